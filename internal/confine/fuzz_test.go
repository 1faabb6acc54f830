package confine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/wire"
)

// relSeeds are the paths of TestRel and TestDir plus the shapes an agent
// may try to escape with: dot segments hidden behind separators of either
// kind, absolute and volume forms, NUL, and a sibling sharing the root's name.
var relSeeds = []string{
	"a/b.txt", "./a//b/", `a\b`, ".", "a/./b/..c", "", "..", "a/../../x", `a\..\x`,
	"/etc/passwd", `\server\share`, "a\x00b", "sub", "in", "out", "file", "missing",
	"a/..", "a/b/../..", "...", "..a", "a..", "./..", `.\..`, "a/\\..", "//x", `\\?\C:\x`,
	"C:x", "C:/x", "../ws2", "ws2", "out/..", "in/../out", "file/x", "\xff/..", "a/b/c/./../../..",
}

// FuzzRel checks the wire-path rule for any path string: an accepted path
// is cleaned, has no NUL and no ".." element, is not absolute, is accepted
// again unchanged, and resolves inside the root; a refused one is a
// schema_violation (it wraps ErrPath and wire.ErrInvalid).
func FuzzRel(f *testing.F) {
	for _, s := range relSeeds {
		f.Add(s)
	}
	const root = "/data/s1"
	f.Fuzz(func(t *testing.T, p string) {
		got, err := Rel("path", p)
		if err != nil {
			if got != "" {
				t.Fatalf("Rel(%q) refused with %v but returned %q", p, err, got)
			}
			if !errors.Is(err, ErrPath) || !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("Rel(%q): %v does not wrap ErrPath and wire.ErrInvalid", p, err)
			}
			return
		}
		if strings.IndexByte(got, 0) >= 0 || strings.IndexByte(p, 0) >= 0 {
			t.Fatalf("Rel(%q) = %q accepts a NUL byte", p, got)
		}
		if got == "" || strings.HasPrefix(got, "/") || strings.ContainsRune(got, '\\') || filepath.IsAbs(got) {
			t.Fatalf("Rel(%q) = %q: want a relative path with / separators", p, got)
		}
		for _, seg := range strings.Split(got, "/") {
			if seg == ".." || (seg == "." && got != ".") || seg == "" {
				t.Fatalf("Rel(%q) = %q is not clean", p, got)
			}
		}
		if again, err := Rel("path", got); err != nil || again != got {
			t.Fatalf("Rel(Rel(%q)) = %q, %v; want %q again", p, again, err, got)
		}
		joined := filepath.Join(root, filepath.FromSlash(got))
		rel, err := filepath.Rel(root, joined)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
			t.Fatalf("Rel(%q) = %q resolves to %s, outside %s (rel %q, %v)", p, got, joined, root, rel, err)
		}
		if !Within(root, joined) {
			t.Fatalf("Rel(%q) = %q: Within(%s, %s) is false", p, got, root, joined)
		}
	})
}

// FuzzDir resolves any path Rel accepts against a real tree with symbolic
// links that stay inside the root and one that leaves it for a sibling
// whose name shares the root's as a prefix. A resolved directory is inside
// the real root and is a directory; a refusal wraps ErrPath, so it reaches
// the agent as schema_violation and not as a retryable runtime_error.
func FuzzDir(f *testing.F) {
	for _, s := range relSeeds {
		f.Add(s)
	}
	f.Add("in/sub2")
	f.Add("loop")
	f.Add("loop/x")
	f.Add("up")
	f.Add("up/ws/sub")
	f.Add("file/x")
	f.Add(strings.Repeat("a/", 3000))
	f.Add(strings.Repeat("x", 300))
	base := f.TempDir()
	root := filepath.Join(base, "ws")
	sibling := filepath.Join(base, "ws2")
	for _, d := range []string{filepath.Join(root, "sub", "sub2"), sibling} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		f.Fatal(err)
	}
	links := map[string]string{
		"out":  sibling,                     // leaves the root
		"in":   filepath.Join(root, "sub"),  // stays inside
		"up":   "..",                        // leaves, then a path may come back in
		"loop": filepath.Join(root, "loop"), // never resolves
		"rel":  "sub/sub2",                  // relative, inside
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			f.Fatal(err)
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := Rel("cwd", p)
		if err != nil {
			return // FuzzRel covers refusals by Rel
		}
		dir, err := Dir(root, "cwd", rel)
		if err != nil {
			if dir != "" {
				t.Fatalf("Dir(%q) refused with %v but returned %q", rel, err, dir)
			}
			if !errors.Is(err, ErrPath) {
				t.Fatalf("Dir(%q): %v does not wrap ErrPath", rel, err)
			}
			return
		}
		if !Within(realRoot, dir) {
			t.Fatalf("Dir(%q) = %s, outside the root %s", rel, dir, realRoot)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("Dir(%q) = %s is not a directory: %v", rel, dir, err)
		}
	})
}
