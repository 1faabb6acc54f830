package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	aepmcp "github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

// envFromYAML starts a host from a YAML config (so ${ENV} is expanded the
// way a host's config file is) and connects an agent with tools and mcp.
func envFromYAML(t *testing.T, yaml string) *env {
	t.Helper()
	cfg, err := server.ParseConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(context.Background(), cfg, server.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h.Close(ctx)
	})
	return &env{h: h, c: connect(t, h)}
}

// waitReady polls mcp/server/list until every server is ready.
func (e *env) waitReady(t *testing.T) []msg.MCPServerInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
		if err != nil {
			t.Fatal(err)
		}
		ready := len(l.Servers) > 0
		for _, s := range l.Servers {
			ready = ready && s.Status == msg.MCPServerInfoStatusReady
		}
		if ready {
			return l.Servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers not ready: %+v", l.Servers)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// headerRecorder serves an mcp-go server over streamable HTTP and keeps the
// values each named header arrived with.
type headerRecorder struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (hr *headerRecorder) wrap(next http.Handler, names ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hr.mu.Lock()
		for _, n := range names {
			if v := r.Header.Get(n); v != "" && !slices.Contains(hr.seen[n], v) {
				hr.seen[n] = append(hr.seen[n], v)
			}
		}
		hr.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (hr *headerRecorder) values(name string) []string {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return slices.Clone(hr.seen[name])
}

// TestHeadersAndSecretsReachHTTPServers: headers of a configured server,
// with a secret given as ${ENV} in the config, reach the server on every
// request; a run-time registration sends its own headers and those of the
// allowlist entry that admits it; none of them is ever reported back.
func TestHeadersAndSecretsReachHTTPServers(t *testing.T) {
	t.Setenv("AEP_AUDIT_MCP_TOKEN", "s3cret-7f2")
	rec := &headerRecorder{seen: map[string][]string{}}
	ts := httptest.NewServer(rec.wrap(mcpserver.NewStreamableHTTPServer(newGoServer("hdr", nil)), "Authorization", "X-Allow", "X-Wire"))
	// After the host's own cleanup, which ends the bridge's standing streams.
	t.Cleanup(ts.Close)
	e := envFromYAML(t, fmt.Sprintf(`server:
  auth_token: `+aeptest.Token+`
plugins:
  - name: mcp
    type: mcp
    cls: aep.mcp.bridge
    config:
      servers:
        - id: conf
          url: %[1]s/mcp
          headers: {Authorization: "Bearer ${AEP_AUDIT_MCP_TOKEN}"}
      allow_urls:
        - prefix: %[1]s/run
          headers: {X-Allow: "${AEP_AUDIT_MCP_TOKEN}-allow"}
`, ts.URL))
	e.waitReady(t)
	if r := e.call(t, "conf__echo", map[string]any{"message": "hi"}, 0); !r.Success || text(r) != "hdr: hi" {
		t.Fatalf("configured server: %+v", r)
	}
	if got := rec.values("Authorization"); !slices.Equal(got, []string{"Bearer s3cret-7f2"}) {
		t.Fatalf("Authorization seen by the server: %q", got)
	}
	r, err := e.c.McpServerRegister(aeptest.Context(t), &msg.MCPServerRegisterReq{ServerID: "run", URL: ts.URL + "/run/mcp",
		Headers: map[string]string{"X-Wire": "wire-secret-41"}})
	if err != nil || !r.Ok {
		t.Fatalf("register: %+v %v", r, err)
	}
	if res := e.call(t, "run__echo", map[string]any{"message": "x"}, 0); !res.Success {
		t.Fatalf("registered server: %+v", res)
	}
	if a, w := rec.values("X-Allow"), rec.values("X-Wire"); !slices.Equal(a, []string{"s3cret-7f2-allow"}) || !slices.Equal(w, []string{"wire-secret-41"}) {
		t.Fatalf("run-time headers seen by the server: X-Allow %q, X-Wire %q", a, w)
	}
	l, err := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(l)
	if strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "wire-secret") {
		t.Fatalf("a header value is reported: %s", b)
	}
}

// TestStdioServerEnvironment: a stdio server gets its configured env (a
// secret through ${ENV}) but not the host's environment. The npm
// server-everything reports its environment with get-env.
func TestStdioServerEnvironment(t *testing.T) {
	script := npmServer(t, "AEP_TEST_MCP_EVERYTHING", "server-everything")
	t.Setenv("AEP_AUDIT_MCP_SECRET", "from-host-env-93")
	t.Setenv("AEP_AUDIT_HOST_ONLY", "must-not-leak")
	e := envFromYAML(t, fmt.Sprintf(`server:
  auth_token: `+aeptest.Token+`
plugins:
  - name: mcp
    type: mcp
    cls: aep.mcp.bridge
    config:
      connect_timeout: 30
      servers:
        - id: everything
          command: node
          args: [%q, stdio]
          env: {AEP_AUDIT_PASSED: "${AEP_AUDIT_MCP_SECRET}"}
`, script))
	e.waitReady(t)
	r := e.call(t, "everything__get-env", nil, 0)
	if !r.Success {
		t.Fatalf("get-env: %+v", r)
	}
	blocks, _ := r.Data.([]any)
	if len(blocks) == 0 {
		t.Fatalf("get-env data %v", r.Data)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(blocks[0].(map[string]any)["text"].(string)), &env); err != nil {
		t.Fatal(err)
	}
	if env["AEP_AUDIT_PASSED"] != "from-host-env-93" {
		t.Fatalf("configured env not passed: %v", env)
	}
	for _, k := range []string{"AEP_AUDIT_HOST_ONLY", "AEP_AUDIT_MCP_SECRET", "AEP_TEST_PG_PASSWORD"} {
		if _, ok := env[k]; ok {
			t.Fatalf("the host's %s reached the server", k)
		}
	}
}

// TestConnectTimeout: a server that accepts the connection and never
// answers is given up after the connect timeout — the plugin's for a stdio
// server from config, the registration's own for one registered at run time
// — with status error and a last_error that says so.
func TestConnectTimeout(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // the server notices a closed client only after the body
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 0.3, AllowURLs: []aepmcp.AllowURL{{Prefix: hang.URL}}, Servers: []aepmcp.ServerConfig{{ID: "mute", Command: "sleep", Args: []string{"1000"}}}}})
	l, err := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
	if err != nil || len(l.Servers) != 1 || l.Servers[0].Status != msg.MCPServerInfoStatusError ||
		l.Servers[0].LastError == nil || !strings.Contains(*l.Servers[0].LastError, "no answer within 300ms") {
		t.Fatalf("stdio server that never answers: %+v %v", l, err)
	}
	// The registration's timeout overrides the plugin's; the request would
	// outlive this context if the 60 s asked for in the plugin applied.
	e2 := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 60, AllowURLs: []aepmcp.AllowURL{{Prefix: hang.URL}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := e2.c.McpServerRegister(ctx, &msg.MCPServerRegisterReq{ServerID: "slow", URL: hang.URL + "/mcp", Timeout: ptrF(0.3)})
	if err != nil || r.Ok || r.Server == nil || r.Server.Status != msg.MCPServerInfoStatusError || r.Error == nil || !strings.Contains(*r.Error, "no answer within 300ms") {
		t.Fatalf("register of a server that never answers: %+v %v", r, err)
	}
}

func ptrF(f float64) *float64 { return &f }

// TestCancelForwarded: an agent's cancel of a tool/call (the client sends
// `cancel` when its context ends) reaches the MCP server's handler, and the
// connection stays usable.
func TestCancelForwarded(t *testing.T) {
	hs := startHTTP(t, "h")
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}}})
	if r := e.register(t, "h", hs.url()); !r.Ok {
		t.Fatalf("register: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "h__slow", Arguments: map[string]any{"seconds": 30}}); err == nil {
		t.Fatal("a cancelled call answered")
	}
	deadline := time.Now().Add(10 * time.Second)
	for hs.hooks.slowCancelled.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server's handler never saw the cancel")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := e.call(t, "h__echo", map[string]any{"message": "after"}, 0); !r.Success || text(r) != "h: after" {
		t.Fatalf("after cancel: %+v", r)
	}
}

// TestResourceAndPromptCursors: resources and prompts come in the server's
// pages, and the cursor of each reply fetches the next until there is none.
// The server offers no tools at all, which is no reason to refuse it.
func TestResourceAndPromptCursors(t *testing.T) {
	s := mcpserver.NewMCPServer("paged", "1.0.0", mcpserver.WithResourceCapabilities(false, false),
		mcpserver.WithPromptCapabilities(false), mcpserver.WithPaginationLimit(2))
	var wantURIs, wantPrompts []string
	for i := range 5 {
		uri := fmt.Sprintf("mem://r%d", i)
		wantURIs = append(wantURIs, uri)
		s.AddResource(mcp.NewResource(uri, fmt.Sprintf("r%d", i)), func(ctx context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, Text: uri}}, nil
		})
	}
	for i := range 3 {
		name := fmt.Sprintf("p%d", i)
		wantPrompts = append(wantPrompts, name)
		s.AddPrompt(mcp.NewPrompt(name), func(ctx context.Context, r mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult(name, []mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent(name))}), nil
		})
	}
	ts := httptest.NewServer(mcpserver.NewStreamableHTTPServer(s))
	t.Cleanup(ts.Close)
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: ts.URL}}}})
	if r := e.register(t, "paged", ts.URL+"/mcp"); !r.Ok || r.Server.ToolsCount != 0 {
		t.Fatalf("register: %+v error %s", r.Server, deref(r.Error))
	}
	ctx := aeptest.Context(t)
	var uris []string
	pages := 0
	for cursor := (*string)(nil); ; pages++ {
		r, err := e.c.McpResourceList(ctx, &msg.MCPResourceListReq{ServerID: "paged", Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Resources) > 2 {
			t.Fatalf("page of %d resources, the server's pages hold 2", len(r.Resources))
		}
		for _, res := range r.Resources {
			uris = append(uris, res.Uri)
		}
		if cursor = r.NextCursor; cursor == nil {
			pages++
			break
		}
		if pages > 10 {
			t.Fatal("resource cursors never end")
		}
	}
	slices.Sort(uris)
	if !slices.Equal(uris, wantURIs) || pages != 3 {
		t.Fatalf("resources %v in %d pages, want %v in 3", uris, pages, wantURIs)
	}
	var prompts []string
	pages = 0
	for cursor := (*string)(nil); ; pages++ {
		r, err := e.c.McpPromptList(ctx, &msg.MCPPromptListReq{ServerID: "paged", Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Prompts {
			prompts = append(prompts, p.Name)
		}
		if cursor = r.NextCursor; cursor == nil {
			pages++
			break
		}
		if pages > 10 {
			t.Fatal("prompt cursors never end")
		}
	}
	slices.Sort(prompts)
	if !slices.Equal(prompts, wantPrompts) || pages != 2 {
		t.Fatalf("prompts %v in %d pages, want %v in 2", prompts, pages, wantPrompts)
	}
	// A resource from a later page reads like any other.
	rr, err := e.c.McpResourceRead(ctx, &msg.MCPResourceReadReq{ServerID: "paged", Uri: "mem://r4"})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text == nil || *rr.Contents[0].Text != "mem://r4" {
		t.Fatalf("read mem://r4: %+v %v", rr, err)
	}
}

// TestFailedRegistrationLeavesNothing: a run-time registration whose server
// cannot be reached answers ok false with the reason and the status it
// reached, and leaves nothing behind — no listed server, no tools, no held
// server_id — so the same id registers once the server is up.
func TestFailedRegistrationLeavesNothing(t *testing.T) {
	hs := startHTTP(t, "h")
	addr := hs.addr
	hs.stop()
	e := newEnv(t, &aepmcp.Plugin{Settings: aepmcp.Settings{ConnectTimeout: 5, AllowURLs: []aepmcp.AllowURL{{Prefix: "http://" + addr}}}})
	r := e.register(t, "h", "http://"+addr+"/mcp")
	if r.Ok || r.Error == nil || *r.Error == "" || r.Server == nil || r.Server.Status != msg.MCPServerInfoStatusError {
		t.Fatalf("register of a server that is down: %+v", r)
	}
	l, err := e.c.McpServerList(aeptest.Context(t), &msg.MCPServerListReq{})
	if err != nil || len(l.Servers) != 0 {
		t.Fatalf("list after a failed registration: %+v %v", l, err)
	}
	if names := e.toolNames(t); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "h__") }) {
		t.Fatalf("tools after a failed registration: %v", names)
	}
	un, err := e.c.McpServerUnregister(aeptest.Context(t), &msg.MCPServerUnregisterReq{ServerID: "h"})
	if err != nil || un.Ok {
		t.Fatalf("unregister after a failed registration: %+v %v", un, err)
	}
	hs.start(addr)
	if r := e.register(t, "h", "http://"+addr+"/mcp"); !r.Ok || r.Server.Status != msg.MCPServerInfoStatusReady {
		t.Fatalf("register once the server is up: %+v", r)
	}
	if r := e.call(t, "h__echo", map[string]any{"message": "up"}, 0); !r.Success {
		t.Fatalf("call after registering: %s", text(r))
	}
}
