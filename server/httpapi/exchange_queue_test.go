package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// TestSingleExchangeQueuedGoneNeverRuns: with max_parallel 1, a single
// exchange queued behind a running request whose client goes away is
// cancelled as `cancel` cancels it: once the running request ends, the
// queued one is taken off the queue without its handler ever starting,
// and nothing of it reaches /stream.
//
// Each step waits for something the host shows, never for time: A's
// handler has started (the plugin says so); B is admitted and waits (the
// host's aep_queue_depth is 2 while only A's handler ran); the host has
// seen B's client go (B's HTTP handler returned, which it does only after
// cancelling B); B has left the queue (aep_queue_depth 0, and B counted
// as cancelled by the worker that found it so).
//
// A is released only once the host has seen B's client go: before that,
// B's client is still there as far as the host can know, and B's starting
// would be right. The client's own end of the request (Do returning its
// error) comes before the host reads the connection's close: releasing A
// then started B in a third to half of the runs tried.
func TestSingleExchangeQueuedGoneNeverRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		// aAccept is A's Accept header: a JSON exchange runs on its own
		// HTTP goroutine and hands its slot to a new worker when it ends
		// (hereDone); an SSE exchange is queued and runs on a worker,
		// which takes B from the queue next.
		aAccept string
		// aClientLeaves ends A by its own client going away (its handler
		// sees its context end) instead of by releasing its gate.
		aClientLeaves bool
		// bDrops closes B's TCP connection itself instead of cancelling
		// the request's context in net/http's client.
		bDrops bool
	}{
		{name: "A released", aAccept: "application/json"},
		{name: "A's client leaves too", aAccept: "application/json", aClientLeaves: true},
		{name: "A on a worker", aAccept: "text/event-stream"},
		{name: "B's connection closed", aAccept: "application/json", bDrops: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, plug := newPlugHost(t, func(c *server.Config) { c.Server.MaxParallel = 1 })
			// The transport behind a handler that tells which tagged
			// request's handler returned: a single exchange's returns only
			// once its request was answered or, its client gone, cancelled.
			returned := make(chan string, 16)
			inner := httpapi.Handler(h, httpapi.Options{})
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.ServeHTTP(w, r)
				if tag := r.Header.Get("X-Test-Tag"); tag != "" {
					returned <- tag
				}
			}))
			t.Cleanup(ts.Close)
			base := ts.URL
			sid := createSession(t, base)
			stream := openStream(t, base, sid, "")

			hs := exchange(t, context.Background(), base, sid, "application/json", handshakeLine("h1"))
			var hr struct {
				Ok          bool `json:"ok"`
				MaxParallel int  `json:"max_parallel"`
			}
			if len(hs.lines) != 1 || json.Unmarshal([]byte(hs.lines[0]), &hr) != nil || !hr.Ok {
				t.Fatalf("handshake: %+v", hs)
			}
			if hr.MaxParallel != 1 {
				t.Fatalf("the session says max_parallel %d, want 1", hr.MaxParallel)
			}

			// A: held on its gate.
			actx, aleave := context.WithCancel(context.Background())
			defer aleave()
			aDone := make(chan posted, 1)
			go func() { aDone <- post(actx, base, sid, tc.aAccept, "A", waitLine("a1", "gA")) }()
			waitGate(t, plug.Started, "gA")

			// B: admitted behind A, and waiting.
			bctx, bleave := context.WithCancel(context.Background())
			defer bleave()
			bDone := make(chan posted, 1)
			var bconn net.Conn
			if tc.bDrops {
				bconn = postRaw(t, base, sid, "B", waitLine("b1", "gB"))
				defer bconn.Close()
			} else {
				go func() { bDone <- post(bctx, base, sid, "application/json", "B", waitLine("b1", "gB")) }()
			}
			eventually(t, "B admitted behind A (aep_queue_depth 2)", func() bool {
				noStart(t, plug.Started, "gB", "while A runs")
				return metric(t, h, "aep_queue_depth") == 2
			})

			// B's client goes; the host notices.
			if tc.bDrops {
				bconn.Close()
			} else {
				bleave()
				if p := <-bDone; p.err == nil {
					t.Fatalf("B was answered: %d %q", p.status, p.body)
				}
			}
			waitTag(t, returned, "B")

			// A ends.
			if tc.aClientLeaves {
				aleave()
				waitGate(t, plug.CtxDone, "gA")
				if p := <-aDone; p.err == nil {
					t.Fatalf("A was answered after its client left: %d %q", p.status, p.body)
				}
			} else {
				plug.Release("gA")
				p := <-aDone
				if p.err != nil || p.status != http.StatusOK || !strings.Contains(p.body, `"type":"echo/wait/resp"`) || !strings.Contains(p.body, `"req_id":"a1"`) {
					t.Fatalf("A's answer: %+v", p)
				}
			}

			// B leaves the queue, counted as cancelled by the worker that
			// found it so; its handler never started.
			eventually(t, "the queue empty (aep_queue_depth 0)", func() bool {
				noStart(t, plug.Started, "gB", "after A ended")
				return metric(t, h, "aep_queue_depth") == 0
			})
			wantCancelled := 1.0
			if tc.aClientLeaves {
				wantCancelled = 2 // A's handler ran and was cancelled too
			}
			if got := metric(t, h, "aep_messages_total", "type", "echo/wait/req", "code", "cancelled"); got != wantCancelled {
				t.Errorf("%v echo/wait requests answered cancelled, want %v", got, wantCancelled)
			}
			noStart(t, plug.Started, "gB", "after A ended")
			if n := plug.MaxRunning(); n != 1 {
				t.Errorf("%d echo/wait handlers ran at once, want 1", n)
			}

			// Nothing of A or B went to /stream: the first message there
			// is the pong to a ping sent in the 202 mode now.
			send(t, base, sid, pingLine("q1"))
			if m := decode(t, stream.next(t, 10*time.Second)); m.Type != "pong" || m.ReqID != "q1" {
				t.Fatalf("first message on /stream: %+v, want the pong to q1", m)
			}
		})
	}
}

func waitLine(id, gate string) string {
	return fmt.Sprintf(`{"type":"echo/wait/req","id":%q,"proto":"1.0","ts":1,"gate":%q}`, id, gate)
}

// posted is the outcome of post: an answer, or the client's error.
type posted struct {
	status int
	body   string
	err    error
}

// post sends line to /send with accept, tagged for the test's handler, and
// reads the whole answer. It may run on any goroutine: it reports instead
// of failing the test.
func post(ctx context.Context, base, sid, accept, tag, line string) posted {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/send", strings.NewReader(line))
	if err != nil {
		return posted{err: err}
	}
	req.Header.Set("X-Session-Id", sid)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Accept", accept)
	req.Header.Set("X-Test-Tag", tag)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return posted{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return posted{status: resp.StatusCode, body: string(b), err: err}
}

// postRaw writes a tagged single exchange of line on a connection of its
// own, which the caller closes to go away.
func postRaw(tb testing.TB, base, sid, tag, line string) net.Conn {
	tb.Helper()
	u, _ := url.Parse(base)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "POST /send HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\nContent-Type: text/plain\r\nAccept: application/json\r\nX-Test-Tag: %s\r\nContent-Length: %d\r\n\r\n%s",
		u.Host, sid, tag, len(line), line)
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return conn
}

// eventually waits for cond; the bound is for a hung test only.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("not within 30 s: %s", what)
		}
	}
}

func waitTag(tb testing.TB, ch chan string, tag string) {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == tag {
				return
			}
		case <-timeout:
			tb.Fatalf("the handler of %s did not return", tag)
		}
	}
}

// noStart fails if the plugin reported gate as started, taking what it
// reported meanwhile.
func noStart(tb testing.TB, ch chan string, gate, when string) {
	tb.Helper()
	for {
		select {
		case g := <-ch:
			if g == gate {
				tb.Fatalf("the handler waiting on %s started %s", gate, when)
			}
		default:
			return
		}
	}
}

// metric sums the samples of the host's metric name whose labels include
// the given name, value pairs.
func metric(tb testing.TB, h *server.Host, name string, labels ...string) float64 {
	tb.Helper()
	fams, err := h.MetricsRegistry().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue samples
				}
			}
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}
