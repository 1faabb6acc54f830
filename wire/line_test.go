package wire_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/aephost/aep/wire"
)

// WriteLine against the golden lines the Python SDK (aep.export_line) and
// the TypeScript SDK (exportLine) are held to as well: keys sorted, Go's
// numbers, strings escaped as Go escapes them.
func TestWriteLineGolden(t *testing.T) {
	in, err := os.ReadFile("testdata/export_line.json")
	if err != nil {
		t.Fatal(err)
	}
	var values []any
	if err := json.Unmarshal(in, &values); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	for _, v := range values {
		if err := wire.WriteLine(&got, v); err != nil {
			t.Fatal(err)
		}
	}
	if os.Getenv("AEP_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile("testdata/export_line.golden", got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/export_line.golden")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got\n%s\nwant\n%s", got.Bytes(), want)
	}
}
