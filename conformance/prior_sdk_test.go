package conformance_test

// The tests of this file pin the behaviour where the prior Python SDK of this
// protocol was broken or departed from SPEC.md (reference/prior-python-sdk.md,
// "BUG" and "Δ" items), where no test of a capability package or of the
// kernel already does; docs/prior-sdk-defects.md maps every item to its test.
// They run against real hosts over the in-process JSON line pipe, and check
// every line a host sends against schemas/.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	_ "github.com/aephost/aep/capabilities/all"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

const priorToken = "secret"

// newPriorHost starts a host from YAML plugin entries the way `aep serve`
// does: registered modules, a data directory and a SQLite store.
func newPriorHost(t *testing.T, plugins string, opts ...server.Option) *server.Host {
	t.Helper()
	cfg, err := server.ParseConfig([]byte("server:\n  auth_token: " + priorToken + "\n" + plugins))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dataDir := t.TempDir()
	st, err := store.Open(ctx, "", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := server.New(ctx, cfg, append([]server.Option{server.WithDataDir(dataDir), server.WithStore(st)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h.Close(ctx)
	})
	return h
}

// allPlugins configures every built-in capability, each under its spec name.
func allPlugins(t *testing.T) string {
	return fmt.Sprintf(`plugins:
  - {name: tools, type: tools, cls: aep.tools.builtin}
  - {name: toolkits, type: toolkits, cls: aep.toolkits.builtin}
  - {name: memory, type: memory, cls: aep.memory.builtin}
  - name: env
    type: env
    cls: aep.env.builtin
    config: {data_root: %q}
  - {name: proc, type: proc, cls: aep.proc.builtin}
  - {name: learn, type: learn, cls: aep.learn.builtin}
  - {name: skills, type: skills, cls: aep.skills.builtin}
  - {name: chains, type: chains, cls: aep.chains.builtin}
  - {name: mcp, type: mcp, cls: aep.mcp.bridge}
  - {name: subagents, type: subagents, cls: aep.subagents.builtin}
`, filepath.Join(t.TempDir(), "envdata"))
}

// hostLine is one line a host sent, decoded loosely.
type hostLine struct {
	raw []byte
	m   map[string]any
}

func (l hostLine) str(k string) string { s, _ := l.m[k].(string); return s }

// lineAgent drives one in-process session line by line and checks every
// host line against the schemas.
type lineAgent struct {
	t     *testing.T
	pipe  *server.LinePipe
	check *conformance.Checker
	ctx   context.Context
}

func newLineAgent(t *testing.T, h *server.Host) *lineAgent {
	t.Helper()
	p, err := h.ConnectLines(256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	// The echo test namespace's schemas too, for the hosts that serve it.
	check, err := conformance.Module(testproto.Schemas())
	if err != nil {
		t.Fatal(err)
	}
	return &lineAgent{t: t, pipe: p, check: check, ctx: ctx}
}

func (a *lineAgent) send(line string) {
	a.t.Helper()
	if err := a.pipe.WriteLine(a.ctx, []byte(line)); err != nil {
		a.t.Fatalf("send %s: %v", line, err)
	}
}

func (a *lineAgent) read() hostLine {
	a.t.Helper()
	raw, err := a.pipe.ReadLine(a.ctx)
	if err != nil {
		a.t.Fatalf("no host line: %v", err)
	}
	if err := a.check.CheckHostLine(raw); err != nil {
		a.t.Fatalf("host line does not conform: %v\n%s", err, raw)
	}
	l := hostLine{raw: raw}
	if err := json.Unmarshal(raw, &l.m); err != nil {
		a.t.Fatal(err)
	}
	return l
}

// ask sends a line and returns the events and the reply that follow it;
// nothing else is in flight, so every line read must belong to id.
func (a *lineAgent) ask(id, line string) (events []hostLine, reply hostLine) {
	a.t.Helper()
	a.send(line)
	for {
		l := a.read()
		if l.str("req_id") != id {
			a.t.Fatalf("asked %s, the host answered %s: %s", id, l.str("req_id"), l.raw)
		}
		if !strings.HasSuffix(l.str("type"), "/event") {
			return events, l
		}
		events = append(events, l)
	}
}

// req builds a request line with the envelope and a body of extra fields.
func req(typ, id, body string) string {
	if body != "" {
		body = "," + body
	}
	return fmt.Sprintf(`{"type":%q,"id":%q,"proto":"1.0","ts":1%s}`, typ, id, body)
}

func (a *lineAgent) handshake(caps ...string) hostLine {
	a.t.Helper()
	cj, _ := json.Marshal(append([]string{}, caps...))
	_, r := a.ask("hs", req("handshake/req", "hs", `"agent_id":"agent","agent_caps":`+string(cj)+`,"auth_token":"`+priorToken+`"`))
	if r.m["ok"] != true {
		a.t.Fatalf("handshake refused: %s", r.raw)
	}
	return r
}

// expectQuiet checks that nothing but the answer to a ping is pending: no
// stray second reply and no pushed message (spec §6 rule 5). Before the
// handshake the answer is unauthorized.
func (a *lineAgent) expectQuiet(id string) {
	a.t.Helper()
	_, r := a.ask(id, req("ping", id, ""))
	if r.str("type") != "pong" && r.str("code") != "unauthorized" {
		a.t.Fatalf("ping answered with %s", r.raw)
	}
}

func wantErrorLine(t *testing.T, l hostLine, code string, retryable bool) {
	t.Helper()
	if l.str("type") != "error" || l.str("code") != code || l.m["retryable"] != retryable {
		t.Fatalf("want error %s (retryable %v), got %s", code, retryable, l.raw)
	}
}

// Prior SDK §2.1 BUG: a line of valid JSON that is not an object crashed
// its decoder and got no reply. Every such line is a parse_error here, with
// an empty req_id since no id can be read, before and after the handshake,
// and the session goes on (docs/DECISIONS.md, Wire: every line gets its answer).
func TestPriorSDKNonObjectJSONIsParseError(t *testing.T) {
	a := newLineAgent(t, newPriorHost(t, ""))
	lines := []string{`[1,2]`, `[]`, `42`, `-0.5`, `"ping"`, `null`, `true`, `false`,
		`[{"type":"ping","id":"in-array","proto":"1.0","ts":1}]`}
	for _, stage := range []string{"before handshake", "after handshake"} {
		if stage == "after handshake" {
			a.handshake()
		}
		for _, line := range lines {
			a.send(line)
			l := a.read()
			wantErrorLine(t, l, "parse_error", false)
			if l.str("req_id") != "" {
				t.Fatalf("%s: %s answered for req_id %q", stage, line, l.str("req_id"))
			}
		}
		a.expectQuiet("after-" + strings.ReplaceAll(stage, " ", "-"))
	}
}

// echoFaults serves the echo test namespace and fails in every way a
// handler can: an error, a panic, and a reply of nothing.
type echoFaults struct{}

func (echoFaults) EchoSay(ctx context.Context, s wire.Scope, r *testproto.EchoSayReq) (*testproto.EchoSayResp, error) {
	return nil, errors.New("disk on fire")
}

func (echoFaults) EchoList(ctx context.Context, s wire.Scope, r *testproto.EchoListReq) (*testproto.EchoListResp, error) {
	return nil, nil
}

func (echoFaults) EchoFind(ctx context.Context, s wire.Scope, r *testproto.EchoFindReq) (*testproto.EchoFindResp, error) {
	var nothing *testproto.EchoFindResp
	return nothing, nil
}

func (echoFaults) EchoWait(ctx context.Context, s wire.Scope, r *testproto.EchoWaitReq) (*testproto.EchoWaitResp, error) {
	if err := s.Emit(wire.EventStatus, map[string]any{"message": "about to fail"}); err != nil {
		return nil, err
	}
	panic("echo faults: asked to wait")
}

// Prior SDK §2.2 BUGs: an exception in a plugin's handler, or a type with
// no handler, left the request without any reply. Here a handler that
// returns an error, panics after an event, or answers with nothing is
// answered by exactly one runtime_error (retryable, spec §7 table) with the
// request's req_id (spec §7 condition 4), naming no capability, as the
// test capability is none of the contract's; a type an
// agent may not send (pong) is parse_error; the session goes on.
func TestPriorSDKHandlerFailuresAreAnswered(t *testing.T) {
	h := newPriorHost(t, "",
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithPlugin(server.PluginSpec{Name: "faults", Type: "echo", Impl: echoFaults{}}))
	a := newLineAgent(t, h)
	a.handshake("echo")
	cases := []struct {
		name, typ, body string
		events          int
		code            string
	}{
		{"handler error", "echo/say/req", `"text":"x"`, 0, "runtime_error"},
		{"reply of nothing", "echo/list/req", ``, 0, "runtime_error"},
		{"typed nil reply", "echo/find/req", `"name":"x"`, 0, "runtime_error"},
		{"panic after an event", "echo/wait/req", ``, 1, "runtime_error"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a.t = t
			id := fmt.Sprintf("f%d", i)
			events, r := a.ask(id, req(tc.typ, id, tc.body))
			if len(events) != tc.events {
				t.Fatalf("%d events before the reply, want %d", len(events), tc.events)
			}
			wantErrorLine(t, r, tc.code, true)
			// echo is a module's capability, outside the contract's
			// CapabilityName (schemas/core.json): the error names none.
			if r.str("capability_name") != "" {
				t.Fatalf("capability_name %q is not one of the contract's: %s", r.str("capability_name"), r.raw)
			}
			a.expectQuiet("after-" + id)
		})
	}
	a.t = t
	a.send(`{"type":"pong","id":"pg","proto":"1.0","ts":1,"uptime_seconds":1}`)
	l := a.read()
	wantErrorLine(t, l, "parse_error", false)
	if l.str("req_id") != "pg" {
		t.Fatalf("pong answered for %q", l.str("req_id"))
	}
	a.expectQuiet("end")
}

// Prior SDK §0 BUG (responses without req_id, so env/close and others never
// correlated) and §7.4 BUG (env/plan/req carried the response's type
// string): every request type of the registry, sent with an empty body to a
// host serving every capability, is answered by exactly one line with its
// req_id — its reply type or an error — and nothing else follows. The reply
// type of every request is its own `…/resp`, never a request type.
func TestPriorSDKEveryRequestTypeAnsweredOnce(t *testing.T) {
	reg := msg.Registry()
	var types []string
	for _, e := range reg.Entries() {
		if e.Kind != wire.KindRequest {
			continue
		}
		types = append(types, e.Type)
		reply := reg.Lookup(e.Reply)
		if reply == nil || reply.Kind != wire.KindReply || e.Reply == e.Type {
			t.Errorf("%s: reply type %q is not a reply type", e.Type, e.Reply)
		}
		if base, ok := strings.CutSuffix(e.Type, "/req"); ok && e.Reply != base+"/resp" {
			t.Errorf("%s: reply type %q, want %s/resp", e.Type, e.Reply, base)
		}
	}
	sort.Strings(types)
	a := newLineAgent(t, newPriorHost(t, allPlugins(t)))
	a.handshake(reg.Capabilities()...)
	seen := map[string]bool{}
	for i, typ := range types {
		if typ == "handshake/req" {
			continue
		}
		id := fmt.Sprintf("q%d", i)
		_, r := a.ask(id, req(typ, id, ""))
		if got := r.str("type"); got != "error" && got != reg.Lookup(typ).Reply {
			t.Errorf("%s answered with %s", typ, r.raw)
		}
		seen[r.str("type")] = true
	}
	a.expectQuiet("end")
	// Both paths ran: plugins answered some requests, the decoder others.
	if !seen["error"] || !seen["tool/list/resp"] || !seen["env/list/resp"] {
		t.Fatalf("reply types seen: %v", seen)
	}
}

// Prior SDK §1.1 BUG: a plugin configured with a type the SDK's capability
// enum lacked (the cookbook's procs, learn, skills) made negotiation raise,
// and the handshake got no reply. Here a type that the plugin's handlers
// do not serve (procs for the proc module) is refused when the host
// starts, naming both, so it can never be reported enabled while nothing
// answers it. With the types the modules serve, the handshake gets one
// handshake/resp with one entry per requested name, in order (spec §2.2):
// the spec's names and the prior SDK's spellings (learning, skill) are
// enabled and their namespaces work, and a capability no plugin serves
// (planning, procs) is not enabled.
func TestPriorSDKHandshakeWithCookbookPluginTypes(t *testing.T) {
	cfg, err := server.ParseConfig([]byte("server:\n  auth_token: " + priorToken + "\nplugins:\n  - {name: procs, type: procs, cls: aep.proc.builtin}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `type "procs" is not served by module aep.proc.builtin (it serves: proc)`) {
		t.Fatalf("a host with type procs started or failed otherwise: %v", err)
	}
	h := newPriorHost(t, `plugins:
  - {name: procs, type: proc, cls: aep.proc.builtin}
  - {name: learn, type: learn, cls: aep.learn.builtin}
  - {name: skills, type: skills, cls: aep.skills.builtin}
`)
	a := newLineAgent(t, h)
	asked := []string{"proc", "learn", "skills", "learning", "skill", "planning", "procs"}
	r := a.handshake(asked...)
	var caps []msg.CapabilityEntry
	if err := json.Unmarshal(mustJSON(t, r.m["accepted_caps"]), &caps); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"proc": true, "learn": true, "skills": true, "learning": true, "skill": true}
	if len(caps) != len(asked) {
		t.Fatalf("accepted_caps %+v for %v", caps, asked)
	}
	for i, c := range caps {
		if c.Name != asked[i] || c.Enabled != want[c.Name] {
			t.Errorf("entry %d: %+v, want {%s %v}", i, c, asked[i], want[asked[i]])
		}
	}
	for _, q := range []struct{ typ, want string }{
		{"proc/list/req", "proc/list/resp"},
		{"learn/stats/req", "learn/stats/resp"},
		{"skill/discover/req", "skill/discover/resp"},
	} {
		if _, r := a.ask(q.typ, req(q.typ, q.typ, "")); r.str("type") != q.want {
			t.Errorf("%s answered with %s", q.typ, r.raw)
		}
	}
	b := newLineAgent(t, h)
	b.handshake("procs")
	_, l := b.ask("pl", req("proc/list/req", "pl", ""))
	wantErrorLine(t, l, "capability_missing", false)
	if l.str("capability_name") != "proc" {
		t.Fatalf("capability_missing names %q: %s", l.str("capability_name"), l.raw)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Prior SDK §2.3 Δ: every error it sent said retryable false. Here the
// retryable flag is the spec §7 table's for every code, on the wire, for
// errors the kernel and the plugins send.
func TestPriorSDKRetryableFollowsSpecTable(t *testing.T) {
	table := map[wire.Code]bool{ // spec §7; cancelled is our addition (docs/DECISIONS.md, Wire)
		wire.CodeRuntimeError: true, wire.CodeTimeout: true, wire.CodeOutOfMemory: true, wire.CodeSandboxCrash: true,
		wire.CodeParseError: false, wire.CodeUnauthorized: false, wire.CodeVersionMismatch: false,
		wire.CodeSchemaViolation: false, wire.CodeCapabilityMissing: false, wire.CodeCancelled: false,
	}
	for code, want := range table {
		if code.Retryable() != want {
			t.Errorf("%s: Retryable() = %v, spec §7 says %v", code, code.Retryable(), want)
		}
	}

	h := newPriorHost(t, `plugins:
  - {name: proc, type: proc, cls: aep.proc.builtin}
  - {name: memory, type: memory, cls: aep.memory.builtin}
`)
	// Before and at the handshake.
	a := newLineAgent(t, h)
	a.send(`not json`)
	wantErrorLine(t, a.read(), "parse_error", false)
	_, r := a.ask("p0", req("ping", "p0", ""))
	wantErrorLine(t, r, "unauthorized", false)
	_, r = a.ask("h0", `{"type":"handshake/req","id":"h0","proto":"9.9","ts":1,"agent_id":"a","agent_caps":[],"auth_token":"`+priorToken+`"}`)
	if e, _ := r.m["error"].(map[string]any); r.m["ok"] != false || e["code"] != "version_mismatch" || e["retryable"] != false {
		t.Fatalf("version mismatch: %s", r.raw)
	}
	a.handshake("proc")
	_, r = a.ask("m1", req("memory/init/req", "m1", ""))
	wantErrorLine(t, r, "capability_missing", false)
	_, r = a.ask("s1", req("proc/spawn/req", "s1", `"argv":"sleep"`))
	wantErrorLine(t, r, "schema_violation", false)

	// Plugin errors: a process's outcome through proc/wait.
	for _, tc := range []struct {
		name, argv, timeout, code string
	}{
		{"timeout", `["sleep","30"]`, `,"timeout":0.2`, "timeout"},
		{"crash", `["sh","-c","kill -SEGV $$"]`, ``, "sandbox_crash"},
	} {
		_, sp := a.ask("sp-"+tc.name, req("proc/spawn/req", "sp-"+tc.name, `"argv":`+tc.argv+tc.timeout))
		proc, _ := sp.m["process"].(map[string]any)
		id, _ := proc["proc_id"].(string)
		if id == "" {
			t.Fatalf("spawn: %s", sp.raw)
		}
		_, w := a.ask("w-"+tc.name, req("proc/wait/req", "w-"+tc.name, fmt.Sprintf(`"proc_id":%q,"timeout":20`, id)))
		wantErrorLine(t, w, tc.code, true)
	}
}

// Prior SDK §7.1 BUG: the tool plugin kept the emit callback on the plugin
// instance, so concurrent calls could tag events with another call's
// req_id. Here concurrent streaming calls each get exactly their own
// events, with seq 0, 1 per request (not timestamps), all before their own
// reply, and the same events collected in result.events (spec §6 rule 1).
func TestPriorSDKConcurrentToolEventsKeepTheirRequest(t *testing.T) {
	// Four run at once (max_parallel), the others wait in the queue.
	h := newPriorHost(t, "plugins:\n  - {name: tools, type: tools, cls: aep.tools.builtin}\n")
	a := newLineAgent(t, h)
	a.handshake("tools")
	const n = 8
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		a.send(req("tool/call/req", id, fmt.Sprintf(
			`"tool_name":"run_command","streaming":true,"arguments":{"argv":["sh","-c","echo %s-a; sleep 0.05; echo %s-b"]}`, id, id)))
	}
	events := map[string][]hostLine{}
	replies := map[string]hostLine{}
	for len(replies) < n {
		l := a.read()
		id := l.str("req_id")
		if _, done := replies[id]; done {
			t.Fatalf("line for %s after its reply: %s", id, l.raw)
		}
		if l.str("type") == "tool/event" {
			events[id] = append(events[id], l)
			continue
		}
		replies[id] = l
	}
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		r := replies[id]
		var resp msg.ToolCallResp
		if err := json.Unmarshal(r.raw, &resp); err != nil || r.str("type") != "tool/call/resp" || !resp.Result.Success {
			t.Fatalf("%s: %s", id, r.raw)
		}
		evs := events[id]
		if len(evs) != 2 || len(resp.Result.Events) != 2 {
			t.Fatalf("%s: %d wire events, %d in the result: %s", id, len(evs), len(resp.Result.Events), r.raw)
		}
		for j, ev := range evs {
			data, _ := ev.m["data"].(map[string]any)
			wantMsg := fmt.Sprintf("%s-%c", id, 'a'+j)
			if ev.m["seq"] != float64(j) || data["message"] != wantMsg {
				t.Errorf("%s event %d: %s, want seq %d message %q", id, j, ev.raw, j, wantMsg)
			}
			if got := resp.Result.Events[j].Data["message"]; got != wantMsg {
				t.Errorf("%s result event %d: %v, want %q", id, j, got, wantMsg)
			}
		}
	}
	a.expectQuiet("end")
}

// Prior SDK §7.5 Δ SEED 6 rule 5: proc output was pushed after the spawn
// reply, outside any request. Here a process that writes output while the
// agent does other things produces no line but the replies to the agent's
// requests; its output is read by proc/read within a request.
func TestPriorSDKProcOutputIsNeverPushed(t *testing.T) {
	h := newPriorHost(t, "plugins:\n  - {name: proc, type: proc, cls: aep.proc.builtin}\n")
	a := newLineAgent(t, h)
	a.handshake("proc")
	_, sp := a.ask("sp", req("proc/spawn/req", "sp", `"argv":["sh","-c","for i in 1 2 3 4 5; do echo line $i; echo err $i >&2; done"]`))
	proc, _ := sp.m["process"].(map[string]any)
	id, _ := proc["proc_id"].(string)
	if id == "" {
		t.Fatalf("spawn: %s", sp.raw)
	}
	// ask fails on any line that does not answer the request just sent.
	if _, w := a.ask("w", req("proc/wait/req", "w", fmt.Sprintf(`"proc_id":%q,"timeout":20`, id))); w.str("type") != "proc/wait/resp" {
		t.Fatalf("wait: %s", w.raw)
	}
	a.expectQuiet("after-exit")
	_, rd := a.ask("rd", req("proc/read/req", "rd", fmt.Sprintf(`"proc_id":%q`, id)))
	var read msg.ProcReadResp
	if err := json.Unmarshal(rd.raw, &read); err != nil || !strings.Contains(read.Stdout.Data, "line 5") || !strings.Contains(read.Stderr.Data, "err 5") {
		t.Fatalf("read: %s", rd.raw)
	}
	a.expectQuiet("end")
}

// Prior SDK §4 Δ: its auth_token sat at the top level of the config, was
// never checked, and a spec-style server.auth_token was silently dropped.
// Here the token is server.auth_token (spec §2.10): a top-level auth_token
// is refused with its line, a host without a token does not start, and the
// configured one is enforced.
func TestPriorSDKAuthTokenUnderServer(t *testing.T) {
	_, err := server.ParseConfig([]byte("auth_token: hunter2\nserver:\n  listen: 127.0.0.1:0\n"))
	if err == nil || !strings.Contains(err.Error(), `config:1: auth_token: unknown key "auth_token"`) {
		t.Fatalf("top-level auth_token: %v", err)
	}
	if _, err := server.New(context.Background(), server.Defaults()); err == nil || !strings.Contains(err.Error(), "auth_token") {
		t.Fatalf("a host without a token started: %v", err)
	}
	a := newLineAgent(t, newPriorHost(t, ""))
	for i, tok := range []string{"", "Secret", priorToken + " "} {
		id := fmt.Sprintf("bad%d", i)
		_, r := a.ask(id, req("handshake/req", id, `"agent_id":"a","agent_caps":[],"auth_token":"`+tok+`"`))
		if e, _ := r.m["error"].(map[string]any); r.m["ok"] != false || e["code"] != "unauthorized" {
			t.Fatalf("token %q: %s", tok, r.raw)
		}
	}
	a.handshake()
}

// Prior SDK §1 Δ: its error `detail` had to be an object; spec §2.3 says
// any. The schemas accept a host error whose detail is any JSON value, and
// the Go client hands it over as it came.
func TestPriorSDKErrorDetailIsAnyValue(t *testing.T) {
	c := loadModule(t)
	for _, detail := range []string{`"disk full"`, `[1,"two"]`, `42`, `true`, `null`, `{"field":"x"}`} {
		line := `{"type":"error","id":"e","proto":"1.0","ts":1,"req_id":"r","code":"runtime_error","message":"m","retryable":true,"detail":` + detail + `}`
		if err := c.CheckHostLine([]byte(line)); err != nil {
			t.Errorf("detail %s refused: %v", detail, err)
			continue
		}
		p, err := client.DecodeHostLine(msg.Registry(), []byte(line))
		if err != nil {
			t.Fatalf("detail %s: %v", detail, err)
		}
		var want any
		_ = json.Unmarshal([]byte(detail), &want)
		if got := p.Msg.(*msg.Error).Detail; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("detail %s decoded as %#v", detail, got)
		}
	}
}

func (echoFaults) Module() server.ModuleInfo { return server.ModuleInfo{ID: "test.echofaults"} }
