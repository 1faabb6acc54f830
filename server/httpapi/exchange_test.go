package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// newPlugHost is newHost with the echo plugin handed back, its Started and
// CtxDone channels set, so a test can see a request run and be cancelled.
func newPlugHost(tb testing.TB, edit func(*server.Config)) (*server.Host, *echoplug.Plugin) {
	tb.Helper()
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	if edit != nil {
		edit(&cfg)
	}
	plug := &echoplug.Plugin{Name: "e1", Started: make(chan string, 64), CtxDone: make(chan string, 64)}
	aud := server.NewFileAuditor(filepath.Join(tb.TempDir(), "audit.jsonl"), 10, 5, nil)
	h, err := server.New(context.Background(), cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithAuditor(aud),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: plug}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close(context.Background()) })
	return h, plug
}

// exchangeResp is one single-exchange answer: the status, the content type
// and the protocol messages of the body (one for JSON, one per event for SSE).
type exchangeResp struct {
	status int
	ctype  string
	lines  []string
}

// exchange posts line to /send with the given Accept header and reads the
// whole answer, checking every message against schemas/.
func exchange(tb testing.TB, ctx context.Context, base, sid, accept, line string) exchangeResp {
	tb.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/send", strings.NewReader(line))
	req.Header.Set("X-Session-Id", sid)
	req.Header.Set("Content-Type", "text/plain")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out := exchangeResp{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type")}
	switch {
	case resp.StatusCode != http.StatusOK:
		_, _ = io.Copy(io.Discard, resp.Body)
	case strings.HasPrefix(out.ctype, "application/json"):
		b, _ := io.ReadAll(resp.Body)
		out.lines = append(out.lines, strings.TrimSuffix(string(b), "\n"))
	case strings.HasPrefix(out.ctype, "text/event-stream"):
		r := bufio.NewReader(resp.Body)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				break
			}
			if d, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), "data: "); ok {
				out.lines = append(out.lines, d)
			} else if strings.HasPrefix(l, "id:") {
				tb.Errorf("a single-exchange event has an id: %q", l)
			}
		}
	default:
		tb.Fatalf("content type %q", out.ctype)
	}
	c := checker(tb)
	for _, l := range out.lines {
		if err := c.CheckHostLine([]byte(l)); err != nil {
			tb.Errorf("host line does not conform: %v\n%s", err, l)
		}
	}
	return out
}

// summary reduces a message to "type req_id [code]" for comparison.
func summary(tb testing.TB, line string) string {
	tb.Helper()
	var m struct {
		Type  string `json:"type"`
		ReqID string `json:"req_id"`
		Code  string `json:"code"`
		Seq   *int   `json:"seq"`
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		tb.Fatalf("%q: %v", line, err)
	}
	s := m.Type + " " + m.ReqID
	if m.Code != "" {
		s += " " + m.Code
	}
	return s
}

// TestSingleExchange covers each single-exchange case over real loopback
// HTTP: both Accept forms, events, errors and notifications. After the
// table, a ping sent in the 202 mode must be the first message on /stream:
// nothing answered in a POST's own response is also delivered there.
func TestSingleExchange(t *testing.T) {
	h, _ := newPlugHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid := createSession(t, base)
	stream := openStream(t, base, sid, "")
	const (
		jsonOnly = "application/json"
		sseOnly  = "text/event-stream"
		both     = "application/json, text/event-stream" // as MCP clients send
	)
	cases := []struct {
		name, accept, line string
		status             int
		want               []string // summaries of the answer's messages
	}{
		{"before handshake", jsonOnly, sayLine("s0", "hi"), 200, []string{"error s0 unauthorized"}},
		{"handshake", jsonOnly, handshakeLine("h1"), 200, []string{"handshake/resp h1"}},
		{"reply as body", jsonOnly, sayLine("s1", "hi"), 200, []string{"echo/say/resp s1"}},
		{"events dropped in JSON", jsonOnly, `{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"events":3}`, 200,
			[]string{"echo/wait/resp w1"}},
		{"events then reply as SSE", sseOnly, `{"type":"echo/wait/req","id":"w2","proto":"1.0","ts":1,"events":3}`, 200,
			[]string{"echo/event w2", "echo/event w2", "echo/event w2", "echo/wait/resp w2"}},
		{"both types choose SSE", both, `{"type":"echo/wait/req","id":"w3","proto":"1.0","ts":1,"events":1}`, 200,
			[]string{"echo/event w3", "echo/wait/resp w3"}},
		{"no event reply as SSE", sseOnly, sayLine("s2", "hi"), 200, []string{"echo/say/resp s2"}},
		{"unknown type", jsonOnly, `{"type":"nope/req","id":"u1","proto":"1.0","ts":1}`, 200, []string{"error u1 parse_error"}},
		{"schema violation", jsonOnly, `{"type":"echo/say/req","id":"v1","proto":"1.0","ts":1}`, 200,
			[]string{"error v1 schema_violation"}},
		{"not JSON", jsonOnly, `not json`, 200, []string{"error  parse_error"}},
		{"not JSON as SSE", both, `{"type":`, 200, []string{"error  parse_error"}},
		{"no id", jsonOnly, `{"type":"ping","proto":"1.0","ts":1}`, 200, []string{"error  schema_violation"}},
		{"malformed with a readable id", jsonOnly, `{"type":"ping","id":"m1","proto":"1.0","ts":1} {}`, 200, []string{"error m1 parse_error"}},
		{"malformed with a readable id as SSE", both, `{"type":"ping","id":"m2","proto":"1.0","proto":"1.0","ts":1}`, 200,
			[]string{"error m2 parse_error"}},
		{"a malformed cancel is answered", jsonOnly, `{"type":"cancel","id":"m3","proto":"1.0","ts":1,"req_id":"none"} x`, 200,
			[]string{"error m3 parse_error"}},
		{"handler error", jsonOnly, `{"type":"echo/wait/req","id":"p1","proto":"1.0","ts":1,"panic":true}`, 200,
			[]string{"error p1 runtime_error"}},
		{"cancel is a notification", jsonOnly, `{"type":"cancel","id":"c1","proto":"1.0","ts":1,"req_id":"none"}`, 202, nil},
		{"cancel as SSE", both, `{"type":"cancel","id":"c2","proto":"1.0","ts":1,"req_id":"none"}`, 202, nil},
		{"any type keeps 202", "*/*", pingLine("q1"), 202, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := exchange(t, context.Background(), base, sid, tc.accept, tc.line)
			if got.status != tc.status {
				t.Fatalf("status %d, want %d", got.status, tc.status)
			}
			if len(got.lines) != len(tc.want) {
				t.Fatalf("answer %q, want %q", got.lines, tc.want)
			}
			for i, l := range got.lines {
				if s := summary(t, l); s != tc.want[i] {
					t.Errorf("message %d: %s, want %s\n%s", i, s, tc.want[i], l)
				}
			}
			for _, l := range got.lines {
				// An answer to a line whose id was read is the session's
				// reply, with its point, as over every other transport;
				// one to a line without a readable id answers no request.
				var m struct {
					Type  string  `json:"type"`
					ReqID string  `json:"req_id"`
					Point *uint64 `json:"point"`
				}
				_ = json.Unmarshal([]byte(l), &m)
				if !strings.HasSuffix(m.Type, "/event") && (m.ReqID != "") != (m.Point != nil) {
					t.Errorf("req_id %q with point %v: %s", m.ReqID, m.Point, l)
				}
			}
			if tc.status == 200 && tc.accept == jsonOnly && got.ctype != "application/json" {
				t.Errorf("content type %q", got.ctype)
			}
		})
	}
	// Sent in the 202 mode by the last case: the ping's pong. It must be the
	// first message on the stream.
	if m := decode(t, stream.next(t, 5*time.Second)); m.Type != "pong" || m.ReqID != "q1" {
		t.Fatalf("first message on /stream: %+v, want the pong to q1", m)
	}
	send(t, base, sid, pingLine("q2"))
	if m := decode(t, stream.next(t, 5*time.Second)); m.Type != "pong" || m.ReqID != "q2" {
		t.Fatalf("next message on /stream: %+v", m)
	}
}

// TestSingleExchangeDisconnectCancels: a client that goes away before the
// reply cancels its request as `cancel` does; the handler's context ends,
// and the `cancelled` answer goes nowhere (not to /stream).
func TestSingleExchangeDisconnectCancels(t *testing.T) {
	for _, accept := range []string{"application/json", "text/event-stream"} {
		t.Run(accept, func(t *testing.T) {
			h, plug := newPlugHost(t, nil)
			base := newServer(t, h, httpapi.Options{})
			sid := createSession(t, base)
			stream := openStream(t, base, sid, "")
			if got := exchange(t, context.Background(), base, sid, "application/json", handshakeLine("h1")); len(got.lines) != 1 {
				t.Fatalf("handshake: %+v", got)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/send",
					strings.NewReader(`{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"gate":"g1"}`))
				req.Header.Set("X-Session-Id", sid)
				req.Header.Set("Accept", accept)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body) // SSE: the head came first
					resp.Body.Close()
				}
			}()
			waitGate(t, plug.Started, "g1")
			cancel()
			waitGate(t, plug.CtxDone, "g1")
			<-done
			// The id is free again once the cancelled reply is sent (just
			// after the handler returns), and the stream saw nothing of w1.
			var got exchangeResp
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				got = exchange(t, context.Background(), base, sid, "application/json",
					`{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1}`)
				if len(got.lines) != 1 || !strings.Contains(got.lines[0], "already in flight") || time.Now().After(deadline) {
					break
				}
			}
			if len(got.lines) != 1 || summary(t, got.lines[0]) != "echo/wait/resp w1" {
				t.Fatalf("after the cancel: %+v", got)
			}
			send(t, base, sid, pingLine("q1"))
			if m := decode(t, stream.next(t, 5*time.Second)); m.Type != "pong" {
				t.Fatalf("first message on /stream: %+v, want the pong", m)
			}
		})
	}
}

// TestSingleExchangeDuplicateID: a second exchange for an id that waits is
// answered at once, and the first still gets its own reply.
func TestSingleExchangeDuplicateID(t *testing.T) {
	h, plug := newPlugHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	sid := createSession(t, base)
	exchange(t, context.Background(), base, sid, "application/json", handshakeLine("h1"))
	first := make(chan exchangeResp, 1)
	go func() {
		first <- exchange(t, context.Background(), base, sid, "application/json", `{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"gate":"g1"}`)
	}()
	waitGate(t, plug.Started, "g1")
	got := exchange(t, context.Background(), base, sid, "application/json", `{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1}`)
	if len(got.lines) != 1 || summary(t, got.lines[0]) != "error w1 schema_violation" {
		t.Fatalf("duplicate: %+v", got)
	}
	plug.Release("g1")
	if f := <-first; len(f.lines) != 1 || summary(t, f.lines[0]) != "echo/wait/resp w1" {
		t.Fatalf("first: %+v", f)
	}
}

// waitGate waits for the echo plugin to report gate. The bound is for a
// hung test only: a loaded machine running the race detector can take
// seconds to start a request.
func waitGate(tb testing.TB, ch chan string, gate string) {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case g := <-ch:
			if g == gate {
				return
			}
		case <-timeout:
			tb.Fatalf("gate %s not reached", gate)
		}
	}
}
