package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// lineSink is a transport of the test: it encodes what the host sends to
// one session, as the HTTP transport does.
type lineSink struct {
	mu     sync.Mutex
	lines  []string
	closed bool
}

func (k *lineSink) Send(p *wire.Packet) (int, error) {
	b, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		return 0, err
	}
	k.mu.Lock()
	k.lines = append(k.lines, string(b))
	k.mu.Unlock()
	return len(b), nil
}

func (k *lineSink) Close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
}

// last returns the last line the host sent.
func (k *lineSink) last(t *testing.T) string {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.lines) == 0 {
		t.Fatal("the host sent nothing")
	}
	return k.lines[len(k.lines)-1]
}

func (k *lineSink) isClosed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}

func hsLine(id, token string) []byte {
	return []byte(fmt.Sprintf(`{"type":"handshake/req","id":%q,"proto":"1.0","ts":1,"agent_id":"a","agent_caps":["echo"],"auth_token":%q}`, id, token))
}

// TestPendingPool checks the pool of sessions waiting for their handshake
// (server.limits.max_pending_sessions): opening a session never fails for
// load, the oldest pending session is evicted when the pool is full, and
// neither touches handshaken sessions nor counts against max_sessions.
func TestPendingPool(t *testing.T) {
	cfg := server.Config{Server: server.ServerConfig{Limits: server.Limits{MaxSessions: 3, MaxPendingSessions: 4}}}
	h := newHost(t, cfg, echoSpec("e1", 0, false, &echoplug.Plugin{}))
	_, a := connect(t, h)
	_, b := connect(t, h)
	var sinks []*lineSink
	var sessions []*server.Session
	for range 10 {
		k := &lineSink{}
		s, err := h.NewSession(k)
		if err != nil {
			t.Fatalf("opening a pending session: %v", err)
		}
		sinks, sessions = append(sinks, k), append(sessions, s)
	}
	if n := h.PendingSessions(); n != 4 {
		t.Fatalf("%d pending sessions, want the pool's 4", n)
	}
	for i, k := range sinks {
		_, known := h.Session(sessions[i].ID())
		if evicted := i < 6; k.isClosed() != evicted || known == evicted {
			t.Fatalf("session %d: closed %v, known %v; want the 6 oldest evicted", i, k.isClosed(), known)
		}
	}
	ctx := tctx(t)
	for _, c := range []testproto.Client{a, b} {
		if r, err := c.EchoSay(ctx, &testproto.EchoSayReq{Text: "ok", Mode: "plain"}); err != nil || r.Text != "ok" {
			t.Fatalf("a handshaken session after the flood: %+v %v", r, err)
		}
	}
	// The newest pending session handshakes into the third slot.
	sessions[9].ReceiveLine(hsLine("h", "secret"))
	if l := sinks[9].last(t); !strings.Contains(l, `"ok":true`) {
		t.Fatalf("handshake of a pending session: %s", l)
	}
	if h.PendingSessions() != 3 || h.LiveSessions() != 3 {
		t.Fatalf("pending %d, live %d; want 3 and 3", h.PendingSessions(), h.LiveSessions())
	}
	// An evicted session cannot handshake.
	sessions[0].ReceiveLine(hsLine("h", "secret"))
	if l := sinks[0].last(t); strings.Contains(l, `"ok":true`) {
		t.Fatalf("an evicted session handshook: %s", l)
	}
}

// TestHandshakeThrottle checks that failed handshakes are throttled per
// session and per client address (server.limits.failed_handshake_*): past
// the budget, a handshake is refused unchecked — the right token too —
// with runtime_error "throttled"; the budget refills with time; successes
// and failures for another reason cost nothing; another address is not
// affected.
func TestHandshakeThrottle(t *testing.T) {
	cfg := server.Config{Server: server.ServerConfig{Limits: server.Limits{
		FailedHandshakeBurst: 5, FailedHandshakeInterval: server.Duration(300 * time.Millisecond)}}}
	h := newHost(t, cfg, echoSpec("e1", 0, false, &echoplug.Plugin{}))
	attacker := netip.MustParseAddr("203.0.113.7")
	open := func(addr netip.Addr) (*server.Session, *lineSink) {
		k := &lineSink{}
		s, err := h.NewSession(k, server.WithRemoteAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		return s, k
	}
	outcome := func(l string) string {
		switch {
		case strings.Contains(l, `"ok":true`):
			return "ok"
		case strings.Contains(l, `"reason":"throttled"`) && strings.Contains(l, `"code":"runtime_error"`) && strings.Contains(l, `"retry_after_seconds"`):
			return "throttled"
		case strings.Contains(l, `"code":"unauthorized"`):
			return "unauthorized"
		}
		return l
	}

	// Per session: 5 failures, then even the right token is not checked.
	s, k := open(netip.Addr{})
	var got []string
	for i := range 6 {
		s.ReceiveLine(hsLine(fmt.Sprint("g", i), "guess"))
		got = append(got, outcome(k.last(t)))
	}
	s.ReceiveLine(hsLine("right", "secret"))
	got = append(got, outcome(k.last(t)))
	if want := "unauthorized,unauthorized,unauthorized,unauthorized,unauthorized,throttled,throttled"; strings.Join(got, ",") != want {
		t.Fatalf("one session: %s, want %s", strings.Join(got, ","), want)
	}

	// Per address: sessions are cheap, the address's budget of 5 is not.
	got = got[:0]
	for i := range 8 {
		s, k := open(attacker)
		s.ReceiveLine(hsLine(fmt.Sprint("g", i), "guess"))
		got = append(got, outcome(k.last(t)))
	}
	if want := "unauthorized,unauthorized,unauthorized,unauthorized,unauthorized,throttled,throttled,throttled"; strings.Join(got, ",") != want {
		t.Fatalf("one address: %s, want %s", strings.Join(got, ","), want)
	}
	s, k = open(attacker)
	s.ReceiveLine(hsLine("right", "secret"))
	if o := outcome(k.last(t)); o != "throttled" {
		t.Fatalf("the right token from a throttled address: %s", o)
	}
	// Another address, even in the same IPv4 /24, has its own budget.
	s, k = open(netip.MustParseAddr("203.0.113.8"))
	s.ReceiveLine(hsLine("right", "secret"))
	if o := outcome(k.last(t)); o != "ok" {
		t.Fatalf("another address: %s", o)
	}
	// The budget refills: one more guess per interval.
	time.Sleep(350 * time.Millisecond)
	s, k = open(attacker)
	s.ReceiveLine(hsLine("right", "secret"))
	if o := outcome(k.last(t)); o != "ok" {
		t.Fatalf("after the interval: %s", o)
	}

	// Successes and version errors cost nothing: many from one address.
	friend := netip.MustParseAddr("2001:db8::1")
	for i := range 20 {
		s, k := open(friend)
		s.ReceiveLine([]byte(`{"type":"handshake/req","id":"v","proto":"9.9","ts":1,"agent_id":"a","agent_caps":[],"auth_token":"x"}`))
		s.ReceiveLine(hsLine("h", "secret"))
		if o := outcome(k.last(t)); o != "ok" {
			t.Fatalf("handshake %d of a well-behaved client: %s", i, o)
		}
		s.Close()
	}
	// IPv6 addresses of one /64 share a budget.
	got = got[:0]
	for i := range 7 {
		s, k := open(netip.MustParseAddr(fmt.Sprintf("2001:db8:0:1::%x", i+1)))
		s.ReceiveLine(hsLine("g", "guess"))
		got = append(got, outcome(k.last(t)))
	}
	if want := "unauthorized,unauthorized,unauthorized,unauthorized,unauthorized,throttled,throttled"; strings.Join(got, ",") != want {
		t.Fatalf("one IPv6 /64: %s, want %s", strings.Join(got, ","), want)
	}
}

// TestPendingErrorsAreSmall sends an unhandshaken session lines whose id,
// type or protocol version is 1 MiB: every answer stays small, so a bad
// line never buys a reply as large as itself.
func TestPendingErrorsAreSmall(t *testing.T) {
	h := newHost(t, server.Config{}, echoSpec("e1", 0, false, &echoplug.Plugin{}))
	big := strings.Repeat("x", 1<<20)
	lines := []string{
		`{"type":"` + big + `","id":"` + big + `"}`,
		`{"type":"ping","id":"` + big + `"}`,
		`{"type":"handshake/req","id":"` + big + `","proto":"` + big + `","agent_id":"a","agent_caps":[],"auth_token":"x"}`,
		`{"type":"handshake/req","id":"` + big + `","proto":"1.0","ts":1,"agent_id":"a","agent_caps":[],"auth_token":"x"}`,
		`{"type":"ping","id":"1","` + big + `":1,"` + big + `":2}`,
	}
	k := &lineSink{}
	s, err := h.NewSession(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		s.ReceiveLine([]byte(l))
		if reply := k.last(t); len(reply) > 1024 {
			t.Fatalf("a reply of %d bytes to a line of %d: %.200s", len(reply), len(l), reply)
		}
	}
	if len(k.lines) != len(lines) {
		t.Fatalf("%d replies to %d lines", len(k.lines), len(lines))
	}
}

// TestChildCountsAgainstMaxSessions checks that a subagent's session is
// counted from its creation: it was made by a live agent, so a flood of
// pending sessions cannot evict it, and it cannot pass max_sessions.
func TestChildCountsAgainstMaxSessions(t *testing.T) {
	cfg := server.Config{Server: server.ServerConfig{Limits: server.Limits{MaxSessions: 2, MaxPendingSessions: 1}}}
	h := newHost(t, cfg, echoSpec("e1", 0, false, &echoplug.Plugin{}))
	k := &lineSink{}
	parent, err := h.NewSession(k)
	if err != nil {
		t.Fatal(err)
	}
	parent.ReceiveLine(hsLine("h", "secret"))
	if l := k.last(t); !strings.Contains(l, `"ok":true`) {
		t.Fatalf("parent handshake: %s", l)
	}
	child, _, err := h.SpawnChild(context.Background(), parent, server.ChildOptions{Name: "kid", MemoryScope: "isolated"})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := h.NewSession(&lineSink{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := h.Session(child.ID()); !ok {
		t.Fatal("a pending flood evicted a subagent's session")
	}
	if _, _, err := h.SpawnChild(context.Background(), parent, server.ChildOptions{Name: "kid2", MemoryScope: "isolated"}); !errors.Is(err, server.ErrTooManySessions) {
		t.Fatalf("a child past max_sessions: %v", err)
	}
}
