package all_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

// A toolkit password that the agent copied into working memory (its own,
// or its parent's through a shared subagent) never reaches a snapshot file
// or the store: the toolkits plugin declares it (server/secrets.go) and the
// snapshot is refused with an error that names no secret. The password is
// in no audit line, no log line and no file of the data directory.
func TestToolkitPasswordNeverInSnapshot(t *testing.T) {
	const password = "pw-canary-7f3a9c1e"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	st, err := store.Open(ctx, "", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	auditPath := filepath.Join(dataDir, "audit.jsonl")
	cfg := aeptest.Config(func(c *server.Config) {
		for _, p := range []struct{ typ, cls string }{{"toolkits", "aep.toolkits.builtin"}, {"memory", "aep.memory.builtin"}, {"subagents", "aep.subagents.builtin"}} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p.typ, Type: p.typ, Cls: p.cls})
		}
	})
	h, err := server.New(ctx, cfg, server.WithDataDir(dataDir), server.WithStore(st), server.WithLogger(log),
		server.WithAuditor(server.NewFileAuditor(auditPath, 10, 1, log)))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			h.Close(ctx)
		}
	}()
	a := aeptest.Connect(t, h, "toolkits", "tools", "memory", "subagents")
	emptySessionFile(t, dataDir, a, "app.db")
	res, err := a.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql",
		Config: msg.ToolkitConfigureReqConfig{"driver": "sqlite", "database": "app.db", "mode": "read_only", "password": password}})
	if err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure: %+v %v", res, err)
	}
	mem, err := a.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	// A clean snapshot is written, so refusals below are the secret's doing.
	if _, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"}); err != nil {
		t.Fatalf("snapshot before the copy: %v", err)
	}
	copyTo := func(c *client.Client, memoryID, key, content string) {
		t.Helper()
		raw, _ := json.Marshal(content)
		if _, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: memoryID, Entries: []msg.MemoryEntry{{Key: key, Tier: "working", Content: raw}}}); err != nil {
			t.Fatal(err)
		}
	}
	copyTo(a, mem.MemoryID, "db", "the password is "+password)

	// A subagent sharing that working memory is refused too: its state
	// holds its parent's secret.
	sp, err := a.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "helper", MemoryScope: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := h.ConnectLinesTo(sp.SessionID, 64)
	if err != nil {
		t.Fatal(err)
	}
	kid := client.New(client.Lines(pipe, nil))
	defer kid.Close()
	if hs, err := kid.Handshake(ctx, "helper", sp.AuthToken, "memory"); err != nil || !hs.Ok {
		t.Fatalf("child handshake %+v %v", hs, err)
	}
	for _, tc := range []struct {
		name   string
		c      *client.Client
		target string
	}{
		{"own working memory/file", a, "file"},
		{"own working memory/sql", a, "sql"},
		{"a child's copy of its parent's memory/file", kid, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(tc.target)})
			we := aeptest.WantReason(t, err, wire.CodeRuntimeError, "secret_in_snapshot")
			if we.Retryable() || !strings.Contains(we.Message, `secret plugin "toolkits" declared`) || strings.Contains(we.Message, password) {
				t.Fatalf("refusal %+v", we)
			}
		})
	}
	closed = true
	if err := h.Close(ctx); err != nil { // flushes the audit file
		t.Fatal(err)
	}
	// Nothing on disk holds it: snapshot files, the SQLite store (and its
	// WAL), the audit file; nor does the log.
	found := []string{}
	filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(password)) {
			found = append(found, path)
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("the password is in %v", found)
	}
	if bytes.Contains(logs.Bytes(), []byte(password)) {
		t.Fatalf("the password is in the log:\n%s", logs.Bytes())
	}
	if b, err := os.ReadFile(auditPath); err != nil || len(b) == 0 {
		t.Fatalf("no audit lines were written (%v), so their check proves nothing", err)
	}
	// A file snapshot is its document and, beside it, its files archive.
	snaps, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*.json"))
	if len(snaps) != 1 {
		t.Fatalf("%d snapshot documents, want only the one taken before the copy", len(snaps))
	}
}
