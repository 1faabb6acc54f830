package mcp_test

import (
	"context"
	"github.com/aephost/aep/internal/aeptest"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	aepmcp "github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// npmServer returns the entry script of an MCP server that .ci/run installs
// from npm (.ci/mcp/package.json): from env (AEP_TEST_MCP_EVERYTHING,
// AEP_TEST_MCP_FILESYSTEM) or the install folder. Absent, the test skips
// unless CI is set, where it fails.
func npmServer(t *testing.T, envVar, pkg string) string {
	t.Helper()
	p := os.Getenv(envVar)
	if p == "" {
		p, _ = filepath.Abs(filepath.Join("..", "..", ".ci", "mcp", "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js"))
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (%s): %v; .ci/run installs it", pkg, envVar, err)
		}
		t.Skipf("%s not installed; set %s or run .ci/run", pkg, envVar)
	}
	return p
}

// @modelcontextprotocol/server-everything over stdio: its tools through
// tool/list, echo and get-sum through tool/call, a resource read, a prompt
// got, and progress events from its long-running tool.
func TestServerEverything(t *testing.T) {
	script := npmServer(t, "AEP_TEST_MCP_EVERYTHING", "server-everything")
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 30, Servers: []aepmcp.ServerConfig{
		{ID: "everything", Command: "node", Args: []string{script, "stdio"}},
	}}})
	ctx := aeptest.Context(t)
	l, err := e.c.McpServerList(ctx, &msg.MCPServerListReq{})
	if err != nil || len(l.Servers) != 1 || l.Servers[0].Status != msg.MCPServerInfoStatusReady {
		t.Fatalf("servers: %+v %v", l, err)
	}
	info := l.Servers[0]
	t.Logf("server-everything: %s %s, protocol %s, %d tools, %d resources, %d prompts",
		*info.ServerName, *info.ServerVersion, *info.ProtocolVersion, info.ToolsCount, info.ResourcesCount, info.PromptsCount)
	names := e.toolNames(t, "everything")
	for _, want := range []string{"everything__echo", "everything__get-sum", "everything__trigger-long-running-operation"} {
		if !slices.Contains(names, want) {
			t.Fatalf("%s not in tool/list: %v", want, names)
		}
	}
	r := e.call(t, "everything__echo", map[string]any{"message": "hello aep"}, 0)
	if !r.Success || r.Summary != "Echo: hello aep" {
		t.Fatalf("echo: %+v", r)
	}
	r = e.call(t, "everything__get-sum", map[string]any{"a": 2, "b": 40}, 0)
	if !r.Success || !strings.Contains(text(r), "42") {
		t.Fatalf("get-sum: %+v", r)
	}
	// Bad arguments are the server's answer: a failed result, not a crash.
	if r := e.call(t, "everything__get-sum", map[string]any{"a": "x"}, 0); r.Success || *r.ErrorCode != msg.ToolResultErrorCodeTOOLERROR {
		t.Fatalf("get-sum with bad arguments: %+v", r)
	}
	streamed := 0
	r2, err := e.c.CallTool(withEvents(ctx, func() { streamed++ }), &msg.ToolCallReq{ToolName: "everything__trigger-long-running-operation",
		Arguments: map[string]any{"duration": 1, "steps": 4}, Streaming: true})
	if err != nil {
		t.Fatal(err)
	}
	var pcts []int
	for _, ev := range r2.Events {
		if ev.Kind == msg.ToolEventKindProgress {
			pcts = append(pcts, int(ev.Data["pct"].(float64)))
		}
	}
	if !r2.Success || !slices.Equal(pcts, []int{25, 50, 75, 100}) || streamed != 4 {
		t.Fatalf("long-running: progress %v, %d streamed, result %+v", pcts, streamed, r2)
	}

	rl, err := e.c.McpResourceList(ctx, &msg.MCPResourceListReq{ServerID: "everything"})
	if err != nil || len(rl.Resources) == 0 {
		t.Fatalf("resources: %+v %v", rl, err)
	}
	rr, err := e.c.McpResourceRead(ctx, &msg.MCPResourceReadReq{ServerID: "everything", Uri: rl.Resources[0].Uri})
	if err != nil || len(rr.Contents) == 0 || rr.Contents[0].Uri != rl.Resources[0].Uri || (rr.Contents[0].Text == nil && rr.Contents[0].Blob == nil) {
		t.Fatalf("read %s: %+v %v", rl.Resources[0].Uri, rr, err)
	}
	pl, err := e.c.McpPromptList(ctx, &msg.MCPPromptListReq{ServerID: "everything"})
	if err != nil || !slices.ContainsFunc(pl.Prompts, func(p msg.MCPPrompt) bool { return p.Name == "args-prompt" }) {
		t.Fatalf("prompts: %+v %v", pl, err)
	}
	pg, err := e.c.McpPromptGet(ctx, &msg.MCPPromptGetReq{ServerID: "everything", Name: "args-prompt", Arguments: map[string]string{"city": "Lyon"}})
	if err != nil || len(pg.Messages) == 0 || !strings.Contains(pg.Messages[0].Content["text"].(string), "Lyon") {
		t.Fatalf("prompt: %+v %v", pg, err)
	}
}

// @modelcontextprotocol/server-filesystem over stdio: a file read through
// tool/call, confined to the directory it was given.
func TestServerFilesystem(t *testing.T) {
	script := npmServer(t, "AEP_TEST_MCP_FILESYSTEM", "server-filesystem")
	dir := t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("line one\nline two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 30, Servers: []aepmcp.ServerConfig{
		{ID: "fs", Command: "node", Args: []string{script, dir}, ToolAllowList: []string{"read_*", "list_*"}},
	}}})
	names := e.toolNames(t, "fs")
	if !slices.Contains(names, "fs__read_text_file") || slices.Contains(names, "fs__write_file") {
		t.Fatalf("tools %v", names)
	}
	r := e.call(t, "fs__read_text_file", map[string]any{"path": file}, 0)
	if !r.Success || !strings.Contains(text(r), "line one") {
		t.Fatalf("read_text_file: %+v", r)
	}
	if r := e.call(t, "fs__read_text_file", map[string]any{"path": "/etc/passwd"}, 0); r.Success {
		t.Fatalf("read outside the allowed directory: %+v", r)
	}
	if r := e.call(t, "fs__write_file", map[string]any{"path": file, "content": "x"}, 0); *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("write_file outside the tool allow list: %+v", r)
	}
}

// startEverythingHTTP runs @modelcontextprotocol/server-everything over
// streamable HTTP on a free loopback port, stops it when the test ends,
// and returns its /mcp URL once it accepts connections.
func startEverythingHTTP(t *testing.T) string {
	t.Helper()
	script := npmServer(t, "AEP_TEST_MCP_EVERYTHING", "server-everything")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command("node", script, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on port %s: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://127.0.0.1:" + port + "/mcp"
}

// A run-time registration is the registering session's own: a second
// session registers the same server_id, and so owns the same tool names,
// without conflict; a session that registered nothing gets UNKNOWN_TOOL
// for those names and does not list them; and one session's unregister
// leaves the other's tools working (spec §5 rule 4, docs/DECISIONS.md,
// Dispatch: per-session claims).
func TestRegistrationsPerSession(t *testing.T) {
	url := startEverythingHTTP(t)
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 30, AllowURLs: []aepmcp.AllowURL{{Prefix: url}}}})
	a, b := e, &env{h: e.h, p: e.p, c: connect(t, e.h)}
	third := &env{h: e.h, p: e.p, c: connect(t, e.h)}
	for name, s := range map[string]*env{"first": a, "second": b} {
		if r := s.register(t, "ev", url, "echo", "get-sum"); !r.Ok {
			t.Fatalf("%s session's registration: %+v %s", name, r, deref(r.Error))
		}
	}
	for name, s := range map[string]*env{"first": a, "second": b} {
		if got := s.toolNames(t, "ev"); !slices.Equal(got, []string{"ev__echo", "ev__get-sum"}) {
			t.Fatalf("%s session lists %v", name, got)
		}
		if r := s.call(t, "ev__echo", map[string]any{"message": name}, 0); !r.Success || r.Summary != "Echo: "+name {
			t.Fatalf("%s session's echo: %+v", name, r)
		}
	}
	if got := third.toolNames(t, "ev"); len(got) != 0 {
		t.Fatalf("a session that registered nothing lists %v", got)
	}
	for _, tool := range []string{"ev__echo", "ev__get-sum"} {
		r := third.call(t, tool, map[string]any{"message": "x", "a": 1, "b": 2}, 0)
		if r.Success || r.ErrorCode == nil || *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
			t.Fatalf("%s from a session that registered nothing: %+v", tool, r)
		}
	}
	// The first session unregisters: its names are gone for it alone.
	if u, err := a.c.McpServerUnregister(aeptest.Context(t), &msg.MCPServerUnregisterReq{ServerID: "ev"}); err != nil || !u.Ok {
		t.Fatalf("unregister: %+v %v", u, err)
	}
	if r := a.call(t, "ev__echo", map[string]any{"message": "x"}, 0); r.ErrorCode == nil || *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("echo after unregister: %+v", r)
	}
	if r := b.call(t, "ev__get-sum", map[string]any{"a": 2, "b": 40}, 0); !r.Success || !strings.Contains(text(r), "42") {
		t.Fatalf("second session's get-sum after the first unregistered: %+v", r)
	}
}

func withEvents(ctx context.Context, fn func()) context.Context {
	return client.WithEvents(ctx, func(ev client.Event) {
		if ev.Type == "tool/event" && ev.Kind == wire.EventProgress {
			fn()
		}
	})
}
