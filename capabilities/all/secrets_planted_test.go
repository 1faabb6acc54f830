package all_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// TestPlantedSecretsReachNoRecord: an agent puts the host token and its
// toolkit password in every field it chooses — tool names (made-up and
// toolkit ones), correlation ids, request ids, tool arguments and working
// memory — and none of them is in the audit file, the log, the metrics or
// an exported span (docs/SECURITY.md, Declared secrets).
func TestPlantedSecretsReachNoRecord(t *testing.T) {
	const (
		hostToken = "host-token-canary-0a1b2c3d4e5f"
		password  = "pw-planted-canary-77e1"
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	st, err := store.Open(ctx, "", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	auditPath := filepath.Join(dataDir, "audit.jsonl")
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.AuthToken = hostToken
		for _, p := range []string{"tools", "toolkits", "memory"} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
	})
	h, err := server.New(ctx, cfg, server.WithDataDir(dataDir), server.WithStore(st), server.WithLogger(log),
		server.WithTracerProvider(tp), server.WithAuditor(server.NewFileAuditor(auditPath, 10, 1, log)))
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	a := client.New(client.Lines(pipe, nil))
	defer a.Close()
	if hs, err := a.Handshake(ctx, "planter", hostToken, "tools", "toolkits", "memory"); err != nil || !hs.Ok {
		t.Fatalf("handshake %+v %v", hs, err)
	}
	emptySessionFile(t, dataDir, a, "app.db")
	if r, err := a.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
		"driver": "sqlite", "database": "app.db", "mode": "read_write", "password": password}}); err != nil || r.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure %+v %v", r, err)
	}
	for _, secret := range []string{hostToken, password} {
		for _, name := range []string{"x_" + secret, "sql_query_" + secret} {
			corr := "corr-" + secret
			if _, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: name, CorrelationID: &corr, Arguments: map[string]any{"v": secret}}); err != nil {
				t.Fatal(err)
			}
		}
		corr := "corr-" + secret
		if _, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: "sql_query", CorrelationID: &corr,
			Arguments: map[string]any{"sql": "SELECT ?", "params": []any{secret}}}); err != nil {
			t.Fatal(err)
		}
		mem, err := a.MemoryInit(ctx, &msg.MemoryInitReq{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(secret)
		if _, err := a.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mem.MemoryID, Entries: []msg.MemoryEntry{{Key: secret, Tier: "working", Content: raw}}}); err != nil {
			t.Fatal(err)
		}
		// A request id of the agent's choosing, and a request that fails
		// to parse with the secret in its type.
		for _, line := range []string{
			fmt.Sprintf(`{"type":"tool/list/req","id":"id-%s","proto":"1.0","ts":1}`, secret),
			fmt.Sprintf(`{"type":"nosuch/%s/req","id":"bad-%s","proto":"1.0","ts":1}`, secret, secret),
		} {
			if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := a.Request(ctx, &msg.Ping{}); err != nil {
		t.Fatal(err)
	}
	fams, err := h.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var metrics strings.Builder
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&metrics, "%s{%s=%q}\n", f.GetName(), l.GetName(), l.GetValue())
			}
		}
	}
	a.Close()
	if err := h.Close(ctx); err != nil { // flushes the audit file
		t.Fatal(err)
	}
	var spans strings.Builder
	for _, s := range exp.GetSpans() {
		fmt.Fprintf(&spans, "%s %v\n", s.Name, s.Attributes)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil || !bytes.Contains(audit, []byte("corr-")) || !bytes.Contains(audit, []byte(`"target":"x_`)) {
		t.Fatalf("the audit file lacks the planted calls (%v), so its check proves nothing:\n%s", err, audit)
	}
	if !strings.Contains(spans.String(), "tool/call/req") || !strings.Contains(metrics.String(), "aep_tool_calls_total") {
		t.Fatal("no span or tool metric was recorded, so their check proves nothing")
	}
	for _, secret := range []string{hostToken, password} {
		for where, text := range map[string]string{"the audit file": string(audit), "the log": string(logs.Bytes()),
			"the metrics": metrics.String(), "the spans": spans.String()} {
			if strings.Contains(text, secret) {
				i := strings.Index(text, secret)
				t.Errorf("%s holds %q: …%s…", where, secret, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
}

// TestChildSecretsAndParentSnapshots: a subagent's one-letter secret is
// refused at configure and never blocks its parent's snapshot or fork
// (secrets shorter than server.MinSecretBytes are not secrets to the
// kernel); a subagent sharing its parent's memory that stores its real
// secret there makes its parent's snapshot and fork refuse, since they
// would carry it.
func TestChildSecretsAndParentSnapshots(t *testing.T) {
	const real = "pw-child-canary-5e2f"
	ctx := aeptest.Context(t)
	r := newForkRig(t, func(c *server.Config) {
		c.Plugins = append(c.Plugins, server.PluginConfig{Name: "subagents", Type: "subagents", Cls: "aep.subagents.builtin"})
	})
	caps := append([]string{"subagents"}, forkCaps...)
	parent := aeptest.Connect(t, r.h, caps...)
	child := func(scope string) *client.Client {
		t.Helper()
		sp, err := parent.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "c-" + scope, MemoryScope: msg.SubagentSpawnReqMemoryScope(scope)})
		if err != nil {
			t.Fatal(err)
		}
		pipe, err := r.h.ConnectLinesTo(sp.SessionID, 64)
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(client.Lines(pipe, nil))
		t.Cleanup(func() { c.Close() })
		if hs, err := c.Handshake(ctx, "child", sp.AuthToken, "toolkits", "memory", "tools"); err != nil || !hs.Ok {
			t.Fatalf("child handshake %+v %v", hs, err)
		}
		return c
	}
	isolated := child("isolated")
	emptySessionFile(t, r.dataDir, isolated, "c.db")
	res, err := isolated.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
		"driver": "sqlite", "database": "c.db", "mode": "read_only", "password": "e"}})
	if err != nil || res.Status != msg.ToolkitConfigureRespStatusError || !strings.Contains(res.Message, "at least 8 bytes") {
		t.Fatalf("a one-letter password: %+v %v", res, err)
	}
	if _, err := parent.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"}); err != nil {
		t.Fatalf("the parent's snapshot beside a child's one-letter secret: %v", err)
	}
	if _, err := parent.SessionFork(ctx, &msg.SessionForkReq{Count: 1}); err != nil {
		t.Fatalf("the parent's fork beside a child's one-letter secret: %v", err)
	}
	shared := child("shared")
	emptySessionFile(t, r.dataDir, parent, "s.db") // a shared child's directory is its parent's
	if res, err := shared.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
		"driver": "sqlite", "database": "s.db", "mode": "read_only", "password": real}}); err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("the shared child's configure %+v %v", res, err)
	}
	raw, _ := json.Marshal("the password is " + real)
	cmem, err := shared.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	// Its working memory is its parent's.
	if _, err := shared.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: cmem.MemoryID, Entries: []msg.MemoryEntry{{Key: "pw", Tier: "working", Content: raw}}}); err != nil {
		t.Fatal(err)
	}
	_, err = parent.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "secret_in_snapshot")
	_, err = parent.SessionFork(ctx, &msg.SessionForkReq{Count: 1})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "secret_in_snapshot")
}
