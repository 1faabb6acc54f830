package openenv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/openenv"
	"github.com/aephost/aep/server/store"
)

const token = "openenv-test-token-0123456789"

// rig is a real host with the env plugin (guess and maze), a real SQLite
// store, the audit log in a file and the host's log in a buffer, served
// by the HTTP transport with the OpenEnv face on a loopback server.
type rig struct {
	h     *server.Host
	face  *openenv.Face
	url   string // http://127.0.0.1:port
	st    *store.Store
	audit string
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type rigOpts struct {
	edit    func(*server.Config)
	plugins []server.PluginSpec
	http    func(*httpapi.Options)
}

func newRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	if o.edit != nil {
		o.edit(&cfg)
	}
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{st: st, audit: filepath.Join(dir, "audit.jsonl"), logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	plugins := o.plugins
	if plugins == nil {
		plugins = []server.PluginSpec{{Name: "env", Type: "env", Impl: &env.Plugin{Settings: env.Settings{Envs: []string{"guess", "maze"}, DataRoot: t.TempDir()}}}}
	}
	opts := []server.Option{server.WithStore(st), server.WithDataDir(dir), server.WithLogger(log),
		server.WithAuditor(server.NewFileAuditor(r.audit, 10, 5, nil))}
	for _, p := range plugins {
		opts = append(opts, server.WithPlugin(p))
	}
	h, err := server.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	r.face = openenv.New(h, openenv.Options{})
	hopts := httpapi.Options{Logger: log, Faces: []httpapi.Face{{Prefix: openenv.Prefix, Handler: r.face, Upgrade: r.face.Upgrade}}}
	if o.http != nil {
		o.http(&hopts)
	}
	ts := httptest.NewServer(httpapi.Handler(h, hopts))
	r.url = ts.URL
	t.Cleanup(func() {
		ts.Close()
		h.Close(context.Background())
		st.Close()
	})
	return r
}

func (r *rig) base(env string) string { return r.url + openenv.Prefix + env }

func (r *rig) wsURL(env string) string { return "ws" + strings.TrimPrefix(r.base(env), "http") + "/ws" }

// wsClient is a raw WebSocket connection to the face, sending what the
// stock client sends (reference §7): no headers unless given.
type wsClient struct {
	t testing.TB
	c *websocket.Conn
}

func dial(t testing.TB, url string, header http.Header) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(100 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c}
}

func (w *wsClient) send(line string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
		w.t.Fatalf("send %s: %v", line, err)
	}
}

// recv returns the next frame, or the error that ended the connection.
func (w *wsClient) recv() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, d, err := w.c.Read(ctx)
	return d, err
}

func (w *wsClient) call(line string) map[string]any {
	w.t.Helper()
	w.send(line)
	d, err := w.recv()
	if err != nil {
		w.t.Fatalf("reply to %s: %v", line, err)
	}
	var m map[string]any
	if err := json.Unmarshal(d, &m); err != nil {
		w.t.Fatalf("reply %s: %v", d, err)
	}
	return m
}

// httpDo sends one request and returns the status, headers and JSON body.
func httpDo(t testing.TB, method, url, body string, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func bearerHeader(tok string) http.Header {
	return http.Header{"Authorization": {"Bearer " + tok}}
}

// serve serves h on a loopback test server and returns its base URL.
func serve(tb testing.TB, h http.Handler) string {
	ts := httptest.NewServer(h)
	tb.Cleanup(ts.Close)
	return ts.URL
}

// The env plugin is what the face serves.
var _ openenv.Catalog = (*env.Plugin)(nil)
