package mutate

import (
	"slices"
	"strings"
	"testing"

	"github.com/aephost/aep/conformance"
)

func outcome(name, transport string, failed ...string) Outcome {
	return Outcome{Mutant: Mutant{Name: name, Bug: name + "'s bug", Kind: KindReply}, Transport: transport, Failed: failed}
}

// TestLoadCaught: one "<transport> <mutant>" a line, comments and blank
// lines aside; anything else, or a line given twice, is refused.
func TestLoadCaught(t *testing.T) {
	got, err := LoadCaught(strings.NewReader("# header\n\nstdio a\nwebsocket a\n"))
	if err != nil || len(got) != 2 || !got["stdio a"] || !got["websocket a"] {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"stdio\n", "stdio a b\n", "stdio a\nstdio a\n"} {
		if _, err := LoadCaught(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestJudge: the kill rate, the survivors, and the gate: a listed run
// that survives is a regression, a listed run no longer made is stale,
// a caught run not yet listed is only reported; below the minimum rate
// the gate fails too.
func TestJudge(t *testing.T) {
	listed := map[string]bool{"stdio a": true, "websocket a": true, "stdio gone": true}
	outcomes := []Outcome{
		outcome("a", "stdio", conformance.CheckPing),
		outcome("a", "websocket"),
		outcome("b", "stdio", conformance.CheckHostStrict),
		outcome("c", "stdio"),
	}
	v := Judge(outcomes, listed)
	if v.Caught != 2 || v.Rate() != 0.5 || len(v.Survivors) != 2 {
		t.Fatalf("caught %d, rate %v, survivors %d", v.Caught, v.Rate(), len(v.Survivors))
	}
	if len(v.Regressions) != 1 || v.Regressions[0].Key() != "websocket a" {
		t.Fatalf("regressions %v", v.Regressions)
	}
	if !slices.Equal(v.New, []string{"stdio b"}) || !slices.Equal(v.Stale, []string{"stdio gone"}) {
		t.Fatalf("new %v, stale %v", v.New, v.Stale)
	}
	err := v.Err(0.95)
	for _, want := range []string{"regression: websocket a", `"stdio gone"`, "kill rate 50.0 % is below 95 %"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the gate's error %v lacks %q", err, want)
		}
	}
	var b strings.Builder
	if err := v.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 mutants, 4 runs, 2 caught: kill rate 50.0 %", "by transport: stdio 2/3 websocket 0/1", "survivors (2):", "websocket a: a's bug", "REGRESSION websocket a", "STALE stdio gone", "stdio b"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, b.String())
		}
	}
	// Every listed run caught, at the rate: the gate passes.
	ok := Judge([]Outcome{outcome("a", "stdio", "x"), outcome("a", "websocket", "x")}, map[string]bool{"stdio a": true, "websocket a": true})
	if err := ok.Err(0.95); err != nil {
		t.Fatal(err)
	}
}

// TestWriteCaught: the list written is the caught runs, sorted, and reads
// back.
func TestWriteCaught(t *testing.T) {
	var b strings.Builder
	if err := WriteCaught(&b, []Outcome{outcome("z", "websocket", "x"), outcome("y", "stdio"), outcome("a", "stdio", "x")}); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCaught(strings.NewReader(b.String()))
	if err != nil || len(got) != 2 || !got["stdio a"] || !got["websocket z"] {
		t.Fatalf("%v %v\n%s", got, err, b.String())
	}
	if i, j := strings.Index(b.String(), "stdio a"), strings.Index(b.String(), "websocket z"); i > j {
		t.Fatalf("not sorted:\n%s", b.String())
	}
}

// TestOutcomeRemoved: a check removed is as if the kit did not have it:
// its failure does not catch.
func TestOutcomeRemoved(t *testing.T) {
	rep := &conformance.Report{Results: []conformance.Result{
		{CheckInfo: conformance.CheckInfo{ID: conformance.CheckPing}, Status: conformance.Fail},
		{CheckInfo: conformance.CheckInfo{ID: conformance.CheckHostStrict}, Status: conformance.Pass},
	}}
	if o := NewOutcome(Mutant{Name: "m"}, "stdio", rep); !o.Caught() || !slices.Equal(o.Failed, []string{conformance.CheckPing}) {
		t.Fatalf("%+v", o)
	}
	if o := NewOutcome(Mutant{Name: "m"}, "stdio", rep, conformance.CheckPing); o.Caught() {
		t.Fatalf("caught with ping removed: %+v", o)
	}
	c := &conformance.Comparison{Reports: []*conformance.Report{rep}, Agree: conformance.Result{CheckInfo: conformance.CheckInfo{ID: conformance.CheckTransportsAgree}, Status: conformance.Fail}}
	if o := NewComparisonOutcome(Mutant{Name: "m"}, "stdio+websocket", c, conformance.CheckPing); !slices.Equal(o.Failed, []string{conformance.CheckTransportsAgree}) {
		t.Fatalf("%+v", o)
	}
}

// TestSuite: the suite holds at least 60 mutants with names of their
// own, a successful-reply mutant for every capability, and envelope,
// event, isolation and gating mutants; each runs over stdio and
// WebSocket, but those stdio cannot carry (the HTTP edge, a session
// reached by id), which run over WebSocket and HTTP+SSE, and the
// transport-dependent ones, whose stdio and WebSocket runs are compared;
// the checks they name are the kit's.
func TestSuite(t *testing.T) {
	suite := Suite()
	if len(suite) < 60 {
		t.Fatalf("%d mutants, want at least 60", len(suite))
	}
	ids := map[string]bool{}
	for _, c := range conformance.Checks() {
		ids[c.ID] = true
	}
	seen := map[string]bool{}
	kinds := map[string]int{}
	replies := map[string]int{}
	independent := 0
	for _, mu := range suite {
		if seen[mu.Name] || mu.Bug == "" || len(mu.Checks()) == 0 {
			t.Errorf("%s: a name given twice, or no bug or checks", mu.Name)
		}
		seen[mu.Name] = true
		kinds[mu.Kind]++
		if mu.Kind == KindReply {
			replies[mu.Capability]++
		}
		if mu.Independent {
			independent++
			if len(mu.Catch) > 0 {
				t.Errorf("%s: an independent mutant names no check it must fail", mu.Name)
			}
		}
		for _, c := range mu.Checks() {
			if !ids[c] {
				t.Errorf("%s runs %s, not a check", mu.Name, c)
			}
		}
		switch want := overStdioAndWS; {
		case mu.OnlyOver != "":
			if !slices.Equal(mu.Transports, []string{CompareStdioWS}) {
				t.Errorf("%s: over %v", mu.Name, mu.Transports)
			}
		case mu.HTTP != nil || reachedByID[mu.Name]:
			if !slices.Equal(mu.Transports, overWSAndHTTP) {
				t.Errorf("%s: over %v", mu.Name, mu.Transports)
			}
		default:
			if !slices.Equal(mu.Transports, want) {
				t.Errorf("%s: over %v, want %v", mu.Name, mu.Transports, want)
			}
		}
	}
	for _, c := range []string{"tools", "toolkits", "memory", "env", "proc", "learn", "skills", "chains", "mcp", "subagents", "session"} {
		if replies[c] == 0 {
			t.Errorf("no successful-reply mutant of %s", c)
		}
	}
	for _, k := range []string{KindEnvelope, KindEvent, KindIsolation, KindGating, KindHandshake, KindError, KindRefusal, KindEdge, KindTransport} {
		if kinds[k] == 0 {
			t.Errorf("no mutant of kind %s", k)
		}
	}
	for _, n := range []string{"same-session-id", "memory-ids-global", "working-memory-shared"} {
		if !seen[n] {
			t.Errorf("the isolation mutant %s is missing", n)
		}
	}
	if independent < 60 {
		t.Errorf("%d independent mutants, want at least 60", independent)
	}
	t.Logf("%d mutants (%d independent), by kind %v", len(suite), independent, kinds)
}

// TestCaughtListIsTheSuites: every run caught.txt lists is one the suite
// makes, so a renamed or removed mutant shows here, without a host.
func TestCaughtListIsTheSuites(t *testing.T) {
	listed, err := LoadCaughtFile("caught.txt")
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, mu := range Suite() {
		for _, tr := range mu.Transports {
			made[tr+" "+mu.Name] = true
		}
	}
	for k := range listed {
		if !made[k] {
			t.Errorf("caught.txt lists %q, which the suite does not run", k)
		}
	}
	if len(listed) < len(made)*95/100 {
		t.Errorf("caught.txt lists %d of the suite's %d runs, under 95 %%", len(listed), len(made))
	}
}
