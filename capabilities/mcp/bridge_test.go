package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	aepmcp "github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

// Both MCP protocol versions mcp-go speaks, pinned on the server side, over
// both transports: the bridge negotiates, lists and calls through each.
func TestProtocolVersions(t *testing.T) {
	for _, v := range []string{mcp.ProtocolVersion20260728, mcp.ProtocolVersion20251125} {
		t.Run("http/"+v, func(t *testing.T) {
			hs := startHTTP(t, "h", mcpserver.WithStreamableHTTPProtocolVersions(v))
			e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}}})
			r := e.register(t, "h", hs.url())
			if !r.Ok || r.Server == nil || r.Server.ProtocolVersion == nil || *r.Server.ProtocolVersion != v {
				t.Fatalf("register: %+v proto %v (error %v)", r.Server, deref(r.Server.ProtocolVersion), r.Error)
			}
			if res := e.call(t, "h__echo", map[string]any{"message": "hi"}, 0); !res.Success || text(res) != "h: hi" {
				t.Fatalf("echo: %+v %s", res, text(res))
			}
			// Progress notifications become progress events in both eras
			// (on 2026-07-28 they arrive in the call's own response stream).
			res := e.call(t, "h__progress", map[string]any{"steps": 2}, 0)
			var pcts []int
			for _, ev := range res.Events {
				if ev.Kind == msg.ToolEventKindProgress {
					pcts = append(pcts, int(ev.Data["pct"].(float64)))
				}
			}
			if !res.Success || !slices.Equal(pcts, []int{50, 100}) {
				t.Fatalf("progress events %v in %+v", pcts, res)
			}
		})
		t.Run("stdio/"+v, func(t *testing.T) {
			e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("s", v)}}})
			l, err := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Servers) != 1 || l.Servers[0].ProtocolVersion == nil || *l.Servers[0].ProtocolVersion != v ||
				l.Servers[0].Status != msg.MCPServerInfoStatusReady || *l.Servers[0].ServerName != "s" || *l.Servers[0].ServerVersion != "1.2.3" {
				t.Fatalf("servers: %+v proto %v", l.Servers, *l.Servers[0].ProtocolVersion)
			}
			if res := e.call(t, "s__echo", map[string]any{"message": "x"}, 0); !res.Success || text(res) != "s: x" {
				t.Fatalf("echo: %s", text(res))
			}
		})
	}
}

// Tools appear as plain tools: named <server>__<tool>, description, converted
// parameters and the whole input schema, tags mcp and the server id.
func TestToolDefinitions(t *testing.T) {
	hs := startHTTP(t, "d")
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: "http://" + hs.addr}}}})
	if r := e.register(t, "d", hs.url()); !r.Ok {
		t.Fatal(*r.Error)
	}
	l, err := e.c.ListTools(aeptest.Context(t), &msg.ToolListReq{Tags: []string{"mcp"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var echo *msg.ToolDefinition
	for i, d := range l.Tools {
		names = append(names, d.Name)
		if d.Name == "d__echo" {
			echo = &l.Tools[i]
		}
	}
	want := []string{"d__add_extra", "d__crash", "d__drop_extra", "d__echo", "d__fail", "d__progress", "d__slow", "d__structured"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	if echo.Description != "Echoes the message with the server's name." || !slices.Equal(echo.Tags, []string{"mcp", "d"}) ||
		len(echo.InputParameters) != 1 || echo.InputParameters[0].Name != "message" || echo.InputParameters[0].Type != "string" ||
		!*echo.InputParameters[0].Required || *echo.InputParameters[0].Description != "Text to echo" {
		t.Fatalf("echo definition: %+v", echo)
	}
	props, _ := echo.InputSchema["properties"].(map[string]any)
	if echo.InputSchema["type"] != "object" || props["message"] == nil || !slices.Contains(echo.InputSchema["required"].([]any), "message") {
		t.Fatalf("input schema: %v", echo.InputSchema)
	}
	// A name of no server is declined: the built-in plugin or the fallback answers.
	if r := e.call(t, "nobody__echo", nil, 0); r.ErrorCode == nil || *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("unknown server: %+v", r)
	}
	if r := e.call(t, "list_dir", map[string]any{"path": "."}, 0); !r.Success {
		t.Fatalf("built-in tool after the bridge declined: %s", text(r))
	}
}

// Results: content → data and summary, structuredContent → data, isError →
// TOOL_ERROR, progress notifications → progress events.
func TestCallResults(t *testing.T) {
	// mcp-go's server sends progress only on sessions made by initialize,
	// so this server keeps to 2025-11-25 (the npm server's test covers the other).
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("s", mcp.ProtocolVersion20251125)}}})
	r := e.call(t, "s__echo", map[string]any{"message": "hi"}, 0)
	blocks, _ := r.Data.([]any)
	if !r.Success || len(blocks) != 1 || blocks[0].(map[string]any)["text"] != "s: hi" || r.Summary != "s: hi" {
		t.Fatalf("echo: %+v", r)
	}
	r = e.call(t, "s__structured", nil, 0)
	if m, _ := r.Data.(map[string]any); !r.Success || m["n"] != float64(42) || m["ok"] != true {
		t.Fatalf("structured: %+v", r)
	}
	r = e.call(t, "s__fail", nil, 0)
	if r.Success || *r.ErrorCode != msg.ToolResultErrorCodeTOOLERROR || *r.Error != "the thing went wrong" {
		t.Fatalf("isError: %+v", r)
	}
	r = e.call(t, "s__progress", map[string]any{"steps": 4}, 0)
	var pcts []int
	for _, ev := range r.Events {
		if ev.Kind == msg.ToolEventKindProgress {
			pcts = append(pcts, int(ev.Data["pct"].(float64)))
		}
	}
	if !r.Success || !slices.Equal(pcts, []int{25, 50, 75, 100}) {
		t.Fatalf("progress events %v in %+v", pcts, r)
	}
}

// A stdio server that dies mid-call gives TOOL_ERROR, and the next call
// reconnects to a fresh process.
func TestCrashMidCallReconnects(t *testing.T) {
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("s", "")}}})
	r := e.call(t, "s__crash", nil, 0)
	if r.Success || *r.ErrorCode != msg.ToolResultErrorCodeTOOLERROR || !strings.Contains(*r.Error, "reconnects") {
		t.Fatalf("crash: %+v", r)
	}
	l, _ := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
	if l.Servers[0].Status != msg.MCPServerInfoStatusError || l.Servers[0].LastError == nil {
		t.Fatalf("after crash: %+v", l.Servers[0])
	}
	if r := e.call(t, "s__echo", map[string]any{"message": "back"}, 0); !r.Success || text(r) != "s: back" {
		t.Fatalf("after crash: %s", text(r))
	}
}

// A slow tool hits the call's timeout: TOOL_ERROR, the server sees the
// cancellation, and the connection stays usable.
func TestTimeoutCancelsServerSide(t *testing.T) {
	hs := startHTTP(t, "h", mcpserver.WithStreamableHTTPProtocolVersions(mcp.ProtocolVersion20260728))
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}}})
	e.register(t, "h", hs.url())
	t0 := time.Now()
	r := e.call(t, "h__slow", map[string]any{"seconds": 30}, 0.3)
	if r.Success || *r.ErrorCode != msg.ToolResultErrorCodeTOOLERROR || !strings.Contains(*r.Error, "timed out") || time.Since(t0) > 10*time.Second {
		t.Fatalf("slow: %+v after %s", r, time.Since(t0))
	}
	deadline := time.Now().Add(5 * time.Second)
	for hs.hooks.slowCancelled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if hs.hooks.slowCancelled.Load() == 0 {
		t.Fatal("the server's handler was never cancelled")
	}
	if r := e.call(t, "h__echo", map[string]any{"message": "still"}, 0); !r.Success {
		t.Fatalf("after timeout: %s", text(r))
	}
	// The stdio subprocess gets notifications/cancelled; the call still ends at the timeout.
	e2 := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("s", "")}}})
	if r := e2.call(t, "s__slow", map[string]any{"seconds": 30}, 0.3); r.Success || !strings.Contains(*r.Error, "timed out") {
		t.Fatalf("stdio slow: %+v", r)
	}
	if r := e2.call(t, "s__echo", map[string]any{"message": "ok"}, 0); !r.Success {
		t.Fatalf("stdio after timeout: %s", text(r))
	}
}

// Two servers offering the same tool names stay apart.
func TestCollidingToolNames(t *testing.T) {
	a, b := startHTTP(t, "alpha"), startHTTP(t, "beta")
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("c", "", "echo")}, AllowURLs: []aepmcp.AllowURL{{Prefix: a.url()}, {Prefix: b.url()}}}})
	e.register(t, "a", a.url(), "echo")
	e.register(t, "b", b.url(), "echo")
	if got := e.toolNames(t, "mcp"); !slices.Equal(got, []string{"a__echo", "b__echo", "c__echo"}) {
		t.Fatalf("tools %v", got)
	}
	for id, want := range map[string]string{"a": "alpha: x", "b": "beta: x", "c": "c: x"} {
		if r := e.call(t, id+"__echo", map[string]any{"message": "x"}, 0); text(r) != want {
			t.Fatalf("%s__echo: %s", id, text(r))
		}
	}
	// Tags name the server.
	if got := e.toolNames(t, "b"); !slices.Equal(got, []string{"b__echo"}) {
		t.Fatalf("tag b: %v", got)
	}
	// A second session sees the configured server but not the first session's.
	e2 := &env{h: e.h, p: e.p, c: connect(t, e.h)}
	if got := e2.toolNames(t, "mcp"); !slices.Equal(got, []string{"c__echo"}) {
		t.Fatalf("other session: %v", got)
	}
	if r := e2.call(t, "a__echo", map[string]any{"message": "x"}, 0); *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("other session's server: %+v", r)
	}
}

// The URL allowlist admits prefixes on a path boundary only; refused
// registrations are ok:false; the tool allow list hides and declines tools.
func TestAllowLists(t *testing.T) {
	hs := startHTTP(t, "h")
	base := "http://" + hs.addr
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: base + "/mcp"}}}})
	for _, tc := range []struct {
		name, id, url, want string
	}{
		{"other path", "x", base + "/other", "allow_urls"},
		{"longer port", "x", "http://" + hs.addr + "1/mcp", "allow_urls"},
		{"path continues without slash", "x", base + "/mcpx", "allow_urls"},
		{"not http", "x", "file:///bin/sh", "http or https"},
		{"user info", "x", "http://u:p@" + hs.addr + "/mcp", "user info"},
		{"bad id", "X_Y", base + "/mcp", "server_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.register(t, tc.id, tc.url)
			if r.Ok || r.Error == nil || !strings.Contains(*r.Error, tc.want) {
				t.Fatalf("register %s: %+v", tc.url, r)
			}
		})
	}
	if r := e.register(t, "h", base+"/mcp", "echo", "s*"); !r.Ok || r.Server.ToolsCount != 3 {
		t.Fatalf("allowed: %+v", r)
	}
	if r := e.register(t, "h", base+"/mcp"); r.Ok || !strings.Contains(*r.Error, "already registered") {
		t.Fatalf("duplicate: %+v", r)
	}
	if got := e.toolNames(t, "h"); !slices.Equal(got, []string{"h__echo", "h__slow", "h__structured"}) {
		t.Fatalf("tools %v", got)
	}
	if r := e.call(t, "h__fail", nil, 0); *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("tool outside the allow list: %+v", r)
	}
	// Without allow_urls nothing can be registered at run time.
	e2 := newEnv(t, &aepmcp.Plugin{})
	if r := e2.register(t, "h", base+"/mcp"); r.Ok {
		t.Fatal("registered without an allowlist")
	}
	// Unregister forgets the session's server; configured ones stay.
	u, err := e.c.McpServerUnregister(aeptest.Context(t), &msg.MCPServerUnregisterReq{ServerID: "h"})
	if err != nil || !u.Ok {
		t.Fatalf("unregister: %+v %v", u, err)
	}
	if got := e.toolNames(t, "mcp"); len(got) != 0 {
		t.Fatalf("after unregister: %v", got)
	}
}

// The server restarts on the same address: the call while it is down fails
// with TOOL_ERROR, the next one after it is back reconnects.
func TestReconnectAfterRestart(t *testing.T) {
	for _, v := range []string{mcp.ProtocolVersion20260728, mcp.ProtocolVersion20251125} {
		t.Run(v, func(t *testing.T) {
			hs := startHTTP(t, "h", mcpserver.WithStreamableHTTPProtocolVersions(v))
			e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}, BackoffMax: 0.2}})
			e.register(t, "h", hs.url())
			if r := e.call(t, "h__echo", map[string]any{"message": "1"}, 0); !r.Success {
				t.Fatal(text(r))
			}
			hs.stop()
			if r := e.call(t, "h__echo", map[string]any{"message": "2"}, 0); r.Success || *r.ErrorCode != msg.ToolResultErrorCodeTOOLERROR {
				t.Fatalf("while down: %+v", r)
			}
			hs.start(hs.addr)
			var r *msg.ToolResult
			for i := 0; i < 20; i++ { // within the backoff a call is refused at once
				if r = e.call(t, "h__echo", map[string]any{"message": "3"}, 0); r.Success {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !r.Success || text(r) != "h: 3" {
				t.Fatalf("after restart: %s", text(r))
			}
		})
	}
}

// Resources and prompts of a server, with the server's cursors.
func TestResourcesAndPrompts(t *testing.T) {
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("s", "")}}})
	ctx := aeptest.Context(t)
	rl, err := e.c.McpResourceList(ctx, &msg.MCPResourceListReq{ServerID: "s"})
	if err != nil || len(rl.Resources) != 1 || rl.Resources[0].Uri != "mem://a" {
		t.Fatalf("resources: %+v %v", rl, err)
	}
	rr, err := e.c.McpResourceRead(ctx, &msg.MCPResourceReadReq{ServerID: "s", Uri: "mem://a"})
	if err != nil || len(rr.Contents) != 1 || *rr.Contents[0].Text != "alpha" || *rr.Contents[0].MimeType != "text/plain" {
		t.Fatalf("read: %+v %v", rr, err)
	}
	pl, err := e.c.McpPromptList(ctx, &msg.MCPPromptListReq{ServerID: "s"})
	if err != nil || len(pl.Prompts) != 1 || pl.Prompts[0].Name != "greet" || !pl.Prompts[0].Arguments[0].Required {
		t.Fatalf("prompts: %+v %v", pl, err)
	}
	pg, err := e.c.McpPromptGet(ctx, &msg.MCPPromptGetReq{ServerID: "s", Name: "greet", Arguments: map[string]string{"who": "bob"}})
	if err != nil || len(pg.Messages) != 1 || pg.Messages[0].Role != "user" || pg.Messages[0].Content["text"] != "hello bob" {
		t.Fatalf("prompt: %+v %v", pg, err)
	}
	if _, err := e.c.McpResourceList(ctx, &msg.MCPResourceListReq{ServerID: "nope"}); err == nil || wire.ReasonOf(wire.AsError(err).Detail) != "not_found" || !strings.Contains(err.Error(), `no MCP server "nope"`) {
		t.Fatalf("unknown server: %v", err)
	}
}

// A snapshot keeps the session's registrations (without headers); a
// restore into a new session reconnects them.
func TestSnapshotRestoreReconnects(t *testing.T) {
	hs := startHTTP(t, "h")
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}}})
	ctx := aeptest.Context(t)
	if r, err := e.c.McpServerRegister(ctx, &msg.MCPServerRegisterReq{ServerID: "h", URL: hs.url(),
		Headers: map[string]string{"Authorization": "Bearer CANARY-9d1"}, ToolAllowList: []string{"echo"}}); err != nil || !r.Ok {
		t.Fatalf("register: %+v %v", r, err)
	}
	state, err := e.p.Snapshot(ctx, aeptest.Handle(t, e.c))
	if err != nil || strings.Contains(string(state), "CANARY") || !strings.Contains(string(state), hs.url()) {
		t.Fatalf("snapshot %s %v", state, err)
	}
	snap, err := e.c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	c2 := connect(t, e.h)
	if _, err := c2.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	e2 := &env{h: e.h, p: e.p, c: c2}
	if got := e2.toolNames(t, "mcp"); !slices.Equal(got, []string{"h__echo"}) {
		t.Fatalf("restored tools %v", got)
	}
	if r := e2.call(t, "h__echo", map[string]any{"message": "again"}, 0); !r.Success || text(r) != "h: again" {
		t.Fatalf("restored call: %s", text(r))
	}
}

// Config mistakes stop the plugin at start-up; a server that cannot start
// does not, and reports status error.
func TestConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *aepmcp.Plugin
		want string
	}{
		{"both", &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{{ID: "a", Command: "x", URL: "http://h/"}}}}, "exactly one"},
		{"neither", &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{{ID: "a"}}}}, "exactly one"},
		{"underscore id", &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{{ID: "a_b", Command: "x"}}}}, "id"},
		{"duplicate", &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{{ID: "a", Command: "x"}, {ID: "a", Command: "y"}}}}, "twice"},
		{"bad allow url", &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: "ftp://x"}}}}, "allow_urls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Provision(aeptest.Context(t), serverEnv())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{{ID: "gone", Command: "/nonexistent/mcp-server"}}}})
	l, _ := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
	if len(l.Servers) != 1 || l.Servers[0].Status != msg.MCPServerInfoStatusError || l.Servers[0].LastError == nil {
		t.Fatalf("servers: %+v", l.Servers)
	}
	// A server that never connected never listed its tools, so no plugin
	// owns its tool names and the kernel answers UNKNOWN_TOOL (tool/call
	// goes only to the claiming owner); a server that was connected and
	// went down answers TOOL_ERROR (TestReconnectAfterRestart).
	if r := e.call(t, "gone__x", nil, 0); r.Success || r.ErrorCode == nil || *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("call to a server that never connected: %+v", r)
	}
	// Its resources are refused with the reason it is down, in the words
	// mcp/server/list shows.
	_, err := e.c.McpResourceList(aeptest.Context(t), &msg.MCPResourceListReq{ServerID: "gone"})
	we := aeptest.WantReason(t, err, wire.CodeRuntimeError, aepmcp.ReasonUnavailable)
	if !strings.Contains(we.Message, `mcp server "gone"`) {
		t.Fatalf("resource list of a down server: %s", we.Message)
	}
}

// A server that is slow to connect holds up no one else: mcp/server/list
// reports it `connecting` at once, and unregistering it ends the connect.
func TestListWhileConnecting(t *testing.T) {
	hit := make(chan struct{}, 1)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // the server notices a closed client only after the body
		select {
		case hit <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	defer hang.Close()
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 30, AllowURLs: []aepmcp.AllowURL{{Prefix: hang.URL}}}})
	registered := make(chan *msg.MCPServerRegisterResp, 1)
	go func() {
		r, err := e.c.McpServerRegister(aeptest.Context(t), &msg.MCPServerRegisterReq{ServerID: "slow", URL: hang.URL + "/mcp"})
		if err != nil {
			t.Error(err)
		}
		registered <- r
	}()
	<-hit // the connect is under way
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := e.c.McpServerList(ctx, &msg.MCPServerListReq{})
	if err != nil {
		t.Fatalf("list while a server connects: %v", err)
	}
	if len(list.Servers) != 1 || list.Servers[0].ServerID != "slow" || list.Servers[0].Status != msg.MCPServerInfoStatusConnecting {
		t.Fatalf("list %+v", list.Servers)
	}
	un, err := e.c.McpServerUnregister(ctx, &msg.MCPServerUnregisterReq{ServerID: "slow"})
	if err != nil || !un.Ok {
		t.Fatalf("unregister while connecting: %+v %v", un, err)
	}
	select { // unregister ended the connect

	case r := <-registered:
		if r == nil || r.Ok {
			t.Fatalf("register of an unregistered server %+v", r)
		}
	case <-ctx.Done():
		t.Fatal("register did not return after unregister")
	}
	if list, err := e.c.McpServerList(ctx, &msg.MCPServerListReq{}); err != nil || len(list.Servers) != 0 {
		t.Fatalf("list after unregister %+v %v", list, err)
	}
}

// A server that announces a change of its tools (notifications/tools/
// list_changed) is listed again: tool/list gains and loses the tool without
// a reconnect, and the added tool is callable. Over stdio the change comes
// from a call of the agent's; over HTTP from the server itself, outside any
// call, so the notification needs the standing stream (a GET on
// 2025-11-25, subscriptions/listen on 2026-07-28).
func TestToolListChanged(t *testing.T) {
	for _, v := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run("stdio/"+v, func(t *testing.T) {
			e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{stdioServer("s", v)}}})
			viaCall := func(tool string) func() {
				return func() {
					if r := e.call(t, "s__"+tool, nil, 0); !r.Success {
						t.Fatalf("%s: %+v", tool, r)
					}
				}
			}
			testToolListChanged(t, e, "s", viaCall("add_extra"), viaCall("drop_extra"))
		})
		t.Run("http/"+v, func(t *testing.T) {
			hs := startHTTP(t, "h", mcpserver.WithStreamableHTTPProtocolVersions(v))
			e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}}})
			if r := e.register(t, "h", hs.url()); !r.Ok {
				t.Fatalf("register: %+v", r)
			}
			testToolListChanged(t, e, "h", func() { addExtra(hs.mcp, "h") }, func() { hs.mcp.DeleteTools("extra") })
		})
	}
}

func testToolListChanged(t *testing.T, e *env, server string, add, drop func()) {
	extra := server + "__extra"
	has := func() bool { return slices.Contains(e.toolNames(t, "mcp"), extra) }
	// Polled: the notification and the new listing arrive after the change.
	// The change is made again now and then, since a standing stream may
	// still be opening when it is first made.
	waitFor := func(want bool, change func()) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for again := time.Now(); has() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s listed = %v, want %v: %v", extra, !want, want, e.toolNames(t, "mcp"))
			}
			if time.Now().After(again) {
				change()
				again = time.Now().Add(time.Second)
			}
		}
	}
	if has() {
		t.Fatalf("%s listed before it exists", extra)
	}
	waitFor(true, add)
	if r := e.call(t, extra, nil, 0); !r.Success || text(r) != server+": extra" {
		t.Fatalf("extra: %+v %s", r, text(r))
	}
	waitFor(false, drop)
	if r := e.call(t, extra, nil, 0); r.Success || r.ErrorCode == nil || *r.ErrorCode != msg.ToolResultErrorCodeUNKNOWNTOOL {
		t.Fatalf("extra after removal: %+v", r)
	}
}
