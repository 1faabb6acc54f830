package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	aepmcp "github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// TestMain doubles as a stdio MCP server: the edge-case tests re-execute the
// test binary with AEP_MCP_TEST_SERVER set, so the bridge talks to a real
// subprocess that can really crash.
func TestMain(m *testing.M) {
	if name := os.Getenv("AEP_MCP_TEST_SERVER"); name != "" {
		serveStdio(name, os.Getenv("AEP_MCP_TEST_VERSIONS"))
	}
	os.Exit(m.Run())
}

// serveStdio serves newGoServer on stdin/stdout and exits. Pinned to
// 2025-11-25 it answers server/discover with "method not found", as every
// server predating 2026-07-28 does (mcp-go's stdio server serves both eras
// and has no option to refuse the newer one).
func serveStdio(name, version string) {
	s := mcpserver.NewStdioServer(newGoServer(name, nil))
	in := io.Reader(os.Stdin)
	if version == mcp.ProtocolVersion20251125 {
		pr, pw := io.Pipe()
		go func() {
			sc := bufio.NewScanner(os.Stdin)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				if json.Unmarshal(sc.Bytes(), &m) == nil && m.Method == string(mcp.MethodServerDiscover) {
					fmt.Fprintf(os.Stdout, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`+"\n", m.ID)
					continue
				}
				pw.Write(append(sc.Bytes(), '\n'))
			}
			pw.Close()
		}()
		in = pr
	}
	if err := s.Listen(context.Background(), in, os.Stdout); err != nil && err != io.EOF {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serverHooks lets a test observe the in-process server's slow tool.
type serverHooks struct {
	slowCancelled atomic.Int32
}

// newGoServer is an mcp-go server with the tools the edge cases need:
// echo, slow (sleeps or stops when cancelled), crash (the process exits
// mid-call), fail (isError), progress (notifications/progress), and a
// structured tool.
func newGoServer(name string, hooks *serverHooks) *mcpserver.MCPServer {
	s := mcpserver.NewMCPServer(name, "1.2.3", mcpserver.WithToolCapabilities(true),
		mcpserver.WithResourceCapabilities(false, false), mcpserver.WithPromptCapabilities(false))
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echoes the message with the server's name."),
		mcp.WithString("message", mcp.Required(), mcp.Description("Text to echo"))),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(name + ": " + r.GetString("message", "")), nil
		})
	s.AddTool(mcp.NewTool("slow", mcp.WithNumber("seconds", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			d := time.Duration(r.GetFloat("seconds", 1) * float64(time.Second))
			select {
			case <-time.After(d):
				return mcp.NewToolResultText("slept"), nil
			case <-ctx.Done():
				if hooks != nil {
					hooks.slowCancelled.Add(1)
				}
				return nil, ctx.Err()
			}
		})
	s.AddTool(mcp.NewTool("crash"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if hooks == nil { // only a subprocess may exit
			os.Exit(3)
		}
		return nil, fmt.Errorf("crash is for subprocesses")
	})
	s.AddTool(mcp.NewTool("fail"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultError("the thing went wrong"), nil
	})
	s.AddTool(mcp.NewTool("structured"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultStructured(map[string]any{"n": 42, "ok": true}, "n is 42"), nil
	})
	s.AddTool(mcp.NewTool("progress", mcp.WithNumber("steps", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			steps := int(r.GetFloat("steps", 3))
			if r.Params.Meta != nil && r.Params.Meta.ProgressToken != nil {
				for i := 1; i <= steps; i++ {
					mcpserver.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
						map[string]any{"progressToken": r.Params.Meta.ProgressToken, "progress": i, "total": steps, "message": "step " + strconv.Itoa(i)})
					// mcp-go's stdio server writes notifications from a goroutine of
					// their own, so a reply sent at once could overtake them.
					time.Sleep(20 * time.Millisecond)
				}
			}
			return mcp.NewToolResultText("done"), nil
		})
	// add_extra adds a tool at run time and drop_extra removes it; mcp-go announces
	// each change with notifications/tools/list_changed.
	s.AddTool(mcp.NewTool("add_extra"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.AddTool(mcp.NewTool("extra", mcp.WithDescription("Added at run time.")),
			func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText(name + ": extra"), nil
			})
		return mcp.NewToolResultText("grown"), nil
	})
	s.AddTool(mcp.NewTool("drop_extra"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.DeleteTools("extra")
		return mcp.NewToolResultText("shrunk"), nil
	})
	s.AddResource(mcp.NewResource("mem://a", "a", mcp.WithMIMEType("text/plain")),
		func(ctx context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "mem://a", MIMEType: "text/plain", Text: "alpha"}}, nil
		})
	s.AddPrompt(mcp.NewPrompt("greet", mcp.WithArgument("who", mcp.RequiredArgument())),
		func(ctx context.Context, r mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult("greeting", []mcp.PromptMessage{
				mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("hello "+r.Params.Arguments["who"]))}), nil
		})
	return s
}

// addExtra adds the tool "extra" to s.
func addExtra(s *mcpserver.MCPServer, name string) {
	s.AddTool(mcp.NewTool("extra", mcp.WithDescription("Added at run time.")),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(name + ": extra"), nil
		})
}

// httpServer is an in-process streamable-HTTP MCP server on a fixed
// loopback address, so it can be stopped and started again there.
type httpServer struct {
	t     testing.TB
	name  string
	addr  string
	opts  []mcpserver.StreamableHTTPOption
	hooks *serverHooks
	mu    sync.Mutex
	srv   *http.Server
	mcp   *mcpserver.MCPServer // the server behind srv, to change its tools
}

func startHTTP(t testing.TB, name string, opts ...mcpserver.StreamableHTTPOption) *httpServer {
	t.Helper()
	h := &httpServer{t: t, name: name, opts: opts, hooks: &serverHooks{}}
	h.start("127.0.0.1:0")
	t.Cleanup(h.stop)
	return h
}

func (h *httpServer) start(addr string) {
	h.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old socket may linger briefly after a stop
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	mcpSrv := newGoServer(h.name, h.hooks)
	srv := &http.Server{Handler: mcpserver.NewStreamableHTTPServer(mcpSrv, h.opts...)}
	h.mu.Lock()
	h.srv, h.mcp = srv, mcpSrv
	h.mu.Unlock()
	go srv.Serve(ln)
}

func (h *httpServer) stop() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	h.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
	}
}

func (h *httpServer) url() string { return "http://" + h.addr + "/mcp" }

// stdioServer declares the re-executed test binary as a configured server.
func stdioServer(id, versions string, allow ...string) aepmcp.ServerConfig {
	env := map[string]string{"AEP_MCP_TEST_SERVER": id}
	if versions != "" {
		env["AEP_MCP_TEST_VERSIONS"] = versions
	}
	return aepmcp.ServerConfig{ID: id, Command: os.Args[0], Args: []string{"-test.run=^$"}, Env: env, ToolAllowList: allow}
}

type env struct {
	h *server.Host
	p *aepmcp.Plugin
	c *client.Client
}

// newEnv starts a host with the bridge and the built-in tools (so declines
// reach another tool plugin) and connects an agent with tools and mcp.
func newEnv(t testing.TB, p *aepmcp.Plugin) *env {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		aeptest.Plugin("mcp", p),
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithDataDir(t.TempDir()), server.WithLogger(logger))
	return &env{h: h, p: p, c: connect(t, h)}
}

// connect handshakes another agent with tools and mcp.
func connect(t testing.TB, h *server.Host) *client.Client {
	t.Helper()
	return aeptest.Connect(t, h, "tools", "mcp")
}

func (e *env) call(t *testing.T, name string, args map[string]any, timeout float64) *msg.ToolResult {
	t.Helper()
	req := &msg.ToolCallReq{ToolName: name, Arguments: args}
	if timeout > 0 {
		req.Timeout = &timeout
	}
	r, err := e.c.CallTool(aeptest.Context(t), req)
	if err != nil {
		t.Fatalf("tool/call %s: %v", name, err)
	}
	return r
}

func (e *env) register(t *testing.T, id, url string, allow ...string) *msg.MCPServerRegisterResp {
	t.Helper()
	r, err := e.c.McpServerRegister(aeptest.Context(t), &msg.MCPServerRegisterReq{ServerID: id, URL: url, ToolAllowList: allow})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) toolNames(t *testing.T, tags ...string) []string {
	t.Helper()
	r, err := e.c.ListTools(aeptest.Context(t), &msg.ToolListReq{Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range r.Tools {
		out = append(out, d.Name)
	}
	return out
}

func text(r *msg.ToolResult) string {
	if r.Error != nil {
		return *r.Error
	}
	if s, ok := r.Summary.(string); ok {
		return s
	}
	return fmt.Sprint(r.Data)
}

// serverEnv is the env of a plugin provisioned without a host; the host
// always gives a logger, so this does too.
func serverEnv() server.PluginEnv {
	return server.PluginEnv{Name: "mcp", Type: "mcp", Claims: server.NewClaims(), Logger: slog.New(slog.DiscardHandler)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
