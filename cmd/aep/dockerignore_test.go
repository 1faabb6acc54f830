package main_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerIgnore is .dockerignore's patterns as Docker reads them: paths
// relative to the context, leading and trailing slashes dropped, * and ?
// within a name, ** across directories; a path is left out when it or a
// directory above it matches.
type dockerIgnore []*regexp.Regexp

func readDockerIgnore(t *testing.T, path string) dockerIgnore {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out dockerIgnore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are not understood by this test", line)
		}
		p := strings.Trim(filepath.ToSlash(filepath.Clean(line)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		re.WriteString("$")
		out = append(out, regexp.MustCompile(re.String()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ignored reports whether path (slash-separated, relative to the
// context) is left out of the build context.
func (d dockerIgnore) ignored(path string) bool {
	parts := strings.Split(path, "/")
	for i := 1; i <= len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		for _, re := range d {
			if re.MatchString(prefix) {
				return true
			}
		}
	}
	return false
}

// TestDockerIgnore: the build context keeps every file the image's
// `go build ./cmd/aep` reads (its packages' Go and embedded files, by
// `go list`, and go.mod and go.sum) and leaves out version control,
// dependencies, data and local secrets.
func TestDockerIgnore(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ign := readDockerIgnore(t, filepath.Join(root, ".dockerignore"))
	// The patterns are understood as this test reads them.
	for _, tc := range []struct {
		path string
		want bool
	}{
		{".git", true},
		{".git/HEAD", true},
		{"sdk/typescript/node_modules/ws/index.js", true},
		{".ci/mcp/node_modules/x.js", true},
		{"aep-data/sessions/s1/notes.txt", true},
		{"aep.db", true},
		{"data/aep.db-wal", true},
		{"cmd/aep/aep.test", true},
		{"docs/deploy.md", true},
		{"deploy/kubernetes/deployment.yaml", true},
		{"server/tls.key", true},
		{"go.mod", false},
		{"cmd/aep/main.go", false},
		{"schemas/core.json", false},
		{"sdk/scenario/doc.go", false},
	} {
		if got := ign.ignored(tc.path); got != tc.want {
			t.Errorf("%s: ignored %v, want %v", tc.path, got, tc.want)
		}
	}

	cmd := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}}|{{.}}{{end}}{{range .EmbedFiles}}|{{.}}{{end}}{{end}}`, "./cmd/aep")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		rel, err := filepath.Rel(root, f[0])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module from the module cache
		}
		for _, name := range f[1:] {
			needed = append(needed, filepath.ToSlash(filepath.Join(rel, name)))
		}
	}
	if len(needed) < 100 {
		t.Fatalf("go list named %d files of the build, fewer than expected", len(needed))
	}
	for _, p := range needed {
		if ign.ignored(p) {
			t.Errorf(".dockerignore leaves out %s, which go build ./cmd/aep reads", p)
		}
	}
}
