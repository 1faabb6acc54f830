package chains_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

// TestValidation checks that a bad graph is refused with schema_violation
// naming the nodes, before any node runs ( unknown references, no
// entry, cycles). Every graph holds an echo/wait node, so a node that ran
// would show in the echo plugin's counter.
func TestValidation(t *testing.T) {
	const wait = `{"id":"w","kind":"action","request":{"type":"echo/wait/req","body":{"ms":1}}}`
	tests := []struct {
		name  string
		chain string
		want  []string // substrings of the error message
	}{
		{"cycle with an entry", `{"nodes":[` + wait + `,{"id":"a","kind":"gather"},{"id":"b","kind":"gather"},{"id":"c","kind":"gather"}],
			"edges":[{"from":"w","to":"a"},{"from":"a","to":"b"},{"from":"b","to":"c"},{"from":"c","to":"a"}]}`,
			[]string{"cycle a → b → c → a"}},
		{"self loop", `{"nodes":[` + wait + `,{"id":"a","kind":"gather"}],"edges":[{"from":"w","to":"a"},{"from":"a","to":"a"}]}`,
			[]string{"cycle a → a"}},
		{"no entry", `{"nodes":[` + wait + `,{"id":"a","kind":"gather"}],"edges":[{"from":"w","to":"a"},{"from":"a","to":"w"}]}`,
			[]string{"no entry node", "w → a → w"}},
		{"dangling edge", `{"nodes":[` + wait + `],"edges":[{"from":"w","to":"ghost"},{"from":"phantom","to":"w"}]}`,
			[]string{"unknown node referenced", "ghost (edges[0].to)", "phantom (edges[1].from)"}},
		{"unknown fallback", `{"nodes":[{"id":"w","kind":"action","on_error":"fallback","fallback":"nope","request":{"type":"echo/wait/req","body":{"ms":1}}}]}`,
			[]string{"nope (fallback of w)"}},
		{"unknown output", `{"nodes":[` + wait + `],"output":"zz"}`, []string{"zz (output)"}},
		{"duplicate id", `{"nodes":[` + wait + `,` + wait + `]}`, []string{`node id "w" is used twice`}},
		{"bad id", `{"nodes":[{"id":"a.b","kind":"gather"}]}`, []string{`node id "a.b"`}},
		{"branch edge without when", `{"nodes":[` + wait + `,{"id":"b","kind":"branch","condition":"true"}],"edges":[{"from":"b","to":"w"}]}`,
			[]string{"b → w leaves a branch"}},
		{"when on a plain edge", `{"nodes":[` + wait + `,{"id":"g","kind":"gather"}],"edges":[{"from":"w","to":"g","when":true}]}`,
			[]string{"w → g has when"}},
		{"expression syntax", `{"nodes":[` + wait + `,{"id":"b","kind":"branch","condition":"input.x >"}],"edges":[{"from":"w","to":"b"}]}`,
			[]string{`node "b": expression`}},
		{"missing setting", `{"nodes":[` + wait + `,{"id":"r","kind":"reduce","items":[1]}]}`, []string{`chain.nodes[1].expr`, `required when kind is "reduce"`}},
		{"unknown request type", `{"nodes":[{"id":"x","kind":"action","request":{"type":"nope/req"}}]}`, []string{`unknown request type "nope/req"`}},
		{"kernel type", `{"nodes":[{"id":"x","kind":"action","request":{"type":"handshake/req"}}]}`, []string{"not a request a chain can send"}},
		{"shared fallback", `{"nodes":[{"id":"a","kind":"action","on_error":"fallback","fallback":"f","request":{"type":"echo/wait/req"}},
			{"id":"b","kind":"action","on_error":"fallback","fallback":"f","request":{"type":"echo/wait/req"}},{"id":"f","kind":"gather"}]}`,
			[]string{`"f" is the fallback of both "a" and "b"`}},
		{"fallback with edges", `{"nodes":[{"id":"w","kind":"action","on_error":"fallback","fallback":"f","request":{"type":"echo/wait/req"}},{"id":"f","kind":"gather"}],"edges":[{"from":"w","to":"f"}]}`,
			[]string{`"f" is a fallback`}},
	}
	e := newEnv(t, envOpts{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, evs, err := e.run(t, `{"chain":`+tt.chain+`}`)
			we := aeptest.WantError(t, err, wire.CodeSchemaViolation, "")
			for _, w := range tt.want {
				if !strings.Contains(we.Message, w) {
					t.Errorf("message %q does not contain %q", we.Message, w)
				}
			}
			if len(evs) != 0 {
				t.Errorf("events of a refused chain: %+v", evs)
			}
		})
	}
	if n := e.echo.MaxRunning(); n != 0 {
		t.Errorf("a node of a refused chain ran (%d echo/wait)", n)
	}
	// The session is fine afterwards.
	if r, _ := e.mustRun(t, `{"chain":{"nodes":[`+wait+`]}}`); !r.Success {
		t.Errorf("valid chain after refusals: %+v", r)
	}
}

// TestOrderAndParallelism checks topological order and that independent
// nodes run at once: both gated nodes start while neither may finish, and
// the node after them runs last.
func TestOrderAndParallelism(t *testing.T) {
	e := newEnv(t, envOpts{})
	chain := `{"chain":{"nodes":[
		{"id":"a","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"ga"}}},
		{"id":"b","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"gb"}}},
		{"id":"c","kind":"action","request":{"type":"echo/say/req","body":{"text":"after {{nodes.a.output.waited}} {{nodes.b.output.waited}}"}}}],
		"edges":[{"from":"a","to":"c"},{"from":"b","to":"c"}]}}`
	type out struct {
		r   *msg.ChainRunResp
		evs []client.Event
		err error
	}
	done := make(chan out, 1)
	phases := make(chan string, 16)
	go func() {
		var ev events
		ctx := client.WithEvents(aeptest.Context(t), func(e client.Event) {
			ev.mu.Lock()
			ev.all = append(ev.all, e)
			ev.mu.Unlock()
			phases <- e.Data["phase"].(string) + ":" + e.Data["node"].(string)
		})
		r, err := e.c.ChainRun(ctx, runReq(t, chain))
		done <- out{r, ev.list(), err}
	}()
	waitStarted(t, e.echo, "ga", "gb") // both running, neither released
	e.echo.Release("gb")
	for p := range phases {
		if p == "end:b" {
			break
		}
	}
	e.echo.Release("ga")
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if e.echo.MaxRunning() < 2 {
		t.Errorf("max echo/wait at once %d, want 2", e.echo.MaxRunning())
	}
	if got := joined(o.r.Ran); got != "b a c" {
		t.Errorf("ran %q, want b a c (b released first, c last)", got)
	}
	if got := output(t, o.r, "c"); !strings.Contains(got, `"text":"after true true"`) {
		t.Errorf("c output %s", got)
	}
	ev := chainEvents(o.evs)
	if len(ev) != 6 || ev[4] != "start:c" || ev[5] != "end:c" {
		t.Errorf("events %v", ev)
	}

	t.Run("two slow nodes take about one node's time", func(t *testing.T) {
		const ms = 300
		r, _ := e.mustRun(t, fmt.Sprintf(`{"chain":{"nodes":[
			{"id":"x","kind":"action","request":{"type":"echo/wait/req","body":{"ms":%d}}},
			{"id":"y","kind":"action","request":{"type":"echo/wait/req","body":{"ms":%d}}}]}}`, ms, ms))
		if !r.Success || r.DurationMs >= ms*18/10 {
			t.Errorf("success %v in %d ms, want < %d ms", r.Success, r.DurationMs, ms*18/10)
		}
		if !sameJSON(t, string(r.FinalOutput), `{"x":{"waited":true},"y":{"waited":true}}`) {
			t.Errorf("final output of two sinks %s", r.FinalOutput)
		}
	})

	t.Run("concurrency limit", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		var nodes []string
		for i := range 6 {
			nodes = append(nodes, fmt.Sprintf(`{"id":"n%d","kind":"action","request":{"type":"echo/wait/req","body":{"ms":40}}}`, i))
		}
		r, _ := e.mustRun(t, `{"max_concurrency":2,"chain":{"nodes":[`+strings.Join(nodes, ",")+`]}}`)
		if !r.Success || len(r.Ran) != 6 {
			t.Fatalf("reply %+v", r)
		}
		if n := e.echo.MaxRunning(); n != 2 {
			t.Errorf("max echo/wait at once %d, want the limit 2", n)
		}
	})
}

// TestEventsInOrder checks the chain/event stream of a linear chain with a
// skipped branch and a failure: phases, nodes, kinds and seq, all before
// the reply.
func TestEventsInOrder(t *testing.T) {
	e := newEnv(t, envOpts{})
	r, evs := e.mustRun(t, `{"input":{"go":false},"chain":{"nodes":[
		{"id":"a","kind":"action","request":{"type":"echo/say/req","body":{"text":"x"}}},
		{"id":"br","kind":"branch","condition":"input.go"},
		{"id":"yes","kind":"action","request":{"type":"echo/say/req","body":{"text":"y"}}},
		{"id":"no","kind":"action","on_error":"skip","request":{"type":"echo/wait/req","body":{"panic":true}}}],
		"edges":[{"from":"a","to":"br"},{"from":"br","to":"yes","when":true},{"from":"br","to":"no","when":false}]}}`)
	if !r.Success {
		t.Fatalf("reply %s", encode(t, r))
	}
	want := "start:a end:a start:br end:br skip:yes start:no fail:no"
	if got := joined(chainEvents(evs)); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	kinds := map[string]wire.EventKind{"start": wire.EventStatus, "end": wire.EventProgress, "skip": wire.EventStatus, "fail": wire.EventLog}
	for i, ev := range evs {
		if ev.Seq != i {
			t.Errorf("event %d has seq %d", i, ev.Seq)
		}
		if ph := ev.Data["phase"].(string); ev.Kind != kinds[ph] {
			t.Errorf("%s event of kind %s", ph, ev.Kind)
		}
		if _, ok := ev.Data["message"].(string); !ok {
			t.Errorf("event without message: %+v", ev.Data)
		}
	}
	if last := evs[len(evs)-1]; last.Data["code"] != "runtime_error" || last.Data["level"] != "error" {
		t.Errorf("fail event %+v", last.Data)
	}
}

// TestNodeKinds runs each kind: action with templates (whole-value templates
// keep JSON types), branch both ways with what only the branch not taken
// reaches skipped, map, gather and reduce.
func TestNodeKinds(t *testing.T) {
	e := newEnv(t, envOpts{})
	t.Run("action templates", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"input":{"city":"paris","ms":5,"mode":"upper"},"chain":{"nodes":[
			{"id":"say","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{input.city}}","mode":"{{input.mode}}"}}},
			{"id":"wait","kind":"action","request":{"type":"echo/wait/req","body":{"ms":"{{input.ms}}"}}},
			{"id":"twice","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{nodes.say.output.text}}/{{nodes.say.output.text}} by {{nodes.say.output.by}}"}}}],
			"edges":[{"from":"say","to":"twice"},{"from":"wait","to":"twice"}],"output":"twice"}}`)
		if !r.Success {
			t.Fatalf("reply %s", encode(t, r))
		}
		if got := string(r.FinalOutput); !sameJSON(t, got, `{"text":"PARIS/PARIS by echo","by":"echo"}`) {
			t.Errorf("final output %s", got)
		}
		if got := output(t, r, "wait"); got != `{"waited":true}` {
			t.Errorf("wait output %s (ms must stay a number)", got)
		}
	})
	t.Run("bad templated body fails the node", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"input":{"ms":"soon"},"chain":{"nodes":[
			{"id":"wait","kind":"action","request":{"type":"echo/wait/req","body":{"ms":"{{input.ms}}"}}}]}}`)
		if r.Success || r.Error == nil || r.Error.Node != "wait" || r.Error.Code != "schema_violation" || !strings.Contains(r.Error.Message, "ms") {
			t.Errorf("reply %s", encode(t, r))
		}
	})
	branch := `{"nodes":[
		{"id":"check","kind":"branch","condition":"input.n > 2 && input.tag == 'x'"},
		{"id":"big","kind":"action","request":{"type":"echo/say/req","body":{"text":"big {{input.n}}"}}},
		{"id":"small","kind":"action","request":{"type":"echo/say/req","body":{"text":"small"}}},
		{"id":"small2","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{nodes.small.output.text}} again"}}},
		{"id":"join","kind":"gather"}],
		"edges":[{"from":"check","to":"big","when":true},{"from":"check","to":"small","when":false},
			{"from":"small","to":"small2"},{"from":"big","to":"join"},{"from":"small2","to":"join"}]}`
	for _, tt := range []struct {
		input, ran, skipped, join string
	}{
		{`{"n":3,"tag":"x"}`, "check big join", "small small2", `{"big":{"text":"big 3","by":"echo"}}`},
		{`{"n":1,"tag":"x"}`, "check small small2 join", "big", `{"small2":{"text":"small again","by":"echo"}}`},
	} {
		t.Run("branch "+tt.input, func(t *testing.T) {
			r, _ := e.mustRun(t, `{"input":`+tt.input+`,"chain":`+branch+`}`)
			if !r.Success || joined(r.Ran) != tt.ran || joined(r.Skipped) != tt.skipped {
				t.Fatalf("ran %v skipped %v: %s", r.Ran, r.Skipped, encode(t, r))
			}
			if got := output(t, r, "join"); !sameJSON(t, got, tt.join) {
				t.Errorf("join %s, want %s", got, tt.join)
			}
			if got := output(t, r, "check"); got != fmt.Sprint(tt.ran != "check small small2 join") {
				t.Errorf("branch output %s", got)
			}
		})
	}
	t.Run("map and reduce", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"input":{"words":["ab","cde","f"]},"chain":{"nodes":[
			{"id":"m","kind":"map","items":"{{input.words}}","request":{"type":"echo/say/req","body":{"text":"{{index}}:{{item}}","mode":"upper"}}},
			{"id":"total","kind":"reduce","items":"{{nodes.m.output}}","initial":0,"expr":"acc + len(item.text)"},
			{"id":"lit","kind":"reduce","items":[1,2,3,4],"initial":{"s":"{{input.words.0}}"},"expr":"{s: acc.s + string(item)}"}],
			"edges":[{"from":"m","to":"total"}]}}`)
		if !r.Success {
			t.Fatalf("reply %s", encode(t, r))
		}
		var items []struct{ Text string }
		if err := json.Unmarshal(r.Outputs["m"], &items); err != nil || len(items) != 3 || items[0].Text != "0:AB" || items[2].Text != "2:F" {
			t.Errorf("map output %s", r.Outputs["m"])
		}
		if got := output(t, r, "total"); got != "12" {
			t.Errorf("reduce total %s, want 12 (3+5+4)", got)
		}
		if got := output(t, r, "lit"); !sameJSON(t, got, `{"s":"ab1234"}`) {
			t.Errorf("reduce over a literal array %s", got)
		}
	})
	t.Run("map items not an array", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"input":{"words":"nope"},"chain":{"nodes":[
			{"id":"m","kind":"map","items":"{{input.words}}","request":{"type":"echo/say/req","body":{"text":"{{item}}"}}}]}}`)
		if r.Success || r.Error.Node != "m" || !strings.Contains(r.Error.Message, "not an array") {
			t.Errorf("reply %s", encode(t, r))
		}
	})
}

// TestOnError covers the three policies and a tool failure as a node
// failure (a tool result with success false, spec §7).
func TestOnError(t *testing.T) {
	e := newEnv(t, envOpts{})
	const fails = `"request":{"type":"echo/wait/req","body":{"panic":true}}`
	t.Run("abort stops the chain", func(t *testing.T) {
		// bad runs only once slow is running, so the abort must cancel it.
		type reply struct {
			r   *msg.ChainRunResp
			err error
		}
		done := make(chan reply, 1)
		go func() {
			r, _, err := e.run(t, `{"chain":{"nodes":[
				{"id":"slow","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"abort-slow"}}},
				{"id":"trigger","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"abort-trigger"}}},
				{"id":"bad","kind":"action",`+fails+`},
				{"id":"next","kind":"action","request":{"type":"echo/say/req","body":{"text":"never"}}}],
				"edges":[{"from":"trigger","to":"bad"},{"from":"bad","to":"next"}]}}`)
			done <- reply{r, err}
		}()
		waitStarted(t, e.echo, "abort-slow", "abort-trigger")
		e.echo.Release("abort-trigger")
		var r *msg.ChainRunResp
		select {
		case got := <-done:
			if got.err != nil {
				t.Fatal(got.err)
			}
			r = got.r
		case <-time.After(5 * time.Second):
			t.Fatal("abort did not end the chain")
		}
		if r.Success || r.Error == nil || r.Error.Node != "bad" || r.Error.Code != "runtime_error" {
			t.Fatalf("reply %s", encode(t, r))
		}
		// The node's request panicked: the reply names the correlation id
		// of the logged panic, never the panic value.
		if b := encode(t, r); !strings.Contains(r.Error.Message, "correlation err-") || strings.Contains(b, "asked to panic") {
			t.Errorf("a panicking node's error: %s", b)
		}
		if f := failure(r, "slow"); f == nil || f.Code != "cancelled" {
			t.Errorf("running node at abort: %+v", f)
		}
		if !has(r.Skipped, "next") || joined(r.Ran) != "trigger" {
			t.Errorf("ran %v skipped %v", r.Ran, r.Skipped)
		}
		waitCtxDone(t, e, "abort-slow")
	})
	t.Run("skip goes on with null", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"chain":{"nodes":[
			{"id":"tool","kind":"action","on_error":"skip","request":{"type":"tool/call/req","body":{"tool_name":"no_such_tool","arguments":{}}}},
			{"id":"next","kind":"action","request":{"type":"echo/say/req","body":{"text":"got {{nodes.tool.output}}"}}}],
			"edges":[{"from":"tool","to":"next"}]}}`)
		if !r.Success || joined(r.Ran) != "next" {
			t.Fatalf("reply %s", encode(t, r))
		}
		f := failure(r, "tool")
		if f == nil || f.Code != "UNKNOWN_TOOL" || f.Handled == nil || *f.Handled != msg.ChainNodeErrorHandledSkip {
			t.Errorf("failure %+v", f)
		}
		if got := output(t, r, "next"); !sameJSON(t, got, `{"text":"got ","by":"echo"}`) {
			t.Errorf("next %s", got)
		}
	})
	t.Run("fallback stands in", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"chain":{"nodes":[
			{"id":"bad","kind":"action","on_error":"fallback","fallback":"fb",`+fails+`},
			{"id":"fb","kind":"action","request":{"type":"echo/say/req","body":{"text":"instead of {{error.node}} ({{error.code}})"}}},
			{"id":"next","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{nodes.bad.output.text}}","mode":"upper"}}}],
			"edges":[{"from":"bad","to":"next"}]}}`)
		if !r.Success || joined(r.Ran) != "fb next" {
			t.Fatalf("reply %s", encode(t, r))
		}
		if f := failure(r, "bad"); f == nil || *f.Handled != msg.ChainNodeErrorHandledFallback {
			t.Errorf("failure %+v", f)
		}
		if got := output(t, r, "next"); !sameJSON(t, got, `{"text":"INSTEAD OF BAD (RUNTIME_ERROR)","by":"echo"}`) {
			t.Errorf("next %s", got)
		}
	})
	t.Run("failing fallback aborts", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"chain":{"nodes":[
			{"id":"bad","kind":"action","on_error":"fallback","fallback":"fb",`+fails+`},
			{"id":"fb","kind":"action",`+fails+`}]}}`)
		if r.Success || r.Error.Node != "fb" || len(r.Failed) != 2 {
			t.Errorf("reply %s", encode(t, r))
		}
	})
	t.Run("unused fallback is skipped", func(t *testing.T) {
		r, _ := e.mustRun(t, `{"chain":{"nodes":[
			{"id":"ok","kind":"action","on_error":"fallback","fallback":"fb","request":{"type":"echo/say/req","body":{"text":"fine"}}},
			{"id":"fb","kind":"action","request":{"type":"echo/say/req","body":{"text":"x"}}}]}}`)
		if !r.Success || joined(r.Ran) != "ok" || joined(r.Skipped) != "fb" || !sameJSON(t, string(r.FinalOutput), `{"text":"fine","by":"echo"}`) {
			t.Errorf("reply %s", encode(t, r))
		}
	})
}

func waitCtxDone(t *testing.T, e *env, gate string) {
	t.Helper()
	select {
	case g := <-e.echo.CtxDone:
		if g != gate {
			t.Errorf("context ended for %q, want %q", g, gate)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the node's request context did not end (%s)", gate)
	}
}

// TestTimeout checks the chain timeout: the reply says timeout, the node's
// request sees its context end, and the session goes on.
func TestTimeout(t *testing.T) {
	e := newEnv(t, envOpts{})
	start := time.Now()
	r, _ := e.mustRun(t, `{"timeout":0.5,"chain":{"nodes":[
		{"id":"quick","kind":"action","request":{"type":"echo/say/req","body":{"text":"x"}}},
		{"id":"stuck","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"never"}}},
		{"id":"after","kind":"gather"}],
		"edges":[{"from":"quick","to":"stuck"},{"from":"stuck","to":"after"}]}}`)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timed out after %s", d)
	}
	if r.Success || r.Error == nil || r.Error.Code != "timeout" {
		t.Fatalf("reply %s", encode(t, r))
	}
	if f := failure(r, "stuck"); f == nil || f.Code != "timeout" {
		t.Errorf("stuck: %+v", f)
	}
	if joined(r.Ran) != "quick" || joined(r.Skipped) != "after" {
		t.Errorf("ran %v skipped %v", r.Ran, r.Skipped)
	}
	waitCtxDone(t, e, "never")
	_, err := e.c.Request(aeptest.Context(t), runReq(t, `{"timeout":0}`))
	aeptest.WantError(t, err, wire.CodeSchemaViolation, "")
}

// TestMapDoesNotDeadlock runs four chains at once, each mapping over 100
// items with eight in flight, on a session whose max_parallel is 4: the
// chains hold all four admission slots, and their internal requests bypass
// the admission queue (docs/DECISIONS.md, Dispatch), so all finish.
func TestMapDoesNotDeadlock(t *testing.T) {
	e := newEnv(t, envOpts{maxParallel: 4})
	items := make([]int, 100)
	for i := range items {
		items[i] = i
	}
	in, _ := json.Marshal(map[string]any{"items": items})
	chain := `{"max_concurrency":8,"input":` + string(in) + `,"chain":{"nodes":[
		{"id":"m","kind":"map","items":"{{input.items}}","request":{"type":"echo/wait/req","body":{"ms":2,"items":[{"key":"k","value":"{{item}}"}]}}},
		{"id":"n","kind":"reduce","items":"{{nodes.m.output}}","initial":0,"expr":"acc + (item.waited ? 1 : 0)"}],
		"edges":[{"from":"m","to":"n"}]}}`
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := e.run(t, chain)
			if err != nil {
				errs <- err.Error()
				return
			}
			if !r.Success || string(r.FinalOutput) != "100" {
				errs <- encode(t, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Error(s)
	}
	if n := e.echo.MaxRunning(); n <= 4 || n > 32 {
		t.Errorf("max echo/wait at once %d: want above max_parallel 4 and at most 4 chains × 8", n)
	}
}

// TestStoredAndNested defines chains by name, runs one from another, and
// checks that a chain running itself stops at the kernel's depth limit.
func TestStoredAndNested(t *testing.T) {
	e := newEnv(t, envOpts{maxDepth: 4})
	def := func(name, chain string) {
		t.Helper()
		var d msg.ChainDefinition
		if err := wire.Unmarshal([]byte(chain), &d); err != nil {
			t.Fatal(err)
		}
		if resp, err := e.c.ChainDefine(aeptest.Context(t), &msg.ChainDefineReq{Name: name, Chain: d}); err != nil || resp.Nodes != len(d.Nodes) {
			t.Fatalf("define %s: %+v %v", name, resp, err)
		}
	}
	def("shout", `{"nodes":[{"id":"s","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{input.word}}","mode":"upper"}}}]}`)
	def("outer", `{"nodes":[{"id":"inner","kind":"action","request":{"type":"chain/run/req","body":{"name":"shout","input":{"word":"{{input.w}}"}}}},
		{"id":"say","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{nodes.inner.output.final_output.text}}!"}}}],
		"edges":[{"from":"inner","to":"say"}]}`)
	r, _ := e.mustRun(t, `{"name":"outer","input":{"w":"hey"}}`)
	if !r.Success || !sameJSON(t, string(r.FinalOutput), `{"text":"HEY!","by":"echo"}`) {
		t.Fatalf("reply %s", encode(t, r))
	}

	def("rec", `{"nodes":[{"id":"again","kind":"action","request":{"type":"chain/run/req","body":{"name":"rec"}}}]}`)
	r, _ = e.mustRun(t, `{"name":"rec"}`)
	if r.Success || r.Error == nil || !strings.Contains(r.Error.Message, "deeper than 4") {
		t.Errorf("recursive chain: %s", encode(t, r))
	}

	_, _, err := e.run(t, `{"name":"missing"}`)
	// A name nothing defines is an error of state (docs/DECISIONS.md).
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
	_, _, err = e.run(t, `{"name":"shout","chain":{"nodes":[{"id":"g","kind":"gather"}]}}`)
	aeptest.WantError(t, err, wire.CodeSchemaViolation, "")
	// Another session does not see this session's chains.
	other := aeptest.Connect(t, e.h, "chains", "echo")
	_, err = other.ChainRun(aeptest.Context(t), runReq(t, `{"name":"shout"}`))
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
}

// TestCapabilityGating checks that an action needs its capability enabled
// in the session, like the agent's own request would.
func TestCapabilityGating(t *testing.T) {
	e := newEnv(t, envOpts{caps: []string{"chains", "echo"}})
	r, _ := e.mustRun(t, `{"chain":{"nodes":[{"id":"t","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"list_dir","arguments":{}}}}]}}`)
	if r.Success || r.Error.Code != "capability_missing" {
		t.Errorf("reply %s", encode(t, r))
	}
}
