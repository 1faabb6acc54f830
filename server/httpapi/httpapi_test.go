package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// TestStatusCodes checks the transport-level codes of docs/DECISIONS.md, Transports:
// 400 missing header, 403 foreign Origin/Host, 404 unknown session, 413 body
// too large (before the session lookup), each with our JSON error body.
func TestStatusCodes(t *testing.T) {
	h := newHost(t, func(c *server.Config) {
		c.Server.Limits.MaxMessageBytes = 1024
		c.Server.AllowedOrigins = []string{"https://app.example", "aep.internal"}
	})
	base := newServer(t, h, httpapi.Options{})
	sid := createSession(t, base)
	big := strings.Repeat("x", 2048)
	hostIs := func(host string) reqOpt { return func(r *http.Request) { r.Host = host } }
	chunked := func(r *http.Request) { r.ContentLength = -1 } // no Content-Length: the limit must hold while reading

	tests := []struct {
		name   string
		method string
		path   string
		body   string
		opts   []reqOpt
		status int
		code   string
	}{
		{"send without session header", "POST", "/send", pingLine("1"), nil, 400, "bad_request"},
		{"stream without session header", "GET", "/stream", "", nil, 400, "bad_request"},
		{"send to unknown session", "POST", "/send", pingLine("1"), []reqOpt{header("X-Session-Id", "s-nope")}, 404, "not_found"},
		{"stream of unknown session", "GET", "/stream", "", []reqOpt{header("X-Session-Id", "s-nope")}, 404, "not_found"},
		{"bad Last-Event-ID", "GET", "/stream", "", []reqOpt{header("X-Session-Id", sid), header("Last-Event-ID", "abc")}, 400, "bad_request"},
		{"foreign origin on session", "POST", "/session", "", []reqOpt{header("Origin", "https://evil.example")}, 403, "forbidden"},
		{"foreign origin on send", "POST", "/send", pingLine("1"), []reqOpt{header("X-Session-Id", sid), header("Origin", "http://evil.example:8765")}, 403, "forbidden"},
		{"opaque origin", "POST", "/session", "", []reqOpt{header("Origin", "null")}, 403, "forbidden"},
		{"foreign host (DNS rebinding)", "GET", "/healthz", "", []reqOpt{hostIs("evil.example:8765")}, 403, "forbidden"},
		{"too large, unknown session", "POST", "/send", big, []reqOpt{header("X-Session-Id", "s-nope")}, 413, "too_large"},
		{"too large, no session header", "POST", "/send", big, nil, 413, "too_large"},
		{"too large, chunked", "POST", "/send", big, []reqOpt{header("X-Session-Id", "s-nope"), chunked}, 413, "too_large"},
		{"loopback origin", "POST", "/session", "", []reqOpt{header("Origin", "http://localhost:3000")}, 200, ""},
		{"configured origin", "POST", "/session", "", []reqOpt{header("Origin", "https://app.example")}, 200, ""},
		{"configured host", "GET", "/healthz", "", []reqOpt{hostIs("aep.internal:8765")}, 200, ""},
		{"healthz", "GET", "/healthz", "", nil, 200, ""},
		{"send accepted", "POST", "/send", pingLine("1"), []reqOpt{header("X-Session-Id", sid)}, 202, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
				if tc.name == "too large, chunked" {
					body = io.MultiReader(strings.NewReader(tc.body)) // hides the length from net/http
				}
			}
			status, b := do(t, tc.method, base+tc.path, body, tc.opts...)
			if status != tc.status {
				t.Fatalf("status %d, want %d (body %s)", status, tc.status, b)
			}
			if tc.code == "" {
				return
			}
			var e struct {
				Ok      bool   `json:"ok"`
				Error   string `json:"error"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("error body %q: %v", b, err)
			}
			if e.Ok || e.Error != tc.code || e.Message == "" {
				t.Fatalf("error body %+v, want code %s", e, tc.code)
			}
		})
	}
}

// TestMalformedBodiesAnsweredOnStream checks that the HTTP layer accepts any
// body and the kernel answers malformed ones on the stream, after which the
// session goes on.
func TestMalformedBodiesAnsweredOnStream(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid, s := handshake(t, base)

	tests := []struct {
		name, body, code, reqID string
	}{
		{"not JSON", "this is not json", "parse_error", ""},
		{"empty body", "", "parse_error", ""},
		{"unknown type", `{"type":"nope/x/req","id":"u1","proto":"1.0","ts":1}`, "parse_error", "u1"},
		{"trailing data", `{"type":"ping","id":"t1","proto":"1.0","ts":1} {}`, "parse_error", "t1"},
		{"host-only type", `{"type":"pong","id":"p1","proto":"1.0","ts":1,"uptime_seconds":1}`, "parse_error", "p1"},
		{"schema violation", `{"type":"echo/say/req","id":"v1","proto":"1.0","ts":1,"text":5}`, "schema_violation", "v1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, b := do(t, http.MethodPost, base+"/send", strings.NewReader(tc.body), header("X-Session-Id", sid))
			if st != http.StatusAccepted {
				t.Fatalf("status %d %s", st, b)
			}
			m := decode(t, s.next(t, 5*time.Second))
			if m.Type != "error" || m.Code != tc.code || m.ReqID != tc.reqID {
				t.Fatalf("got %+v, want error %s for %q", m, tc.code, tc.reqID)
			}
		})
	}
	send(t, base, sid, pingLine("after"))
	if m := decode(t, s.next(t, 5*time.Second)); m.Type != "pong" || m.ReqID != "after" {
		t.Fatalf("after malformed bodies: %+v", m)
	}
}

// TestReconnectReplaysEachMissedMessageOnce drops the stream part way, sends
// more while no stream is open, and reconnects with Last-Event-ID: every reply
// arrives exactly once, with ids counting up by one.
func TestReconnectReplaysEachMissedMessageOnce(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid, s1 := handshake(t, base)

	const total = 40
	seen := map[string]int{}
	var lastID string
	prev := 1 // the handshake reply was event 1
	take := func(s *sse) {
		ev := s.next(t, 5*time.Second)
		n, err := strconv.Atoi(ev.ID)
		if err != nil || n != prev+1 {
			t.Fatalf("event id %q after %d", ev.ID, prev)
		}
		prev, lastID = n, ev.ID
		seen[decode(t, ev).ReqID]++
	}
	for i := range 10 {
		send(t, base, sid, pingLine(fmt.Sprint("p", i)))
	}
	for range 10 {
		take(s1)
	}
	s1.close()
	for i := 10; i < total; i++ { // sent while no stream is open
		send(t, base, sid, pingLine(fmt.Sprint("p", i)))
	}
	s2 := openStream(t, base, sid, lastID)
	for range total - 10 {
		take(s2)
	}
	for i := range total {
		if n := seen[fmt.Sprint("p", i)]; n != 1 {
			t.Errorf("reply to p%d seen %d times", i, n)
		}
	}
	// Nothing more may follow: the replay held no duplicates.
	send(t, base, sid, pingLine("last"))
	take(s2)
	if seen["last"] != 1 || len(seen) != total+1 {
		t.Fatalf("after replay: %v", seen)
	}
}

// TestStreamWithoutLastEventIDResumesAfterDelivered checks that a new stream
// without Last-Event-ID neither repeats what an earlier stream delivered nor
// loses replies sent before any stream was open.
func TestStreamWithoutLastEventIDResumesAfterDelivered(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid := createSession(t, base)
	send(t, base, sid, handshakeLine("h1")) // before any stream exists
	s1 := openStream(t, base, sid, "")
	if m := decode(t, s1.next(t, 5*time.Second)); m.Type != "handshake/resp" || !m.Ok {
		t.Fatalf("got %+v", m)
	}
	send(t, base, sid, pingLine("a"))
	if m := decode(t, s1.next(t, 5*time.Second)); m.ReqID != "a" {
		t.Fatalf("got %+v", m)
	}
	// The second stream opens while the first still runs (a client that
	// lost its connection without noticing): it takes over where the first
	// one stopped. (A message written to a connection that died unnoticed is
	// lost without Last-Event-ID; that is what the header is for.)
	s2 := openStream(t, base, sid, "")
	send(t, base, sid, pingLine("b"))
	if m := decode(t, s2.next(t, 5*time.Second)); m.ReqID != "b" {
		t.Fatalf("second stream began with %+v, want the reply to b", m)
	}
}

// TestSessionsAreIsolated runs two sessions at once: neither stream carries
// a message of the other.
func TestSessionsAreIsolated(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	const n = 30
	var wg sync.WaitGroup
	for _, name := range []string{"A", "B"} {
		sid, s := handshake(t, base)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				send(t, base, sid, sayLine(fmt.Sprint(name, i), name))
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				ev := <-s.events
				for ev.Comment != "" {
					ev = <-s.events
				}
				var m message
				if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				if m.Type != "echo/say/resp" || !strings.HasPrefix(m.ReqID, name) || m.Text != name {
					t.Errorf("session %s (%s) got %+v", name, sid, m)
				}
			}
		}()
	}
	wg.Wait()
}

// TestStalledReaderDoesNotSlowOthers opens a stream that is never read, over
// a raw socket, floods its session far past the socket buffers, and meanwhile
// times another session's round trips against a generous bound. Afterwards
// the stalled stream reports that its oldest messages were dropped.
func TestStalledReaderDoesNotSlowOthers(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{BufferMessages: 64, BufferBytes: 256 << 10})
	stalledID, _ := handshake(t, base)
	// Replace the stream with one over a raw socket nobody reads.
	addr := strings.TrimPrefix(base, "http://")
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	fmt.Fprintf(raw, "GET /stream HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\nLast-Event-ID: 1\r\n\r\n", addr, stalledID)

	otherID, other := handshake(t, base)
	text := strings.Repeat("z", 32<<10)
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		for i := range 800 { // ~26 MB of replies for a reader that reads nothing
			send(t, base, stalledID, sayLine(fmt.Sprint("f", i), text))
		}
	}()
	for i := range 50 {
		start := time.Now()
		id := fmt.Sprint("o", i)
		send(t, base, otherID, pingLine(id))
		m := decode(t, other.next(t, 10*time.Second))
		if m.ReqID != id {
			t.Fatalf("other session got %+v", m)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("round trip %d of the other session took %s", i, d)
		}
	}
	select {
	case <-floodDone:
	case <-time.After(60 * time.Second):
		t.Fatal("sending to the stalled session blocked")
	}
	// Now read the stalled stream: it must say the reader fell behind.
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	var got []byte
	buf := make([]byte, 64<<10)
	for !bytes.Contains(got, []byte(": dropped ")) {
		n, err := raw.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Logf("%s", buf[:n])
			t.Fatalf("stalled stream never noted dropped messages: %v (last bytes %q)", err, got[max(0, len(got)-300):])
		}
		if len(got) > 1<<20 {
			got = got[len(got)-4096:]
		}
	}
}

// TestHeartbeat checks that an idle stream carries heartbeat comments.
func TestHeartbeat(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{Heartbeat: 20 * time.Millisecond})
	s := openStream(t, base, createSession(t, base), "")
	deadline := time.After(5 * time.Second)
	for beats := 0; beats < 2; {
		select {
		case ev := <-s.events:
			if ev.Comment == "heartbeat" {
				beats++
			}
		case <-deadline:
			t.Fatal("no heartbeats")
		}
	}
}

// TestNewerStreamTakesOver checks that a second stream of a session ends
// the first, so two readers never split one session's messages.
func TestNewerStreamTakesOver(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid, s1 := handshake(t, base)
	s2 := openStream(t, base, sid, "")
	for {
		ev, ok := <-s1.events
		if !ok {
			break
		}
		if ev.Comment == "" {
			t.Fatalf("old stream got %+v", ev)
		}
	}
	send(t, base, sid, pingLine("x"))
	if m := decode(t, s2.next(t, 5*time.Second)); m.ReqID != "x" {
		t.Fatalf("got %+v", m)
	}
}

// TestSessionEndEndsStream checks that shutdown ends the stream after its
// last messages and that the session is then unknown.
func TestSessionEndEndsStream(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid, s := handshake(t, base)
	send(t, base, sid, `{"type":"shutdown","id":"sd","proto":"1.0","ts":1,"timeout":1}`)
	deadline := time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case _, ok := <-s.events:
			done = !ok
		case <-deadline:
			t.Fatal("stream did not end")
		}
	}
	if st, b := do(t, http.MethodPost, base+"/send", strings.NewReader(pingLine("1")), header("X-Session-Id", sid)); st != 404 {
		t.Fatalf("send after shutdown: %d %s", st, b)
	}
}

// TestGoClientOverHTTP drives the Go client over HTTP: handshake, ping and a
// request of the echo namespace.
func TestGoClientOverHTTP(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.DialHTTP(ctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(conn, msg.Registry().Union(testproto.Registry())))
	defer c.Close()
	resp, err := c.Handshake(ctx, "agent", token, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if resp.SessionID == nil || *resp.SessionID != conn.SessionID() {
		t.Fatalf("handshake session %v, POST /session gave %s", resp.SessionID, conn.SessionID())
	}
	if _, err := c.Ping(ctx, &msg.Ping{}); err != nil {
		t.Fatal(err)
	}
	r, err := testproto.Client{Requester: c}.EchoSay(ctx, &testproto.EchoSayReq{Text: "hi", Mode: "upper"})
	if err != nil || r.Text != "HI" {
		t.Fatalf("echo/say: %+v %v", r, err)
	}
	// A wrong token is refused with unauthorized, over the same transport.
	conn2, err := client.DialHTTP(ctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2 := client.New(client.Lines(conn2, nil))
	defer c2.Close()
	if _, err := c2.Handshake(ctx, "agent", "wrong"); err == nil {
		t.Fatal("handshake with a wrong token succeeded")
	}
}

// TestServeEndsStreamsOnCancel checks that Serve returns once its context
// ends even while a stream is open.
func TestServeEndsStreamsOnCancel(t *testing.T) {
	h := newHost(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- httpapi.ServeListener(ctx, h, ln, httpapi.Options{}) }()
	base := "http://" + ln.Addr().String()
	s := openStream(t, base, createSession(t, base), "")
	_ = s
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// TestGoClientReconnects cuts every connection of the Go client's HTTPConn
// while replies are on their way; the conn reopens its stream with
// Last-Event-ID and reads each reply exactly once, in order.
func TestGoClientReconnects(t *testing.T) {
	h := newHost(t, nil)
	ts := httptest.NewServer(httpapi.Handler(h, httpapi.Options{}))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := client.DialHTTP(ctx, ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rec := conformance.NewRecorderFor(t, checker(t))
	read := func() message {
		line, err := conn.ReadLine(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec.Host(line)
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if err := conn.WriteLine(ctx, []byte(handshakeLine("h"))); err != nil {
		t.Fatal(err)
	}
	if m := read(); m.Type != "handshake/resp" || !m.Ok || m.SessionID != conn.SessionID() {
		t.Fatalf("handshake: %+v", m)
	}
	for round := range 3 {
		for i := range 5 {
			if err := conn.WriteLine(ctx, []byte(pingLine(fmt.Sprint(round, "-", i)))); err != nil {
				t.Fatal(err)
			}
		}
		if round > 0 {
			ts.CloseClientConnections() // replies may be in flight or already read
		}
		for i := range 5 {
			if m := read(); m.Type != "pong" || m.ReqID != fmt.Sprint(round, "-", i) {
				t.Fatalf("round %d: got %+v, want the pong of %d-%d", round, m, round, i)
			}
		}
	}
}
