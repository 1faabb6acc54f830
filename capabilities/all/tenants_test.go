package all_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
)

// TestTenantAttribution: in a two-tenant run every audit line, the tenant
// metrics and every request span name the tenant of the session that made
// the request, and none holds a tenant's secret.
func TestTenantAttribution(t *testing.T) {
	secrets := map[string]string{"team-a": "attr-secret-a-1f2e3d", "team-b": "attr-secret-b-9c8b7a"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	auditPath := filepath.Join(dataDir, "audit.jsonl")
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.AuthToken = ""
		for _, name := range []string{"team-a", "team-b"} {
			sum := sha256.Sum256([]byte(secrets[name]))
			c.Server.Tenants = append(c.Server.Tenants, server.TenantConfig{Name: name, SecretSHA256: []string{hex.EncodeToString(sum[:])}})
		}
		c.Plugins = append(c.Plugins, server.PluginConfig{Name: "tools", Type: "tools", Cls: "aep.tools.builtin"})
	})
	h, err := server.New(ctx, cfg, server.WithDataDir(dataDir), server.WithLogger(log),
		server.WithTracerProvider(tp), server.WithAuditor(server.NewFileAuditor(auditPath, 10, 1, log)))
	if err != nil {
		t.Fatal(err)
	}
	byHandle := map[string]string{}
	for _, name := range []string{"team-a", "team-b"} {
		for i := 0; i < 2; i++ {
			pipe, err := h.ConnectLines(64)
			if err != nil {
				t.Fatal(err)
			}
			c := client.New(client.Lines(pipe, nil))
			defer c.Close()
			if hs, err := c.Handshake(ctx, "agent-"+name, secrets[name], "tools"); err != nil || !hs.Ok {
				t.Fatalf("%s: %+v %v", name, hs, err)
			}
			byHandle[aeptest.Handle(t, c)] = name
			for j := 0; j < 3; j++ {
				if _, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Gathered once the host has closed, which waits for every worker: a
	// worker counts its request after the reply the client already has.
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	fams, err := h.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	perTenant := map[string]float64{}
	var metrics strings.Builder
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&metrics, "%s{%s=%q}\n", f.GetName(), l.GetName(), l.GetValue())
				if f.GetName() == "aep_tenant_requests_total" && l.GetName() == "tenant" {
					perTenant[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	// Each session: session/info (aeptest.Handle) and three tool calls.
	if perTenant["team-a"] < 8 || perTenant["team-b"] < 8 {
		t.Fatalf("requests by tenant %v", perTenant)
	}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(string(audit)), "\n") {
		var r struct {
			Session string `json:"session_id"`
			Tenant  string `json:"tenant"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if want := byHandle[r.Session]; want == "" || r.Tenant != want {
			t.Fatalf("audit line of %s names tenant %q, want %q", r.Session, r.Tenant, want)
		}
		lines++
	}
	if lines < 16 {
		t.Fatalf("%d audit lines", lines)
	}
	spans := 0
	var spanText strings.Builder
	for _, s := range exp.GetSpans() {
		fmt.Fprintf(&spanText, "%v\n", s.Attributes)
		var session, tenant string
		for _, a := range s.Attributes {
			switch a.Key {
			case "aep.session":
				session = a.Value.AsString()
			case "aep.tenant":
				tenant = a.Value.AsString()
			}
		}
		if session == "" || s.Name == "handshake/req" {
			continue
		}
		if tenant != byHandle[session] {
			t.Fatalf("span %s of %s names tenant %q, want %q", s.Name, session, tenant, byHandle[session])
		}
		spans++
	}
	if spans < 16 {
		t.Fatalf("%d request spans", spans)
	}
	for _, secret := range secrets {
		for where, text := range map[string]string{"audit": string(audit), "log": string(logs.Bytes()), "metrics": metrics.String(), "spans": spanText.String()} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds a tenant's secret", where)
			}
		}
	}
}
