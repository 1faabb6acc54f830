//go:build aepkit

// The mutants against a real aep: a heavy end-to-end suite (a host,
// proxies in front of it), run once by its own step of .ci/run with
// -tags aepkit, not under -race.

package mutate_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
	"github.com/aephost/aep/conformance/mutate"
)

// caught runs the kit's scenarios for mu and requires each check of
// mu.Catch to fail.
func caught(t *testing.T, tg conformance.Target, mu mutate.Mutant) {
	t.Helper()
	// A bug that leaves a request unanswered costs the kit its wait for
	// the reply: short here.
	rep := kittest.Run(t, tg, conformance.Options{Only: mu.Checks(), Timeout: 5 * time.Second})
	for _, c := range mu.Catch {
		r, ok := rep.Result(c)
		if !ok || r.Status != conformance.Fail {
			kittest.Log(t, rep)
			t.Fatalf("%s (%s): check %s is %s, want fail", mu.Name, mu.Bug, c, r.Status)
		}
		t.Logf("%s: %s fails: %s", mu.Name, c, r.Problems[0])
	}
}

// caughtAcross runs the kit's scenarios for mu over HTTP+SSE, against
// the host as it is, and over mu.OnlyOver with the mutant, compares the
// runs, and requires each check of mu.Catch to fail: transports.agree of
// the comparison, or a check of either run.
func caughtAcross(t *testing.T, base string, mu mutate.Mutant) {
	t.Helper()
	plain := target(t, base, "http", mutate.Mutant{Name: "none"})
	c := kittest.Compare(t, []conformance.Target{plain, target(t, base, mu.OnlyOver, mu)}, conformance.Options{Only: mu.Checks(), Timeout: 5 * time.Second})
	failed := mutate.NewComparisonOutcome(mu, "http+"+mu.OnlyOver, c).Failed
	for _, id := range mu.Catch {
		if !slices.Contains(failed, id) {
			kittest.LogComparison(t, c)
			t.Fatalf("%s (%s): check %s does not fail (failed: %v)", mu.Name, mu.Bug, id, failed)
		}
	}
	t.Logf("%s: %s fails: %s", mu.Name, mu.Catch, c.Agree.Problems)
}

// TestCatalogue: every mutant of the catalogue, put in front of a real
// aep, fails the checks it names.
func TestCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	base := kittest.Serve(t)
	for _, mu := range mutate.Catalogue() {
		t.Run(mu.Name, func(t *testing.T) {
			t.Parallel()
			if mu.OnlyOver != "" {
				caughtAcross(t, base, mu)
				return
			}
			over := mu.Over
			if over == "" {
				over = "http"
			}
			caught(t, target(t, base, over, mu), mu)
		})
	}
}

// TestTransparent: the layer itself breaks nothing. Through a proxy and a
// wrap that change nothing, aep passes every check of the whole kit.
func TestTransparent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	base := kittest.Serve(t)
	none := mutate.Mutant{Name: "none", HTTP: func(next http.Handler) http.Handler { return next }}
	rep := kittest.Run(t, target(t, base, "websocket", none), conformance.Options{})
	if !rep.OK || rep.Summary.FailShould > 0 {
		kittest.Log(t, rep)
		t.Fatalf("failed through the layer: %v", rep.Failed())
	}
	if got := rep.Failed(); !slices.Equal(got, nil) {
		t.Fatalf("failed %v", got)
	}
}
