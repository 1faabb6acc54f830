//go:build aepkit

// The kit against a real aep over every transport: a heavy end-to-end
// suite (a host per transport, a process per stdio session), run once by
// its own step of .ci/run with -tags aepkit, not under -race.

package conformance_test

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
)

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
		"stdio":     {conformance.CheckSubagentGating, conformance.CheckHTTPHost, conformance.CheckHTTPOrigin, conformance.CheckHTTPSession, conformance.CheckHTTPSize, conformance.CheckSessionOperator},
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
