package server_test

import (
	"context"
	"errors"
	"github.com/aephost/aep/gen/msg"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// waitClosed reads a pipe until the host reports the session closed.
func waitClosed(t *testing.T, p *server.LinePipe, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		_, err := p.ReadLine(ctx)
		if errors.Is(err, server.ErrSessionClosed) {
			return
		}
		if err != nil {
			t.Fatalf("session not closed within %s: %v", within, err)
		}
	}
}

// TestExpiry checks idle and unhandshaken expiry with short configured
// limits (docs/DECISIONS.md, Dispatch defaults, server.limits.*): a session that never
// handshakes and one that stays idle are closed; one with a request in
// flight is not, however long the request takes.
func TestExpiry(t *testing.T) {
	cfg, err := server.ParseConfig([]byte(`
server:
  auth_token: secret
  limits:
    idle_timeout: 150ms
    handshake_timeout: 100ms
`))
	if err != nil {
		t.Fatal(err)
	}
	plug := &echoplug.Plugin{Started: make(chan string, 4)}
	h := newHost(t, cfg, echoSpec("e", 0, false, plug))
	hs := []byte(`{"type":"handshake/req","id":"h","ts":1,"proto":"1.0","agent_id":"a","agent_caps":["echo"],"auth_token":"secret"}`)
	ctx := tctx(t)

	unshaken, _ := h.ConnectLines(8)
	idle, _ := h.ConnectLines(8)
	busy, _ := h.ConnectLines(8)
	for _, p := range []*server.LinePipe{idle, busy} {
		p.WriteLine(ctx, hs)
		if l, err := p.ReadLine(ctx); err != nil || !strings.Contains(string(l), `"ok":true`) {
			t.Fatalf("handshake: %s %v", l, err)
		}
	}
	busy.WriteLine(ctx, []byte(`{"type":"echo/wait/req","id":"w","proto":"1.0","ts":1,"gate":"slow"}`))
	if err := waitFor(ctx, plug.Started, "slow"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitClosed(t, unshaken, 5*time.Second)
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("unhandshaken session closed after %s, before its limit", d)
	}
	waitClosed(t, idle, 5*time.Second)
	if _, ok := h.Session(idle.Session().ID()); ok {
		t.Error("expired session still known to the host")
	}
	if err := idle.WriteLine(ctx, []byte(`{"type":"ping","id":"p","proto":"1.0","ts":1}`)); !errors.Is(err, server.ErrSessionClosed) {
		t.Errorf("write to an expired session: %v", err)
	}
	// Well past idle_timeout, the busy session is alive.
	time.Sleep(400 * time.Millisecond)
	if !busy.Session().Live() {
		t.Fatal("a session with a request in flight expired")
	}
	plug.Release("slow")
	if l, err := busy.ReadLine(ctx); err != nil || !strings.Contains(string(l), `"echo/wait/resp"`) {
		t.Fatalf("reply: %s %v", l, err)
	}
	// Once idle again, it expires too.
	waitClosed(t, busy, 5*time.Second)
	if n := h.LiveSessions(); n != 0 {
		t.Errorf("live sessions %d after expiry", n)
	}
}

// TestCapabilityAliases checks docs/DECISIONS.md, Wire: the prior SDK's spellings
// `learning` and `skill` enable learn and skills, and accepted_caps echoes
// each name as the agent sent it.
func TestCapabilityAliases(t *testing.T) {
	for alias, canon := range map[string]string{"learning": "learn", "skill": "skills", "learn": "learn", "tools": "tools"} {
		if got := server.CanonicalCapability(alias); got != canon {
			t.Errorf("CanonicalCapability(%q) = %q, want %q", alias, got, canon)
		}
	}
	// Only the handshake runs here, so plugins that declare the learn and
	// skills handlers (and would panic if called) are enough to serve them.
	h := newHost(t, server.Config{},
		server.PluginSpec{Name: "learner", Type: "learn", Impl: &declares{LearnHandler: nil}},
		server.PluginSpec{Name: "skiller", Type: "skills", Impl: &declares{}})
	for _, caps := range [][]string{{"learning", "skill", "memory"}, {"learn", "skills"}} {
		p, err := h.ConnectLines(8)
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(client.Lines(checkedConn{t: t, LinePipe: p}, h.Registry()))
		resp, err := c.Handshake(tctx(t), "a", "secret", caps...)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.AcceptedCaps) != len(caps) {
			t.Fatalf("accepted_caps %+v for %q", resp.AcceptedCaps, caps)
		}
		for i, e := range resp.AcceptedCaps {
			wantOn := caps[i] != "memory"
			if e.Name != caps[i] || e.Enabled != wantOn {
				t.Errorf("accepted_caps[%d] = %+v, want {%s %v}", i, e, caps[i], wantOn)
			}
		}
		if s := p.Session(); !s.Enabled("learn") || !s.Enabled("skills") || s.Enabled("memory") {
			t.Errorf("caps %q: enabled learn=%v skills=%v memory=%v", caps, s.Enabled("learn"), s.Enabled("skills"), s.Enabled("memory"))
		}
		c.Close()
	}
}

// relay answers echo/find by dispatching echo/wait (with events) and
// echo/say through the kernel, as chains and subagents reach other
// capabilities (docs/DECISIONS.md, Dispatch).
type relay struct {
	echoplug.Plugin
}

func (r *relay) EchoFind(ctx context.Context, s wire.Scope, req *testproto.EchoFindReq) (*testproto.EchoFindResp, error) {
	two := 2
	if _, err := s.Dispatch(ctx, &testproto.EchoWaitReq{Events: &two}); err != nil {
		return nil, err
	}
	m, err := s.Dispatch(ctx, &testproto.EchoSayReq{Text: req.Name, Mode: "upper"})
	if err != nil {
		return nil, err
	}
	say := m.(*testproto.EchoSayResp)
	return &testproto.EchoFindResp{Name: say.Text, Found: true, By: "relay via " + say.By}, nil
}

// EchoWait declines, so e1 alone serves the inner echo/wait.
func (r *relay) EchoWait(ctx context.Context, s wire.Scope, req *testproto.EchoWaitReq) (*testproto.EchoWaitResp, error) {
	return nil, wire.ErrDecline
}

// recurser answers echo/find by dispatching echo/find again, forever.
type recurser struct {
	echoplug.Plugin
	calls int
}

func (r *recurser) EchoFind(ctx context.Context, s wire.Scope, req *testproto.EchoFindReq) (*testproto.EchoFindResp, error) {
	r.calls++
	if _, err := s.Dispatch(ctx, req); err != nil {
		return nil, err
	}
	return nil, errors.New("unreachable: recursion ended without error")
}

func TestInternalDispatch(t *testing.T) {
	t.Run("reaches other plugins and forwards events", func(t *testing.T) {
		// max_parallel 1: the inner requests bypass the admission queue,
		// so they cannot wait for the worker their caller holds.
		h := newHost(t, server.Config{Server: server.ServerConfig{MaxParallel: 1}},
			server.PluginSpec{Name: "relay", Type: "echo", Priority: 5, Impl: &relay{Plugin: echoplug.Plugin{Name: "relay", DeclineSay: true}}},
			echoSpec("e1", 0, false, &echoplug.Plugin{}))
		_, ec := connect(t, h)
		var events []client.Event
		ctx := client.WithEvents(tctx(t), func(e client.Event) { events = append(events, e) })
		resp, err := ec.EchoFind(ctx, &testproto.EchoFindReq{Name: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Name != "HI" || resp.By != "relay via e1" || !resp.Found {
			t.Errorf("echo/find = %+v", resp)
		}
		if len(events) != 2 || events[0].Seq != 0 || events[1].Seq != 1 || events[0].Type != "echo/event" {
			t.Errorf("events of the inner request: %+v", events)
		}
	})
	t.Run("depth limit", func(t *testing.T) {
		cfg := server.Config{Server: server.ServerConfig{Limits: server.Limits{MaxDepth: 3}}}
		rec := &recurser{Plugin: echoplug.Plugin{Name: "rec"}}
		h := newHost(t, cfg, server.PluginSpec{Name: "rec", Type: "echo", Impl: rec})
		_, ec := connect(t, h)
		_, err := ec.EchoFind(tctx(t), &testproto.EchoFindReq{Name: "loop"})
		var we *wire.Error
		if !errors.As(err, &we) {
			t.Fatalf("want a protocol error, got %v", err)
		}
		d, _ := we.Detail.(map[string]any)
		if we.Code != wire.CodeRuntimeError || d["reason"] != "depth_limit" || !strings.Contains(we.Message, "deeper than 3") {
			t.Errorf("error = %+v", we)
		}
		if rec.calls != 4 {
			t.Errorf("handler ran %d times, want 4 (the request and 3 nested)", rec.calls)
		}
		// The session survives.
		if _, err := ec.EchoSay(tctx(t), &testproto.EchoSayReq{Text: "ok", Mode: "plain"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("capability gating applies", func(t *testing.T) {
		h := newHost(t, server.Config{},
			server.PluginSpec{Name: "relay", Type: "echo", Impl: &relay{Plugin: echoplug.Plugin{Name: "relay"}}})
		c, _ := connect(t, h, "session")
		_, err := c.Request(tctx(t), &testproto.EchoFindReq{Name: "x"})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeCapabilityMissing {
			t.Errorf("err = %v, want capability_missing", err)
		}
	})
}

// TestRequestTimeout checks the deadline of every request's context
// (server.limits.request_timeout): a handler still waiting is answered
// timeout and sees its context end.
func TestRequestTimeout(t *testing.T) {
	cfg := server.Config{Server: server.ServerConfig{Limits: server.Limits{RequestTimeout: server.Duration(80 * time.Millisecond)}}}
	plug := &echoplug.Plugin{CtxDone: make(chan string, 1)}
	h := newHost(t, cfg, echoSpec("e", 0, false, plug))
	_, ec := connect(t, h)
	gate := "never"
	_, err := ec.EchoWait(tctx(t), &testproto.EchoWaitReq{Gate: &gate})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeTimeout {
		t.Fatalf("err = %v, want timeout", err)
	}
	if err := waitFor(tctx(t), plug.CtxDone, gate); err != nil {
		t.Fatal(err)
	}
	// A quick request within the limit is answered normally.
	if _, err := ec.EchoSay(tctx(t), &testproto.EchoSayReq{Text: "ok", Mode: "plain"}); err != nil {
		t.Fatal(err)
	}
}

// declares implements the learn and skills handler interfaces without
// bodies: enough for tests of capability negotiation, never called.
type declares struct {
	msg.LearnHandler
	msg.SkillHandler
}

func (*declares) Module() server.ModuleInfo { return server.ModuleInfo{ID: "test.declares"} }
