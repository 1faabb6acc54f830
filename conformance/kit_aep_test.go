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
	"github.com/aephost/aep/conformance/mutate"
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
// http.size's) and transports.agree, which is the comparison's: the four
// runs compared answer every request alike.
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
	c := kittest.Compare(t, kittest.Targets(t), conformance.Options{})
	for _, rep := range c.Reports {
		t.Run(rep.Transport, func(t *testing.T) {
			kittest.Log(t, rep)
			if !rep.OK || rep.Summary.FailShould > 0 || rep.Summary.ExpectedFail > 0 {
				t.Fatalf("failed: %v", rep.Failed())
			}
			wantSkip := append([]string{conformance.CheckTransportsAgree}, want[rep.Transport]...)
			if !mcp {
				wantSkip = append(wantSkip, conformance.CheckMCPServers, conformance.CheckMCPServer)
			}
			sort.Strings(wantSkip)
			if got := skipped(rep); !slices.Equal(got, wantSkip) {
				t.Fatalf("skipped %v, want %v", got, wantSkip)
			}
		})
	}
	if c.Agree.Status != conformance.Pass || !c.OK || c.Agree.Checked < 500 {
		kittest.LogComparison(t, c)
		t.Fatalf("across the transports: %s, %d answers compared: %v", c.Agree.Status, c.Agree.Checked, c.Agree.Problems)
	}
	t.Logf("across the transports: %d answers compared", c.Agree.Checked)
}

// TestTransportDependentHost: a host whose session/info answers
// differently over WebSocket (the catalogue's websocket-budget-differs,
// on the WebSocket target only) passes every check over each transport
// on its own, and fails transports.agree, which names the reply and the
// transports.
func TestTransportDependentHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	var mu mutate.Mutant
	for _, m := range mutate.Catalogue() {
		if m.Name == "websocket-budget-differs" {
			mu = m
		}
	}
	base := kittest.Serve(t)
	targets := []conformance.Target{conformance.HTTPTarget(base, nil), conformance.ExchangeTarget(base, nil),
		mutate.Wrap(conformance.WebSocketTarget("ws"+strings.TrimPrefix(base, "http")+"/ws", nil), mu)}
	c := kittest.Compare(t, targets, conformance.Options{})
	for _, rep := range c.Reports {
		if !rep.OK || rep.Summary.FailShould > 0 {
			kittest.Log(t, rep)
			t.Fatalf("over %s alone the host fails %v", rep.Transport, rep.Failed())
		}
	}
	if c.OK || c.Agree.Status != conformance.Fail || c.Agree.Level != conformance.Must {
		kittest.LogComparison(t, c)
		t.Fatalf("across the transports: %s (OK %v), want a MUST failure", c.Agree.Status, c.OK)
	}
	for _, p := range c.Agree.Problems {
		if !strings.Contains(p, "(session/info/req)") || !strings.Contains(p, "budgets.leaf_work.limit") || !strings.Contains(p, "over websocket") {
			t.Errorf("a difference other than the WebSocket one: %s", p)
		}
	}
	var b strings.Builder
	if err := c.WriteText(&b); err != nil || !strings.Contains(b.String(), "not conformant: transports.agree") {
		t.Fatalf("the report does not say so: %v\n%s", err, b.String())
	}
	t.Logf("%d answers compared; %s", c.Agree.Checked, c.Agree.Problems[0])
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
	want := append(needsFixture(), conformance.CheckTransportsAgree)
	if !kittest.MCP(t) {
		want = append(want, conformance.CheckMCPServers)
	}
	sort.Strings(want)
	if got := skipped(rep); !slices.Equal(got, want) {
		t.Fatalf("skipped %v, want the checks that need a fixture key %v", got, want)
	}
	for _, r := range rep.Results {
		if r.Status == conformance.Skip && r.Note == "" {
			t.Errorf("%s skipped without saying why", r.ID)
		}
	}
}
