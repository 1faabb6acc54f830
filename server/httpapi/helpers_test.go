package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

const token = "secret-token"

// newHost starts a host with the echo test namespace and audit on.
func newHost(tb testing.TB, edit func(*server.Config)) *server.Host {
	tb.Helper()
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	if edit != nil {
		edit(&cfg)
	}
	ctx := context.Background()
	aud := server.NewFileAuditor(filepath.Join(tb.TempDir(), "audit.jsonl"), 10, 5, nil)
	h, err := server.New(ctx, cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithAuditor(aud),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: &echoplug.Plugin{Name: "e1"}}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// newServer serves h on a real loopback listener.
func newServer(tb testing.TB, h *server.Host, opts httpapi.Options) string {
	tb.Helper()
	ts := httptest.NewServer(httpapi.Handler(h, opts))
	tb.Cleanup(ts.Close)
	return ts.URL
}

type reqOpt func(*http.Request)

func header(k, v string) reqOpt { return func(r *http.Request) { r.Header.Set(k, v) } }

// do sends one request and returns the status and body.
func do(tb testing.TB, method, url string, body io.Reader, opts ...reqOpt) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func createSession(tb testing.TB, base string) string {
	tb.Helper()
	st, b := do(tb, http.MethodPost, base+"/session", nil)
	if st != http.StatusOK {
		tb.Fatalf("POST /session: %d %s", st, b)
	}
	var r struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.SessionID == "" {
		tb.Fatalf("POST /session body %s: %v", b, err)
	}
	return r.SessionID
}

func send(tb testing.TB, base, sid, line string) {
	tb.Helper()
	st, b := do(tb, http.MethodPost, base+"/send", strings.NewReader(line), header("X-Session-Id", sid), header("Content-Type", "text/plain"))
	if st != http.StatusAccepted || !bytes.Contains(b, []byte(`"ok":true`)) {
		tb.Fatalf("POST /send: %d %s", st, b)
	}
}

// event is one server-sent event, or a comment when Comment is set.
type event struct {
	ID      string
	Data    string
	Comment string
}

// sse is a real SSE reader of GET /stream: it parses the event-stream format
// line by line from the response body.
type sse struct {
	rec    *conformance.Recorder
	resp   *http.Response
	cancel context.CancelFunc
	events chan event
}

func openStream(tb testing.TB, base, sid, lastID string) *sse {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/stream", nil)
	req.Header.Set("X-Session-Id", sid)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		tb.Fatalf("GET /stream: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		tb.Errorf("Content-Type %q", ct)
	}
	s := &sse{rec: conformance.NewRecorderFor(tb, checker(tb)), resp: resp, cancel: cancel, events: make(chan event, 4096)}
	go s.read()
	tb.Cleanup(s.close)
	return s
}

func (s *sse) read() {
	defer close(s.events)
	r := bufio.NewReaderSize(s.resp.Body, 1<<20)
	var ev event
	hasData := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if hasData {
				s.rec.Host([]byte(ev.Data)) // every line on the stream must conform
				s.events <- ev
			}
			ev, hasData = event{}, false
		case strings.HasPrefix(line, ":"):
			s.events <- event{Comment: strings.TrimSpace(line[1:])}
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[4:]
		case strings.HasPrefix(line, "data: "):
			if hasData {
				ev.Data += "\n"
			}
			ev.Data += line[6:]
			hasData = true
		}
	}
}

func (s *sse) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next event that is not a comment.
func (s *sse) next(tb testing.TB, d time.Duration) event {
	tb.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				tb.Fatal("stream ended")
			}
			if ev.Comment == "" {
				return ev
			}
		case <-timeout:
			tb.Fatalf("no event within %s", d)
		}
	}
}

// message is the decoded envelope and body fields tests look at.
type message struct {
	Type      string         `json:"type"`
	ID        string         `json:"id"`
	ReqID     string         `json:"req_id"`
	Code      string         `json:"code"`
	Ok        bool           `json:"ok"`
	SessionID string         `json:"session_id"`
	Text      string         `json:"text"`
	Detail    map[string]any `json:"detail"`
	// Error is a failed handshake's error.
	Error struct {
		Code   string         `json:"code"`
		Detail map[string]any `json:"detail"`
	} `json:"error"`
}

func decode(tb testing.TB, ev event) message {
	tb.Helper()
	var m message
	if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
		tb.Fatalf("event %q: %v", ev.Data, err)
	}
	return m
}

func handshakeLine(id string) string {
	return fmt.Sprintf(`{"type":"handshake/req","id":%q,"proto":"1.0","ts":1,"agent_id":"a","agent_caps":["echo"],"auth_token":%q}`, id, token)
}

func pingLine(id string) string {
	return fmt.Sprintf(`{"type":"ping","id":%q,"proto":"1.0","ts":1}`, id)
}

func sayLine(id, text string) string {
	return fmt.Sprintf(`{"type":"echo/say/req","id":%q,"proto":"1.0","ts":1,"text":%q}`, id, text)
}

// handshake opens a session and its stream and completes the handshake.
func handshake(tb testing.TB, base string) (string, *sse) {
	tb.Helper()
	sid := createSession(tb, base)
	s := openStream(tb, base, sid, "")
	send(tb, base, sid, handshakeLine("h1"))
	m := decode(tb, s.next(tb, 5*time.Second))
	if m.Type != "handshake/resp" || !m.Ok || m.SessionID != sid {
		tb.Fatalf("handshake: %+v (session %s)", m, sid)
	}
	return sid, s
}

var checkerOnce struct {
	sync.Once
	c   *conformance.Checker
	err error
}

// checker compiles the module's schemas/ with the echo test namespace's
// schema, which the test hosts also speak.
func checker(tb testing.TB) *conformance.Checker {
	tb.Helper()
	checkerOnce.Do(func() {
		checkerOnce.c, checkerOnce.err = conformance.Module(testproto.Schemas())
	})
	if checkerOnce.err != nil {
		tb.Fatalf("conformance: %v", checkerOnce.err)
	}
	return checkerOnce.c
}
