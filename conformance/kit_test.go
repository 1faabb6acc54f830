package conformance_test

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
	"github.com/aephost/aep/internal/aepbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	aepbin.Cleanup()
	os.Exit(code)
}

// TestSchemaExamples: aep refuses every invalid example of schemas/examples
// as the kit expects (a handshake/req by handshake/resp, a wrong proto by
// version_mismatch, a duplicate id key under its first id), with ids
// reused across files; and the examples UNSTATABLE.md lists are marked
// beyond a static schema.
func TestSchemaExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	ex, err := conformance.LoadExamples(os.DirFS("../schemas/examples"))
	if err != nil {
		t.Fatal(err)
	}
	opts := conformance.Options{Only: []string{conformance.CheckInvalidExamples}, Timeout: 20 * time.Second}
	for _, e := range ex {
		if e.Name == "tool/list/req/invalid--duplicate-key.json" && !e.Beyond {
			t.Errorf("%s: not marked beyond a static schema", e.Name)
		}
		if !e.Valid {
			opts.Examples = append(opts.Examples, e)
		}
	}
	// Over stdio: an oversized example is answered parse_error there; over
	// HTTP the transport refuses its body with 413 before any session sees it.
	rep := kittest.Run(t, kittest.Stdio(t), opts)
	for _, id := range []string{conformance.CheckInvalidExamples, conformance.CheckReplyOnce, conformance.CheckHostStrict} {
		r, _ := rep.Result(id)
		if r.Status != conformance.Pass || id == conformance.CheckInvalidExamples && r.Checked < 100 {
			kittest.Log(t, rep)
			t.Fatalf("check %s: %s (%d checked)", id, r.Status, r.Checked)
		}
	}
}

// TestTargets: the constructors name their transport, and the WebSocket
// target derives the HTTP base of the edge checks from its URL.
func TestTargets(t *testing.T) {
	if got := conformance.StdioTarget("true", io.Discard).Name; got != "stdio" {
		t.Fatalf("name %q", got)
	}
	ws := conformance.WebSocketTarget("wss://example.test:8443/ws", nil)
	if ws.HTTP != "https://example.test:8443" || ws.Attach == nil {
		t.Fatalf("websocket target: HTTP %q", ws.HTTP)
	}
}
