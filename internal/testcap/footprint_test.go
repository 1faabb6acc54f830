package testcap_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Where the test capability's files are, relative to the repository root.
const (
	pkgDir   = "internal/testcap"
	pkgPath  = "github.com/aephost/aep/" + pkgDir
	wireFile = "capabilities/all/testcap_test.go"
)

// The files of the change that added the capability: the schema, the
// package (hand-written and generated) and the one line that links it in.
var (
	handWritten = []string{
		"internal/testcap/footprint_test.go",
		"internal/testcap/generate.go",
		"internal/testcap/schemas/testcap.json",
		"internal/testcap/testcap.go",
		"internal/testcap/testcap_test.go",
	}
	generated = []string{
		"internal/testcap/package.gen.go",
		"internal/testcap/testcap.gen.go",
		"internal/testcap/testcap.models.gen.go",
	}
)

// TestAddingCapabilityTouchesOnlyItsFiles checks the claim of
// docs/architecture.md (Adding a capability): a capability is one schema
// file, one package and one line in capabilities/all. It walks the whole
// repository: the package holds exactly the files above, one schema among
// them; no other file names the capability (neither the kernel, the
// generator, schemas/, gen/msg nor the command), except prose under docs/
// that explains it and the wiring file, whose only content is one blank
// import. The schema's namespace therefore reaches no user's binary,
// which `go list` confirms for cmd/aep.
func TestAddingCapabilityTouchesOnlyItsFiles(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var inPkg, mentions []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == ".git" || !d.Type().IsRegular() {
			return nil // a worktree's .git file
		}
		if strings.HasPrefix(rel, pkgDir+"/") {
			inPkg = append(inPkg, rel)
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !namesCapability(string(data)) {
			return nil
		}
		if strings.HasPrefix(rel, "docs/") && strings.HasSuffix(rel, ".md") && !isGenerated(data) {
			return nil // prose about the example, not part of it
		}
		mentions = append(mentions, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	want := append(append([]string{}, handWritten...), generated...)
	sort.Strings(want)
	sort.Strings(inPkg)
	if !slices.Equal(inPkg, want) {
		t.Errorf("files of %s:\n got %q\nwant %q", pkgDir, inPkg, want)
	}
	for _, f := range generated {
		if data, err := os.ReadFile(filepath.Join(root, f)); err != nil || !isGenerated(data) {
			t.Errorf("%s is not a generated file (%v)", f, err)
		}
	}
	if !slices.Equal(mentions, []string{wireFile}) {
		t.Errorf("files outside %s that name the capability: %q, want only %s", pkgDir, mentions, wireFile)
	}
	checkWireFile(t, filepath.Join(root, wireFile))

	// The command users run does not link the package; the tests of
	// capabilities/all do, through the one line.
	if deps := goList(t, root, "-deps", "./cmd/aep"); slices.Contains(deps, pkgPath) {
		t.Errorf("cmd/aep links %s: its namespace would ship to users", pkgPath)
	}
	if deps := goList(t, root, "-deps", "-test", "./capabilities/all"); !slices.Contains(deps, pkgPath) {
		t.Errorf("the tests of capabilities/all do not link %s", pkgPath)
	}
}

// checkWireFile fails unless the file holds nothing but a package clause,
// comments and one blank import of the package, and names the capability
// on that one line only.
func checkWireFile(t *testing.T, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	full, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var decls []ast.Decl
	for _, d := range full.Decls {
		if g, ok := d.(*ast.GenDecl); !ok || g.Tok != token.IMPORT {
			decls = append(decls, d)
		}
	}
	if len(decls) != 0 || len(f.Imports) != 1 {
		t.Fatalf("%s: want only one import and no declarations, got %d imports, %d declarations", wireFile, len(f.Imports), len(decls))
	}
	imp := f.Imports[0]
	if p, _ := strconv.Unquote(imp.Path.Value); p != pkgPath || imp.Name == nil || imp.Name.Name != "_" {
		t.Fatalf("%s: import %s, want a blank import of %s", wireFile, imp.Path.Value, pkgPath)
	}
	var lines []string
	for _, l := range strings.Split(string(src), "\n") {
		if namesCapability(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%s: %d lines name the capability, want 1: %q", wireFile, len(lines), lines)
	}
}

// namesCapability reports whether s names the capability: its package,
// namespace or module ("testcap") or a generated Go name ("TestcapAddReq").
// A case-blind match would also hit words such as TestCapabilityGating.
func namesCapability(s string) bool {
	return strings.Contains(s, "testcap") || strings.Contains(s, "Testcap")
}

// isGenerated reports whether data carries Go's generated-file marker
// ("Code generated … DO NOT EDIT.") in its first line.
func isGenerated(data []byte) bool {
	first, _, _ := bytes.Cut(data, []byte("\n"))
	return bytes.Contains(first, []byte("Code generated")) && bytes.Contains(first, []byte("DO NOT EDIT"))
}

// goList runs `go list` in dir and returns the import paths it prints.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}
