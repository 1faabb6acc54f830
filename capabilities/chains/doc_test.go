package chains_test

import (
	"os"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/server"
	"github.com/tidwall/gjson"
)

// TestDocExample runs the example of docs/chains.md, so the guide stays true.
func TestDocExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/chains.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "## Example")
	start := strings.Index(doc[i:], "```json\n") + i + len("```json\n")
	end := strings.Index(doc[start:], "```") + start
	example := doc[start:end]
	e := newEnv(t, envOpts{
		store: true,
		extra: []server.PluginSpec{{Name: "memory", Type: "memory", Impl: &memory.Plugin{}}},
		caps:  []string{"chains", "tools", "memory"},
	})
	r, _ := e.mustRun(t, example)
	if !r.Success {
		t.Fatalf("reply %s", encode(t, r))
	}
	fin := string(r.FinalOutput)
	if got := gjson.Get(fin, "bytes").Int(); got != 3 {
		t.Errorf("bytes %d, want 3; final %s", got, fin)
	}
	if !gjson.Get(fin, "store.stored").Exists() {
		t.Errorf("store missing from the report: %s", fin)
	}
	if joined(r.Skipped) != "note_failure" {
		t.Errorf("skipped %v", r.Skipped)
	}
}
