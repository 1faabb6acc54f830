package chains_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/chains"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// env is a real kernel with the chains plugin, the echo test plugin and the
// built-in tools, and a Go client on the in-process JSON transport.
type env struct {
	h    *server.Host
	c    *client.Client
	echo *echoplug.Plugin
}

type envOpts struct {
	maxParallel int
	maxDepth    int
	extra       []server.PluginSpec
	caps        []string
	// store opens the host's SQLite store (for the memory capability).
	store bool
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	cfg := aeptest.Config(func(cfg *server.Config) {
		if o.maxParallel > 0 {
			cfg.Server.MaxParallel = o.maxParallel
		}
		if o.maxDepth > 0 {
			cfg.Server.Limits.MaxDepth = o.maxDepth
		}
	})
	dir := t.TempDir()
	opts := []server.Option{
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithDataDir(dir),
	}
	if o.store {
		st, err := store.Open(aeptest.Context(t), "", dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() }) // runs after the host's Close
		opts = append(opts, server.WithStore(st))
	}
	echo := &echoplug.Plugin{Name: "echo", Started: make(chan string, 256), CtxDone: make(chan string, 256)}
	plugins := append([]server.PluginSpec{
		aeptest.Plugin("chains", &chains.Plugin{}),
		aeptest.Plugin("echo", echo),
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, o.extra...)
	h := aeptest.NewHost(t, cfg, plugins, opts...)
	caps := o.caps
	if caps == nil {
		caps = []string{"chains", "echo", "tools"}
	}
	return &env{h: h, c: aeptest.Connect(t, h, caps...), echo: echo}
}

// runReq builds a chain/run/req from JSON, over the schema's defaults.
func runReq(t testing.TB, js string) *msg.ChainRunReq {
	t.Helper()
	req := &msg.ChainRunReq{MaxConcurrency: 4, Timeout: 300}
	if err := wire.Unmarshal([]byte(js), req); err != nil {
		t.Fatalf("bad test request: %v\n%s", err, js)
	}
	return req
}

// events collects the events of requests made with its context.
type events struct {
	mu  sync.Mutex
	all []client.Event
}

func (e *events) ctx(ctx context.Context) context.Context {
	return client.WithEvents(ctx, func(ev client.Event) {
		e.mu.Lock()
		e.all = append(e.all, ev)
		e.mu.Unlock()
	})
}

func (e *events) list() []client.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]client.Event(nil), e.all...)
}

// run sends a chain and returns its reply and events.
func (e *env) run(t *testing.T, js string) (*msg.ChainRunResp, []client.Event, error) {
	t.Helper()
	var ev events
	resp, err := e.c.ChainRun(ev.ctx(aeptest.Context(t)), runReq(t, js))
	return resp, ev.list(), err
}

// mustRun runs a chain that must be answered by a reply.
func (e *env) mustRun(t *testing.T, js string) (*msg.ChainRunResp, []client.Event) {
	t.Helper()
	resp, evs, err := e.run(t, js)
	if err != nil {
		t.Fatalf("chain/run: %v", err)
	}
	return resp, evs
}

func output(t *testing.T, r *msg.ChainRunResp, id string) string {
	t.Helper()
	o, ok := r.Outputs[id]
	if !ok {
		t.Fatalf("no output of node %s; outputs %s", id, encode(t, r.Outputs))
	}
	return string(o)
}

func encode(t testing.TB, v any) string {
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func has(list []string, id string) bool {
	for _, s := range list {
		if s == id {
			return true
		}
	}
	return false
}

func failure(r *msg.ChainRunResp, id string) *msg.ChainNodeError {
	for i := range r.Failed {
		if r.Failed[i].Node == id {
			return &r.Failed[i]
		}
	}
	return nil
}

// waitStarted waits until echo/wait with each gate has started.
func waitStarted(t *testing.T, p *echoplug.Plugin, gates ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, g := range gates {
		want[g] = true
	}
	timeout := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case g := <-p.Started:
			delete(want, g)
		case <-timeout:
			t.Fatalf("gates not started: %v", want)
		}
	}
}

// chainEvents returns the chain/event events as "phase:node" strings.
func chainEvents(evs []client.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type != "chain/event" {
			continue
		}
		out = append(out, e.Data["phase"].(string)+":"+e.Data["node"].(string))
	}
	return out
}

func joined(s []string) string { return strings.Join(s, " ") }

// sameJSON reports whether two JSON texts hold the same value (object key
// order aside).
func sameJSON(t testing.TB, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s", want)
	}
	return reflect.DeepEqual(g, w)
}
