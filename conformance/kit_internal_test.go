package conformance

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestReportLevelsAndBaseline: a MUST failure makes the run fail unless
// the baseline lists it (then it is expected); a SHOULD failure never
// does; a listed check that passed is named stale; a check that ran no
// case skips with its reason.
func TestReportLevelsAndBaseline(t *testing.T) {
	tests := []struct {
		name     string
		problems map[string][]string
		baseline []ExpectedFailure
		ok       bool
		status   map[string]Status
		stale    []string
	}{
		{"all pass", nil, nil, true, map[string]Status{CheckPing: Pass}, nil},
		{"MUST fails", map[string][]string{CheckPing: {"negative"}}, nil, false, map[string]Status{CheckPing: Fail}, nil},
		{"SHOULD fails", map[string][]string{CheckEventsQuiet: {"streamed"}}, nil, true, map[string]Status{CheckEventsQuiet: Fail}, nil},
		{"MUST fails, expected", map[string][]string{CheckPing: {"negative"}}, []ExpectedFailure{{CheckPing, "known"}}, true, map[string]Status{CheckPing: XFail}, nil},
		{"expected, but passed", nil, []ExpectedFailure{{CheckPing, "known"}}, true, map[string]Status{CheckPing: Pass}, []string{CheckPing}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &kit{problems: map[string][]string{}, checked: map[string]int{}, notes: map[string]string{CheckToolsCall: "needs fixture tools.call"}}
			for _, c := range catalogue {
				if c.ID != CheckToolsCall {
					k.checked[c.ID] = 1
				}
			}
			for c, p := range tc.problems {
				k.problems[c] = p
			}
			if tc.baseline != nil {
				k.opts.Baseline = &Baseline{ExpectedFailures: tc.baseline}
			}
			rep := k.report()
			if rep.OK != tc.ok {
				t.Fatalf("OK %v, want %v", rep.OK, tc.ok)
			}
			for c, want := range tc.status {
				if r, _ := rep.Result(c); r.Status != want {
					t.Errorf("%s: %s, want %s", c, r.Status, want)
				}
			}
			if r, _ := rep.Result(CheckToolsCall); r.Status != Skip || r.Note != "needs fixture tools.call" {
				t.Errorf("a check without a case: %+v", r)
			}
			if !slices.Equal(rep.Summary.Stale, tc.stale) {
				t.Errorf("stale %v, want %v", rep.Summary.Stale, tc.stale)
			}
			var b strings.Builder
			if err := rep.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if tc.ok != strings.HasSuffix(b.String(), "conformant\n") || !tc.ok && !strings.Contains(b.String(), "not conformant: ping") {
				t.Errorf("text report:\n%s", b.String())
			}
		})
	}
}

// TestCatalogue: every check has a level, a citation and a title, its
// ID once; needs name a fixture key the fixture schema has.
func TestCatalogue(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(fixtureSchema, &schema); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range catalogue {
		if seen[c.ID] || c.Cites == "" || c.Title == "" || (c.Level != Must && c.Level != Should) {
			t.Errorf("%+v", c)
		}
		seen[c.ID] = true
		if key, ok := strings.CutPrefix(c.Needs, "fixture "); ok {
			key, _, _ = strings.Cut(key, " ")
			path := "properties." + strings.ReplaceAll(key, ".", ".properties.")
			if !has(schema, path) {
				t.Errorf("%s needs %s, which fixture.schema.json does not have", c.ID, key)
			}
		}
	}
}

// TestCloseObjects: the shapes the contract describes are closed at any
// depth; open objects and those that say what else they take stay as
// they are.
func TestCloseObjects(t *testing.T) {
	doc := map[string]any{}
	if err := json.Unmarshal([]byte(`{
		"$defs": {
			"M": {"type": "object", "additionalProperties": false, "properties": {
				"result": {"$ref": "#/$defs/R"},
				"data": {"type": "object"},
				"env": {"type": "object", "additionalProperties": {"type": "string"}, "properties": {"a": {}}},
				"list": {"type": "array", "items": {"type": "object", "properties": {"x": {}}}},
				"either": {"oneOf": [{"type": "object", "properties": {"y": {}}}, {"type": "null"}]},
				"ruled": {"type": "object", "properties": {"ok": {"type": "boolean"}, "id": {}},
					"if": {"properties": {"ok": {"const": true}}}, "then": {"properties": {"id": {}}, "required": ["id"]},
					"allOf": [{"properties": {"ok": {}}, "required": ["ok"]}]}
			}},
			"R": {"type": "object", "properties": {"n": {"type": "integer"}}}
		}}`), &doc); err != nil {
		t.Fatal(err)
	}
	closeObjects(doc)
	for path, want := range map[string]any{
		"$defs.M.additionalProperties":                            false,
		"$defs.M.unevaluatedProperties":                           nil,
		"$defs.R.unevaluatedProperties":                           false,
		"$defs.M.properties.data.unevaluatedProperties":           nil,
		"$defs.M.properties.env.unevaluatedProperties":            nil,
		"$defs.M.properties.list.items.unevaluatedProperties":     false,
		"$defs.M.properties.either.oneOf.0.unevaluatedProperties": false,
		// The parts of one value's shape stay open: the whole is closed.
		"$defs.M.properties.ruled.unevaluatedProperties":         false,
		"$defs.M.properties.ruled.if.unevaluatedProperties":      nil,
		"$defs.M.properties.ruled.then.unevaluatedProperties":    nil,
		"$defs.M.properties.ruled.allOf.0.unevaluatedProperties": nil,
	} {
		got, ok := get(doc, path)
		if want == nil && ok || want != nil && got != want {
			t.Errorf("%s: %v (present %v), want %v", path, got, ok, want)
		}
	}
}

// TestHolds: how a fixture's expected value is matched.
func TestHolds(t *testing.T) {
	tests := []struct {
		got, want any
		ok        bool
	}{
		{map[string]any{"a": 1.0, "b": "x"}, map[string]any{"a": 1}, true},
		{map[string]any{"a": map[string]any{"b": 2.0, "c": 3.0}}, map[string]any{"a": map[string]any{"b": 2}}, true},
		{map[string]any{"a": 1.0}, map[string]any{"a": 2}, false},
		{map[string]any{"a": 1.0}, map[string]any{"b": 1}, false},
		{[]any{1.0, 2.0}, []any{1, 2}, true},
		{[]any{1.0, 2.0}, []any{1}, false},
		{"said: x\n", "said: x\n", true},
		{nil, map[string]any{}, false},
	}
	for _, tc := range tests {
		if got := holds(tc.got, tc.want); got != tc.ok {
			t.Errorf("holds(%v, %v) = %v", tc.got, tc.want, got)
		}
	}
}

// TestSelected: --only takes check IDs and prefixes.
func TestSelected(t *testing.T) {
	k := &kit{opts: Options{Only: []string{"isolation", "tools.", CheckPing}}}
	for id, want := range map[string]bool{
		CheckIsolationIDs: true, CheckIsolationState: true, CheckToolsList: true, CheckPing: true,
		CheckMemoryErrors: false, CheckToolkitsList: false, CheckHostStrict: false,
	} {
		if got := k.selected(id); got != want {
			t.Errorf("selected(%s) = %v", id, got)
		}
	}
}

// TestProbes: every capability of the contract, and the always-on session
// namespace, has a probe the kit can send, needing nothing of the host.
func TestProbes(t *testing.T) {
	c, err := Module()
	if err != nil {
		t.Fatal(err)
	}
	k := &kit{judge: &judge{checker: c}}
	probes := k.probes()
	for _, cp := range append(k.capabilities(), k.alwaysOn()...) {
		p, ok := probes[cp]
		if !ok {
			t.Errorf("no probe for %s", cp)
			continue
		}
		if k.capabilityOf(p.typ) != cp {
			t.Errorf("the probe of %s is %s", cp, p.typ)
		}
	}
	if !slices.Equal(k.alwaysOn(), []string{"session"}) {
		t.Errorf("always-on namespaces %v", k.alwaysOn())
	}
	if p := probes["chains"]; p.typ != "chain/run/req" || p.body["name"] == nil {
		t.Errorf("chains probe %+v: a chain/run/req with its first oneOf branch filled", p)
	}
}
