package conformance_test

import (
	"io"
	"os"
	"slices"
	"sort"
	"strings"
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

// skipped returns the IDs of the checks the report skipped, sorted.
func skipped(rep *conformance.Report) []string {
	var out []string
	for _, r := range rep.Results {
		if r.Status == conformance.Skip {
			out = append(out, r.ID)
		}
	}
	sort.Strings(out)
	return out
}

func needsFixture() []string {
	var out []string
	for _, c := range conformance.Checks() {
		if strings.HasPrefix(c.Needs, "fixture ") {
			out = append(out, c.ID)
		}
	}
	sort.Strings(out)
	return out
}

// TestAEPConforms: with its fixture file, aep passes every check, MUST and
// SHOULD, over stdio, HTTP+SSE, single exchanges and WebSocket; the only
// checks skipped are those the transport cannot carry (stdio reaches no
// session by id and has no HTTP edge; over HTTP the size limit is
// http.size's).
func TestAEPConforms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	mcp := kittest.MCP(t)
	want := map[string][]string{
		"stdio":     {conformance.CheckSubagentGating, conformance.CheckHTTPHost, conformance.CheckHTTPOrigin, conformance.CheckHTTPSession, conformance.CheckHTTPSize},
		"http":      {conformance.CheckTransportSize},
		"exchange":  {conformance.CheckTransportSize},
		"websocket": nil,
	}
	for _, target := range kittest.Targets(t) {
		t.Run(target.Name, func(t *testing.T) {
			rep := kittest.Run(t, target, conformance.Options{})
			kittest.Log(t, rep)
			if !rep.OK || rep.Summary.FailShould > 0 || rep.Summary.ExpectedFail > 0 {
				t.Fatalf("failed: %v", rep.Failed())
			}
			wantSkip := append([]string(nil), want[target.Name]...)
			if !mcp {
				wantSkip = append(wantSkip, conformance.CheckMCPServers, conformance.CheckMCPServer)
			}
			sort.Strings(wantSkip)
			if got := skipped(rep); !slices.Equal(got, wantSkip) {
				t.Fatalf("skipped %v, want %v", got, wantSkip)
			}
		})
	}
}

// TestWithoutFixture: without a fixture file aep still passes; exactly
// the checks that need a fixture key skip, each saying which.
func TestWithoutFixture(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	base := kittest.Serve(t)
	rep := kittest.Run(t, conformance.WebSocketTarget("ws"+strings.TrimPrefix(base, "http")+"/ws", nil), conformance.Options{Fixture: &conformance.Fixture{}})
	kittest.Log(t, rep)
	if !rep.OK || rep.Summary.FailShould > 0 {
		t.Fatalf("failed: %v", rep.Failed())
	}
	want := needsFixture()
	if !kittest.MCP(t) {
		want = append(want, conformance.CheckMCPServers)
		sort.Strings(want)
	}
	if got := skipped(rep); !slices.Equal(got, want) {
		t.Fatalf("skipped %v, want the checks that need a fixture key %v", got, want)
	}
	for _, r := range rep.Results {
		if r.Status == conformance.Skip && r.Note == "" {
			t.Errorf("%s skipped without saying why", r.ID)
		}
	}
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
