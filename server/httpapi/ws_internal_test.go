package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/server"
)

// readFrame keeps a message of at most limit bytes whole and reports a
// longer one by its size only, having read it to its end, however the
// reader splits it.
func TestReadFrame(t *testing.T) {
	const limit = 1000
	for _, size := range []int{0, 1, 511, 512, 513, 999, 1000, 1001, 1024, 5000} {
		msg := bytes.Repeat([]byte("x"), size)
		for name, wrap := range map[string]func(io.Reader) io.Reader{
			"whole":    func(r io.Reader) io.Reader { return r },
			"bytewise": iotest.OneByteReader,
			"half":     iotest.HalfReader,
			"data+EOF": iotest.DataErrReader,
		} {
			r := bytes.NewReader(msg)
			line, n, err := readFrame(wrap(r), limit)
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", size, name, err)
			}
			if n != size || r.Len() != 0 {
				t.Fatalf("%d bytes, %s: size %d, %d left unread", size, name, n, r.Len())
			}
			if size <= limit && !bytes.Equal(line, msg) {
				t.Fatalf("%d bytes, %s: kept %d bytes", size, name, len(line))
			}
			if size > limit && line != nil {
				t.Fatalf("%d bytes, %s: kept %d bytes of an oversized message", size, name, len(line))
			}
		}
	}
	if _, _, err := readFrame(iotest.TimeoutReader(strings.NewReader(strings.Repeat("y", 600))), limit); err == nil {
		t.Fatal("a read error was not returned")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("{}"), 10)
	f.Add(bytes.Repeat([]byte("z"), 700), 600)
	f.Fuzz(func(t *testing.T, msg []byte, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		line, n, err := readFrame(iotest.HalfReader(bytes.NewReader(msg)), limit)
		if err != nil || n != len(msg) {
			t.Fatalf("limit %d: size %d of %d, %v", limit, n, len(msg), err)
		}
		if (len(msg) <= limit) != (line != nil) || (line != nil && !bytes.Equal(line, msg)) {
			t.Fatalf("limit %d, %d bytes: kept %q", limit, len(msg), line)
		}
	})
}

// deadlineWriter records the write deadlines an http.ResponseController
// sets through it.
type deadlineWriter struct {
	http.ResponseWriter
	set []time.Time
}

func (d *deadlineWriter) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// A write of an answer may block at most write_timeout (docs/SECURITY.md)
// and at least nine tenths of it; the connection's deadline is moved only
// once more than a tenth has passed, not for every write.
func TestWriteDeadlineMovedOnlyWhenDue(t *testing.T) {
	const perWrite = 200 * time.Millisecond
	d := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
	w := &respWriter{ResponseWriter: d, rc: *http.NewResponseController(d), perWrite: perWrite}
	check := func(before time.Time, wantSet int) {
		t.Helper()
		if len(d.set) != wantSet {
			t.Fatalf("%d deadlines set; want %d", len(d.set), wantSet)
		}
		last := d.set[len(d.set)-1]
		if left := time.Until(last); left < perWrite-perWrite/10 || left > perWrite || last.Before(before.Add(perWrite)) {
			t.Fatalf("the deadline leaves %v for the next write; want between %v and %v", left, perWrite-perWrite/10, perWrite)
		}
	}
	t0 := time.Now()
	w.WriteHeader(http.StatusOK)
	for range 5 {
		w.Write([]byte("x"))
	}
	check(t0, 1)
	time.Sleep(perWrite / 5)
	t1 := time.Now()
	w.Write([]byte("y"))
	check(t1, 2)
}

// TestTerminatedCloseCode: a WebSocket whose session the operator
// terminated is told so by the kernel (operator.ConnectionSink) before it
// is closed, and its connection then closes with closeTerminated, so that
// a moving client knows not to move; a session that ends otherwise closes
// its connection normally. The kernel closes a terminated session's sink
// only after the linger; the test closes it itself, as that timer would.
func TestTerminatedCloseCode(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(h *server.Host, ws *wsSession) error
		want websocket.StatusCode
	}{
		{"terminated", func(h *server.Host, ws *wsSession) error {
			if _, err := h.Operator().Terminate(ws.sess.Handle()); err != nil {
				return err
			}
			ws.Close() // what the kernel does once the linger is over
			return nil
		}, closeTerminated},
		{"ended", func(h *server.Host, ws *wsSession) error { ws.sess.Close(); return nil }, websocket.StatusNormalClosure},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg := server.Defaults()
			cfg.Server.AuthToken = "terminated-close-token"
			h, err := server.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close(context.Background()) })
			a := Handler(h, Options{}).(*guard).a
			hub := &wsHub{a: a, opts: a.opts.WebSocket.withDefaults(), sessions: map[string]*wsSession{}, watch: newWatchdog()}
			srv := httptest.NewServer(http.HandlerFunc(hub.serve))
			defer srv.Close()
			conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			hs := `{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["session"],"auth_token":"terminated-close-token"}`
			if err := conn.Write(ctx, websocket.MessageText, []byte(hs)); err != nil {
				t.Fatal(err)
			}
			if _, b, err := conn.Read(ctx); err != nil || !strings.Contains(string(b), `"ok":true`) {
				t.Fatalf("handshake: %s %v", b, err)
			}
			var ws *wsSession
			hub.mu.Lock()
			for _, x := range hub.sessions {
				ws = x
			}
			hub.mu.Unlock()
			if ws == nil {
				t.Fatal("the hub holds no session")
			}
			if err := c.end(h, ws); err != nil {
				t.Fatal(err)
			}
			_, b, err := conn.Read(ctx)
			if got := websocket.CloseStatus(err); got != c.want {
				t.Fatalf("the connection's end: %s %v (status %d), want status %d", b, err, got, c.want)
			}
		})
	}
}
