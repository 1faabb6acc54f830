package conformance

import (
	"bytes"
	"context"
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

// The kit: [Run] checks a running host, reached through a [Dialer], against
// the contract (gen/contract/aep.schema.json and schemas/) and the
// behavioural rules of the protocol, one [Result] per rule with the spec
// section it comes from. `aep conformance` is its command line.

// Status of one rule.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip" // nothing to check it with (e.g. no events request given)
)

// Rule IDs, in report order.
const (
	RuleHandshake         = "handshake"
	RuleHandshakeFailures = "handshake.failures"
	RuleReplyOnce         = "reply.once"
	RuleEvents            = "events"
	RuleCapability        = "capability.gating"
	RuleRetryable         = "error.retryable"
	RuleInvalidExamples   = "examples.invalid"
	RuleValidExamples     = "examples.valid"
	RuleDirection         = "direction"
	RuleHostStrict        = "host.strict"
	RuleOperatorSession   = "session.operator"
)

var rules = []struct{ id, section, title string }{
	{RuleHandshake, "spec §2.4, §2.2, §4.2", "a handshake with the token opens a session: ok, session_id, max_parallel, one accepted_caps entry per requested name, enabled false where nothing serves it"},
	{RuleHandshakeFailures, "spec §5 rule 3, §9 rule 2, §3", "a wrong token is unauthorized, another proto version_mismatch, a malformed handshake schema_violation, each with ok false and no session; a request before a handshake is unauthorized"},
	{RuleReplyOnce, "spec §2.1, docs/DECISIONS.md Wire", "every request gets exactly one reply, of its reply type or error, with req_id its id"},
	{RuleEvents, "spec §6", "events of a request arrive while it is in flight, before its reply, typed <ns>/event, seq 0, 1, 2 …"},
	{RuleCapability, "spec §7 condition 3, §2.2", "a namespace whose capability the session did not request is capability_missing"},
	{RuleRetryable, "spec §7", "every error's retryable is the contract's value for its code and detail.reason"},
	{RuleInvalidExamples, "spec §7 condition 1, docs/DECISIONS.md Wire", "every invalid example is answered with parse_error or schema_violation"},
	{RuleValidExamples, "spec §7 condition 1", "no valid example is answered with parse_error or schema_violation"},
	{RuleDirection, "spec §2.1, docs/DECISIONS.md Wire", "a host sends only replies and events; a type only a host sends, sent by an agent, is parse_error"},
	{RuleHostStrict, "spec §2.1, docs/DECISIONS.md Wire", "every line a host sends is one JSON object on one line that validates against the contract's HostMessage (closed: no field the contract does not name)"},
	{RuleOperatorSession, "spec §5, docs/operating.md Admin API", "a session the operator opened handshakes with the token issued for it, not with a tenant's secret, and session/info says operator_opened; that token opens no other session, and an agent's own session is not marked (skipped unless the kit is given the operator's way to open one)"},
}

// Result is the outcome of one rule.
type Result struct {
	Rule     string   `json:"rule"`
	Section  string   `json:"section"`
	Title    string   `json:"title"`
	Status   Status   `json:"status"`
	Checked  int      `json:"checked"` // messages or cases the rule looked at
	Problems []string `json:"problems,omitempty"`
	Note     string   `json:"note,omitempty"`
}

// Report is the outcome of a run, rules in a fixed order.
type Report struct {
	Results []Result `json:"results"`
	OK      bool     `json:"ok"`
}

// Failed returns the IDs of the rules that failed.
func (r *Report) Failed() []string {
	var out []string
	for _, x := range r.Results {
		if x.Status == Fail {
			out = append(out, x.Rule)
		}
	}
	return out
}

// WriteText writes the report for people: one line per rule, its problems
// indented below it.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, x := range r.Results {
		fmt.Fprintf(&b, "%-4s %-20s %s (%d checked)\n", strings.ToUpper(string(x.Status)), x.Rule, x.Section, x.Checked)
		if x.Note != "" {
			fmt.Fprintf(&b, "     %s\n", x.Note)
		}
		for _, p := range x.Problems {
			fmt.Fprintf(&b, "     - %s\n", p)
		}
	}
	if r.OK {
		b.WriteString("conformant\n")
	} else {
		fmt.Fprintf(&b, "not conformant: %s\n", strings.Join(r.Failed(), ", "))
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
	// Caps are the capabilities requested where a rule needs a working
	// session; default: every capability the contract names.
	Caps []string
	// EventsRequest is a request line (without id, proto, ts, which the kit
	// sets) that makes the host send events, e.g. a streaming tool call.
	// Without it the events rule checks the events other rules saw.
	EventsRequest []byte
	// Examples are sent by the examples rules; default [BuiltinExamples].
	Examples []Example
	// Timeout bounds the wait for one reply; default 10 s.
	Timeout time.Duration
	// OperatorSession, when set, opens a session through the host's admin
	// API (POST /admin/sessions) and returns a connection attached to it
	// and the token its handshake takes, for the session.operator rule;
	// without it that rule is skipped.
	OperatorSession func(ctx context.Context) (conn Conn, token string, err error)
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

// kit is one run: the contract, the options, and what each rule found.
type kit struct {
	opts    Options
	dial    Dialer
	checker *Checker
	host    *jsonschema.Schema  // the bundle's HostMessage
	codes   map[string]retryRow // the retryable table, from the bundle
	// required lists each message type's required fields (bundle).
	required map[string][]string
	// conditional marks types whose def has rules beyond required fields.
	conditional map[string]bool

	mu       sync.Mutex
	problems map[string][]string
	checked  map[string]int
	notes    map[string]string
	seq      int
}

func (k *kit) fail(rule, format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.problems[rule] = append(k.problems[rule], fmt.Sprintf(format, args...))
}

func (k *kit) count(rule string) {
	k.mu.Lock()
	k.checked[rule]++
	k.mu.Unlock()
}

func (k *kit) nextID(prefix string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	return fmt.Sprintf("%s-%d", prefix, k.seq)
}

// Run checks the host that dial reaches. An error means the kit could not
// run at all (no contract, no host); a host that breaks rules gives a
// report with OK false.
func Run(ctx context.Context, dial Dialer, opts Options) (*Report, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Examples == nil {
		opts.Examples = BuiltinExamples()
	}
	k := &kit{opts: opts, dial: dial, problems: map[string][]string{}, checked: map[string]int{}, notes: map[string]string{}}
	var err error
	if k.checker, err = Module(); err != nil {
		return nil, err
	}
	if err := k.loadBundle(); err != nil {
		return nil, err
	}
	if len(k.opts.Caps) == 0 {
		k.opts.Caps = k.capabilities()
	}
	// A first session proves the host is there at all.
	probe, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("conformance: cannot reach the host: %w", err)
	}
	_ = probe.Close()

	for _, step := range []func(context.Context) error{
		k.handshake, k.handshakeFailures, k.replyOnce, k.events, k.capabilityGating,
		k.invalidExamples, k.validExamples, k.direction, k.operatorSession,
	} {
		if err := step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
	rep := &Report{OK: true}
	for _, r := range rules {
		res := Result{Rule: r.id, Section: r.section, Title: r.title, Checked: k.checked[r.id], Problems: k.problems[r.id], Note: k.notes[r.id]}
		switch {
		case len(res.Problems) > 0:
			res.Status = Fail
			rep.OK = false
		case res.Checked == 0:
			res.Status = Skip
		default:
			res.Status = Pass
		}
		if len(res.Problems) > 20 {
			res.Problems = append(res.Problems[:20], fmt.Sprintf("… and %d more", len(res.Problems)-20))
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

func (k *kit) loadBundle() error {
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
	var b struct {
		Defs map[string]struct {
			Enum       []string `json:"enum"`
			Properties map[string]struct {
				Const any `json:"const"`
			} `json:"properties"`
			Required []string `json:"required"`
			AnyOf    []any    `json:"anyOf"`
			OneOf    []any    `json:"oneOf"`
			AllOf    []struct {
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
	k.required = map[string][]string{}
	k.conditional = map[string]bool{}
	for _, d := range b.Defs {
		if t, ok := d.Properties["type"].Const.(string); ok {
			k.required[t] = d.Required
			k.conditional[t] = len(d.AllOf)+len(d.AnyOf)+len(d.OneOf) > 0
		}
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

// msg is one host line, decoded loosely.
type msg struct {
	raw       []byte
	Type      string          `json:"type"`
	ReqID     *string         `json:"req_id"`
	Seq       *int            `json:"seq"`
	Code      string          `json:"code"`
	Retryable *bool           `json:"retryable"`
	OK        *bool           `json:"ok"`
	SessionID string          `json:"session_id"`
	Error     *errBody        `json:"error"`
	Caps      []capEntry      `json:"accepted_caps"`
	CapName   string          `json:"capability_name"`
	MaxPar    *int            `json:"max_parallel"`
	Detail    json.RawMessage `json:"detail"`
	// OperatorOpened is session/info's operator_opened.
	OperatorOpened *bool `json:"operator_opened"`
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

// session is one connection with its bookkeeping: the requests in flight
// (for the events and reply rules) and the replies seen.
type session struct {
	k        *kit
	conn     Conn
	example  *Example          // set while an example is sent
	inflight map[string]string // id → request type
	events   map[string]int    // id → events seen
	replies  map[string]int    // id → replies seen
}

func (k *kit) open(ctx context.Context) (*session, error) {
	c, err := k.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("conformance: new session: %w", err)
	}
	return &session{k: k, conn: c, inflight: map[string]string{}, events: map[string]int{}, replies: map[string]int{}}, nil
}

// send writes a line; when the line is a request with a string id, the id
// is in flight until its reply.
func (s *session) send(ctx context.Context, line []byte) error {
	if typ, id := lineID(line); id != "" {
		s.inflight[id] = typ
	}
	if s.example == nil {
		s.k.record(record{From: "agent", Line: string(line)})
	}
	return s.conn.Send(ctx, line)
}

// lineID reads the type and string id of the first JSON value of a line,
// as a host does that answers a line with trailing data by its id. Of a
// key given twice the first counts, as the host names the first id when
// it refuses the duplicate.
func lineID(line []byte) (typ, id string) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", ""
	}
	var seenType, seenID bool
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return typ, id
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return typ, id
		}
		switch k {
		case "type":
			if !seenType {
				typ, _ = v.(string)
				seenType = true
			}
		case "id":
			if !seenID {
				id, _ = v.(string)
				seenID = true
			}
		}
	}
	return typ, id
}

// request builds and sends a message of typ with the envelope filled in.
func (s *session) request(ctx context.Context, typ string, body map[string]any) (string, error) {
	id := s.k.nextID("c")
	m := map[string]any{}
	for k, v := range body {
		m[k] = v
	}
	m["type"], m["id"], m["proto"], m["ts"] = typ, id, "1.0", float64(time.Now().Unix())
	line, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return id, s.send(ctx, line)
}

// handshake opens the session with caps; it returns the handshake/resp.
func (s *session) handshake(ctx context.Context, caps []string, token string) (*msg, error) {
	id, err := s.request(ctx, "handshake/req", map[string]any{"agent_id": "aep-conformance", "agent_caps": caps, "auth_token": token})
	if err != nil {
		return nil, err
	}
	return s.await(ctx, id)
}

// await reads host lines until the reply to id, checking each on the way.
func (s *session) await(ctx context.Context, id string) (*msg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.k.opts.Timeout)
	defer cancel()
	for {
		m, err := s.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for the reply to %s: %w", id, err)
		}
		if m != nil && !strings.HasSuffix(m.Type, "/event") && m.reqID() == id {
			return m, nil
		}
	}
}

// next reads one host line and checks it against every rule that applies
// to all traffic: host.strict, direction, error.retryable, events and
// reply.once. It returns nil (no error) for a line that is not an object.
func (s *session) next(ctx context.Context) (*msg, error) {
	line, err := s.conn.Recv(ctx)
	if err != nil {
		return nil, err
	}
	k := s.k
	k.record(record{From: "host", Line: string(line)})
	k.count(RuleHostStrict)
	if err := k.checker.CheckHostLine(line); err != nil {
		var v *Violation
		if errors.As(err, &v) && strings.HasPrefix(v.Reason, "a host never sends") {
			k.fail(RuleDirection, "%s", err)
		} else {
			k.fail(RuleHostStrict, "%s", err)
		}
	} else if v, err := jsonschema.UnmarshalJSON(bytes.NewReader(line)); err == nil {
		if err := k.host.Validate(v); err != nil {
			k.fail(RuleHostStrict, "%s: not a HostMessage of the contract: %s", clip(line), describe(err))
		}
	}
	m := &msg{raw: line}
	if err := json.Unmarshal(line, m); err != nil {
		return nil, nil // host.strict has it
	}
	k.count(RuleDirection)
	if m.Type == "error" {
		k.checkRetryable(m.Code, reason(m.Detail), m.Retryable, line)
	}
	if m.Type == "handshake/resp" && m.Error != nil {
		k.checkRetryable(m.Error.Code, reason(m.Error.Detail), m.Error.Retryable, line)
	}
	id := m.reqID()
	if strings.HasSuffix(m.Type, "/event") {
		k.count(RuleEvents)
		reqType, inflight := s.inflight[id]
		switch {
		case !inflight:
			k.fail(RuleEvents, "%s: an event for %q, which is not in flight", clip(line), id)
		default:
			if ns := k.namespace(reqType); ns != "" && m.Type != ns+"/event" {
				k.fail(RuleEvents, "%s: an event of a %s request is typed %s", clip(line), reqType, m.Type)
			}
			if m.Seq == nil || *m.Seq != s.events[id] {
				k.fail(RuleEvents, "%s: seq should be %d", clip(line), s.events[id])
			}
			s.events[id]++
		}
		return m, nil
	}
	if id == "" {
		return m, nil // an error answering a line without a readable id
	}
	k.count(RuleReplyOnce)
	s.replies[id]++
	reqType, inflight := s.inflight[id]
	switch {
	case s.replies[id] > 1:
		k.fail(RuleReplyOnce, "%s: a second reply to %q", clip(line), id)
	case !inflight:
		k.fail(RuleReplyOnce, "%s: a reply to %q, which was never sent", clip(line), id)
	default:
		if want := k.replyType(reqType); want != "" && m.Type != want && m.Type != "error" {
			k.fail(RuleReplyOnce, "%s: %s is answered by %s or error", clip(line), reqType, want)
		}
	}
	delete(s.inflight, id)
	return m, nil
}

func (k *kit) namespace(typ string) string {
	if ts, ok := k.checker.types[typ]; ok {
		return ts.namespace
	}
	return ""
}

func (k *kit) replyType(typ string) string {
	if ts, ok := k.checker.types[typ]; ok {
		return ts.reply
	}
	return ""
}

func (k *kit) checkRetryable(code, reason string, retryable *bool, line []byte) {
	k.count(RuleRetryable)
	row, known := k.codes[code]
	want, byReason := row.Reasons[reason]
	if !byReason {
		want = row.Retryable
	}
	switch {
	case !known:
		k.fail(RuleRetryable, "%s: code %q is not in the contract's ErrorCode", clip(line), code)
	case retryable == nil:
		k.fail(RuleRetryable, "%s: no retryable", clip(line))
	case *retryable != want && byReason:
		k.fail(RuleRetryable, "%s: retryable %v, the contract says %v for %s with reason %q", clip(line), *retryable, want, code, reason)
	case *retryable != want:
		k.fail(RuleRetryable, "%s: retryable %v, the contract says %v for %s", clip(line), *retryable, want, code)
	}
}

// close drains the session: a last ping's pong proves that nothing more
// (a second reply, a late event) was waiting before it.
func (s *session) close(ctx context.Context) {
	defer s.conn.Close()
	id, err := s.request(ctx, "ping", nil)
	if err != nil {
		return
	}
	if _, err := s.await(ctx, id); err != nil {
		s.k.fail(RuleReplyOnce, "the closing ping: %v", err)
	}
}

func clip(line []byte) string {
	if len(line) > 200 {
		return string(line[:200]) + "…"
	}
	return string(line)
}

// --- the rules that send something of their own.

func (k *kit) handshake(ctx context.Context) error {
	s, err := k.open(ctx)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	caps := append(append([]string(nil), k.opts.Caps...), "no_such_capability")
	k.count(RuleHandshake)
	m, err := s.handshake(ctx, caps, k.opts.Token)
	if err != nil {
		k.fail(RuleHandshake, "%v", err)
		return nil
	}
	switch {
	case m.Type != "handshake/resp":
		k.fail(RuleHandshake, "%s: answered by %s", clip(m.raw), m.Type)
		return nil
	case m.OK == nil || !*m.OK:
		k.fail(RuleHandshake, "%s: ok is not true with the right token", clip(m.raw))
		return nil
	}
	if m.SessionID == "" {
		k.fail(RuleHandshake, "%s: no session_id", clip(m.raw))
	}
	if m.MaxPar == nil || *m.MaxPar < 1 {
		k.fail(RuleHandshake, "%s: max_parallel is not a positive integer", clip(m.raw))
	}
	if len(m.Caps) != len(caps) {
		k.fail(RuleHandshake, "%s: %d accepted_caps for %d requested", clip(m.raw), len(m.Caps), len(caps))
	} else {
		for i, c := range m.Caps {
			if c.Name != caps[i] {
				k.fail(RuleHandshake, "accepted_caps[%d] is %q, requested %q", i, c.Name, caps[i])
			}
		}
		if last := m.Caps[len(m.Caps)-1]; last.Enabled {
			k.fail(RuleHandshake, "accepted_caps: no_such_capability is enabled")
		}
	}
	// The session works: a ping is answered by pong.
	id, err := s.request(ctx, "ping", nil)
	if err != nil {
		return err
	}
	if p, err := s.await(ctx, id); err != nil || p.Type != "pong" {
		k.fail(RuleHandshake, "a ping after the handshake: %v %v", err, p)
	}
	return nil
}

func (k *kit) handshakeFailures(ctx context.Context) error {
	cases := []struct {
		name string
		body map[string]any
		line func(id string) []byte // when set, the handshake line itself
		code string
	}{
		{name: "a wrong token", body: map[string]any{"agent_id": "aep-conformance", "agent_caps": []string{}, "auth_token": k.opts.Token + "-wrong"}, code: "unauthorized"},
		{name: "proto 2.0", line: func(id string) []byte {
			return fmt.Appendf(nil, `{"type":"handshake/req","id":%q,"proto":"2.0","ts":1,"agent_id":"aep-conformance","agent_caps":[],"auth_token":%q}`, id, k.opts.Token)
		}, code: "version_mismatch"},
		{name: "no agent_id", body: map[string]any{"agent_caps": []string{}, "auth_token": k.opts.Token}, code: "schema_violation"},
	}
	for _, tc := range cases {
		if err := func() error {
			s, err := k.open(ctx)
			if err != nil {
				return err
			}
			defer s.close(ctx)
			// Before any handshake, a request is unauthorized.
			k.count(RuleHandshakeFailures)
			id, err := s.request(ctx, "ping", nil)
			if err != nil {
				return err
			}
			if m, err := s.await(ctx, id); err != nil {
				k.fail(RuleHandshakeFailures, "ping before the handshake: %v", err)
			} else if m.Type != "error" || m.Code != "unauthorized" {
				k.fail(RuleHandshakeFailures, "%s: a ping before the handshake is answered by %s %s, not error unauthorized", clip(m.raw), m.Type, m.Code)
			}
			k.count(RuleHandshakeFailures)
			if tc.line != nil {
				id = k.nextID("c")
				err = s.send(ctx, tc.line(id))
			} else {
				id, err = s.request(ctx, "handshake/req", tc.body)
			}
			if err != nil {
				return err
			}
			m, err := s.await(ctx, id)
			if err != nil {
				k.fail(RuleHandshakeFailures, "%s: %v", tc.name, err)
				return nil
			}
			if m.Type != "handshake/resp" || m.OK == nil || *m.OK || m.Error == nil || m.Error.Code != tc.code {
				k.fail(RuleHandshakeFailures, "%s: %s, want handshake/resp with ok false and error %s", tc.name, clip(m.raw), tc.code)
			}
			// No session was created: requests are still unauthorized.
			k.count(RuleHandshakeFailures)
			id, err = s.request(ctx, "session/info/req", nil)
			if err != nil {
				return err
			}
			if m, err := s.await(ctx, id); err != nil {
				k.fail(RuleHandshakeFailures, "%s, then session/info: %v", tc.name, err)
			} else if m.Type != "error" || m.Code != "unauthorized" {
				k.fail(RuleHandshakeFailures, "%s, then session/info: %s, want error unauthorized", tc.name, clip(m.raw))
			}
			return nil
		}(); err != nil {
			return err
		}
	}
	return nil
}

// operatorSession checks a session the operator opened (Options.OperatorSession).
func (k *kit) operatorSession(ctx context.Context) error {
	if k.opts.OperatorSession == nil {
		k.notes[RuleOperatorSession] = "no way to open an operator's session was given (aep conformance --operator)"
		return nil
	}
	conn, token, err := k.opts.OperatorSession(ctx)
	if err != nil {
		k.count(RuleOperatorSession)
		k.fail(RuleOperatorSession, "opening a session as the operator: %v", err)
		return nil
	}
	s := &session{k: k, conn: conn, inflight: map[string]string{}, events: map[string]int{}, replies: map[string]int{}}
	defer s.close(ctx)
	caps := []string{"session"}
	// A tenant's secret (the kit's token) does not open it.
	k.count(RuleOperatorSession)
	if m, err := s.handshake(ctx, caps, k.opts.Token); err != nil {
		k.fail(RuleOperatorSession, "a handshake with the tenant's secret: %v", err)
	} else if m.OK == nil || *m.OK || m.Error == nil || m.Error.Code != "unauthorized" {
		k.fail(RuleOperatorSession, "%s: the tenant's secret opened the operator's session, want handshake/resp ok false unauthorized", clip(m.raw))
	}
	k.count(RuleOperatorSession)
	m, err := s.handshake(ctx, caps, token)
	if err != nil || m.OK == nil || !*m.OK {
		k.fail(RuleOperatorSession, "the handshake with the issued token: %v %s", err, clipMsg(m))
		return nil
	}
	k.count(RuleOperatorSession)
	id, err := s.request(ctx, "session/info/req", nil)
	if err != nil {
		return err
	}
	if m, err := s.await(ctx, id); err != nil {
		k.fail(RuleOperatorSession, "session/info: %v", err)
	} else if m.Type != "session/info/resp" || m.OperatorOpened == nil || !*m.OperatorOpened {
		k.fail(RuleOperatorSession, "%s: session/info of the operator's session does not say operator_opened: true", clip(m.raw))
	}
	// The issued token opens no other session.
	k.count(RuleOperatorSession)
	other, err := k.open(ctx)
	if err != nil {
		return err
	}
	if m, err := other.handshake(ctx, caps, token); err != nil {
		k.fail(RuleOperatorSession, "a handshake of a new session with the issued token: %v", err)
	} else if m.OK == nil || *m.OK || m.Error == nil || m.Error.Code != "unauthorized" {
		k.fail(RuleOperatorSession, "%s: the operator's session token opened another session, want ok false unauthorized", clip(m.raw))
	}
	other.close(ctx)
	// An agent's own session is not marked.
	k.count(RuleOperatorSession)
	own, err := k.working(ctx, caps)
	if err != nil {
		return err
	}
	defer own.close(ctx)
	id, err = own.request(ctx, "session/info/req", nil)
	if err != nil {
		return err
	}
	if m, err := own.await(ctx, id); err != nil {
		k.fail(RuleOperatorSession, "session/info of an agent's session: %v", err)
	} else if m.OperatorOpened != nil && *m.OperatorOpened {
		k.fail(RuleOperatorSession, "%s: an agent's own session says operator_opened: true", clip(m.raw))
	}
	return nil
}

func clipMsg(m *msg) string {
	if m == nil {
		return ""
	}
	return clip(m.raw)
}

func (k *kit) working(ctx context.Context, caps []string) (*session, error) {
	s, err := k.open(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.handshake(ctx, caps, k.opts.Token)
	if err != nil || m.OK == nil || !*m.OK {
		s.conn.Close()
		return nil, fmt.Errorf("conformance: the handshake with the token failed (%v); see %s", err, RuleHandshake)
	}
	return s, nil
}

func (k *kit) replyOnce(ctx context.Context) error {
	s, err := k.working(ctx, k.opts.Caps)
	if err != nil {
		k.fail(RuleReplyOnce, "%v", err)
		return nil
	}
	defer s.close(ctx)
	// Pipelined: several requests in flight at once, a failing one among
	// them; each must be answered once.
	var ids []string
	for _, r := range []struct {
		typ  string
		body map[string]any
	}{
		{"ping", nil}, {"session/info/req", nil}, {"ping", nil}, {"tool/list/req", nil},
		{"tool/call/req", map[string]any{"tool_name": 7}}, {"nope/nope/req", nil}, {"ping", nil},
	} {
		id, err := s.request(ctx, r.typ, r.body)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if s.replies[id] > 0 {
			continue
		}
		if _, err := s.await(ctx, id); err != nil {
			k.fail(RuleReplyOnce, "%v", err)
		}
	}
	return nil
}

func (k *kit) events(ctx context.Context) error {
	if len(k.opts.EventsRequest) == 0 {
		k.notes[RuleEvents] = "no events request given (--events): checked the events other rules saw"
		return nil
	}
	s, err := k.working(ctx, k.opts.Caps)
	if err != nil {
		k.fail(RuleEvents, "%v", err)
		return nil
	}
	defer s.close(ctx)
	var body map[string]any
	if err := json.Unmarshal(k.opts.EventsRequest, &body); err != nil {
		return fmt.Errorf("conformance: the events request: %w", err)
	}
	typ, _ := body["type"].(string)
	delete(body, "type")
	id, err := s.request(ctx, typ, body)
	if err != nil {
		return err
	}
	m, err := s.await(ctx, id)
	if err != nil {
		k.fail(RuleEvents, "%v", err)
		return nil
	}
	if s.events[id] == 0 {
		k.fail(RuleEvents, "the events request %s sent no event before its reply %s", typ, clip(m.raw))
	}
	return nil
}

func (k *kit) capabilityGating(ctx context.Context) error {
	// One request per gated namespace, chosen among those needing no body
	// field and stating no other rule, so no schema check can come first.
	pick := map[string]string{} // capability → type
	for typ, ts := range k.checker.types {
		if ts.kind != kindRequest || ts.capability == "" {
			continue
		}
		bodyReq := false
		for _, r := range k.required[typ] {
			switch r {
			case "type", "id", "proto", "ts":
			default:
				bodyReq = true
			}
		}
		if !bodyReq && !k.conditional[typ] && (pick[ts.capability] == "" || typ < pick[ts.capability]) {
			pick[ts.capability] = typ
		}
	}
	s, err := k.working(ctx, []string{})
	if err != nil {
		k.fail(RuleCapability, "%v", err)
		return nil
	}
	defer s.close(ctx)
	for _, capName := range sortedKeys(pick) {
		typ := pick[capName]
		k.count(RuleCapability)
		id, err := s.request(ctx, typ, nil)
		if err != nil {
			return err
		}
		m, err := s.await(ctx, id)
		if err != nil {
			k.fail(RuleCapability, "%s: %v", typ, err)
			continue
		}
		if m.Type != "error" || m.Code != "capability_missing" {
			k.fail(RuleCapability, "%s without %s: %s, want error capability_missing", typ, capName, clip(m.raw))
		}
	}
	return nil
}

func (k *kit) invalidExamples(ctx context.Context) error {
	return k.examples(ctx, false)
}

func (k *kit) validExamples(ctx context.Context) error {
	return k.examples(ctx, true)
}

func (k *kit) examples(ctx context.Context, valid bool) error {
	rule := RuleInvalidExamples
	if valid {
		rule = RuleValidExamples
	}
	s, err := k.working(ctx, k.opts.Caps)
	if err != nil {
		k.fail(rule, "%v", err)
		return nil
	}
	defer s.close(ctx)
	for _, ex := range k.opts.Examples {
		if ex.Valid != valid {
			continue
		}
		if valid {
			// A notification gets no reply (and shutdown ends the session);
			// the handshake has its own rules.
			if ts, ok := k.checker.types[ex.Type]; !ok || ts.kind != kindRequest || ex.Type == "handshake/req" {
				continue
			}
		}
		k.count(rule)
		k.record(record{From: "agent", Line: string(ex.Line), Example: map[bool]string{true: "valid", false: "invalid"}[ex.Valid], Beyond: ex.Beyond})
		s.example = &ex
		err := s.send(ctx, ex.Line)
		s.example = nil
		if err != nil {
			return err
		}
		// One line at a time, so the next answer is this line's; an error
		// answering a line whose id could not be read has req_id "".
		_, want := lineID(ex.Line)
		m, err := s.awaitAny(ctx, want)
		if err != nil {
			k.fail(rule, "%s: %v", ex.Name, err)
			continue
		}
		// Examples of a directory reuse ids (each file is whole on its own);
		// sent one at a time, an answered id is free again.
		delete(s.replies, want)
		bad := refusedAsMalformed(m, ex.Line)
		switch {
		case valid && bad:
			k.fail(rule, "%s: answered %s", ex.Name, clip(m.raw))
		case !valid && !bad:
			k.fail(rule, "%s: answered %s, want error parse_error or schema_violation", ex.Name, clip(m.raw))
		}
	}
	return nil
}

// refusedAsMalformed says whether m refuses line as a message that breaks
// the contract: error parse_error or schema_violation; a handshake/req is
// answered by handshake/resp with that error (docs/DECISIONS.md, Wire); a
// line whose proto is not the host's may be answered version_mismatch
// (spec §9).
func refusedAsMalformed(m *msg, line []byte) bool {
	code := m.Code
	switch {
	case m.Type == "handshake/resp" && m.Error != nil:
		code = m.Error.Code
	case m.Type != "error":
		return false
	}
	switch code {
	case "parse_error", "schema_violation":
		return true
	case "version_mismatch":
		var env struct {
			Proto *string `json:"proto"`
		}
		return json.Unmarshal(line, &env) == nil && env.Proto != nil && *env.Proto != "1.0"
	}
	return false
}

// awaitAny waits for the reply to id, or to "" (a line whose id the host
// could not read, or one with a duplicate id key).
func (s *session) awaitAny(ctx context.Context, id string) (*msg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.k.opts.Timeout)
	defer cancel()
	for {
		m, err := s.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for a reply: %w", err)
		}
		if m != nil && !strings.HasSuffix(m.Type, "/event") && (m.reqID() == id || m.reqID() == "") {
			return m, nil
		}
	}
}

func (k *kit) direction(ctx context.Context) error {
	s, err := k.working(ctx, k.opts.Caps)
	if err != nil {
		k.fail(RuleDirection, "%v", err)
		return nil
	}
	defer s.close(ctx)
	var hostTypes []string
	for typ, ts := range k.checker.types {
		if ts.kind == kindReply || ts.kind == kindEvent {
			hostTypes = append(hostTypes, typ)
		}
	}
	hostTypes = append(hostTypes, sortedKeys(k.checker.events)...)
	sort.Strings(hostTypes)
	for _, typ := range hostTypes {
		k.count(RuleDirection)
		id, err := s.request(ctx, typ, map[string]any{"req_id": "x"})
		if err != nil {
			return err
		}
		m, err := s.await(ctx, id)
		if err != nil {
			k.fail(RuleDirection, "%s sent by the agent: %v", typ, err)
			continue
		}
		if m.Type != "error" || m.Code != "parse_error" {
			k.fail(RuleDirection, "%s sent by the agent: %s, want error parse_error", typ, clip(m.raw))
		}
	}
	return nil
}
