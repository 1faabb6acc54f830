package server_test

import (
	"context"
	"errors"
	"github.com/aephost/aep/gen/msg"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

func init() {
	// A module for config-driven tests: `cls: test.echo` builds an echoplug.
	server.RegisterModule(new(echoplug.Plugin))
}

// newHost starts a host with the echo namespace and the given plugins.
func newHost(t testing.TB, cfg server.Config, plugins ...server.PluginSpec) *server.Host {
	t.Helper()
	if cfg.Server.AuthToken == "" {
		cfg.Server.AuthToken = "secret"
	}
	opts := []server.Option{server.WithRegistry(testRegistry())}
	for _, p := range plugins {
		opts = append(opts, server.WithPlugin(p))
	}
	h, err := server.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// connect opens a handshaken JSON-codec client whose host lines are all
// checked against the schemas.
func connect(t testing.TB, h *server.Host, caps ...string) (*client.Client, testproto.Client) {
	t.Helper()
	p, err := h.ConnectLines(256)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(checkedConn{t: t, LinePipe: p}, h.Registry()))
	t.Cleanup(func() { c.Close() })
	if caps == nil {
		caps = []string{"echo"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Handshake(ctx, "agent", "secret", caps...); err != nil {
		t.Fatal(err)
	}
	return c, testproto.Client{Requester: c}
}

// checkedConn checks every line the host sends.
type checkedConn struct {
	t testing.TB
	*server.LinePipe
}

func (c checkedConn) ReadLine(ctx context.Context) ([]byte, error) {
	l, err := c.LinePipe.ReadLine(ctx)
	if err == nil {
		checkHostLine(c.t, l)
	}
	return l, err
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func echoSpec(name string, prio int, excl bool, p *echoplug.Plugin) server.PluginSpec {
	if p.Name == "" {
		p.Name = name
	}
	return server.PluginSpec{Name: name, Type: "echo", Priority: prio, Exclusive: excl, Impl: p}
}

// TestDispatch covers spec §1 dispatch rules 2–4 and docs/DECISIONS.md, Dispatch with
// several echo plugins: who answers echo/say (a unique-owner type),
// what echo/list (a merged list type) holds, and who answers echo/find
// (declining, fallback).
func TestDispatch(t *testing.T) {
	tests := []struct {
		name     string
		plugins  []server.PluginSpec
		wantSay  string   // plugin answering echo/say
		wantList []string // merged echo/list items
		find     string
		wantFind testproto.EchoFindResp
	}{
		{
			name: "priority order",
			plugins: []server.PluginSpec{
				echoSpec("low", 0, false, &echoplug.Plugin{Items: []string{"l"}}),
				echoSpec("high", 10, false, &echoplug.Plugin{Items: []string{"h"}}),
				echoSpec("mid", 5, false, &echoplug.Plugin{Items: []string{"m"}}),
			},
			wantSay: "high", wantList: []string{"h", "m", "l"},
			find: "x", wantFind: testproto.EchoFindResp{Name: "x", Found: false, By: ""},
		},
		{
			name: "ties in config order",
			plugins: []server.PluginSpec{
				echoSpec("first", 5, false, &echoplug.Plugin{Items: []string{"f1", "f2"}}),
				echoSpec("second", 5, false, &echoplug.Plugin{Items: []string{"s1"}}),
				echoSpec("third", 5, false, &echoplug.Plugin{Items: []string{"t1"}}),
			},
			wantSay: "first", wantList: []string{"f1", "f2", "s1", "t1"},
			find: "x", wantFind: testproto.EchoFindResp{Name: "x"},
		},
		{
			name: "higher priority declines",
			plugins: []server.PluginSpec{
				echoSpec("low", 0, false, &echoplug.Plugin{}),
				echoSpec("high", 10, false, &echoplug.Plugin{DeclineSay: true}),
			},
			wantSay: "low", wantList: []string{},
			find: "x", wantFind: testproto.EchoFindResp{Name: "x"},
		},
		{
			name: "exclusive: the highest-priority exclusive plugin alone",
			plugins: []server.PluginSpec{
				echoSpec("ex-low", 1, true, &echoplug.Plugin{Items: []string{"a"}, Owns: []string{"na"}}),
				echoSpec("shared-top", 9, false, &echoplug.Plugin{Items: []string{"b"}, Owns: []string{"nb"}}),
				echoSpec("ex-high", 3, true, &echoplug.Plugin{Items: []string{"c"}, Owns: []string{"nc"}}),
			},
			wantSay: "ex-high", wantList: []string{"c"},
			// shared-top owns nb but is not asked: the exclusive route has one plugin.
			find: "nb", wantFind: testproto.EchoFindResp{Name: "nb"},
		},
		{
			name: "declining: the owner answers",
			plugins: []server.PluginSpec{
				echoSpec("a", 10, false, &echoplug.Plugin{Owns: []string{"alpha"}}),
				echoSpec("b", 0, false, &echoplug.Plugin{Owns: []string{"beta", "gamma"}}),
			},
			wantSay: "a", wantList: []string{},
			find: "gamma", wantFind: testproto.EchoFindResp{Name: "gamma", Found: true, By: "b"},
		},
		{
			name: "fallback when all decline",
			plugins: []server.PluginSpec{
				echoSpec("a", 0, false, &echoplug.Plugin{Owns: []string{"alpha"}}),
				echoSpec("b", 0, false, &echoplug.Plugin{Owns: []string{"beta"}}),
			},
			wantSay: "a", wantList: []string{},
			find: "omega \"quoted\"", wantFind: testproto.EchoFindResp{Name: "omega \"quoted\"", Found: false, By: ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, server.Config{}, tt.plugins...)
			_, ec := connect(t, h)
			ctx := tctx(t)
			say, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "hi", Mode: "plain"})
			if err != nil {
				t.Fatal(err)
			}
			if say.By != tt.wantSay || say.Text != "hi" {
				t.Errorf("echo/say answered by %q (%q), want %q", say.By, say.Text, tt.wantSay)
			}
			list, err := ec.EchoList(ctx, &testproto.EchoListReq{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(list.Items, tt.wantList) && !(len(list.Items) == 0 && len(tt.wantList) == 0) {
				t.Errorf("echo/list = %q, want %q", list.Items, tt.wantList)
			}
			find, err := ec.EchoFind(ctx, &testproto.EchoFindReq{Name: tt.find})
			if err != nil {
				t.Fatal(err)
			}
			if *find != tt.wantFind {
				t.Errorf("echo/find = %+v, want %+v", *find, tt.wantFind)
			}
		})
	}
}

func TestDuplicateOwnershipRejected(t *testing.T) {
	cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret"}}
	_, err := server.New(context.Background(), cfg, server.WithRegistry(testRegistry()),
		server.WithPlugin(echoSpec("owner-one", 0, false, &echoplug.Plugin{Owns: []string{"solo", "shared"}})),
		server.WithPlugin(echoSpec("owner-two", 0, false, &echoplug.Plugin{Owns: []string{"shared"}})))
	if err == nil {
		t.Fatal("two plugins claiming one name: want a registration error")
	}
	for _, want := range []string{"owner-one", "owner-two", `"shared"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if !errors.Is(err, server.ErrClaimed) {
		t.Errorf("error %v does not wrap ErrClaimed", err)
	}
}

// lifePlugin records its lifecycle calls in a shared log.
type lifePlugin struct {
	name          string
	log           *[]string
	failProvision bool
	failValidate  bool
	env           server.PluginEnv
}

func (p *lifePlugin) Provision(ctx context.Context, env server.PluginEnv) error {
	*p.log = append(*p.log, "provision "+p.name)
	p.env = env
	if p.failProvision {
		return errors.New("disk on fire")
	}
	return nil
}

func (p *lifePlugin) Validate() error {
	*p.log = append(*p.log, "validate "+p.name)
	if p.failValidate {
		return errors.New("bad settings")
	}
	return nil
}

func (p *lifePlugin) Cleanup() error {
	*p.log = append(*p.log, "cleanup "+p.name)
	return nil
}

var (
	_ server.Provisioner  = (*lifePlugin)(nil)
	_ server.Validator    = (*lifePlugin)(nil)
	_ server.CleanerUpper = (*lifePlugin)(nil)
)

// TestPluginLifecycle checks the plugin lifecycle (docs/DECISIONS.md, Plugins and configuration): Provision, Validate, and
// Cleanup in reverse order, also for a plugin whose own step failed and for
// every plugin started before it (unlike caddy #7067).
func TestPluginLifecycle(t *testing.T) {
	tests := []struct {
		name    string
		fail    string // "provision:<plugin>" or "validate:<plugin>" or ""
		wantErr string
		wantLog []string
	}{
		{
			name: "all start, close cleans up in reverse",
			wantLog: []string{"provision a", "validate a", "provision b", "validate b", "provision c", "validate c",
				"cleanup c", "cleanup b", "cleanup a"},
		},
		{
			name: "provision error", fail: "provision:b", wantErr: `plugin "b": provision: disk on fire`,
			wantLog: []string{"provision a", "validate a", "provision b", "cleanup b", "cleanup a"},
		},
		{
			name: "validate error", fail: "validate:c", wantErr: `plugin "c": validate: bad settings`,
			wantLog: []string{"provision a", "validate a", "provision b", "validate b", "provision c", "validate c",
				"cleanup c", "cleanup b", "cleanup a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			opts := []server.Option{server.WithDataDir(t.TempDir())}
			for _, n := range []string{"a", "b", "c"} {
				p := &lifePlugin{name: n, log: &log, failProvision: tt.fail == "provision:"+n, failValidate: tt.fail == "validate:"+n}
				opts = append(opts, server.WithPlugin(server.PluginSpec{Name: n, Impl: p}))
			}
			cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret"}}
			h, err := server.New(context.Background(), cfg, opts...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: err %v, want %q", err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(log, tt.wantLog) {
				t.Errorf("lifecycle\n got %q\nwant %q", log, tt.wantLog)
			}
		})
	}
}

// TestPluginEnv: a plugin's data directory is named by its instance key
// (its module ID), not its configured name (server/datadir.go).
func TestPluginEnv(t *testing.T) {
	var log []string
	dir := t.TempDir()
	p := &lifePlugin{name: "a", log: &log}
	cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret"}}
	h, err := server.New(context.Background(), cfg, server.WithDataDir(dir),
		server.WithPlugin(server.PluginSpec{Name: "a", Impl: p}))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	if p.env.Name != "a" || p.env.Type != "" || p.env.DataDir != dir+"/test.lifePlugin" || p.env.Host != h || p.env.Claims == nil || p.env.Logger == nil {
		t.Errorf("plugin env = %+v", p.env)
	}
	// A plugin that implements no handler serves nothing; only the
	// kernel's session namespace is served.
	if got := h.Served(); !slices.Equal(got, []string{"session"}) {
		t.Errorf("served %q, want only session", got)
	}
}

// TestPluginTypeMustBeServed: a plugin configured as a capability its
// handlers do not serve is refused at start-up, naming the plugin, the
// type and what the module does serve; the same check runs in
// server.CheckConfig (what `aep config validate` calls).
func TestPluginTypeMustBeServed(t *testing.T) {
	cases := []struct {
		name, typ string
		impl      server.Plugin
		wantErr   string
	}{
		{"served type", "echo", &echoplug.Plugin{}, ""},
		{"alias of nothing", "procs", &echoplug.Plugin{}, `plugin "p": type "procs" is not served by module test.echo (it serves: echo)`},
		{"capability of another plugin", "tools", &echoplug.Plugin{}, `type "tools" is not served by module test.echo`},
		{"handler-less plugin with a type", "learn", &lifePlugin{log: new([]string)}, `(it serves: none)`},
		{"handler-less plugin without a type", "", &lifePlugin{log: new([]string)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret"}}
			h, err := server.New(context.Background(), cfg, server.WithRegistry(msg.Registry().Union(testproto.Registry())),
				server.WithPlugin(server.PluginSpec{Name: "p", Type: c.typ, Impl: c.impl}))
			if h != nil {
				defer h.Close(context.Background())
			}
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("New: err %v, want %q", err, c.wantErr)
			}
		})
	}
	t.Run("config", func(t *testing.T) {
		cfg, err := server.ParseConfig([]byte(`
server:
  auth_token: secret
plugins:
  - name: p
    type: procs
    cls: test.echo
`))
		if err != nil {
			t.Fatal(err)
		}
		reg := msg.Registry().Union(testproto.Registry())
		err = server.CheckConfig(cfg, reg)
		if err == nil || !strings.Contains(err.Error(), `plugins[0].type: type "procs" is not served by module test.echo (it serves: echo)`) {
			t.Fatalf("CheckConfig: %v", err)
		}
		_, err = server.New(context.Background(), cfg, server.WithRegistry(reg))
		if err == nil || !strings.Contains(err.Error(), `type "procs" is not served`) {
			t.Fatalf("New: %v", err)
		}
	})
}

// TestConfigPlugins builds plugins from YAML through registered modules.
func TestConfigPlugins(t *testing.T) {
	t.Run("settings, metadata and enabled", func(t *testing.T) {
		cfg, err := server.ParseConfig([]byte(`
server:
  auth_token: secret
plugins:
  - name: low
    type: echo
    cls: test.echo
    config: {name: low, items: [l1]}
  - name: high
    type: echo
    cls: test.echo
    metadata: {priority: 7}
    config: {name: high, items: [h1, h2], owns: [hx]}
  - name: off
    type: echo
    cls: test.echo
    metadata: {enabled: false, priority: 99, exclusive: true}
    config: {name: off, items: [never]}
`))
		if err != nil {
			t.Fatal(err)
		}
		h := newHost(t, cfg)
		if got := h.Plugins(); !slices.Equal(got, []string{"session", "low", "high"}) {
			t.Errorf("plugins %q", got)
		}
		_, ec := connect(t, h)
		ctx := tctx(t)
		list, err := ec.EchoList(ctx, &testproto.EchoListReq{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(list.Items, []string{"h1", "h2", "l1"}) {
			t.Errorf("echo/list = %q", list.Items)
		}
		find, err := ec.EchoFind(ctx, &testproto.EchoFindReq{Name: "hx"})
		if err != nil || !find.Found || find.By != "high" {
			t.Errorf("echo/find = %+v, %v", find, err)
		}
	})
	t.Run("an anchor of one plugin's config used by another", func(t *testing.T) {
		cfg, err := server.ParseConfig([]byte(`
server:
  auth_token: secret
plugins:
  - name: a
    type: echo
    cls: test.echo
    config: &shared {name: a, items: [x, y]}
  - name: b
    type: echo
    cls: test.echo
    config: *shared
`))
		if err != nil {
			t.Fatal(err)
		}
		h := newHost(t, cfg)
		_, ec := connect(t, h)
		list, err := ec.EchoList(tctx(t), &testproto.EchoListReq{})
		if err != nil || !slices.Equal(list.Items, []string{"x", "y", "x", "y"}) {
			t.Errorf("echo/list = %+v, %v", list, err)
		}
	})
	errCases := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown cls lists the registered", `
server: {auth_token: secret}
plugins:
  - {name: p, type: echo, cls: test.nope}
`, []string{`plugin "p"`, `unknown cls "test.nope"`, "registered:", "test.echo"}},
		{"unknown settings key", `
server: {auth_token: secret}
plugins:
  - name: p
    type: echo
    cls: test.echo
    config:
      name: p
      colour: blue
`, []string{`plugin "p": config`, "colour", "not found"}},
		{"settings of the wrong type", `
server: {auth_token: secret}
plugins:
  - name: p
    type: echo
    cls: test.echo
    config: {items: 7}
`, []string{`plugin "p": config`}},
	}
	for _, tt := range errCases {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := server.ParseConfig([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			_, err = server.New(context.Background(), cfg, server.WithRegistry(testRegistry()))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestMaxParallel checks that no more than max_parallel handlers of one
// session run at once and that every admitted request is answered.
func TestMaxParallel(t *testing.T) {
	for _, mp := range []int{1, 2, 3} {
		cfg := server.Config{Server: server.ServerConfig{MaxParallel: mp}}
		plug := &echoplug.Plugin{Started: make(chan string, 64)}
		h := newHost(t, cfg, echoSpec("e", 0, false, plug))
		_, ec := connect(t, h)
		ctx := tctx(t)
		const n = 8
		errs := make(chan error, n)
		gate := "g"
		for range n {
			go func() {
				_, err := ec.EchoWait(ctx, &testproto.EchoWaitReq{Gate: &gate})
				errs <- err
			}()
		}
		for range mp {
			if err := waitFor(ctx, plug.Started, gate); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-plug.Started:
			t.Fatalf("max_parallel %d: a handler started beyond the limit", mp)
		case <-time.After(50 * time.Millisecond):
		}
		plug.Release(gate)
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := plug.MaxRunning(); got != mp {
			t.Errorf("max_parallel %d: %d ran at once", mp, got)
		}
	}
}

// TestEmitAfterReply checks spec §6 rule 5: once the reply is sent, Emit
// fails and nothing more reaches the wire for that request.
func TestEmitAfterReply(t *testing.T) {
	plug := &echoplug.Plugin{Scopes: make(chan wire.Scope, 1)}
	h := newHost(t, server.Config{}, echoSpec("e", 0, false, plug))
	p, err := h.ConnectLines(16)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := tctx(t)
	send := func(l string) {
		if err := p.WriteLine(ctx, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() []byte {
		l, err := p.ReadLine(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkHostLine(t, l)
		return l
	}
	send(`{"type":"handshake/req","id":"h","ts":1,"proto":"1.0","agent_id":"a","agent_caps":["echo"],"auth_token":"secret"}`)
	read()
	send(`{"type":"echo/wait/req","id":"w","proto":"1.0","ts":1,"events":1}`)
	if l := read(); !isEvent(l) {
		t.Fatalf("want the event first, got %s", l)
	}
	if l := read(); !strings.Contains(string(l), `"echo/wait/resp"`) {
		t.Fatalf("want the reply, got %s", l)
	}
	sc := <-plug.Scopes
	// The scope is handed over before the handler returns; wait until the
	// reply has gone out, which the line above proves.
	if err := sc.Emit(wire.EventLog, map[string]any{"late": true}); !errors.Is(err, wire.ErrNotInFlight) {
		t.Fatalf("Emit after reply: %v, want ErrNotInFlight", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if l, err := p.ReadLine(short); err == nil {
		t.Fatalf("host sent %s after the reply", l)
	}
}

func (*lifePlugin) Module() server.ModuleInfo { return server.ModuleInfo{ID: "test.lifePlugin"} }
