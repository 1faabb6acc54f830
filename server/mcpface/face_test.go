package mcpface_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/mcpface"
	"github.com/aephost/aep/server/toolrun"
)

// revisions are the two MCP revisions mcp-go speaks that the face must
// serve: the last with sessions and the stateless one.
var revisions = []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728}

type echoIn struct {
	Text string `json:"text" desc:"what to echo"`
}
type echoOut struct {
	Echo string `json:"echo"`
}
type slowIn struct {
	Steps int  `json:"steps"`
	Wait  bool `json:"wait,omitempty"`
}

// rig is a real host with a tools plugin of test tools, its MCP face on a
// loopback HTTP server, and what the slow tool saw.
type rig struct {
	h         *server.Host
	face      *mcpface.Face
	url       string
	started   chan struct{}
	cancelled chan struct{}
}

func newRig(t testing.TB, edit func(*server.Config), opts ...server.Option) *rig {
	t.Helper()
	r := &rig{started: make(chan struct{}, 16), cancelled: make(chan struct{}, 16)}
	reg := toolrun.NewRegistry()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(toolrun.Register(reg, "echo", "Echo text back.", func(ctx context.Context, in echoIn) (echoOut, error) {
		return echoOut{Echo: in.Text}, nil
	}, toolrun.Idempotent(), toolrun.Tags("read")))
	must(toolrun.Register(reg, "fail", "Always fails.", func(ctx context.Context, in struct{}) (echoOut, error) {
		return echoOut{}, errors.New("it broke")
	}))
	must(toolrun.Register(reg, "danger", "Denied by policy.", func(ctx context.Context, in struct{}) (echoOut, error) {
		return echoOut{}, nil
	}, toolrun.Tags("write")))
	// slow reports progress step by step; with wait it then blocks until
	// its call is cancelled, and reports that it saw the cancellation.
	must(toolrun.Register(reg, "slow", "Reports progress.", func(ctx context.Context, in slowIn) (echoOut, error) {
		r.started <- struct{}{}
		for i := 1; i <= in.Steps; i++ {
			_ = toolrun.Progress(ctx, i*100/in.Steps, "step")
		}
		if in.Wait {
			<-ctx.Done()
			r.cancelled <- struct{}{}
			return echoOut{}, ctx.Err()
		}
		return echoOut{Echo: "done"}, nil
	}, toolrun.Streaming(), toolrun.Tags("write")))
	// talk writes lines as run_command does: `log` events, stdout at info
	// and stderr at error.
	must(toolrun.Register(reg, "talk", "Writes lines.", func(ctx context.Context, in struct{}) (echoOut, error) {
		for _, l := range []struct{ level, stream, message string }{
			{"info", "stdout", "line 1"}, {"info", "stdout", "line 2"}, {"error", "stderr", "oops"},
		} {
			_ = toolrun.Emit(ctx, "log", map[string]any{"level": l.level, "stream": l.stream, "message": l.message})
		}
		return echoOut{Echo: "said"}, nil
	}, toolrun.Streaming(), toolrun.Tags("read")))
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.ToolPolicy.Deny = []string{"danger"}
		c.MCPFace.Capabilities = []string{"tools"}
		if edit != nil {
			edit(c)
		}
	})
	r.h = aeptest.NewHost(t, cfg, []server.PluginSpec{aeptest.Plugin("tools", tools.NewPlugin(reg))}, opts...)
	r.face = mcpface.New(r.h)
	t.Cleanup(r.face.Close)
	srv := httptest.NewServer(r.face)
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/mcp"
	return r
}

// connect starts mcp-go's client on the face over streamable HTTP, pinned
// to rev, and checks that rev is what was negotiated.
func (r *rig) connect(t testing.TB, rev string, token string, opts ...mcpclient.ClientOption) (*mcpclient.Client, error) {
	return r.connectWith(t, rev, map[string]string{"Authorization": "Bearer " + token}, opts...)
}

// connectWith is connect with the HTTP headers of every request.
func (r *rig) connectWith(t testing.TB, rev string, headers map[string]string, opts ...mcpclient.ClientOption) (*mcpclient.Client, error) {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(r.url, transport.WithHTTPHeaders(headers))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, append([]mcpclient.ClientOption{mcpclient.WithProtocolVersion(rev)}, opts...)...)
	ctx := aeptest.Context(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "mcpface-test", Version: "1"}
	init.Params.ProtocolVersion = rev
	if _, err := c.Initialize(ctx, init); err != nil {
		return nil, err
	}
	if got := c.ProtocolVersion(); got != rev {
		t.Fatalf("negotiated %q, want %q", got, rev)
	}
	return c, nil
}

func callText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsOverStreamableHTTP(t *testing.T) {
	r := newRig(t, nil)
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) {
			c, err := r.connect(t, rev, aeptest.Token)
			if err != nil {
				t.Fatal(err)
			}
			ctx := aeptest.Context(t)
			lr, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]mcp.Tool{}
			for _, tl := range lr.Tools {
				byName[tl.Name] = tl
			}
			echo, ok := byName["echo"]
			// danger is denied by server.tool_policy, which hides it.
			if _, denied := byName["danger"]; !ok || denied || len(byName) != 4 {
				t.Fatalf("tools: %v", lr.Tools)
			}
			if echo.Annotations.IdempotentHint == nil || !*echo.Annotations.IdempotentHint ||
				echo.Annotations.ReadOnlyHint == nil || !*echo.Annotations.ReadOnlyHint {
				t.Fatalf("echo annotations: %+v", echo.Annotations)
			}
			if d := byName["slow"].Annotations.DestructiveHint; d == nil || !*d {
				t.Fatalf("slow annotations: %+v", byName["slow"].Annotations)
			}
			in, _ := json.Marshal(echo.InputSchema)
			if !strings.Contains(string(in), `"text"`) {
				t.Fatalf("echo input schema: %s", in)
			}
			if echo.OutputSchema.Type != "object" {
				t.Fatalf("echo output schema: %+v", echo.OutputSchema)
			}

			for _, tc := range []struct {
				name, tool string
				args       map[string]any
				isError    bool
				code, text string
			}{
				{name: "ok", tool: "echo", args: map[string]any{"text": "hi"}, text: `{"echo":"hi"}`},
				{name: "tool error", tool: "fail", isError: true, code: "TOOL_ERROR", text: "it broke"},
				{name: "policy", tool: "danger", isError: true, code: "TOOL_DENIED"},
				{name: "unknown", tool: "nope", isError: true, code: "UNKNOWN_TOOL"},
				{name: "bad arguments", tool: "echo", args: map[string]any{"text": 3}, isError: true, code: "TOOL_ERROR", text: "text"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					req := mcp.CallToolRequest{}
					req.Params.Name, req.Params.Arguments = tc.tool, tc.args
					res, err := c.CallTool(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if res.IsError != tc.isError || !strings.Contains(callText(res), tc.text) {
						t.Fatalf("result: isError %v, %q", res.IsError, callText(res))
					}
					if tc.isError {
						if !strings.HasPrefix(callText(res), tc.code+": ") || res.Meta == nil || res.Meta.AdditionalFields[mcpface.ErrorCodeKey] != tc.code {
							t.Fatalf("error code: %q %+v", callText(res), res.Meta)
						}
						return
					}
					if sc, _ := res.StructuredContent.(map[string]any); sc["echo"] != "hi" {
						t.Fatalf("structuredContent: %#v", res.StructuredContent)
					}
				})
			}
		})
	}
}

// Progress events of a tool arrive as notifications/progress with the
// request's token, before the result, in both revisions.
func TestProgressNotifications(t *testing.T) {
	r := newRig(t, nil)
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) {
			c, err := r.connect(t, rev, aeptest.Token)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []float64
			c.OnNotification(func(n mcp.JSONRPCNotification) {
				if n.Method != string(mcp.MethodNotificationProgress) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if n.Params.AdditionalFields["progressToken"] == "tok-1" {
					p, _ := n.Params.AdditionalFields["progress"].(float64)
					got = append(got, p)
				}
			})
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "slow", map[string]any{"steps": 4}
			req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
			res, err := c.CallTool(aeptest.Context(t), req)
			if err != nil || res.IsError {
				t.Fatalf("call: %v %+v", err, res)
			}
			mu.Lock()
			defer mu.Unlock()
			// All of them, in order, before the result (delivery.go).
			if fmt.Sprint(got) != "[25 50 75 100]" {
				t.Fatalf("progress %v, want [25 50 75 100]", got)
			}
		})
	}
}

// A tool's output lines (`log` events, as run_command emits) reach the MCP
// client as notifications/progress carrying each line, when the call has a
// progress token, and as notifications/message at the line's level when
// the client asked for logs; in order, before the result, in both
// revisions. A call with neither does not stream.
func TestLogNotifications(t *testing.T) {
	r := newRig(t, nil)
	for _, rev := range revisions {
		for _, tc := range []struct {
			name           string
			token          bool
			level          mcp.LoggingLevel
			progress, logs string
		}{
			// The 2025-11-25 session's level is error until set (mcp-go);
			// a 2026-07-28 request without a level gets no logs.
			{"progress token", true, "", "[line 1 line 2 oops]", map[bool]string{true: "[]", false: "[error:stderr:oops]"}[rev == mcp.ProtocolVersion20260728]},
			{"log level info", false, mcp.LoggingLevelInfo, "[]", "[info:stdout:line 1 info:stdout:line 2 error:stderr:oops]"},
			{"log level error", false, mcp.LoggingLevelError, "[]", "[]"},
			{"both", true, mcp.LoggingLevelWarning, "[line 1 line 2 oops]", "[error:stderr:oops]"},
			{"neither", false, "", "[]", "[]"},
		} {
			t.Run(rev+"/"+tc.name, func(t *testing.T) {
				c, err := r.connect(t, rev, aeptest.Token)
				if err != nil {
					t.Fatal(err)
				}
				ctx := aeptest.Context(t)
				var mu sync.Mutex
				var progress, logs []string
				last := 0.0
				c.OnNotification(func(n mcp.JSONRPCNotification) {
					mu.Lock()
					defer mu.Unlock()
					f := n.Params.AdditionalFields
					switch n.Method {
					case string(mcp.MethodNotificationProgress):
						p, _ := f["progress"].(float64)
						if p <= last {
							t.Errorf("progress %v after %v", p, last)
						}
						last = p
						progress = append(progress, fmt.Sprint(f["message"]))
					case string(mcp.MethodNotificationMessage):
						d, _ := f["data"].(map[string]any)
						if f["logger"] != "aep/talk" {
							t.Errorf("logger %v", f["logger"])
						}
						logs = append(logs, fmt.Sprintf("%v:%v:%v", f["level"], d["stream"], d["message"]))
					}
				})
				req := mcp.CallToolRequest{}
				req.Params.Name = "talk"
				if tc.token {
					req.Params.Meta = &mcp.Meta{ProgressToken: "tok-log"}
				}
				if tc.level != "" {
					if rev == mcp.ProtocolVersion20260728 {
						if req.Params.Meta == nil {
							req.Params.Meta = &mcp.Meta{}
						}
						req.Params.Meta.AdditionalFields = map[string]any{mcp.MetaKeyLogLevel: string(tc.level)}
					} else {
						lr := mcp.SetLevelRequest{}
						lr.Params.Level = tc.level
						//lint:ignore SA1019 a 2025-11-25 client sets its level so; the face must honour it
						if err := c.SetLevel(ctx, lr); err != nil {
							t.Fatal(err)
						}
					}
				}
				res, err := c.CallTool(ctx, req)
				if err != nil || res.IsError {
					t.Fatalf("call: %v %+v", err, res)
				}
				mu.Lock()
				defer mu.Unlock()
				if fmt.Sprint(progress) != tc.progress || fmt.Sprint(logs) != tc.logs {
					t.Fatalf("progress %v, want %s; logs %v, want %s", progress, tc.progress, logs, tc.logs)
				}
			})
		}
	}
}

// On the wire every progress event of the call is a notifications/progress
// on the POST's SSE stream, before the result (stateless revision, raw HTTP).
func TestProgressOnTheWire(t *testing.T) {
	r := newRig(t, nil)
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{"steps":4},"_meta":{"progressToken":"tok","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+aeptest.Token)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "slow")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var progress []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "notifications/progress") {
			var m struct {
				Params map[string]any `json:"params"`
			}
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m)
			progress = append(progress, fmt.Sprint(m.Params["progress"]))
		}
	}
	// Every notification arrives, in order, before the result
	// (delivery.go).
	got := strings.Join(progress, ",")
	if got != "25,50,75,100" || !strings.Contains(string(b), `"structuredContent":{"echo":"done"}`) {
		t.Fatalf("progress %q in\n%s", got, b)
	}
}

// An MCP client that gives up on a call (its context ends, so mcp-go sends
// notifications/cancelled) reaches the tool: aep cancels the call.
func TestCancellationReachesTool(t *testing.T) {
	r := newRig(t, nil)
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) {
			c, err := r.connect(t, rev, aeptest.Token)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(aeptest.Context(t))
			done := make(chan error, 1)
			go func() {
				req := mcp.CallToolRequest{}
				req.Params.Name, req.Params.Arguments = "slow", map[string]any{"steps": 1, "wait": true}
				_, err := c.CallTool(ctx, req)
				done <- err
			}()
			select {
			case <-r.started:
			case <-time.After(20 * time.Second):
				t.Fatal("the tool never started")
			}
			cancel()
			select {
			case <-r.cancelled:
			case <-time.After(20 * time.Second):
				t.Fatal("the tool never saw the cancellation")
			}
			if err := <-done; err == nil {
				t.Fatal("a cancelled call returned no error")
			}
		})
	}
}

// The shared token is required, and a wrong one is refused by the kernel's
// handshake; a session is reached only with the token it was opened with.
func TestAuth(t *testing.T) {
	r := newRig(t, nil)
	post := func(token, session, body string, header ...string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		return resp
	}
	const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const statelessList = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	// A plain 401 that says why, and nothing an MCP client would take for
	// OAuth: no resource_metadata in the challenge.
	for _, tc := range []struct {
		name, token, body, want string
		header                  []string
	}{
		{"no token", "", initBody, "no token", nil},
		{"wrong token", "wrong", initBody, "the bearer token is wrong", nil},
		{"wrong token, stateless", "wrong", statelessList, "the bearer token is wrong", []string{"Mcp-Protocol-Version", "2026-07-28"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(tc.token, "", tc.body, tc.header...)
			var body struct {
				Error, Message string
			}
			b, _ := io.ReadAll(resp.Body)
			_ = json.Unmarshal(b, &body)
			challenge := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != http.StatusUnauthorized || body.Error != "unauthorized" || !strings.Contains(body.Message, tc.want) ||
				!strings.HasPrefix(challenge, "Bearer ") || strings.Contains(challenge, "resource_metadata") {
				t.Fatalf("%d %q %s", resp.StatusCode, challenge, b)
			}
		})
	}
	resp := post(aeptest.Token, "", initBody)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %q", resp.StatusCode, id)
	}
	// No standalone GET stream: a call's notifications go on its own POST.
	get, _ := http.NewRequest(http.MethodGet, r.url, nil)
	get.Header.Set("Authorization", "Bearer "+aeptest.Token)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Mcp-Session-Id", id)
	if resp, err := http.DefaultClient.Do(get); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST, DELETE" {
		t.Fatalf("GET stream: %v %+v", err, resp)
	} else {
		resp.Body.Close()
	}
	const list = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if resp := post("wrong", id, list); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session with another token: %d", resp.StatusCode)
	}
	if resp := post(aeptest.Token, "made-up", list); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown session: %d", resp.StatusCode)
	}
	for _, rev := range revisions {
		if _, err := r.connect(t, rev, "wrong"); err == nil {
			t.Fatalf("%s: mcp-go connected with a wrong token", rev)
		}
	}
}
