package chains

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// chainSeeds are chain definitions of the package's tests: graphs they run
// (templates, branches, map, reduce, fallbacks) and graphs they refuse.
var chainSeeds = []string{
	`{"nodes":[{"id":"w","kind":"action","request":{"type":"echo/wait/req","body":{"ms":1}}}]}`,
	`{"nodes":[{"id":"a","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"ga"}}},
		{"id":"b","kind":"action","request":{"type":"echo/wait/req","body":{"gate":"gb"}}},
		{"id":"c","kind":"action","request":{"type":"echo/say/req","body":{"text":"after {{nodes.a.output.waited}} {{nodes.b.output.waited}}"}}}],
		"edges":[{"from":"a","to":"c"},{"from":"b","to":"c"}]}`,
	`{"nodes":[{"id":"a","kind":"action","request":{"type":"echo/say/req","body":{"text":"x"}}},
		{"id":"br","kind":"branch","condition":"input.go"},
		{"id":"yes","kind":"action","request":{"type":"echo/say/req","body":{"text":"y"}}},
		{"id":"no","kind":"action","on_error":"skip","request":{"type":"echo/wait/req","body":{"panic":true}}}],
		"edges":[{"from":"a","to":"br"},{"from":"br","to":"yes","when":true},{"from":"br","to":"no","when":false}]}`,
	`{"nodes":[{"id":"say","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{input.city}}","mode":"{{input.mode}}"}}},
		{"id":"wait","kind":"action","request":{"type":"echo/wait/req","body":{"ms":"{{input.ms}}"}}},
		{"id":"twice","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{nodes.say.output.text}}/{{nodes.say.output.text}}"}}}],
		"edges":[{"from":"say","to":"twice"},{"from":"wait","to":"twice"}],"output":"twice"}`,
	`{"nodes":[{"id":"check","kind":"branch","condition":"input.n > 2 && input.tag == 'x'"},
		{"id":"big","kind":"action","request":{"type":"echo/say/req","body":{"text":"big {{input.n}}"}}},
		{"id":"small","kind":"action","request":{"type":"echo/say/req","body":{"text":"small"}}},
		{"id":"join","kind":"gather"}],
		"edges":[{"from":"check","to":"big","when":true},{"from":"check","to":"small","when":false},{"from":"big","to":"join"},{"from":"small","to":"join"}]}`,
	`{"nodes":[{"id":"m","kind":"map","items":"{{input.words}}","request":{"type":"echo/say/req","body":{"text":"{{index}}:{{item}}","mode":"upper"}}},
		{"id":"total","kind":"reduce","items":"{{nodes.m.output}}","initial":0,"expr":"acc + len(item.text)"},
		{"id":"lit","kind":"reduce","items":[1,2,3,4],"initial":{"s":"{{input.words.0}}"},"expr":"{s: acc.s + string(item)}"}],
		"edges":[{"from":"m","to":"total"}]}`,
	`{"nodes":[{"id":"bad","kind":"action","on_error":"fallback","fallback":"fb","request":{"type":"echo/wait/req","body":{"panic":true}}},
		{"id":"fb","kind":"action","request":{"type":"echo/say/req","body":{"text":"instead of {{error.node}} ({{error.code}})"}}},
		{"id":"next","kind":"action","request":{"type":"echo/say/req","body":{"text":"{{nodes.bad.output.text}}"}}}],
		"edges":[{"from":"bad","to":"next"}]}`,
	`{"nodes":[{"id":"inner","kind":"action","request":{"type":"chain/run/req","body":{"name":"shout","input":{"word":"{{input.w}}"}}}}]}`,
	`{"nodes":[{"id":"t","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"list_dir","arguments":{}}}}]}`,
	`{"nodes":[{"id":"w","kind":"action","request":{"type":"echo/wait/req","body":{"ms":1}}},{"id":"a","kind":"gather"},{"id":"b","kind":"gather"},{"id":"c","kind":"gather"}],
		"edges":[{"from":"w","to":"a"},{"from":"a","to":"b"},{"from":"b","to":"c"},{"from":"c","to":"a"}]}`,
	`{"nodes":[{"id":"w","kind":"gather"},{"id":"a","kind":"gather"}],"edges":[{"from":"w","to":"a"},{"from":"a","to":"a"}]}`,
	`{"nodes":[{"id":"w","kind":"gather"},{"id":"a","kind":"gather"}],"edges":[{"from":"w","to":"a"},{"from":"a","to":"w"}]}`,
	`{"nodes":[{"id":"w","kind":"gather"}],"edges":[{"from":"w","to":"ghost"},{"from":"phantom","to":"w"}]}`,
	`{"nodes":[{"id":"w","kind":"action","on_error":"fallback","fallback":"nope","request":{"type":"echo/wait/req"}}]}`,
	`{"nodes":[{"id":"w","kind":"gather"}],"output":"zz"}`,
	`{"nodes":[{"id":"a.b","kind":"gather"}]}`,
	`{"nodes":[{"id":"b","kind":"branch","condition":"input.x >"}]}`,
	`{"nodes":[{"id":"r","kind":"reduce","items":[1]}]}`,
	`{"nodes":[{"id":"x","kind":"action","request":{"type":"nope/req"}}]}`,
	`{"nodes":[{"id":"x","kind":"action","request":{"type":"handshake/req"}}]}`,
	`{"nodes":[{"id":"a","kind":"action","on_error":"fallback","fallback":"f","request":{"type":"echo/wait/req"}},
		{"id":"b","kind":"action","on_error":"fallback","fallback":"f","request":{"type":"echo/wait/req"}},{"id":"f","kind":"gather"}]}`,
	`{"nodes":[{"id":"w","kind":"action","on_error":"fallback","fallback":"f","request":{"type":"echo/wait/req"}},{"id":"f","kind":"gather"}],"edges":[{"from":"w","to":"f"}]}`,
	`{"nodes":[{"id":"w","kind":"action","on_error":"fallback","fallback":"w","request":{"type":"echo/wait/req"}}]}`,
	`{"nodes":[{"id":"a","kind":"action","request":{"type":"echo/say/req","body":[1]}}]}`,
	`{"nodes":[]}`, `{}`, `null`,
}

// FuzzCompile compiles any chain definition an agent can send. A refusal is
// a *GraphError that answers schema_violation. An accepted graph has an
// entry node, no cycle, a topological order through every node of its
// flow, fallbacks outside the flow, and what each kind needs; and once
// stored it survives a session snapshot and restore.
func FuzzCompile(f *testing.F) {
	for _, s := range chainSeeds {
		f.Add([]byte(s))
	}
	reg := msg.Registry().Union(testproto.Registry())
	f.Fuzz(func(t *testing.T, raw []byte) {
		var def msg.ChainDefinition
		if err := wire.Unmarshal(raw, &def); err != nil {
			return
		}
		g, err := compile(&def, reg)
		if err != nil {
			var ge *GraphError
			if g != nil || !errors.As(err, &ge) || !errors.Is(err, wire.ErrInvalid) {
				t.Fatalf("compile refused with %T %v (graph %v); want a *GraphError wrapping wire.ErrInvalid", err, err, g)
			}
			return
		}
		checkGraph(t, reg, &def, g)
		// A chain/define request only stores what its schema accepts.
		if (&msg.ChainDefineReq{Name: "c", Chain: def}).Validate() != nil {
			return
		}
		const session = "s-fuzz"
		p := newPlugin(t, reg)
		sc, err := p.sessions.GetOrCreate(session)
		if err != nil {
			t.Fatal(err)
		}
		sc.defs["c"] = stored{g: g, def: def}
		state, err := p.Snapshot(context.Background(), session)
		if err != nil {
			t.Fatalf("snapshot of a stored chain: %v", err)
		}
		q := newPlugin(t, reg)
		if err := q.Restore(context.Background(), session, state); err != nil {
			t.Fatalf("restore of a stored chain: %v\nstate %s", err, state)
		}
		qc, _ := q.sessions.Get(session)
		if got := qc.defs["c"].g; got == nil || len(got.nodes) != len(g.nodes) || got.active != g.active {
			t.Fatalf("restore changed the chain: %d nodes, %d active; want %d, %d", len(got.nodes), got.active, len(g.nodes), g.active)
		}
	})
}

// newPlugin provisions a plugin without a host, allowing one stored chain.
func newPlugin(t *testing.T, reg *wire.Registry) *Plugin {
	t.Helper()
	p := &Plugin{Settings: Settings{MaxDefinitions: 1}}
	if err := p.Provision(context.Background(), server.PluginEnv{Name: "chains", Type: "chains", Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	p.reg = reg
	return p
}

func checkGraph(t *testing.T, reg *wire.Registry, def *msg.ChainDefinition, g *graph) {
	t.Helper()
	if len(g.nodes) != len(def.Nodes) || len(g.byID) != len(def.Nodes) {
		t.Fatalf("graph has %d nodes (%d ids) for %d defined", len(g.nodes), len(g.byID), len(def.Nodes))
	}
	if cyc := g.findCycle(); cyc != nil {
		t.Fatalf("accepted cycle %v", cyc)
	}
	active := 0
	indegree := map[*node]int{}
	var ready []*node
	for _, n := range g.nodes {
		if !idPattern.MatchString(n.def.ID) {
			t.Fatalf("accepted node id %q", n.def.ID)
		}
		if n.isFallback {
			if len(n.in)+len(n.out) > 0 || n.fallback != nil || g.output == n.def.ID {
				t.Fatalf("fallback node %q is part of the flow", n.def.ID)
			}
			continue
		}
		active++
		if (n.policy == msg.ChainNodeOnErrorFallback) != (n.fallback != nil) || n.fallback == n {
			t.Fatalf("node %q: on_error %s with fallback %v", n.def.ID, n.policy, n.fallback)
		}
		switch n.def.Kind {
		case msg.ChainNodeKindAction, msg.ChainNodeKindMap:
			if e := reg.Lookup(n.reqType); e == nil || e.Kind != wire.KindRequest || e.Kernel {
				t.Fatalf("node %q sends %q, which is not a request a chain may send", n.def.ID, n.reqType)
			}
		case msg.ChainNodeKindBranch, msg.ChainNodeKindReduce:
			if n.program == nil {
				t.Fatalf("%s node %q has no compiled expression", n.def.Kind, n.def.ID)
			}
		}
		for _, e := range n.out {
			if (n.def.Kind == msg.ChainNodeKindBranch) != (e.when != nil) {
				t.Fatalf("edge %s → %s: when %v on a %s node", n.def.ID, e.to.def.ID, e.when, n.def.Kind)
			}
		}
		indegree[n] = len(n.in)
		if len(n.in) == 0 {
			ready = append(ready, n)
		}
	}
	if active != g.active || active == 0 || len(ready) == 0 {
		t.Fatalf("%d flow nodes (graph says %d), %d entries", active, g.active, len(ready))
	}
	if g.output != "" && (g.byID[g.output] == nil || g.byID[g.output].isFallback) {
		t.Fatalf("output %q is not a flow node", g.output)
	}
	ordered := 0
	for len(ready) > 0 {
		n := ready[0]
		ready = ready[1:]
		ordered++
		for _, e := range n.out {
			if indegree[e.to]--; indegree[e.to] == 0 {
				ready = append(ready, e.to)
			}
		}
	}
	if ordered != active {
		t.Fatalf("topological order reaches %d of %d flow nodes", ordered, active)
	}
}

// FuzzRender renders templates against any scope document: a template
// string alone (which keeps the JSON type of what it names), inside an
// object, and any JSON value as a request body. Rendering a valid JSON
// value succeeds and gives valid JSON; a value without templates comes
// back unchanged; and a lookup always gives a JSON value.
func FuzzRender(f *testing.F) {
	docs := []string{
		`{"city":"paris","ms":5,"mode":"upper","words":["ab","cde","f"],"n":3,"tag":"x"}`,
		`{"w":"hey","go":false}`, `null`, `"s"`, `[1,{"a":[2]}]`, `{"a":{"b":{"c":1e400}}}`, `{"":1,"a.b":2,"#":3,"@this":4}`,
	}
	tmpls := []string{
		"{{input.city}}", "{{ input.ms }}", "{{nodes.say.output.text}}/{{nodes.say.output.text}} by {{nodes.say.output.by}}",
		"{{index}}:{{item}}", "{{input.words.0}}", "{{input.words}}", "{{nodes.m.output}}", "instead of {{error.node}} ({{error.code}})",
		"{{input.missing}}", "{{}}", "{{{{x}}}}", "{{ }}", "{{input.words.#}}", "{{input|@reverse}}", "{{@this}}", "{{input.words.#(len>1)#}}",
		"{{..0}}", "{{input.@pretty}}", "{{input.@ugly}}", "{{input.\\.}}", `{"text":"{{input.w}}!","n":[1,"{{input.n}}"]}`, "{{\xff}}", "no template",
	}
	for i, d := range docs {
		for j, tm := range tmpls {
			if (i+j)%3 == 0 {
				f.Add([]byte(d), tm)
			}
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte, tmpl string) {
		if !json.Valid(doc) {
			return // input and node outputs are JSON values by the time they reach a scope
		}
		sc, err := newScope(doc, map[string]json.RawMessage{"say": doc, "m": doc}, map[string]json.RawMessage{"item": doc, "index": json.RawMessage("0")})
		if err != nil {
			t.Fatalf("scope of a JSON value: %v", err)
		}
		if sc, err = sc.with(map[string]json.RawMessage{"error": json.RawMessage(`{"node":"bad","code":"runtime_error"}`)}); err != nil {
			t.Fatalf("scope with: %v", err)
		}
		if !json.Valid(sc.lookup(tmpl)) {
			t.Fatalf("lookup(%q) = %q is not JSON", tmpl, sc.lookup(tmpl))
		}
		quoted, _ := json.Marshal(tmpl)
		for _, raw := range [][]byte{quoted, []byte(`{"k":[` + string(quoted) + `,1]}`), []byte(tmpl)} {
			out, err := sc.render(raw)
			if !json.Valid(raw) {
				continue // not a body an agent's line can carry; an error is the answer
			}
			if err != nil {
				t.Fatalf("render(%s): %v", raw, err)
			}
			if !json.Valid(out) {
				t.Fatalf("render(%s) = %s is not JSON", raw, out)
			}
			if !bytes.Contains(raw, []byte("{{")) && !bytes.Equal(out, raw) {
				t.Fatalf("render(%s) = %s changed a value without templates", raw, out)
			}
		}
	})
}
