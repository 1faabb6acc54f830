package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// typeName is a def's name as the protocol reference writes it in a
// field's type cell ("MemoryEntry", "list of DataPart, at least 1 items").
var typeName = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]+\b`)

// TestDocsDefineEveryType generates the protocol reference from the
// fixtures and from schemas/ (as generate.go does) and requires every type
// a field names to be defined in it, under a heading of its own, so no
// name in docs/protocol.md leads nowhere.
func TestDocsDefineEveryType(t *testing.T) {
	for _, dir := range []string{fixtureSchemas, "../../schemas"} {
		t.Run(dir, func(t *testing.T) {
			out := t.TempDir()
			if err := run(options{schemaDir: dir, outDir: out, pkg: "docscheck", docsOut: out + "/protocol.md"}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out + "/protocol.md")
			if err != nil {
				t.Fatal(err)
			}
			defined := map[string]bool{}
			var used []string
			for _, line := range strings.Split(string(b), "\n") {
				if name, ok := strings.CutPrefix(line, "#### "); ok {
					defined[strings.TrimSpace(name)] = true
					continue
				}
				cols := strings.Split(line, "|")
				if !strings.HasPrefix(line, "| `") || len(cols) < 4 {
					continue
				}
				// Drop what is quoted (choices, patterns): only names remain.
				cell := regexp.MustCompile("`[^`]*`").ReplaceAllString(cols[2], "")
				used = append(used, typeName.FindAllString(cell, -1)...)
			}
			var missing []string
			for _, u := range used {
				if !defined[u] && !slices.Contains(missing, u) {
					missing = append(missing, u)
				}
			}
			if dir == "../../schemas" && len(used) == 0 {
				t.Fatal("no field of the protocol names a shared type: the check reads nothing")
			}
			if len(missing) > 0 {
				t.Errorf("the reference names types it does not define: %v", missing)
			}
		})
	}
}
