package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSessionFloodLocksNoAgentOut sends 10,500 POST /session from
// 127.0.0.1 to a host with the default configuration (max_sessions
// 10,000): none is refused, an agent handshaken before the flood goes on
// working, and a new agent still connects and works, since sessions that
// never handshake only evict each other from their own pool
// (docs/SECURITY.md, The edge).
func TestSessionFloodLocksNoAgentOut(t *testing.T) {
	t.Parallel()
	h := startHost(t, "")
	c := newClient()
	before, beforeSt := h.agent(t, c)

	const flood = 10_500
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += 8 {
				resp, err := c.Post(h.base+"/session", "application/json", nil)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if refused > 0 {
		t.Fatalf("%d of %d POST /session refused", refused, flood)
	}
	for _, a := range []struct {
		sid string
		st  *stream
	}{{before, beforeSt}, func() struct {
		sid string
		st  *stream
	} {
		sid, st := h.agent(t, c)
		return struct {
			sid string
			st  *stream
		}{sid, st}
	}()} {
		h.send(t, c, a.sid, toolCall("ls", false, "list_dir", map[string]any{}))
		if m, _ := a.st.message(t, "ls", 30*time.Second); m["type"] != "tool/call/resp" {
			t.Fatalf("an agent after the flood: %v", m)
		}
	}
}

// TestDeadlinesPerRoute checks the HTTP deadlines of the default
// configuration (docs/SECURITY.md, The edge): a body sent a byte every 2 s
// is cut by read_body_timeout (10 s), headers that never end by
// read_header_timeout (10 s), an idle keep-alive connection by
// idle_timeout (15 s), a header block over max_header_bytes is refused
// with 431, while a stream that is read, and a single-exchange POST /send
// whose answer takes 17 s, stay open past all of them and deliver.
func TestDeadlinesPerRoute(t *testing.T) {
	t.Parallel()
	h := startHost(t, "")
	c := newClient()
	sid, st := h.agent(t, c)
	start := time.Now()

	// closedWithin reads conn until the host closes it, and reports how long that took.
	closedWithin := func(name string, conn net.Conn, limit time.Duration) {
		conn.SetReadDeadline(time.Now().Add(limit))
		// EOF or a reset (the host closing while the client still sends)
		// are both the host's close; only our own deadline is not.
		b, err := io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: still open after %v: %v", name, limit, err)
			return
		}
		t.Logf("%s: closed after %v (answer %.40q)", name, time.Since(start).Round(time.Second), b)
	}
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { // a single exchange that waits longer than every deadline
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodPost, h.base+"/send",
			strings.NewReader(toolCall("long", false, "run_command", map[string]any{"argv": []string{"sleep", "17"}})))
		req.Header.Set("X-Session-Id", sid)
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Accept", "application/json")
		resp, err := newClient().Do(req)
		if err != nil {
			t.Errorf("a 17 s single exchange: %v", err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"success":true`) {
			t.Errorf("a 17 s single exchange: %d %.300s", resp.StatusCode, b)
		}
	}()
	go func() { // slow body
		defer wg.Done()
		conn := dial()
		fmt.Fprintf(conn, "POST /send HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n", h.addr, sid)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Second):
					if _, err := conn.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		closedWithin("slow body", conn, 25*time.Second)
		close(stop)
	}()
	go func() { // slow headers
		defer wg.Done()
		conn := dial()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n", h.addr)
		closedWithin("slow headers", conn, 25*time.Second)
	}()
	go func() { // idle keep-alive
		defer wg.Done()
		conn := dial()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", h.addr)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Error("the host closed a keep-alive connection at once")
		}
		closedWithin("idle keep-alive", conn, 30*time.Second)
	}()

	// Header size limit.
	req, _ := http.NewRequest(http.MethodGet, h.base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 64<<10))
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 64 KiB header: %v %v, want 431", resp, err)
	} else {
		resp.Body.Close()
	}
	wg.Wait()
	if time.Since(start) < 15*time.Second {
		t.Fatalf("the idle connection was closed before idle_timeout")
	}
	// The stream has lived through all of it and still delivers.
	h.send(t, c, sid, `{"type":"ping","id":"still","proto":"1.0","ts":1}`)
	if m, _ := st.message(t, "still", 10*time.Second); m["type"] != "pong" {
		t.Fatalf("the stream after %v: %v", time.Since(start), m)
	}
}
