package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aephost/aep/tools/aepgen/internal/cases"
)

// The fixtures: schemas and cases in fixtureSchemas, their generated code
// (the golden output, a Go package the cases run against) in fixtureOut.
const (
	fixtureSchemas = "testdata/fixtures"
	fixtureOut     = "fixtures"
)

// generateFixtures runs the generator over the fixture schemas into out,
// as one package with its error catalogue and protocol reference, the way
// generate.go runs it over schemas/.
func generateFixtures(out string) error {
	return run(options{
		schemaDir: fixtureSchemas, outDir: out, pkg: "fixtures",
		codesOut: filepath.Join(out, "codes.gen.go"), wirePkg: "fixtures",
		docsOut: filepath.Join(out, "protocol.md"),
	})
}

// generatedFiles lists the files of dir that the generator writes.
func generatedFiles(t *testing.T, dir string) []string {
	t.Helper()
	gen, err := filepath.Glob(filepath.Join(dir, "*.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"protocol.md"}
	for _, p := range gen {
		out = append(out, filepath.Base(p))
	}
	slices.Sort(out)
	return out
}

// TestFixturesGolden generates the fixture schemas and compares every
// output with the committed package in fixtures/, which the fixture cases
// compile and run against; -update rewrites it.
func TestFixturesGolden(t *testing.T) {
	if *update {
		if err := generateFixtures(fixtureOut); err != nil {
			t.Fatal(err)
		}
		return
	}
	tmp := t.TempDir()
	if err := generateFixtures(tmp); err != nil {
		t.Fatal(err)
	}
	got, want := generatedFiles(t, tmp), generatedFiles(t, fixtureOut)
	if !slices.Equal(got, want) {
		t.Errorf("generation writes %v, %s holds %v; run go test ./tools/aepgen -run TestFixturesGolden -update", got, fixtureOut, want)
	}
	for _, name := range got {
		g, err := os.ReadFile(filepath.Join(tmp, name))
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(filepath.Join(fixtureOut, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s differs from the generator's output; run go test ./tools/aepgen -run TestFixturesGolden -update and review the diff", filepath.Join(fixtureOut, name))
		}
	}
}

// TestFixturesUseKeywords checks that every line of the keyword table names
// a fixture schema that exists and uses the keyword, in one of the places
// the table allows it (the walk of checkKeywords knows every place).
func TestFixturesUseKeywords(t *testing.T) {
	used := map[string]map[string]bool{} // fixture → keywords it uses
	for _, k := range keywords {
		if used[k.Fixture] != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(fixtureSchemas, k.Fixture))
		if err != nil {
			t.Errorf("keyword %q: its fixture: %v", k.Name, err)
			continue
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", k.Fixture, err)
		}
		used[k.Fixture] = map[string]bool{}
		collectKeywords(doc, used[k.Fixture])
	}
	for _, k := range keywords {
		if u := used[k.Fixture]; u != nil && !u[k.Name] {
			t.Errorf("keyword %q: its fixture %s does not use it", k.Name, k.Fixture)
		}
	}
}

// collectKeywords records every keyword of a schema, at any depth. Maps of
// names (properties, $defs) hold schemas, not keywords; x-aep-codes and the
// other values of aep's keywords hold data.
func collectKeywords(node map[string]any, out map[string]bool) {
	for k, v := range node {
		out[k] = true
		switch k {
		case "properties", "$defs":
			for _, s := range v.(map[string]any) {
				if m, ok := s.(map[string]any); ok {
					collectKeywords(m, out)
				}
			}
		case "items", "additionalProperties", "if", "then", "else":
			if m, ok := v.(map[string]any); ok {
				collectKeywords(m, out)
			}
		case "prefixItems", "anyOf", "oneOf", "allOf":
			for _, s := range v.([]any) {
				collectKeywords(s.(map[string]any), out)
			}
		}
	}
}

// TestFixtureCasesCover checks that every keyword of the table that makes a
// check (Checks) has, in its fixture's cases, a line accepted and a line
// rejected for it, and that cases name only keywords of the table.
func TestFixtureCasesCover(t *testing.T) {
	type seen struct{ accept, reject bool }
	byFixture := map[string]map[string]*seen{}
	files, err := filepath.Glob(filepath.Join(fixtureSchemas, "*.cases"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in %s: %v", fixtureSchemas, err)
	}
	for _, f := range files {
		cs, err := cases.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		fx := strings.TrimSuffix(filepath.Base(f), ".cases") + ".json"
		if _, err := os.Stat(filepath.Join(fixtureSchemas, fx)); err != nil {
			t.Errorf("%s has no fixture schema: %v", f, err)
		}
		byFixture[fx] = map[string]*seen{}
		for _, c := range cs {
			for _, k := range c.Keywords {
				if keywordByName[k] == nil {
					t.Errorf("%s: %q is not a keyword of the table", c.Pos, k)
					continue
				}
				s := byFixture[fx][k]
				if s == nil {
					s = &seen{}
					byFixture[fx][k] = s
				}
				s.accept = s.accept || c.Accept
				s.reject = s.reject || !c.Accept
			}
		}
	}
	for _, k := range keywords {
		if !k.Checks {
			continue
		}
		s := byFixture[k.Fixture][k.Name]
		if s == nil || !s.accept {
			t.Errorf("keyword %q: no case of %s accepts a line for it", k.Name, strings.TrimSuffix(k.Fixture, ".json")+".cases")
		}
		if s == nil || !s.reject {
			t.Errorf("keyword %q: no case of %s rejects a line for it", k.Name, strings.TrimSuffix(k.Fixture, ".json")+".cases")
		}
	}
}
