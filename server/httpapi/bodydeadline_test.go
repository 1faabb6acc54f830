package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// TestReadBodyTimeout: read_body_timeout cuts a body that has not arrived
// within it (408 and the connection closed), one over the size limit that
// then stalls, and one the handler left unread; a body read in time leaves
// no deadline behind, so a single exchange that waits far longer than the
// timeout answers, and a keep-alive connection serves request after
// request well past it.
func TestReadBodyTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h, plug := newPlugHost(t, func(c *server.Config) {
		c.Transport.HTTP.ReadBodyTimeout = server.Duration(timeout)
		c.Server.Limits.MaxMessageBytes = 1024
	})
	base := newServer(t, h, httpapi.Options{})
	u, _ := url.Parse(base)
	sid := createSession(t, base)
	if got := exchange(t, context.Background(), base, sid, "application/json", handshakeLine("h1")); len(got.lines) != 1 {
		t.Fatalf("handshake: %+v", got)
	}

	// closed sends head on a fresh connection, then a byte every
	// trickle (never, if zero), and reads until the host closes it.
	closed := func(t *testing.T, head string, trickle time.Duration) (time.Duration, string) {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		fmt.Fprint(conn, head)
		stop := make(chan struct{})
		defer close(stop)
		if trickle > 0 {
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(trickle):
						if _, err := conn.Write([]byte("x")); err != nil {
							return
						}
					}
				}
			}()
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("still open after 10 s: %.200q", b)
		}
		return time.Since(start), string(b)
	}
	post := func(path string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n", path, u.Host, sid)
	}

	for _, tc := range []struct {
		name, head string
		trickle    time.Duration
		status     string // the answer's status line, if it must have one
	}{
		{"a body a byte at a time", post("/send"), 50 * time.Millisecond, "HTTP/1.1 408"},
		{"a body that never comes", post("/send"), 0, "HTTP/1.1 408"},
		{"a body the handler leaves unread", post("/healthz"), 0, ""},
		{"a chunked body over the limit that stalls", fmt.Sprintf("POST /send HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n%s\r\n", u.Host, sid, strings.Repeat("x", 2048)), 0, "HTTP/1.1 413"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took, answer := closed(t, tc.head, tc.trickle)
			if took < timeout || took > 3*timeout {
				t.Errorf("closed after %v, want between %v and %v", took, timeout, 3*timeout)
			}
			if !strings.HasPrefix(answer, tc.status) {
				t.Errorf("answer %.80q, want %q", answer, tc.status)
			}
		})
	}

	t.Run("a single exchange that waits past the timeout", func(t *testing.T) {
		done := make(chan exchangeResp, 1)
		go func() {
			done <- exchange(t, context.Background(), base, sid, "application/json", `{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"gate":"g1"}`)
		}()
		waitGate(t, plug.Started, "g1")
		time.Sleep(4 * timeout)
		plug.Release("g1")
		if got := <-done; got.status != http.StatusOK || len(got.lines) != 1 || summary(t, got.lines[0]) != "echo/wait/resp w1" {
			t.Fatalf("after %v: %+v", 4*timeout, got)
		}
	})

	// keepAlive dials one connection for requests written by hand, one
	// after the other; exchange writes a single-exchange POST /send of
	// line on it, and answer reads the next response.
	keepAlive := func(t *testing.T) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, bufio.NewReader(conn)
	}
	exchangeOn := func(conn net.Conn, line string) {
		fmt.Fprintf(conn, "POST /send HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\nContent-Type: text/plain\r\nAccept: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, sid, len(line), line)
	}
	answer := func(t *testing.T, br *bufio.Reader, what string) (int, string) {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}

	t.Run("a request after one whose body was left unread", func(t *testing.T) {
		// The first body is left unread by its handler (net/http reads it
		// after, to reuse the connection); nothing of its deadline may
		// reach the next request on the connection, which waits past the
		// timeout.
		conn, br := keepAlive(t)
		fmt.Fprintf(conn, "POST /healthz HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\nxxxxx", u.Host)
		answer(t, br, "the first request")
		exchangeOn(conn, `{"type":"echo/wait/req","id":"w2","proto":"1.0","ts":1,"gate":"g2"}`)
		waitGate(t, plug.Started, "g2")
		time.Sleep(4 * timeout)
		plug.Release("g2")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if status, b := answer(t, br, "the second request"); status != http.StatusOK || !strings.Contains(b, `"w2"`) {
			t.Fatalf("the second request: %d %q", status, b)
		}
	})

	t.Run("a keep-alive connection past the timeout", func(t *testing.T) {
		conn, br := keepAlive(t)
		for i := range 8 {
			exchangeOn(conn, sayLine(fmt.Sprint("k", i), "hi"))
			if status, b := answer(t, br, fmt.Sprint("request ", i)); status != http.StatusOK || !strings.Contains(b, fmt.Sprint(`"k`, i, `"`)) {
				t.Fatalf("request %d: %d %s", i, status, b)
			}
			time.Sleep(timeout / 2)
		}
	})
}
