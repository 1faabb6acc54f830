package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// lockedLog is a log sink safe for the host's goroutines.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestHandlerErrorsNeverLeak: a handler error that is not written for the
// agent (here one holding a file path and a DSN with its password) reaches
// the wire only as a generic runtime_error carrying a correlation id; the
// full text reaches the log under that id. Errors marked for the agent keep
// their text.
func TestHandlerErrorsNeverLeak(t *testing.T) {
	const secretText = "open /srv/aep/data/aep.db: permission denied (dsn postgres://aep:hunter2@db.internal/aep)"
	cases := []struct {
		name     string
		err      error
		code     wire.Code
		wantText string // what the wire message must contain; "" for a generic one
	}{
		{"plain error", errors.New(secretText), wire.CodeRuntimeError, ""},
		{"wrapped plain error", fmt.Errorf("say: %w", errors.New(secretText)), wire.CodeRuntimeError, ""},
		{"public", wire.Publicf("the echo service is busy"), wire.CodeRuntimeError, "the echo service is busy"},
		{"not found", fmt.Errorf("no voice named %q: %w", "v1", wire.ErrNotFound), wire.CodeRuntimeError, `no voice named "v1"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs lockedLog
			cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret"}}
			h, err := server.New(tctx(t), cfg,
				server.WithRegistry(msg.Registry().Union(testproto.Registry())),
				server.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				server.WithPlugin(echoSpec("echo", 0, false, &echoplug.Plugin{FailSay: c.err})))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(tctx(t))
			_, ec := connect(t, h)
			_, err = ec.EchoSay(tctx(t), &testproto.EchoSayReq{Text: "hi"})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != c.code {
				t.Fatalf("got %v, want a %s error", err, c.code)
			}
			if c.wantText != "" {
				if !strings.Contains(we.Message, c.wantText) {
					t.Fatalf("message %q lacks %q", we.Message, c.wantText)
				}
				return
			}
			for _, leak := range []string{"/srv/aep", "hunter2", "postgres://", "permission denied"} {
				if strings.Contains(we.Message, leak) || strings.Contains(fmt.Sprint(we.Detail), leak) {
					t.Fatalf("wire error leaks %q: %s %v", leak, we.Message, we.Detail)
				}
			}
			d, _ := we.Detail.(map[string]any)
			corr, _ := d["correlation_id"].(string)
			if !strings.HasPrefix(corr, "err-") || !strings.Contains(we.Message, corr) || !we.Retryable() {
				t.Fatalf("want a retryable generic message with a correlation id, got %q %v", we.Message, we.Detail)
			}
			logged := logs.String()
			if !strings.Contains(logged, corr) || !strings.Contains(logged, "hunter2@db.internal") || !strings.Contains(logged, "/srv/aep/data/aep.db") {
				t.Fatalf("the log lacks the correlation id or the full text:\n%s", logged)
			}
		})
	}
}
