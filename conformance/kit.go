package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/aephost/aep/gen/contract"
)

// The kit: [Run] checks a running host, reached through a [Target],
// against the contract (gen/contract/aep.schema.json and schemas/) and the
// behaviour the spec and the schemas describe, one [Result] per check of
// [Checks] with its level (MUST or SHOULD) and the section it cites.
// Checks that need content only the host has take it from a [Fixture] and
// skip without it; a [Baseline] lists the failures a host expects.
// `aep conformance` is its command line.

// Status of one check.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	// Skip: nothing to check it with (no fixture key, a capability the
	// host does not offer, a transport without the feature); Note says.
	Skip Status = "skip"
	// XFail: failed, as the baseline says it does.
	XFail Status = "xfail"
)

// Result is the outcome of one check.
type Result struct {
	CheckInfo
	Status   Status   `json:"status"`
	Checked  int      `json:"checked"` // messages or cases the check looked at
	Problems []string `json:"problems,omitempty"`
	// Note says why a check skipped, or that a check the baseline lists
	// passed (the entry can go).
	Note string `json:"note,omitempty"`
	// Expected is the baseline's reason for a failure it lists.
	Expected string `json:"expected,omitempty"`
}

// Report is the outcome of a run, checks in the order of [Checks].
type Report struct {
	Transport string   `json:"transport"`
	Results   []Result `json:"results"`
	// OK is false when a MUST check failed that the baseline does not
	// list: the host is not conformant.
	OK      bool    `json:"ok"`
	Summary Summary `json:"summary"`

	// What [Compare] holds to the other transports' runs: every answer
	// of the run, and the run's unique names.
	answers []answer
	uniq    string
}

// Summary counts the results.
type Summary struct {
	Pass         int `json:"pass"`
	FailMust     int `json:"fail_must"`
	FailShould   int `json:"fail_should"`
	ExpectedFail int `json:"expected_fail"`
	Skip         int `json:"skip"`
	// Stale lists the baseline's checks that passed.
	Stale []string `json:"stale,omitempty"`
}

// Failed returns the IDs of the checks that failed, expected or not.
func (r *Report) Failed() []string {
	var out []string
	for _, x := range r.Results {
		if x.Status == Fail || x.Status == XFail {
			out = append(out, x.ID)
		}
	}
	return out
}

// Result returns the result of one check.
func (r *Report) Result(id string) (Result, bool) {
	for _, x := range r.Results {
		if x.ID == id {
			return x, true
		}
	}
	return Result{}, false
}

// WriteText writes the report for people: one line per check with its
// level, its problems indented below it, then the skipped checks with
// what they need, and a summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, x := range r.Results {
		if x.Status == Skip {
			continue
		}
		fmt.Fprintf(&b, "%-5s %-6s %-29s %s (%d checked)\n", strings.ToUpper(string(x.Status)), x.Level, x.ID, x.Cites, x.Checked)
		if x.Expected != "" {
			fmt.Fprintf(&b, "      expected by the baseline: %s\n", x.Expected)
		}
		if x.Note != "" {
			fmt.Fprintf(&b, "      %s\n", x.Note)
		}
		for _, p := range x.Problems {
			fmt.Fprintf(&b, "      - %s\n", p)
		}
	}
	for _, x := range r.Results {
		if x.Status == Skip {
			fmt.Fprintf(&b, "SKIP  %-6s %-29s %s\n", x.Level, x.ID, x.Note)
		}
	}
	s := r.Summary
	fmt.Fprintf(&b, "%s: %d pass, %d MUST failed, %d SHOULD failed, %d expected failures, %d skipped\n",
		r.Transport, s.Pass, s.FailMust, s.FailShould, s.ExpectedFail, s.Skip)
	if len(s.Stale) > 0 {
		fmt.Fprintf(&b, "the baseline lists checks that passed (remove them): %s\n", strings.Join(s.Stale, ", "))
	}
	if r.OK {
		b.WriteString("conformant\n")
	} else {
		var must []string
		for _, x := range r.Results {
			if x.Status == Fail && x.Level == Must {
				must = append(must, x.ID)
			}
		}
		fmt.Fprintf(&b, "not conformant: %s\n", strings.Join(must, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Example is one example message of the contract.
type Example struct {
	Name  string // where it came from, e.g. "schemas/examples/tool/call/req/invalid-no-tool_name.json"
	Type  string
	Valid bool
	Line  []byte
	// Beyond marks an invalid example no static schema can refuse (a
	// duplicate key, invalid UTF-8): only a host can.
	Beyond bool
}

// Options configure [Run].
type Options struct {
	// Token is the host's auth_token.
	Token string
	// AgentID is the agent_id of the kit's handshakes; default
	// "aep-conformance".
	AgentID string
	// Caps are the capabilities requested where a check needs a working
	// session; default: every capability the contract names, and the
	// always-on session namespace.
	Caps []string
	// Fixture is the host content of the checks that need some; nil: they
	// skip.
	Fixture *Fixture
	// Baseline lists the checks the host is expected to fail.
	Baseline *Baseline
	// Only, when set, runs only the scenarios judging these checks (an ID,
	// or a prefix ending in "." such as "tools."); the traffic checks
	// judge whatever they see, and the rest skip.
	Only []string
	// EventsRequest is a request line (without id, proto, ts, which the kit
	// sets) that makes the host send events, e.g. a streaming tool call.
	// The fixture's tools.streaming is the usual way; this one is sent as
	// it is, for a host whose events come from elsewhere.
	EventsRequest []byte
	// Examples are sent by the examples checks; default [BuiltinExamples].
	Examples []Example
	// OperatorSession, when set, opens a session for the kit's tenant
	// through the host's admin API (POST /admin/sessions) and returns its
	// transport id and the token its handshake takes; the kit reaches it
	// with Target.Attach. Without it session.operator skips.
	OperatorSession func(ctx context.Context) (sessionID, token string, err error)
	// Timeout bounds the wait for one reply; default 10 s.
	Timeout time.Duration
	// Record, when set, gets every line of every session as one JSON object
	// per line: {"from": "agent"|"host", "line": "...", "example":
	// "valid"|"invalid" (the examples), "beyond": true (an invalid example
	// no schema can refuse)}. CI validates such a recording with stock tools.
	Record io.Writer
}

type record struct {
	From    string `json:"from"`
	Line    string `json:"line"`
	Example string `json:"example,omitempty"`
	Beyond  bool   `json:"beyond,omitempty"`
}

func (k *kit) record(r record) {
	if k.opts.Record == nil {
		return
	}
	b, _ := json.Marshal(r)
	k.mu.Lock()
	defer k.mu.Unlock()
	_, _ = k.opts.Record.Write(append(b, '\n'))
}

// BuiltinExamples are the kit's own examples, used when no example
// directory is given: lines whose answer the spec and docs/DECISIONS.md,
// Wire fix for every host.
func BuiltinExamples() []Example {
	ex := func(typ, name string, valid bool, line string) Example {
		return Example{Name: "built-in " + name, Type: typ, Valid: valid, Line: []byte(line)}
	}
	beyond := func(e Example) Example { e.Beyond = true; return e }
	return []Example{
		ex("ping", "ping", true, `{"type":"ping","id":"ex-v1","proto":"1.0","ts":1}`),
		ex("session/info/req", "session info", true, `{"type":"session/info/req","id":"ex-v2","proto":"1.0","ts":1}`),
		ex("tool/list/req", "tool list", true, `{"type":"tool/list/req","id":"ex-v3","proto":"1.0","ts":1}`),
		ex("tool/call/req", "unknown tool", true, `{"type":"tool/call/req","id":"ex-v4","proto":"1.0","ts":1,"tool_name":"no_such_tool_conformance","arguments":{}}`),
		ex("ping", "not JSON", false, `{"type":"ping",`),
		ex("ping", "trailing data", false, `{"type":"ping","id":"ex-i1","proto":"1.0","ts":1} {}`),
		beyond(ex("ping", "duplicate key", false, `{"type":"ping","id":"ex-i2","proto":"1.0","proto":"1.0","ts":1}`)),
		beyond(ex("ping", "invalid UTF-8", false, "{\"type\":\"ping\",\"id\":\"ex-i3\",\"proto\":\"1.0\",\"ts\":1,\"x\":\"\xff\"}")),
		ex("nope/nope/req", "unknown type", false, `{"type":"nope/nope/req","id":"ex-i4","proto":"1.0","ts":1}`),
		ex("tool/call/req", "no tool_name", false, `{"type":"tool/call/req","id":"ex-i5","proto":"1.0","ts":1,"arguments":{}}`),
		ex("tool/call/req", "tool_name a number", false, `{"type":"tool/call/req","id":"ex-i6","proto":"1.0","ts":1,"tool_name":7,"arguments":{}}`),
	}
}

// LoadExamples reads example messages from fsys: each `<type>/<name>.json`
// (the type's slashes are directories, as in schemas/examples/) is a valid
// example unless its name starts with "invalid". An UNSTATABLE.md beside
// them lists, one table row each with the path in backticks first, the
// invalid examples no static schema can refuse: they are marked Beyond.
func LoadExamples(fsys fs.FS) ([]Example, error) {
	beyond := map[string]bool{}
	if b, err := fs.ReadFile(fsys, "UNSTATABLE.md"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "| `"); ok {
				if p, _, ok := strings.Cut(rest, "`"); ok {
					beyond[p] = true
				}
			}
		}
	}
	var out []Example
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		var line bytes.Buffer
		if json.Compact(&line, b) != nil {
			// Not JSON on purpose: sent as it is, on one line.
			line.Reset()
			line.Write(bytes.TrimSpace(bytes.ReplaceAll(b, []byte("\n"), nil)))
		}
		out = append(out, Example{Name: p, Type: path.Dir(p), Valid: !strings.HasPrefix(path.Base(p), "invalid"), Line: line.Bytes(), Beyond: beyond[p]})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("conformance: examples: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("conformance: no examples")
	}
	return out, nil
}

// judge is the compiled schemas and bundle a run judges by; it never
// changes, so runs in one process share it (compiledContract).
type judge struct {
	checker *Checker
	host    *jsonschema.Schema // the bundle's HostMessage
	closed  *jsonschema.Schema // the same with every described object closed
	// hostDefs and closedDefs are the bundle's message defs by type, so
	// a line is judged by its own def, and its problems are its own.
	hostDefs, closedDefs map[string]*jsonschema.Schema
	codes                map[string]retryRow // the retryable table, from the bundle
}

var compiled struct {
	once sync.Once
	j    *judge
	err  error
}

// compiledContract compiles the module's schemas and the bundle once per
// process: a suite running the kit many times (mutants) pays it once.
func compiledContract() (*judge, error) {
	compiled.once.Do(func() {
		j := &judge{}
		if j.checker, compiled.err = Module(); compiled.err != nil {
			return
		}
		if compiled.err = j.loadBundle(); compiled.err == nil {
			compiled.j = j
		}
	})
	return compiled.j, compiled.err
}

// kit is one run: the contract, the options, and what each check found.
type kit struct {
	*judge
	opts   Options
	target Target
	// uniq makes the names this run creates (memory namespaces, chains,
	// keys) its own, so runs against one host do not meet.
	uniq string

	mu       sync.Mutex
	problems map[string][]string
	checked  map[string]int
	notes    map[string]string
	seq      int

	// For the comparison across transports (compare.go): the scenario
	// running (its first check), the sessions of each label it opened,
	// and every answer, once per request.
	scenario   string
	branch     string // the transport's own paths the scenario took (transportBranch)
	sessions   map[string]int
	answers    []answer
	answerKeys map[string]bool

	// Learnt from the handshake check's session.
	offered     map[string]bool // capabilities enabled when every one was asked for
	handshakeOK bool
}

func (k *kit) fail(check, format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.problems[check] = append(k.problems[check], fmt.Sprintf(format, args...))
}

func (k *kit) count(check string) {
	k.mu.Lock()
	k.checked[check]++
	k.mu.Unlock()
}

// expect counts one case of check and fails it unless ok.
func (k *kit) expect(check string, ok bool, format string, args ...any) bool {
	k.count(check)
	if !ok {
		k.fail(check, format, args...)
	}
	return ok
}

// skip records why checks could not run, for the report of those that
// end without a case.
func (k *kit) skip(reason string, checks ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range checks {
		if k.notes[c] == "" {
			k.notes[c] = reason
		}
	}
}

func (k *kit) nextID(prefix string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	return fmt.Sprintf("%s-%d", prefix, k.seq)
}

// name returns a name of this run: "aep-conformance-<what>-<uniq>".
func (k *kit) name(what string) string {
	return "aep-conformance-" + what + "-" + k.uniq
}

// selected says whether any of checks is among Options.Only.
func (k *kit) selected(checks ...string) bool {
	if len(k.opts.Only) == 0 {
		return true
	}
	for _, c := range checks {
		for _, o := range k.opts.Only {
			if c == o || strings.HasSuffix(o, ".") && strings.HasPrefix(c, o) || strings.HasPrefix(c, o+".") {
				return true
			}
		}
	}
	return false
}

// scenario is a run of requests that judges some checks.
type scenario struct {
	checks []string
	run    func(context.Context) error
}

// Run checks the host that target reaches. An error means the kit could
// not run at all (no contract, no host, a bad fixture); a host that fails
// checks gives a report with OK false.
func Run(ctx context.Context, target Target, opts Options) (*Report, error) {
	if target.Dial == nil {
		return nil, errors.New("conformance: the target has no Dial")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Examples == nil {
		opts.Examples = BuiltinExamples()
	}
	if opts.AgentID == "" {
		opts.AgentID = "aep-conformance"
	}
	if opts.Fixture == nil {
		opts.Fixture = &Fixture{}
	}
	for _, o := range opts.Only {
		if _, ok := checkInfo(o); !ok && !strings.HasSuffix(o, ".") {
			found := false
			for _, c := range catalogue {
				found = found || strings.HasPrefix(c.ID, o+".")
			}
			if !found {
				return nil, fmt.Errorf("conformance: --only %s: no such check", o)
			}
		}
	}
	k := &kit{opts: opts, target: target, problems: map[string][]string{}, checked: map[string]int{}, notes: map[string]string{}, offered: map[string]bool{},
		sessions: map[string]int{}, answerKeys: map[string]bool{}}
	k.skip("needs runs over two transports or more (Compare; aep conformance --all-transports): its result is the comparison's", CheckTransportsAgree)
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	k.uniq = hex.EncodeToString(rb[:])
	j, err := compiledContract()
	if err != nil {
		return nil, err
	}
	k.judge = j
	if len(k.opts.Caps) == 0 {
		k.opts.Caps = append(k.capabilities(), k.alwaysOn()...)
	}
	// A first session proves the host is there at all.
	probe, err := target.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("conformance: cannot reach the host: %w", err)
	}
	_ = probe.Close()

	for i, sc := range k.scenarios() {
		// The first, the handshake, learns what the host offers: it
		// always runs.
		if i > 0 && !k.selected(sc.checks...) {
			k.skip("not selected (--only)", sc.checks...)
			continue
		}
		if i > 0 && !k.handshakeOK {
			// Every other scenario needs a session: they would all fail
			// the same way, each after a timeout.
			k.skip("the handshake with the token failed (see handshake)", checkIDs()...)
			break
		}
		k.scenario, k.branch = sc.checks[0], ""
		if err := sc.run(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
	return k.report(), nil
}

func (k *kit) report() *Report {
	rep := &Report{Transport: k.target.Name, OK: true, answers: k.answers, uniq: k.uniq}
	if rep.Transport == "" {
		rep.Transport = "host"
	}
	for _, c := range catalogue {
		res := Result{CheckInfo: c, Checked: k.checked[c.ID], Problems: k.problems[c.ID]}
		reason, listed := k.opts.Baseline.reason(c.ID)
		switch {
		case len(res.Problems) > 0 && listed:
			res.Status = XFail
			res.Expected = reason
			rep.Summary.ExpectedFail++
		case len(res.Problems) > 0:
			res.Status = Fail
			if c.Level == Must {
				rep.OK = false
				rep.Summary.FailMust++
			} else {
				rep.Summary.FailShould++
			}
		case res.Checked == 0:
			res.Status = Skip
			res.Note = k.notes[c.ID]
			if res.Note == "" {
				res.Note = "nothing exercised it"
			}
			rep.Summary.Skip++
		default:
			res.Status = Pass
			rep.Summary.Pass++
			if listed {
				res.Note = "the baseline lists it as failing, but it passed: remove the entry"
				rep.Summary.Stale = append(rep.Summary.Stale, c.ID)
			}
		}
		if len(res.Problems) > 20 {
			res.Problems = append(res.Problems[:20:20], fmt.Sprintf("… and %d more", len(res.Problems)-20))
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

func (k *judge) loadBundle() error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(contract.Bundle))
	if err != nil {
		return err
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.UseLoader(noNetwork{})
	if err := comp.AddResource(contract.BundleID, doc); err != nil {
		return err
	}
	if k.host, err = comp.Compile(contract.BundleID + "#/$defs/HostMessage"); err != nil {
		return err
	}
	// The same bundle with every object it describes closed, compiled on
	// its own.
	closedDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(contract.Bundle))
	if err != nil {
		return err
	}
	closeObjects(closedDoc)
	const closedID = "https://aephost.dev/conformance/closed.schema.json"
	closedDoc.(map[string]any)["$id"] = closedID
	comp2 := jsonschema.NewCompiler()
	comp2.DefaultDraft(jsonschema.Draft2020)
	comp2.UseLoader(noNetwork{})
	if err := comp2.AddResource(closedID, closedDoc); err != nil {
		return err
	}
	if k.closed, err = comp2.Compile(closedID + "#/$defs/HostMessage"); err != nil {
		return err
	}
	// Each message def of the union, by its type's const.
	var union struct {
		Defs map[string]struct {
			OneOf []struct {
				Ref string `json:"$ref"`
			} `json:"oneOf"`
			Properties map[string]struct {
				Const string `json:"const"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(contract.Bundle, &union); err != nil {
		return err
	}
	k.hostDefs, k.closedDefs = map[string]*jsonschema.Schema{}, map[string]*jsonschema.Schema{}
	for _, ref := range union.Defs["HostMessage"].OneOf {
		name := strings.TrimPrefix(ref.Ref, "#/$defs/")
		typ := union.Defs[name].Properties["type"].Const
		if typ == "" || name == ref.Ref {
			continue
		}
		if k.hostDefs[typ], err = comp.Compile(contract.BundleID + "#/$defs/" + name); err != nil {
			return err
		}
		if k.closedDefs[typ], err = comp2.Compile(closedID + "#/$defs/" + name); err != nil {
			return err
		}
	}
	var b struct {
		Defs map[string]struct {
			AllOf []struct {
				If struct {
					Properties map[string]struct {
						Const      any `json:"const"`
						Properties map[string]struct {
							Const any `json:"const"`
						} `json:"properties"`
					} `json:"properties"`
				} `json:"if"`
				Then struct {
					Properties map[string]struct {
						Const any `json:"const"`
					} `json:"properties"`
				} `json:"then"`
			} `json:"allOf"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(contract.Bundle, &b); err != nil {
		return err
	}
	// The retryable table, from ErrorMessage's if/then rules: one per code
	// (any other reason or none) and one per listed detail.reason.
	k.codes = map[string]retryRow{}
	for _, c := range b.Defs["ErrorMessage"].AllOf {
		code, ok1 := c.If.Properties["code"].Const.(string)
		r, ok2 := c.Then.Properties["retryable"].Const.(bool)
		if !ok1 || !ok2 {
			continue
		}
		row := k.codes[code]
		if reason, ok := c.If.Properties["detail"].Properties["reason"].Const.(string); ok {
			if row.Reasons == nil {
				row.Reasons = map[string]bool{}
			}
			row.Reasons[reason] = r
		} else {
			row.Retryable = r
		}
		k.codes[code] = row
	}
	if len(k.codes) == 0 {
		return errors.New("conformance: the bundle states no retryable per code")
	}
	return nil
}

// closeObjects adds `unevaluatedProperties: false` to every schema object
// of doc that names its properties and says nothing of others: the
// contract's own shapes, at any depth, are closed for a host's lines,
// while objects it leaves open (no properties: data, info, detail, a
// toolkit's config schema) stay open, as do those that say what else they
// take (additionalProperties). unevaluatedProperties, unlike
// additionalProperties, sees the properties of allOf, $ref and if/then
// beside it, so a composed shape is not refused its own fields.
func closeObjects(doc any) {
	var walk func(s any)
	walkMap := func(m any) {
		if mm, ok := m.(map[string]any); ok {
			for _, v := range mm {
				walk(v)
			}
		}
	}
	walkList := func(l any) {
		if ll, ok := l.([]any); ok {
			for _, v := range ll {
				walk(v)
			}
		}
	}
	walk = func(s any) {
		m, ok := s.(map[string]any)
		if !ok {
			return
		}
		_, props := m["properties"]
		_, addl := m["additionalProperties"]
		_, uneval := m["unevaluatedProperties"]
		if props && !addl && !uneval {
			m["unevaluatedProperties"] = false
		}
		walkMap(m["properties"])
		walkMap(m["patternProperties"])
		walkMap(m["$defs"])
		walkList(m["allOf"])
		walkList(m["anyOf"])
		walkList(m["oneOf"])
		walkList(m["prefixItems"])
		for _, key := range []string{"items", "additionalProperties", "if", "then", "else", "not", "contains", "unevaluatedItems"} {
			walk(m[key])
		}
	}
	walk(doc)
}

// capabilities are every capability some type of the contract needs.
func (k *kit) capabilities() []string {
	seen := map[string]bool{}
	var out []string
	for _, ts := range k.checker.types {
		if ts.capability != "" && !seen[ts.capability] {
			seen[ts.capability] = true
			out = append(out, ts.capability)
		}
	}
	sort.Strings(out)
	return out
}

// alwaysOn are the namespaces served to every session whatever it asked
// for: those no capability gates, other than the kernel's own core
// messages (docs/DECISIONS.md, Wire: session/ is always on). Each is also
// the name an agent may request it by.
func (k *kit) alwaysOn() []string {
	seen := map[string]bool{}
	var out []string
	for _, ts := range k.checker.types {
		if ts.capability == "" && !ts.kernel && ts.namespace != "" && !seen[ts.namespace] {
			seen[ts.namespace] = true
			out = append(out, ts.namespace)
		}
	}
	sort.Strings(out)
	return out
}

// capabilityOf returns the capability a request type needs, or for an
// always-on namespace its name; "" for core messages.
func (k *kit) capabilityOf(typ string) string {
	ts, ok := k.checker.types[typ]
	if !ok || ts.kernel {
		return ""
	}
	if ts.capability != "" {
		return ts.capability
	}
	return ts.namespace
}

// offers says whether the host enabled capability c when every one was
// asked for; when it did not, the checks of c skip with that reason.
func (k *kit) offers(c string, checks ...string) bool {
	if k.offered[c] {
		return true
	}
	if !k.handshakeOK {
		k.skip("the handshake with the token failed (see handshake)", checks...)
	} else {
		k.skip("the host does not offer "+c, checks...)
	}
	return false
}

// msg is one host line, decoded loosely.
type msg struct {
	raw       []byte
	body      map[string]any   // the whole message
	events    []map[string]any // the events of its request, in order
	err       error            // no reply: why
	Type      string           `json:"type"`
	ReqID     *string          `json:"req_id"`
	Seq       *int             `json:"seq"`
	Code      string           `json:"code"`
	Retryable *bool            `json:"retryable"`
	OK        *bool            `json:"ok"`
	SessionID string           `json:"session_id"`
	ErrorRaw  json.RawMessage  `json:"error"` // handshake/resp's error object (a string elsewhere)
	Error     *errBody         `json:"-"`
	Caps      []capEntry       `json:"accepted_caps"`
	CapName   *string          `json:"capability_name"`
	MaxPar    *int             `json:"max_parallel"`
	Detail    json.RawMessage  `json:"detail"`
}

type errBody struct {
	Code      string          `json:"code"`
	Retryable *bool           `json:"retryable"`
	Detail    json.RawMessage `json:"detail"`
}

// retryRow is one code of the retryable table: its retryable, and the
// retryable of each detail.reason that overrides it.
type retryRow struct {
	Retryable bool            `json:"retryable"`
	Reasons   map[string]bool `json:"reasons"`
}

// reason is detail.reason of an error, "" when there is none.
func reason(detail json.RawMessage) string {
	var d struct {
		Reason string `json:"reason"`
	}
	if len(detail) > 0 && json.Unmarshal(detail, &d) == nil {
		return d.Reason
	}
	return ""
}

type capEntry struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
}

func (m *msg) reqID() string {
	if m.ReqID == nil {
		return ""
	}
	return *m.ReqID
}

func clip(line []byte) string {
	if len(line) > 200 {
		return string(line[:200]) + "…"
	}
	return string(line)
}

// scenarios are the kit's runs, in order. The handshake comes first: it
// learns what the host offers.
func (k *kit) scenarios() []scenario {
	out := []scenario{
		{[]string{CheckHandshake}, k.handshake},
	}
	out = append(out, k.coreScenarios()...)
	out = append(out, k.capabilityScenarios()...)
	out = append(out, k.transportScenarios()...)
	return out
}
