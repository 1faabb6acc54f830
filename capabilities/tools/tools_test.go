package tools_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/toolrun"
)

type echoIn struct {
	Text  string `json:"text" desc:"Text to echo."`
	Times int    `json:"times,omitempty"`
}

type echoOut struct {
	Text string `json:"text"`
}

func echo(ctx context.Context, in echoIn) (echoOut, error) {
	return echoOut{Text: strings.Repeat(in.Text, max(in.Times, 1))}, nil
}

type sleepIn struct {
	Ms     int  `json:"ms"`
	Ignore bool `json:"ignore,omitempty"`
}

// testRegistry is a second tool-serving plugin's registry.
func testRegistry(t testing.TB) *toolrun.Registry {
	r := toolrun.NewRegistry()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(toolrun.Register(r, "echo", "Echo the text back.", echo, toolrun.Tags("text", "demo"), toolrun.Idempotent()))
	must(toolrun.Register(r, "shout", "Echo in UPPER case.", func(ctx context.Context, in echoIn) (echoOut, error) {
		return echoOut{Text: strings.ToUpper(in.Text)}, nil
	}, toolrun.Tags("text")))
	must(toolrun.Register(r, "secret_search", "Deferred semantic search.", echo, toolrun.Tags("search"), toolrun.Deferred()))
	must(toolrun.Register(r, "sleep", "Sleep for ms milliseconds.", func(ctx context.Context, in sleepIn) (echoOut, error) {
		if in.Ignore {
			time.Sleep(time.Duration(in.Ms) * time.Millisecond)
			return echoOut{}, nil
		}
		select {
		case <-time.After(time.Duration(in.Ms) * time.Millisecond):
			return echoOut{Text: "slept"}, nil
		case <-ctx.Done():
			return echoOut{}, ctx.Err()
		}
	}, toolrun.Tags("slow")))
	must(toolrun.Register(r, "boom", "Panics.", func(ctx context.Context, in struct{}) (echoOut, error) {
		panic("kaboom")
	}, toolrun.Tags("danger")))
	must(toolrun.Register(r, "fail", "Fails.", func(ctx context.Context, in struct{}) (echoOut, error) {
		return echoOut{}, errors.New("it failed")
	}))
	must(toolrun.Register(r, "steps", "Emits three progress events.", func(ctx context.Context, in struct{}) (echoOut, error) {
		for i := 1; i <= 3; i++ {
			if err := toolrun.Progress(ctx, i*33, fmt.Sprintf("step %d", i)); err != nil {
				return echoOut{}, err
			}
		}
		return echoOut{Text: "done"}, nil
	}, toolrun.Streaming()))
	must(toolrun.Register(r, "big", "Returns n bytes.", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (string, error) {
		return strings.Repeat("x", in.N), nil
	}))
	return r
}

type env struct {
	h      *server.Host
	c      *client.Client
	root   string
	audits chan server.AuditRecord
}

func newEnv(t testing.TB, codec client.Codec, policy server.ToolPolicy, maxOut int) *env {
	t.Helper()
	ctx := context.Background()
	cfg := server.Defaults()
	cfg.Server.AuthToken = "tok"
	cfg.Server.ToolPolicy = policy
	root := t.TempDir()
	builtin := &tools.Plugin{Root: root, MaxOutputBytes: maxOut}
	custom := tools.NewPlugin(testRegistry(t))
	custom.MaxOutputBytes = maxOut
	h, err := server.New(ctx, cfg, server.WithDataDir(t.TempDir()),
		server.WithPlugin(server.PluginSpec{Name: "builtin", Type: "tools", Impl: builtin}),
		server.WithPlugin(server.PluginSpec{Name: "custom", Type: "tools", Impl: custom}))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{h: h, root: root, audits: make(chan server.AuditRecord, 1000)}
	unsub := h.SubscribeAudit(func(r server.AuditRecord) {
		select {
		case e.audits <- r:
		default:
		}
	})
	c, err := client.InProcess(h, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Handshake(ctx, "agent", "tok", "tools"); err != nil {
		t.Fatal(err)
	}
	e.c = c
	t.Cleanup(func() {
		unsub()
		c.Close()
		h.Close(ctx)
	})
	return e
}

func names(ts []msg.ToolDefinition) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return strings.Join(out, ",")
}

func ptr[T any](v T) *T { return &v }

func TestListFilters(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	cases := []struct {
		name string
		req  msg.ToolListReq
		want string
	}{
		{"default hides deferred", msg.ToolListReq{}, "big,boom,echo,fail,glob,grep,list_dir,read_file,run_command,shout,sleep,steps,write_file"},
		{"query name and description, case-insensitive", msg.ToolListReq{Query: ptr("ECHO")}, "echo,shout"},
		{"query name only", msg.ToolListReq{Query: ptr("ShOuT")}, "shout"},
		{"query description", msg.ToolListReq{Query: ptr("upper case")}, "shout"},
		{"query tag", msg.ToolListReq{Query: ptr("demo")}, "echo"},
		{"query misses deferred", msg.ToolListReq{Query: ptr("semantic")}, ""},
		{"include_deferred finds deferred", msg.ToolListReq{Query: ptr("semantic"), IncludeDeferred: true}, "secret_search"},
		{"include_deferred lists all", msg.ToolListReq{IncludeDeferred: true, Tags: []string{"search"}}, "glob,grep,secret_search"},
		{"one tag", msg.ToolListReq{Tags: []string{"text"}}, "echo,shout"},
		{"tags any-of", msg.ToolListReq{Tags: []string{"slow", "danger"}}, "boom,sleep"},
		{"tag and query", msg.ToolListReq{Tags: []string{"text"}, Query: ptr("upper")}, "shout"},
		{"tag and query, no match", msg.ToolListReq{Tags: []string{"slow"}, Query: ptr("echo")}, ""},
		{"tags from both plugins", msg.ToolListReq{Tags: []string{"file", "text"}, Query: ptr("e")}, "echo,glob,grep,list_dir,read_file,shout,write_file"},
		{"unknown tag", msg.ToolListReq{Tags: []string{"nope"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			resp, err := e.c.ListTools(ctx, &req)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(resp.Tools); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestListDefinitionFields(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	resp, err := e.c.ListTools(context.Background(), &msg.ToolListReq{Query: ptr("echo the")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tools) != 1 {
		t.Fatalf("got %v", names(resp.Tools))
	}
	d := resp.Tools[0]
	if !d.Idempotent || d.Version == "" || d.DeferLoading || d.Toolkit != nil {
		t.Fatalf("definition %+v", d)
	}
	if len(d.InputParameters) != 2 || d.InputParameters[0].Name != "text" || !*d.InputParameters[0].Required || d.InputParameters[0].Type != "string" ||
		*d.InputParameters[0].Description != "Text to echo." || d.InputParameters[1].Name != "times" || *d.InputParameters[1].Required {
		t.Fatalf("input parameters %+v", d.InputParameters)
	}
	props, _ := d.InputSchema["properties"].(map[string]any)
	if d.InputSchema["type"] != "object" || props["times"].(map[string]any)["type"] != "integer" {
		t.Fatalf("input schema %v", d.InputSchema)
	}
	if len(d.OutputParameters) != 1 || d.OutputParameters[0].Name != "text" {
		t.Fatalf("output parameters %+v", d.OutputParameters)
	}
}

func TestListPagination(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	all, err := e.c.ListTools(ctx, &msg.ToolListReq{IncludeDeferred: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 3, 5, 100} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var got []msg.ToolDefinition
			req := &msg.ToolListReq{IncludeDeferred: true, Limit: ptr(limit)}
			for pages := 0; ; pages++ {
				if pages > 50 {
					t.Fatal("pagination does not end")
				}
				resp, err := e.c.ListTools(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Tools) > limit {
					t.Fatalf("page of %d over limit %d", len(resp.Tools), limit)
				}
				got = append(got, resp.Tools...)
				if resp.NextCursor == nil {
					break
				}
				req.Cursor = resp.NextCursor
			}
			if names(got) != names(all.Tools) {
				t.Fatalf("pages gave %s\nwant %s", names(got), names(all.Tools))
			}
		})
	}
	// One plugin's page on the wire is exact: limit tools and a cursor.
	r := toolrun.NewRegistry()
	for _, n := range []string{"a", "b", "c"} {
		if err := toolrun.Register(r, n, n, echo); err != nil {
			t.Fatal(err)
		}
	}
	resp := r.List(&msg.ToolListReq{Limit: ptr(2)}, toolrun.Options{})
	if names(resp.Tools) != "a,b" || resp.NextCursor == nil || *resp.NextCursor != "b" {
		t.Fatalf("got %s %v", names(resp.Tools), resp.NextCursor)
	}
	resp = r.List(&msg.ToolListReq{Limit: ptr(2), Cursor: resp.NextCursor}, toolrun.Options{})
	if names(resp.Tools) != "c" || resp.NextCursor != nil {
		t.Fatalf("got %s %v", names(resp.Tools), resp.NextCursor)
	}
}

func TestListMergesPlugins(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	// The raw reply holds both plugins' tools.
	resp, err := e.c.ToolList(context.Background(), &msg.ToolListReq{})
	if err != nil {
		t.Fatal(err)
	}
	got := "," + names(resp.Tools) + ","
	for _, n := range []string{"read_file", "run_command", "echo", "steps"} {
		if !strings.Contains(got, ","+n+",") {
			t.Fatalf("%s missing from merged list %s", n, got)
		}
	}
	if len(resp.Tools) != 13 {
		t.Fatalf("got %d tools: %s", len(resp.Tools), got)
	}
}

func TestDuplicateToolNameRefused(t *testing.T) {
	cfg := server.Defaults()
	cfg.Server.AuthToken = "tok"
	r1, r2 := toolrun.NewRegistry(), toolrun.NewRegistry()
	toolrun.Register(r1, "same", "", echo)
	toolrun.Register(r2, "same", "", echo)
	_, err := server.New(context.Background(), cfg,
		server.WithPlugin(server.PluginSpec{Name: "a", Type: "tools", Impl: tools.NewPlugin(r1)}),
		server.WithPlugin(server.PluginSpec{Name: "b", Type: "tools", Impl: tools.NewPlugin(r2)}))
	if !errors.Is(err, server.ErrClaimed) {
		t.Fatalf("got %v, want ErrClaimed", err)
	}
}

func TestCallPaths(t *testing.T) {
	for _, codec := range []client.Codec{client.JSON, client.Direct} {
		e := newEnv(t, codec, server.ToolPolicy{Deny: []string{"fail*", "tag:danger"}}, 0)
		cases := []struct {
			name      string
			req       msg.ToolCallReq
			success   bool
			code      string
			errPart   string
			data      string // substring of the encoded data
			truncated bool
		}{
			{"success", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "hi", "times": 2}}, true, "", "", `"text":"hihi"`, false},
			{"unknown", msg.ToolCallReq{ToolName: "nope"}, false, "UNKNOWN_TOOL", "no tool", "", false},
			{"denied by name", msg.ToolCallReq{ToolName: "fail"}, false, "TOOL_DENIED", "deny \"fail*\"", "", false},
			{"denied by tag", msg.ToolCallReq{ToolName: "boom"}, false, "TOOL_DENIED", "tag:danger", "", false},
			{"timeout", msg.ToolCallReq{ToolName: "sleep", Arguments: map[string]any{"ms": 5000}, Timeout: ptr(0.05)}, false, "TOOL_ERROR", "timed out", "", false},
			{"timeout of a tool ignoring its context", msg.ToolCallReq{ToolName: "sleep", Arguments: map[string]any{"ms": 300, "ignore": true}, Timeout: ptr(0.05)}, false, "TOOL_ERROR", "timed out", "", false},
			{"within timeout", msg.ToolCallReq{ToolName: "sleep", Arguments: map[string]any{"ms": 1}, Timeout: ptr(5.0)}, true, "", "", "slept", false},
			{"missing argument", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{}}, false, "TOOL_ERROR", `missing required argument "text"`, "", false},
			{"wrong type", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": 5}}, false, "TOOL_ERROR", `argument "text": expected string, got number`, "", false},
			{"unknown argument", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "a", "txet": 1}}, false, "TOOL_ERROR", `unknown argument "txet"`, "", false},
			{"not an object", msg.ToolCallReq{ToolName: "echo", Arguments: []any{1}}, false, "TOOL_ERROR", "must be a JSON object", "", false},
			{"tool error", msg.ToolCallReq{ToolName: "shout", Arguments: map[string]any{"text": "a"}}, true, "", "", `"text":"A"`, false},
			{"output cap", msg.ToolCallReq{ToolName: "big", Arguments: map[string]any{"n": 2 << 20}}, true, "", "", "xxx", true},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%v/%s", codec, tc.name), func(t *testing.T) {
				req := tc.req
				res, err := e.c.CallTool(context.Background(), &req)
				if err != nil {
					t.Fatalf("a tool failure must be a result, got error %v", err)
				}
				if res.Success != tc.success || res.ToolName != tc.req.ToolName {
					t.Fatalf("result %+v (error %v)", res, deref(res.Error))
				}
				if tc.code == "" && res.ErrorCode != nil || tc.code != "" && (res.ErrorCode == nil || string(*res.ErrorCode) != tc.code) {
					t.Fatalf("error_code %v, want %q (error %v)", res.ErrorCode, tc.code, deref(res.Error))
				}
				if tc.errPart != "" && !strings.Contains(deref(res.Error), tc.errPart) {
					t.Fatalf("error %q does not contain %q", deref(res.Error), tc.errPart)
				}
				if res.Truncated != tc.truncated || res.Events == nil {
					t.Fatalf("truncated %v events %v", res.Truncated, res.Events)
				}
				if tc.truncated {
					if s, _ := res.Data.(string); len(s) != 1<<20 {
						t.Fatalf("truncated data of %d bytes, want the 1 MiB cap", len(s))
					}
				}
				if tc.data != "" && !strings.Contains(fmt.Sprint(encode(t, res.Data)), tc.data) {
					t.Fatalf("data %v lacks %q", encode(t, res.Data), tc.data)
				}
			})
		}
		// Denied tools are not offered: tool/list leaves them out, even
		// when searched for by name or asked for by tag.
		for _, req := range []msg.ToolListReq{{}, {Query: ptr("fail")}, {Tags: []string{"danger"}}} {
			l, err := e.c.ListTools(context.Background(), &req)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range l.Tools {
				if d.Name == "fail" || d.Name == "boom" {
					t.Fatalf("%v: denied tool %s listed", codec, d.Name)
				}
			}
		}
		if l, _ := e.c.ListTools(context.Background(), &msg.ToolListReq{}); !strings.Contains(names(l.Tools), "echo") {
			t.Fatalf("allowed tools missing: %s", names(l.Tools))
		}
	}
}

func TestPanickingToolAndHostSurvives(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "boom"})
	if err != nil || res.Success || string(*res.ErrorCode) != "TOOL_ERROR" || !strings.Contains(*res.Error, "kaboom") {
		t.Fatalf("got %+v %v", res, err)
	}
	res, err = e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "still here"}})
	if err != nil || !res.Success {
		t.Fatalf("after a panic: %+v %v", res, err)
	}
}

func TestStreamingEvents(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprint("streaming=", streaming), func(t *testing.T) {
			e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
			var mu sync.Mutex
			var wireEvents []client.Event
			ctx := client.WithEvents(context.Background(), func(ev client.Event) {
				mu.Lock()
				wireEvents = append(wireEvents, ev)
				mu.Unlock()
			})
			res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "steps", Streaming: streaming})
			if err != nil || !res.Success {
				t.Fatalf("%+v %v", res, err)
			}
			if len(res.Events) != 3 || res.Events[2].Kind != "progress" || fmt.Sprint(res.Events[2].Data["message"]) != "step 3" {
				t.Fatalf("result events %+v", res.Events)
			}
			mu.Lock()
			defer mu.Unlock()
			want := 0
			if streaming {
				want = 3
			}
			if len(wireEvents) != want {
				t.Fatalf("wire events %+v, want %d", wireEvents, want)
			}
			for i, ev := range wireEvents {
				if ev.Type != "tool/event" || ev.Seq != i || ev.Kind != "progress" {
					t.Fatalf("event %d: %+v", i, ev)
				}
			}
		})
	}
}

func TestCorrelationIDReachesAudit(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	_, err := e.c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "x"}, CorrelationID: ptr("corr-42")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(2 * time.Second)
	for {
		select {
		case r := <-e.audits:
			if r.Type == "tool/call/req" && r.Plugin == "custom" {
				if r.CorrelationID != "corr-42" {
					t.Fatalf("audit %+v", r)
				}
				return
			}
		case <-deadline:
			t.Fatal("no audit record of the call")
		}
	}
}

func TestPolicyAllowList(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{Allow: []string{"echo", "tag:file"}}, 0)
	ctx := context.Background()
	for name, ok := range map[string]bool{"echo": true, "list_dir": true, "shout": false, "run_command": false} {
		res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: name, Arguments: map[string]any{"text": "a", "argv": []any{"true"}}})
		if err != nil {
			t.Fatal(err)
		}
		denied := res.ErrorCode != nil && *res.ErrorCode == "TOOL_DENIED"
		if denied == ok {
			t.Fatalf("%s: allowed=%v, got %+v", name, ok, res)
		}
	}
}

func TestFileTools(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("TOP SECRET"), 0o644)
	// A sibling directory whose name extends the root's.
	sibling := e.root + "2"
	os.MkdirAll(sibling, 0o755)
	os.WriteFile(filepath.Join(sibling, "s.txt"), []byte("SIBLING"), 0o644)
	t.Cleanup(func() { os.RemoveAll(sibling) })
	os.Symlink(outside, filepath.Join(e.root, "out"))
	os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(e.root, "leak.txt"))
	call := func(name string, args map[string]any) *msg.ToolResult {
		t.Helper()
		res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call("write_file", map[string]any{"path": "src/a/main.go", "content": "package main\n// hello TODO\n"}); !res.Success {
		t.Fatalf("write: %v", deref(res.Error))
	}
	call("write_file", map[string]any{"path": "notes.txt", "content": "TODO one\nnothing\n"})
	if res := call("read_file", map[string]any{"path": "src/a/main.go"}); !res.Success || !strings.Contains(encode(t, res.Data), "hello TODO") {
		t.Fatalf("read: %+v", res)
	}
	if res := call("list_dir", map[string]any{}); !res.Success || !strings.Contains(encode(t, res.Data), `"name":"src","size":0,"type":"dir"`) {
		t.Fatalf("list: %v", encode(t, res.Data))
	}
	if res := call("glob", map[string]any{"pattern": "**/*.go"}); encode(t, res.Data) != `{"matches":["src/a/main.go"],"truncated":false}` {
		t.Fatalf("glob: %v", encode(t, res.Data))
	}
	if res := call("grep", map[string]any{"pattern": "TODO"}); !strings.Contains(encode(t, res.Data), `{"line":1,"path":"notes.txt","text":"TODO one"}`) ||
		!strings.Contains(encode(t, res.Data), `{"line":2,"path":"src/a/main.go"`) || strings.Contains(encode(t, res.Data), "SECRET") {
		t.Fatalf("grep: %v", encode(t, res.Data))
	}
	if res := call("grep", map[string]any{"pattern": "SECRET"}); strings.Contains(encode(t, res.Data), "SECRET") {
		t.Fatalf("grep followed a symlink out: %v", encode(t, res.Data))
	}
	refused := []struct {
		name, tool string
		args       map[string]any
	}{
		{"dotdot read", "read_file", map[string]any{"path": "../x"}},
		{"dotdot inside", "read_file", map[string]any{"path": "src/../../x"}},
		{"absolute", "read_file", map[string]any{"path": filepath.Join(outside, "secret.txt")}},
		{"symlink dir out", "read_file", map[string]any{"path": "out/secret.txt"}},
		{"symlink file out", "read_file", map[string]any{"path": "leak.txt"}},
		{"sibling prefix", "read_file", map[string]any{"path": "../" + filepath.Base(sibling) + "/s.txt"}},
		{"nul byte", "read_file", map[string]any{"path": "notes.txt\x00.png"}},
		{"write via symlink", "write_file", map[string]any{"path": "out/new.txt", "content": "x"}},
		{"write dotdot", "write_file", map[string]any{"path": "../evil.txt", "content": "x"}},
		{"list absolute", "list_dir", map[string]any{"path": "/"}},
		{"list symlink out", "list_dir", map[string]any{"path": "out"}},
		{"glob dotdot", "glob", map[string]any{"pattern": "../*"}},
		{"cwd out", "run_command", map[string]any{"argv": []any{"pwd"}, "cwd": "out"}},
		{"cwd dotdot", "run_command", map[string]any{"argv": []any{"pwd"}, "cwd": ".."}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			res := call(tc.tool, tc.args)
			if res.Success || res.ErrorCode == nil || *res.ErrorCode != "TOOL_ERROR" {
				t.Fatalf("not refused: %+v data %v", res, encode(t, res.Data))
			}
			if strings.Contains(encode(t, res.Data), "SECRET") || strings.Contains(encode(t, res.Data), "SIBLING") {
				t.Fatal("leaked")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Fatal("wrote outside the workspace")
	}
}

func TestRunCommand(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	var mu sync.Mutex
	var logs []string
	ctx := client.WithEvents(context.Background(), func(ev client.Event) {
		mu.Lock()
		logs = append(logs, fmt.Sprint(ev.Data["message"]))
		mu.Unlock()
	})
	res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Streaming: true,
		Arguments: map[string]any{"argv": []any{"sh", "-c", "echo one; echo two >&2; pwd; exit 3"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.ExitCode == nil || *res.ExitCode != 3 || !strings.Contains(encode(t, res.Data), `"stdout":"one\n`+e.root) {
		t.Fatalf("got %+v %v", res, encode(t, res.Data))
	}
	mu.Lock()
	if strings.Join(logs, "|") == "" || len(res.Events) != 3 || len(logs) != 3 {
		t.Fatalf("log events %v, result events %v", logs, res.Events)
	}
	mu.Unlock()
	// Success, exit code 0.
	res, _ = e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"true"}}})
	if !res.Success || *res.ExitCode != 0 {
		t.Fatalf("true: %+v", res)
	}
	// The command's own timeout kills the process group.
	t0 := time.Now()
	res, _ = e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"sh", "-c", "sleep 30 & sleep 30"}, "timeout": 0.2}})
	if res.Success || !strings.Contains(deref(res.Error), "timeout") || time.Since(t0) > 10*time.Second {
		t.Fatalf("timeout: %+v after %s", res, time.Since(t0))
	}
	// Output cap.
	res, _ = e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"head", "-c", "100000", "/dev/zero"}, "max_output_bytes": 1000}})
	if !res.Success || !res.Truncated {
		t.Fatalf("cap: %+v", res)
	}
	// Unknown program.
	res, _ = e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"/no/such/program"}}})
	if res.Success || *res.ErrorCode != "TOOL_ERROR" || res.ExitCode != nil || res.Data != nil {
		t.Fatalf("missing program: %+v (a command that never ran has no exit code or output)", res)
	}
	// A failure that is not a process's has no result beside its error (spec §7).
	for _, tc := range []struct {
		call msg.ToolCallReq
		why  string
	}{
		{msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "no-such-file"}}, "no-such-file"},
		{msg.ToolCallReq{ToolName: "grep", Arguments: map[string]any{"pattern": "("}}, "missing closing )"},
	} {
		res, err := e.c.CallTool(ctx, &tc.call)
		if err != nil || res.Success || !strings.Contains(deref(res.Error), tc.why) || res.Data != nil || res.Summary != nil {
			t.Fatalf("%s: %+v %v", tc.call.ToolName, res, err)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestWirePagesAcrossPlugins walks tool/list pages on the wire, without any
// client-side help: the kernel must make every page exact although two
// plugins each answer with their own page (x-aep-merge with key and limit).
func TestWirePagesAcrossPlugins(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 5, 100} {
		e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
		all, err := e.c.ToolList(context.Background(), &msg.ToolListReq{})
		if err != nil {
			t.Fatal(err)
		}
		var walked []string
		var cursor *string
		for page := 0; ; page++ {
			if page > 50 {
				t.Fatal("pages never end")
			}
			resp, err := e.c.ToolList(context.Background(), &msg.ToolListReq{Limit: &limit, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Tools) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(resp.Tools))
			}
			for _, td := range resp.Tools {
				walked = append(walked, td.Name)
			}
			if resp.NextCursor == nil {
				break
			}
			cursor = resp.NextCursor
		}
		if got, want := strings.Join(walked, ","), names(all.Tools); got != want {
			t.Fatalf("limit %d: pages give\n%s\nwant\n%s", limit, got, want)
		}
	}
}
