//go:build aepkit

// The mutants against a real aep: a heavy end-to-end suite (a host,
// proxies in front of it), run once by its own step of .ci/run with
// -tags aepkit, not under -race.

package mutate_test

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
	"github.com/aephost/aep/conformance/mutate"
	"github.com/aephost/aep/internal/aepbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	aepbin.Cleanup()
	os.Exit(code)
}

// target puts mu in front of the aep at base, reached over the transport
// named: an HTTP bug through a proxy, a message bug by wrapping the
// target's connections.
func target(t *testing.T, base, transport string, mu mutate.Mutant) conformance.Target {
	t.Helper()
	if mu.HTTP != nil {
		b, stop, err := mutate.Proxy(base, mu)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		base = b
	}
	var tg conformance.Target
	switch transport {
	case "http":
		tg = conformance.HTTPTarget(base, nil)
	case "exchange":
		tg = conformance.ExchangeTarget(base, nil)
	case "websocket":
		tg = conformance.WebSocketTarget("ws"+strings.TrimPrefix(base, "http")+"/ws", nil)
	case "stdio":
		tg = kittest.Stdio(t)
	default:
		t.Fatalf("transport %q", transport)
	}
	return mutate.Wrap(tg, mu)
}

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
			over := mu.Over
			if over == "" {
				over = "http"
			}
			caught(t, target(t, base, over, mu), mu)
		})
	}
}

// TestMissed: the bugs an earlier kit let through are each caught by a
// named check over WebSocket too (TestCatalogue runs them over HTTP+SSE).
func TestMissed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	byName := map[string]mutate.Mutant{}
	for _, mu := range mutate.Catalogue() {
		byName[mu.Name] = mu
	}
	if len(mutate.Missed) != 10 {
		t.Fatalf("%d missed bugs, want the 8 missed and the 2 never provoked", len(mutate.Missed))
	}
	base := kittest.Serve(t)
	for _, name := range mutate.Missed {
		mu, ok := byName[name]
		if !ok {
			t.Fatalf("%s is not in the catalogue", name)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			caught(t, target(t, base, "websocket", mu), mu)
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
