package confine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/wire"
)

func TestRel(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"a/b.txt", "a/b.txt", true},
		{"./a//b/", "a/b", true},
		{`a\b`, "a/b", true},
		{".", ".", true},
		{"a/./b/..c", "a/b/..c", true},
		{"", "", false},
		{"..", "", false},
		{"a/../../x", "", false},
		{`a\..\x`, "", false},
		{"/etc/passwd", "", false},
		{`\server\share`, "", false},
		{"a\x00b", "", false},
	}
	for _, c := range cases {
		got, err := Rel("path", c.in)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("Rel(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, wire.ErrInvalid) {
			t.Errorf("Rel(%q): %v does not wrap wire.ErrInvalid", c.in, err)
		}
	}
}

func TestWithin(t *testing.T) {
	cases := []struct {
		dir  string
		want bool
	}{
		{"/data/s1", true}, {"/data/s1/x", true}, {"/data/s10", false}, {"/data", false}, {"/data/s1/../s2", false},
	}
	for _, c := range cases {
		if got := Within("/data/s1", filepath.Clean(c.dir)); got != c.want {
			t.Errorf("Within(/data/s1, %s) = %v", c.dir, got)
		}
	}
}

func TestDir(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "ws")
	sibling := filepath.Join(base, "ws2")
	for _, d := range []string{filepath.Join(root, "sub"), sibling} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(root, "file"), nil, 0o644)
	_ = os.Symlink(sibling, filepath.Join(root, "out"))
	_ = os.Symlink(filepath.Join(root, "sub"), filepath.Join(root, "in"))
	cases := []struct {
		rel string
		ok  bool
	}{
		{".", true}, {"sub", true}, {"in", true}, {"out", false}, {"file", false}, {"missing", false},
	}
	for _, c := range cases {
		got, err := Dir(root, "cwd", c.rel)
		if c.ok != (err == nil) {
			t.Errorf("Dir(%q) = %q, %v; want ok=%v", c.rel, got, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrPath) {
			t.Errorf("Dir(%q): %v does not wrap ErrPath", c.rel, err)
		}
	}
}

func TestRootError(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_ = os.Symlink("/etc", filepath.Join(root.Name(), "etc"))
	_, err = root.Open("etc/passwd")
	if got := RootError("path", "etc/passwd", err); !errors.Is(got, ErrPath) {
		t.Fatalf("RootError(%v) = %v", err, got)
	}
	plain := os.ErrNotExist
	if got := RootError("path", "x", plain); got != plain {
		t.Fatalf("other errors must pass through, got %v", got)
	}
}
