package mutate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/aephost/aep/conformance"
)

// The mutation suite's verdict: which runs of a mutant the kit caught,
// the kill rate, and the regression gate against the recorded list of
// caught runs (caught.txt): a run the list names that survives fails the
// suite.

// Outcome is one run of the kit against a host with one mutant, over one
// transport.
type Outcome struct {
	Mutant    Mutant
	Transport string
	// Failed are the checks the run failed (MUST or SHOULD): the kit
	// caught the mutant when there is one.
	Failed []string
}

// Key names the run in caught.txt: "<transport> <mutant>".
func (o Outcome) Key() string { return o.Transport + " " + o.Mutant.Name }

// Caught says whether the kit noticed the mutant.
func (o Outcome) Caught() bool { return len(o.Failed) > 0 }

// NewOutcome reads a report of a run against mu over transport. The
// checks of removed are left out as if the kit did not have them: how the
// gate is tested (TestGateSeesARemovedCheck).
func NewOutcome(mu Mutant, transport string, rep *conformance.Report, removed ...string) Outcome {
	o := Outcome{Mutant: mu, Transport: transport}
	for _, r := range rep.Results {
		if (r.Status == conformance.Fail || r.Status == conformance.XFail) && !containsString(removed, r.ID) {
			o.Failed = append(o.Failed, r.ID)
		}
	}
	return o
}

// NewComparisonOutcome reads a comparison of runs against mu (on the
// transport it breaks) and against the host as it is: the checks any run
// failed, and transports.agree when the runs disagreed.
func NewComparisonOutcome(mu Mutant, transport string, c *conformance.Comparison, removed ...string) Outcome {
	o := Outcome{Mutant: mu, Transport: transport}
	seen := map[string]bool{}
	for _, rep := range c.Reports {
		for _, id := range NewOutcome(mu, transport, rep, removed...).Failed {
			if !seen[id] {
				seen[id] = true
				o.Failed = append(o.Failed, id)
			}
		}
	}
	if (c.Agree.Status == conformance.Fail || c.Agree.Status == conformance.XFail) && !containsString(removed, c.Agree.ID) {
		o.Failed = append(o.Failed, c.Agree.ID)
	}
	return o
}

// LoadCaught reads a list of caught runs: one "<transport> <mutant>" a
// line; blank lines and lines starting with # are comments.
func LoadCaught(r io.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if f := strings.Fields(l); len(f) != 2 {
			return nil, fmt.Errorf("mutate: caught list line %d: %q is not \"<transport> <mutant>\"", n, l)
		}
		if out[l] {
			return nil, fmt.Errorf("mutate: caught list line %d: %q given twice", n, l)
		}
		out[l] = true
	}
	return out, sc.Err()
}

// LoadCaughtFile is LoadCaught of a file.
func LoadCaughtFile(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return LoadCaught(f)
}

// WriteCaught writes the caught runs of outcomes as a list LoadCaught
// reads, sorted, under a header saying what the file is.
func WriteCaught(w io.Writer, outcomes []Outcome) error {
	var keys []string
	for _, o := range outcomes {
		if o.Caught() {
			keys = append(keys, o.Key())
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# The runs of the mutation suite the conformance kit caught, one\n")
	b.WriteString("# \"<transport> <mutant>\" a line (conformance/mutate, TestMutationSuite).\n")
	b.WriteString("# A run listed here that survives fails CI: a check stopped catching it.\n")
	b.WriteString("# Rewrite it with AEP_MUTATION_UPDATE=1 once a new catch is intended.\n")
	for _, k := range keys {
		b.WriteString(k + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Verdict is the suite's outcome held to the recorded list.
type Verdict struct {
	Outcomes []Outcome
	Caught   int
	// Survivors are the runs the kit did not catch.
	Survivors []Outcome
	// Regressions are runs the list names that survived: the gate fails.
	Regressions []Outcome
	// New are caught runs the list does not name yet.
	New []string
	// Stale are listed runs the suite no longer makes (a mutant renamed
	// or removed): the list must follow, so the gate fails.
	Stale []string
}

// Judge holds outcomes to the caught list.
func Judge(outcomes []Outcome, listed map[string]bool) Verdict {
	v := Verdict{Outcomes: outcomes}
	made := map[string]bool{}
	for _, o := range outcomes {
		made[o.Key()] = true
		switch {
		case o.Caught():
			v.Caught++
			if !listed[o.Key()] {
				v.New = append(v.New, o.Key())
			}
		default:
			v.Survivors = append(v.Survivors, o)
			if listed[o.Key()] {
				v.Regressions = append(v.Regressions, o)
			}
		}
	}
	for k := range listed {
		if !made[k] {
			v.Stale = append(v.Stale, k)
		}
	}
	sort.Strings(v.New)
	sort.Strings(v.Stale)
	return v
}

// Rate is the share of runs caught.
func (v Verdict) Rate() float64 {
	if len(v.Outcomes) == 0 {
		return 0
	}
	return float64(v.Caught) / float64(len(v.Outcomes))
}

// Err is the gate: regressions, stale entries, or a kill rate below min.
func (v Verdict) Err(min float64) error {
	var errs []error
	for _, o := range v.Regressions {
		errs = append(errs, fmt.Errorf("regression: %s (%s) was caught before (caught.txt) and survives now", o.Key(), o.Mutant.Bug))
	}
	for _, k := range v.Stale {
		errs = append(errs, fmt.Errorf("caught.txt lists %q, which the suite no longer runs: remove it", k))
	}
	if v.Rate() < min {
		errs = append(errs, fmt.Errorf("kill rate %.1f %% is below %.0f %%", 100*v.Rate(), 100*min))
	}
	return errors.Join(errs...)
}

// WriteText writes the kill rate, overall, per transport and per kind,
// the surviving runs with their bugs, and what the gate found.
func (v Verdict) WriteText(w io.Writer) error {
	var b strings.Builder
	mutants := map[string]bool{}
	for _, o := range v.Outcomes {
		mutants[o.Mutant.Name] = true
	}
	fmt.Fprintf(&b, "mutation suite: %d mutants, %d runs, %d caught: kill rate %.1f %%\n", len(mutants), len(v.Outcomes), v.Caught, 100*v.Rate())
	type tally struct{ runs, caught int }
	group := func(name string, key func(Outcome) string) {
		t := map[string]*tally{}
		for _, o := range v.Outcomes {
			k := key(o)
			if t[k] == nil {
				t[k] = &tally{}
			}
			t[k].runs++
			if o.Caught() {
				t[k].caught++
			}
		}
		var keys []string
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "  by %s:", name)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s %d/%d", k, t[k].caught, t[k].runs)
		}
		b.WriteString("\n")
	}
	group("transport", func(o Outcome) string { return o.Transport })
	group("kind", func(o Outcome) string { return o.Mutant.Kind })
	group("origin", func(o Outcome) string {
		if o.Mutant.Independent {
			return "independent"
		}
		return "catalogue"
	})
	if len(v.Survivors) == 0 {
		b.WriteString("survivors: none\n")
	} else {
		fmt.Fprintf(&b, "survivors (%d):\n", len(v.Survivors))
		for _, o := range v.Survivors {
			fmt.Fprintf(&b, "  %s: %s\n", o.Key(), o.Mutant.Bug)
		}
	}
	for _, o := range v.Regressions {
		fmt.Fprintf(&b, "REGRESSION %s: caught before (caught.txt), survives now\n", o.Key())
	}
	for _, k := range v.Stale {
		fmt.Fprintf(&b, "STALE %s: listed in caught.txt, no longer run\n", k)
	}
	if len(v.New) > 0 {
		fmt.Fprintf(&b, "caught now and not yet in caught.txt (AEP_MUTATION_UPDATE=1 adds them): %s\n", strings.Join(v.New, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
