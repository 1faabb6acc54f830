package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md's keyword table from keywords.go and the fixtures' golden package (fixtures/) from testdata/fixtures")

const tableStart, tableEnd = "<!-- keyword table: generated from keywords.go -->\n", "<!-- end of the keyword table -->\n"

// TestReadmeIsTheTable keeps README.md's keyword table equal to the table
// the generator checks schemas against, so the documentation cannot promise
// a keyword the generator refuses or miss one it accepts.
func TestReadmeIsTheTable(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, tableStart), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the markers %q and %q", tableStart, tableEnd)
	}
	want := s[:i+len(tableStart)] + readmeTable() + s[j:]
	if *update {
		if err := os.WriteFile("README.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if s != want {
		t.Fatal("README.md's keyword table differs from keywords.go; run go test ./tools/aepgen -run TestReadmeIsTheTable -update")
	}
}
