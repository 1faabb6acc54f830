package all_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/capabilities/toolkits"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// auditLog keeps every audit record the host writes.
type auditLog struct {
	mu   sync.Mutex
	recs []server.AuditRecord
}

func (a *auditLog) Record(r server.AuditRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
}

// everythingServer returns the entry script of the npm MCP server
// server-everything that .ci/run installs; absent, the test skips unless
// CI is set, where it fails.
func everythingServer(t *testing.T) string {
	p := os.Getenv("AEP_TEST_MCP_EVERYTHING")
	if p == "" {
		p, _ = filepath.Abs(filepath.Join("..", "..", ".ci", "mcp", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("server-everything not installed (%v); .ci/run installs it", err)
		}
		t.Skip("server-everything not installed; run .ci/run or set AEP_TEST_MCP_EVERYTHING")
	}
	return p
}

// TestOneAuditLinePerToolCall: a tool/call goes to the plugin that owns the
// tool, so it gives exactly one audit line whichever plugin serves the tool
// (built-in, toolkit, MCP-proxied) and when none does (the kernel's
// UNKNOWN_TOOL fallback). The line carries the tool-level outcome: a
// failed, denied, unknown or cancelled call is recorded with success false
// and its error_code.
func TestOneAuditLinePerToolCall(t *testing.T) {
	script := everythingServer(t)
	data := t.TempDir()
	audit := &auditLog{}
	cfg := aeptest.Config(func(c *server.Config) { c.Server.ToolPolicy.Deny = []string{"grep"} })
	h := aeptest.NewHost(t, cfg, []server.PluginSpec{
		aeptest.Plugin("tools", &tools.Plugin{Settings: tools.Settings{Root: filepath.Join(data, "ws")}}),
		aeptest.Plugin("toolkits", &toolkits.Plugin{}),
		aeptest.Plugin("mcp", &mcp.Plugin{Settings: mcp.Settings{ConnectTimeout: 30, Servers: []mcp.ServerConfig{
			{ID: "everything", Command: "node", Args: []string{script, "stdio"}},
		}}}),
	}, server.WithAuditor(audit), server.WithDataDir(data))
	c := aeptest.Connect(t, h, "tools", "toolkits", "mcp")
	ctx := aeptest.Context(t)
	// The toolkit's databases are files of the session's own directory.
	sessionDir := filepath.Join(data, "sessions", aeptest.Handle(t, c))
	if err := os.MkdirAll(sessionDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(sessionDir, "notes.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if r, err := c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: map[string]any{"driver": "sqlite", "database": "notes.db", "mode": "read_only"}}); err != nil || r.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure: %+v %v", r, err)
	}

	cases := []struct {
		name, tool string
		args       map[string]any
		plugin     string // "" for the kernel's fallback
		success    bool
		errorCode  string
	}{
		{"built-in", "list_dir", map[string]any{}, "tools", true, ""},
		{"built-in failing", "read_file", map[string]any{"path": "absent.txt"}, "tools", false, "TOOL_ERROR"},
		{"denied by policy", "grep", map[string]any{"pattern": "x"}, "tools", false, "TOOL_DENIED"},
		{"unknown", "no_such_tool", map[string]any{}, "", false, "UNKNOWN_TOOL"},
		{"toolkit", "sql_query", map[string]any{"sql": "SELECT body FROM notes"}, "toolkits", true, ""},
		{"MCP-proxied", "everything__echo", map[string]any{"message": "hi"}, "mcp", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &msg.ToolCallReq{ToolName: tc.tool, Arguments: tc.args}
			resp, err := c.ToolCall(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Result.Success != tc.success {
				t.Fatalf("result %+v", resp.Result)
			}
			recs := waitRecords(t, audit, tc.tool, 1)
			r := recs[0]
			if r.Plugin != tc.plugin || r.Success != tc.success || r.ErrorCode != tc.errorCode || r.Type != "tool/call/req" {
				t.Fatalf("audit line %+v, want plugin %q success %v error_code %q", r, tc.plugin, tc.success, tc.errorCode)
			}
		})
	}

	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := c.ToolCall(cctx, &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"sleep", "30"}}})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a cancelled call returned no error")
		}
		recs := waitRecords(t, audit, "run_command", 1)
		if r := recs[0]; r.Success || r.ErrorCode != "cancelled" || r.Plugin != "tools" {
			t.Fatalf("audit line %+v, want success false, error_code cancelled", r)
		}
	})
}

// waitRecords waits until the host has written the audit lines of the
// calls of one tool, then fails unless there are exactly n.
func waitRecords(t *testing.T, a *auditLog, tool string, n int) []server.AuditRecord {
	t.Helper()
	var got []server.AuditRecord
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		got = got[:0]
		for _, r := range a.recs {
			if r.Target == tool {
				got = append(got, r)
			}
		}
		a.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A second line, if the kernel wrote one, would come with the first.
	time.Sleep(50 * time.Millisecond)
	a.mu.Lock()
	defer a.mu.Unlock()
	got = got[:0]
	for _, r := range a.recs {
		if r.Target == tool {
			got = append(got, r)
		}
	}
	if len(got) != n {
		t.Fatalf("%d audit lines for %s, want %d: %+v", len(got), tool, n, got)
	}
	return append([]server.AuditRecord(nil), got...)
}
