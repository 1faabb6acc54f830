package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnknownKeywordFails checks that a keyword outside the table, or one
// of the table's keywords where it is not allowed, fails generation naming
// the keyword and the file, before anything is written.
func TestUnknownKeywordFails(t *testing.T) {
	cases := []struct {
		name, schema string
		want         []string
	}{
		{"unknown keyword", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "$defs": {"A": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}`,
			[]string{`"multipleOf"`, "bad.json", "/$defs/A/properties/n"}},
		{"known keyword misplaced", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x", "$defs": {"A": {"type": "object", "properties": {"n": {"type": "string", "anyOf": [{"minLength": 1}]}}}}}`,
			[]string{`"anyOf"`, "bad.json", "supports it only in"}},
		{"schema without $schema", `{"$id": "x", "$defs": {}}`, []string{"bad.json", `"$schema"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(tc.schema), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			err := run(options{schemaDir: dir, outDir: out, pkg: "x"})
			if err == nil {
				t.Fatal("generation succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed generation created %s", out)
			}
		})
	}
}

// TestDataFileSkipped checks that a JSON file without $schema (a table
// such as retryable.json) is not read as a schema.
func TestDataFileSkipped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "table.json"), []byte(`{"rows": [{"code": "timeout", "retryable": true}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := loadSchemas(dir)
	if err != nil || len(files) != 0 {
		t.Fatalf("loadSchemas = %d files, %v; want none", len(files), err)
	}
}
