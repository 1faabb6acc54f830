//go:build aepmutants

// The mutation suite against a real aep: every mutant of mutate.Suite in
// front of it, over each of its transports, judged by the kit; the kill
// rate and the survivors printed, and the regression gate held to
// caught.txt. A heavy end-to-end suite, run once by its own step of
// .ci/run (go test -tags aepmutants in this directory, so its summary is
// printed), not under -race.

package mutate_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
	"github.com/aephost/aep/conformance/mutate"
)

// minKillRate is the share of runs the kit must catch.
const minKillRate = 0.95

// runSuite runs the kit against aep with each mutant of mutants, over
// each of its transports, in parallel; removed are checks left out of the
// verdict as if the kit did not have them.
func runSuite(t *testing.T, base string, mutants []mutate.Mutant, removed ...string) []mutate.Outcome {
	t.Helper()
	var mu sync.Mutex
	var out []mutate.Outcome
	t.Run("runs", func(t *testing.T) {
		for _, m := range mutants {
			for _, tr := range m.Transports {
				t.Run(m.Name+"/"+tr, func(t *testing.T) {
					t.Parallel()
					o := runOne(t, base, m, tr, removed...)
					mu.Lock()
					out = append(out, o)
					mu.Unlock()
				})
			}
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// runOne is one run: the kit's scenarios of m (its Run checks: a run of
// the whole kit fails every check these fail, as scenarios run in
// sessions of their own), with a short wait for replies, since a bug
// that leaves a request unanswered costs the kit that wait.
func runOne(t *testing.T, base string, m mutate.Mutant, transport string, removed ...string) mutate.Outcome {
	t.Helper()
	opts := conformance.Options{Only: m.Checks(), Timeout: 5 * time.Second}
	var o mutate.Outcome
	if m.OnlyOver != "" {
		// The host as it is over stdio, broken over m.OnlyOver: compared.
		plain := target(t, base, "stdio", mutate.Mutant{Name: "none", Run: m.Checks()})
		c := kittest.Compare(t, []conformance.Target{plain, target(t, base, m.OnlyOver, m)}, opts)
		o = mutate.NewComparisonOutcome(m, transport, c, removed...)
	} else {
		o = mutate.NewOutcome(m, transport, kittest.Run(t, target(t, base, transport, m), opts), removed...)
	}
	if o.Caught() {
		t.Logf("caught by %s", strings.Join(o.Failed, ", "))
	} else {
		t.Logf("survived: %s", m.Bug)
	}
	return o
}

// TestMutationSuite: the kit catches at least 95 % of the suite's runs,
// and every run caught.txt lists (caught before) is caught again. With
// AEP_MUTATION_UPDATE=1 it rewrites caught.txt from this run instead.
func TestMutationSuite(t *testing.T) {
	base := kittest.Serve(t)
	start := time.Now()
	outcomes := runSuite(t, base, mutate.Suite())
	if os.Getenv("AEP_MUTATION_UPDATE") == "1" {
		f, err := os.Create("caught.txt")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := mutate.WriteCaught(f, outcomes); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := mutate.LoadCaughtFile("caught.txt")
	if err != nil {
		t.Fatal(err)
	}
	// A catalogue mutant names the checks it breaks: they fail over
	// every transport it runs on (TestCatalogue holds this over HTTP+SSE).
	for _, o := range outcomes {
		for _, c := range o.Mutant.Catch {
			if !slices.Contains(o.Failed, c) {
				t.Errorf("%s (%s): check %s did not fail (failed: %v)", o.Key(), o.Mutant.Bug, c, o.Failed)
			}
		}
	}
	v := mutate.Judge(outcomes, listed)
	// A listed run that survived is run once more on its own before it
	// counts: the machine may be loaded, and a regression survives twice.
	var again []string
	if len(v.Regressions) > 0 {
		byKey := map[string]int{}
		for i, o := range outcomes {
			byKey[o.Key()] = i
		}
		t.Run("again", func(t *testing.T) {
			for _, o := range v.Regressions {
				t.Run(o.Mutant.Name+"/"+o.Transport, func(t *testing.T) {
					second := runOne(t, base, o.Mutant, o.Transport)
					outcomes[byKey[o.Key()]] = second
					if second.Caught() {
						again = append(again, o.Key())
					}
				})
			}
		})
		v = mutate.Judge(outcomes, listed)
	}
	var b strings.Builder
	if err := v.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if len(again) > 0 {
		fmt.Fprintf(&b, "caught only on a second run: %s\n", strings.Join(again, ", "))
	}
	fmt.Fprintf(&b, "in %s\n", time.Since(start).Round(time.Second))
	// Printed, not only logged: .ci/run runs this test in its package's
	// directory, where go test shows what a passing test prints.
	fmt.Print(b.String())
	if err := v.Err(minKillRate); err != nil {
		t.Fatal(err)
	}
}

// TestGateSeesARemovedCheck: the gate fails when a check stops catching.
// The mutants only ping catches run with ping removed from the verdict,
// as if the kit had lost the check: each is a regression against
// caught.txt, and Err names it. The same runs with every check pass the
// gate.
func TestGateSeesARemovedCheck(t *testing.T) {
	// The checks a pong's mutants break: with both gone, nothing else
	// catches them.
	removed := []string{conformance.CheckPing, conformance.CheckHostStrict}
	listed, err := mutate.LoadCaughtFile("caught.txt")
	if err != nil {
		t.Fatal(err)
	}
	var only []mutate.Mutant
	for _, m := range mutate.Suite() {
		if len(m.Catch) > 0 && !slices.ContainsFunc(m.Catch, func(c string) bool { return !slices.Contains(removed, c) }) &&
			slices.Contains(m.Run, conformance.CheckPing) {
			m.Transports = []string{"websocket"}
			only = append(only, m)
		}
	}
	if len(only) == 0 {
		t.Fatalf("no mutant of the suite is caught by %v alone", removed)
	}
	base := kittest.Serve(t)
	var sub map[string]bool
	restrict := func(outcomes []mutate.Outcome) map[string]bool {
		sub = map[string]bool{}
		for _, o := range outcomes {
			if listed[o.Key()] {
				sub[o.Key()] = true
			}
		}
		return sub
	}
	with := runSuite(t, base, only)
	if err := mutate.Judge(with, restrict(with)).Err(minKillRate); err != nil || len(sub) != len(only) {
		t.Fatalf("with every check: %v; %d of %d runs listed in caught.txt", err, len(sub), len(only))
	}
	without := runSuite(t, base, only, removed...)
	err = mutate.Judge(without, restrict(without)).Err(minKillRate)
	if err == nil {
		t.Fatalf("with %v removed the gate passed", removed)
	}
	for _, m := range only {
		if want := "regression: websocket " + m.Name; !strings.Contains(err.Error(), want) {
			t.Errorf("the gate's error does not name %q: %v", want, err)
		}
	}
	t.Logf("with %s removed the gate says: %v", removed, err)
}
