package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// wsClient is a test's WebSocket connection; it checks every frame the host
// sends against schemas/ and counts them (the count is what a re-attach
// sends as Last-Event-ID).
type wsClient struct {
	tb   testing.TB
	c    *websocket.Conn
	seen int
}

func dialWS(tb testing.TB, base string, hdr http.Header) (*wsClient, *http.Response, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(-1)
	tb.Cleanup(func() { c.CloseNow() })
	return &wsClient{tb: tb, c: c}, resp, nil
}

func mustDialWS(tb testing.TB, base string, hdr http.Header) *wsClient {
	tb.Helper()
	c, _, err := dialWS(tb, base, hdr)
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	return c
}

func (w *wsClient) send(line string) {
	w.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
		w.tb.Fatalf("write: %v", err)
	}
}

func (w *wsClient) next() message {
	w.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := w.c.Read(ctx)
	if err != nil {
		w.tb.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		w.tb.Fatalf("frame type %v", typ)
	}
	if err := checker(w.tb).CheckHostLine(b); err != nil {
		w.tb.Errorf("host frame does not conform: %v\n%s", err, b)
	}
	w.seen++
	return decode(w.tb, event{Data: string(b)})
}

func (w *wsClient) handshake() string {
	w.tb.Helper()
	w.send(handshakeLine("h1"))
	m := w.next()
	if m.Type != "handshake/resp" || !m.Ok || m.SessionID == "" {
		w.tb.Fatalf("handshake: %+v", m)
	}
	return m.SessionID
}

// TestWebSocketExchange: one frame per message each way, the same messages
// as every other transport: replies, events before their reply, errors for
// lines that do not decode, and an oversized frame answered without closing.
func TestWebSocketExchange(t *testing.T) {
	h, _ := newPlugHost(t, func(c *server.Config) { c.Server.Limits.MaxMessageBytes = 4096 })
	base := newServer(t, h, httpapi.Options{})
	w := mustDialWS(t, base, nil)
	w.send(sayLine("s0", "early"))
	if m := w.next(); m.Type != "error" || m.Code != "unauthorized" || m.ReqID != "s0" {
		t.Fatalf("before the handshake: %+v", m)
	}
	w.handshake()
	steps := []struct {
		send string
		want []string // "type req_id [code]"
	}{
		{sayLine("s1", "hi"), []string{"echo/say/resp s1"}},
		{`{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"events":2}`, []string{"echo/event w1", "echo/event w1", "echo/wait/resp w1"}},
		{`not json`, []string{"error  parse_error"}},
		{`{"type":"nope/req","id":"u1","proto":"1.0","ts":1}`, []string{"error u1 parse_error"}},
		{sayLine("big", strings.Repeat("x", 5000)), []string{"error  parse_error"}},
		{pingLine("p1"), []string{"pong p1"}},
	}
	for _, st := range steps {
		w.send(st.send)
		for _, want := range st.want {
			m := w.next()
			got := m.Type + " " + m.ReqID
			if m.Code != "" {
				got += " " + m.Code
			}
			if got != want {
				t.Fatalf("after %.40s: %s, want %s", st.send, got, want)
			}
		}
	}
}

// TestWebSocketForeignOrigin: a foreign Origin is refused with 403 before the
// upgrade, as on every HTTP route; no session is created.
func TestWebSocketForeignOrigin(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	_, resp, err := dialWS(t, base, http.Header{"Origin": {"https://evil.example"}})
	if err == nil {
		t.Fatal("the upgrade succeeded from a foreign origin")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("response %+v, want 403", resp)
	}
	if got := h.LiveSessions(); got != 0 {
		t.Fatalf("%d live sessions", got)
	}
	// Loopback origins pass.
	w := mustDialWS(t, base, http.Header{"Origin": {"http://localhost:3000"}})
	w.handshake()
}

// TestWebSocketReattach: a dropped connection re-attaches by session id (a
// header, or the first frame) within the grace period and receives what it
// missed from the replay buffer: a reply that was written to the dead
// connection but never read, and one produced while nobody was attached.
func TestWebSocketReattach(t *testing.T) {
	for _, how := range []string{"header", "first frame"} {
		t.Run(how, func(t *testing.T) {
			h, plug := newPlugHost(t, nil)
			base := newServer(t, h, httpapi.Options{WebSocket: httpapi.WebSocketOptions{Grace: 10 * time.Second}})
			w := mustDialWS(t, base, nil)
			sid := w.handshake()
			w.send(`{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"gate":"g1"}`)
			waitGate(t, plug.Started, "g1")
			w.send(pingLine("p1")) // answered, but this client never reads the pong
			waitAnswered(t, h, "ping", 1)
			seen := w.seen
			w.c.CloseNow() // a drop, not a close handshake
			plug.Release("g1")

			var w2 *wsClient
			last := strconv.Itoa(seen)
			if how == "header" {
				w2 = mustDialWS(t, base, http.Header{"X-Session-Id": {sid}, "Last-Event-ID": {last}})
			} else {
				w2 = mustDialWS(t, base, nil)
				w2.send(`{"session_id":"` + sid + `","last_seen":` + last + `}`)
			}
			got := map[string]string{}
			for range 2 {
				m := w2.next()
				got[m.ReqID] = m.Type
			}
			if got["p1"] != "pong" || got["w1"] != "echo/wait/resp" {
				t.Fatalf("replayed %v, want the pong to p1 and the reply to w1", got)
			}
			// The session goes on over the new connection.
			w2.send(sayLine("s1", "again"))
			if m := w2.next(); m.Type != "echo/say/resp" || m.ReqID != "s1" {
				t.Fatalf("after the re-attach: %+v", m)
			}
			if _, ok := h.Session(sid); !ok {
				t.Fatal("session gone")
			}
		})
	}
}

// TestWebSocketGraceEnds: a session nobody re-attaches to ends when the grace
// period is over; a re-attach then finds nothing (404 before the upgrade).
func TestWebSocketGraceEnds(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{WebSocket: httpapi.WebSocketOptions{Grace: 200 * time.Millisecond}})
	w := mustDialWS(t, base, nil)
	sid := w.handshake()
	w.c.CloseNow()
	if !waitEnded(h, sid, 5*time.Second) {
		t.Fatal("the session outlived its grace period")
	}
	_, resp, err := dialWS(t, base, http.Header{"X-Session-Id": {sid}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("re-attach after the grace period: %v %+v", err, resp)
	}
}

// TestWebSocketNeverReadsIsClosed: a client that sends but never reads is
// closed once what the host holds for it passes the buffer cap, and its
// session ends; the host does not hold more than the cap for it.
func TestWebSocketNeverReadsIsClosed(t *testing.T) {
	h := newHost(t, nil)
	const capBytes = 64 << 10
	base := newServer(t, h, httpapi.Options{BufferBytes: capBytes})
	w := mustDialWS(t, base, nil)
	sid := w.handshake()
	text := strings.Repeat("y", 60<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		// Far more than loopback TCP buffers hold: the ring must overflow.
		for i := range 2000 {
			if err := w.c.Write(ctx, websocket.MessageText, []byte(sayLine("s"+strconv.Itoa(i), text))); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	if !waitEnded(h, sid, 20*time.Second) {
		t.Fatal("a client that never reads was not closed")
	}
	// Its connection is closed: reading through what was written ends in an
	// error (the close frame with the reason, when the socket had room for it).
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	for {
		_, _, err := w.c.Read(rctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) && (ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "reader too slow")) {
				t.Fatalf("closed with %v, want a policy violation naming the slow reader", ce)
			}
			if rctx.Err() != nil {
				t.Fatal("the connection stayed open")
			}
			break
		}
	}
	cancel()
	<-sent
}

// TestWebSocketSlowRequestKeepsReading: a request runs on the connection's
// reading goroutine when nothing else is in flight (ws.go, receiveHere);
// one that takes long hands the reading on, so a ping and a cancel sent
// meanwhile are read and answered, and max_parallel still holds.
func TestWebSocketSlowRequestKeepsReading(t *testing.T) {
	h, plug := newPlugHost(t, func(c *server.Config) { c.Server.MaxParallel = 1 })
	base := newServer(t, h, httpapi.Options{})
	w := mustDialWS(t, base, nil)
	w.handshake()
	w.send(`{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"gate":"g1"}`)
	waitGate(t, plug.Started, "g1")
	w.send(pingLine("p1"))
	if m := w.next(); m.Type != "pong" || m.ReqID != "p1" {
		t.Fatalf("while w1 runs: %+v, want the pong", m)
	}
	w.send(`{"type":"echo/wait/req","id":"w2","proto":"1.0","ts":1,"gate":"g2"}`)
	// Once the pong to a ping sent after w2 is back, w2 was read and
	// admitted: queued, not started, with w1 running and max_parallel 1.
	w.send(pingLine("p2"))
	if m := w.next(); m.Type != "pong" || m.ReqID != "p2" {
		t.Fatalf("after w2: %+v, want the pong", m)
	}
	select {
	case g := <-plug.Started:
		t.Fatalf("%s started while w1 runs with max_parallel 1", g)
	default:
	}
	w.send(`{"type":"cancel","id":"c1","proto":"1.0","ts":1,"req_id":"w1"}`)
	if m := w.next(); m.Type != "error" || m.ReqID != "w1" || m.Code != "cancelled" {
		t.Fatalf("after the cancel: %+v", m)
	}
	waitGate(t, plug.Started, "g2")
	plug.Release("g2")
	if m := w.next(); m.Type != "echo/wait/resp" || m.ReqID != "w2" {
		t.Fatalf("w2: %+v", m)
	}
	if n := plug.MaxRunning(); n != 1 {
		t.Fatalf("%d echo/wait ran at once with max_parallel 1", n)
	}
	// Back to quick requests, on whichever goroutine reads now.
	for i := range 20 {
		id := "s" + strconv.Itoa(i)
		w.send(sayLine(id, "x"))
		if m := w.next(); m.Type != "echo/say/resp" || m.ReqID != id {
			t.Fatalf("%s: %+v", id, m)
		}
	}
}

// TestWebSocketSlowRequestsOnManyConnections: the one watchdog of a
// handler's WebSocket connections (wswatch.go) hands off each connection
// whose request runs long, however many do at once, while quick requests
// on another connection come and go, and it goes on doing so after the
// long runs ended.
func TestWebSocketSlowRequestsOnManyConnections(t *testing.T) {
	h, plug := newPlugHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	slow := []*wsClient{mustDialWS(t, base, nil), mustDialWS(t, base, nil)}
	quick := mustDialWS(t, base, nil)
	for _, w := range append(slow, quick) {
		w.handshake()
	}
	quickTrips := func(prefix string) {
		for i := range 20 {
			id := prefix + strconv.Itoa(i)
			quick.send(sayLine(id, "x"))
			if m := quick.next(); m.Type != "echo/say/resp" || m.ReqID != id {
				t.Fatalf("%s: %+v", id, m)
			}
		}
	}
	// Every request has an id of its own (spec §2.1: unique correlation
	// identifiers): an id sent again as soon as its reply is read may
	// find the request still being finished on the host, and be refused.
	for round := range 2 {
		for i, w := range slow {
			gate := fmt.Sprintf("g%d-%d", round, i)
			w.send(`{"type":"echo/wait/req","id":"w` + gate + `","proto":"1.0","ts":1,"gate":"` + gate + `"}`)
			waitGate(t, plug.Started, gate)
			quickTrips(fmt.Sprintf("q%d-%d-", round, i))
		}
		for i, w := range slow {
			p := fmt.Sprintf("p%d", round)
			w.send(pingLine(p))
			if m := w.next(); m.Type != "pong" || m.ReqID != p {
				t.Fatalf("round %d, connection %d, while its request runs: %+v, want the pong", round, i, m)
			}
		}
		for i, w := range slow {
			gate := fmt.Sprintf("g%d-%d", round, i)
			plug.Release(gate)
			if m := w.next(); m.Type != "echo/wait/resp" || m.ReqID != "w"+gate {
				t.Fatalf("round %d, connection %d: %+v", round, i, m)
			}
		}
		quickTrips(fmt.Sprintf("after%d-", round))
	}
}

// waitAnswered waits until the host has answered n requests of type typ:
// aep_messages_total counts each once its reply is in the session's
// sink, so the reply is then in the replay buffer whether or not it was
// read. It looks every millisecond; the bound is for a hung test only.
func waitAnswered(tb testing.TB, h *server.Host, typ string, n float64) {
	tb.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for metric(tb, h, "aep_messages_total", "type", typ) < n {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("the host did not answer %v %s", n, typ)
		}
	}
}

// waitEnded waits for the session with transport id sid to end, at most
// within; it reports whether it did.
func waitEnded(h *server.Host, sid string, within time.Duration) bool {
	s, ok := h.Session(sid)
	if !ok {
		return true
	}
	select {
	case <-s.Done():
		return true
	case <-time.After(within):
		return false
	}
}
