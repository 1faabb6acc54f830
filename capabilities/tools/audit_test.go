package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/aephost/aep/server/toolrun"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kaptinlin/jsonschema"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

type reportIn struct {
	Query string   `json:"query" desc:"What to look for."`
	Limit int      `json:"limit,omitempty" desc:"At most this many hits."`
	Tags  []string `json:"tags,omitempty"`
}

type reportOut struct {
	Hits []string       `json:"hits"`
	Note *string        `json:"note"`
	Meta map[string]int `json:"meta"`
}

// report emits one event of each spec §6 kind, then answers; a query without
// a hit leaves every field of its output at Go's zero value (nil slice, nil
// pointer, nil map).
func report(ctx context.Context, in reportIn) (reportOut, error) {
	steps := []func() error{
		func() error { return toolrun.Progress(ctx, 50, "searching") },
		func() error { return toolrun.Status(ctx, "indexed") },
		func() error { return toolrun.Log(ctx, "warn", "slow disk") },
		func() error { return toolrun.Artifact(ctx, "hits.txt", "text/plain", "part one,", false) },
		func() error { return toolrun.Artifact(ctx, "hits.txt", "text/plain", "part two", true) },
	}
	for _, emit := range steps {
		if err := emit(); err != nil {
			return reportOut{}, err
		}
	}
	if in.Query == "none" {
		return reportOut{}, nil
	}
	note := "found"
	return reportOut{Hits: []string{in.Query + "-1", in.Query + "-2"}, Note: &note, Meta: map[string]int{"total": 2}}, nil
}

func reportHost(t *testing.T, codec client.Codec) *client.Client {
	t.Helper()
	r := toolrun.NewRegistry()
	if err := toolrun.Register(r, "report", "Search and report.", report,
		toolrun.Tags("search", "demo"), toolrun.Version("2.1.0"), toolrun.Streaming(), toolrun.Idempotent()); err != nil {
		t.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Server.AuthToken = "tok"
	ctx := context.Background()
	h, err := server.New(ctx, cfg, server.WithPlugin(server.PluginSpec{Name: "rep", Type: "tools", Impl: tools.NewPlugin(r)}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.InProcess(h, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		h.Close(ctx)
	})
	if _, err := c.Handshake(ctx, "agent", "tok", "tools"); err != nil {
		t.Fatal(err)
	}
	return c
}

// compileSchema compiles a tool's derived schema with a JSON Schema 2020-12
// validator, as a client that wants it would.
func compileSchema(t *testing.T, what string, s map[string]any) *jsonschema.Schema {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	cs, err := c.Compile(raw)
	if err != nil {
		t.Fatalf("%s %s does not compile: %v", what, raw, err)
	}
	return cs
}

// asJSON gives v as a client decodes it from the wire.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(encode(t, v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTypedToolDefinitionAndSchemas checks typed tools: a typed
// tool's definition carries every spec §2.5 field, and its input and output
// JSON Schemas, derived from the Go types, are real schemas: the input
// schema accepts the arguments the tool accepts and refuses those it
// refuses, and every result the tool gives conforms to the output schema.
func TestTypedToolDefinitionAndSchemas(t *testing.T) {
	c := reportHost(t, client.JSON)
	ctx := context.Background()
	l, err := c.ListTools(ctx, &msg.ToolListReq{Query: ptr("report")})
	if err != nil || len(l.Tools) != 1 {
		t.Fatalf("list: %+v %v", l, err)
	}
	d := l.Tools[0]
	if d.Name != "report" || d.Description != "Search and report." || !d.Streaming || !d.Idempotent ||
		d.Version != "2.1.0" || strings.Join(d.Tags, ",") != "search,demo" || d.DeferLoading || d.Toolkit != nil {
		t.Fatalf("definition %+v", d)
	}
	params := func(ps []msg.ToolParameter) string {
		var b strings.Builder
		for _, p := range ps {
			desc := ""
			if p.Description != nil {
				desc = *p.Description
			}
			fmt.Fprintf(&b, "%s:%s:%v:%s;", p.Name, p.Type, p.Required != nil && *p.Required, desc)
		}
		return b.String()
	}
	if got, want := params(d.InputParameters), "limit:integer:false:At most this many hits.;query:string:true:What to look for.;tags:array:false:;"; got != want {
		t.Errorf("input_parameters %s, want %s", got, want)
	}
	if got := params(d.OutputParameters); !strings.Contains(got, "hits:array:") || !strings.Contains(got, "meta:object:") || !strings.Contains(got, "note:string:") {
		t.Errorf("output_parameters %s", got)
	}

	in := compileSchema(t, "input_schema", d.InputSchema)
	out := compileSchema(t, "output_schema", d.OutputSchema)
	for _, tc := range []struct {
		args map[string]any
		ok   bool
	}{
		{map[string]any{"query": "go"}, true},
		{map[string]any{"query": "go", "limit": 3, "tags": []any{"a"}}, true},
		{map[string]any{"limit": 3}, false},                   // query missing
		{map[string]any{"query": 5}, false},                   // wrong type
		{map[string]any{"query": "go", "limit": 1.5}, false},  // not an integer
		{map[string]any{"query": "go", "colour": "x"}, false}, // unknown argument
		{map[string]any{"query": "go", "tags": "one"}, false}, // not an array
	} {
		if got := in.Validate(tc.args).IsValid(); got != tc.ok {
			t.Errorf("input_schema on %v: valid %v, want %v", tc.args, got, tc.ok)
		}
		res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "report", Arguments: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		if res.Success != tc.ok {
			t.Errorf("call with %v: success %v, schema says %v (%v)", tc.args, res.Success, tc.ok, deref(res.Error))
		}
	}
	// Every result conforms to the output schema: one whose fields are all
	// set, and one whose slice, map and pointer fields are nil (encoded as
	// null, which the output schema admits for such fields).
	for _, query := range []string{"go", "none"} {
		res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "report", Arguments: map[string]any{"query": query}})
		if err != nil || !res.Success {
			t.Fatalf("call: %+v %v", res, err)
		}
		if r := out.Validate(asJSON(t, res.Data)); !r.IsValid() {
			t.Errorf("result data %s does not conform to output_schema %s: %v", encode(t, res.Data), encode(t, d.OutputSchema), r.Errors)
		}
	}
	if r := out.Validate(map[string]any{"hits": []any{"a"}, "meta": map[string]any{"n": "x"}}); r.IsValid() {
		t.Error("output_schema accepts a map value of the wrong type")
	}
}

// TestTypedToolEmitsEveryEventKind checks spec §6: a tool
// emits progress, status, log and artifact events with the data shapes of
// spec §6; they are collected in the result, and with streaming also sent
// on the wire in order with seq 0, 1, ..., with both codecs.
func TestTypedToolEmitsEveryEventKind(t *testing.T) {
	want := []struct {
		kind string
		data map[string]any
	}{
		{"progress", map[string]any{"pct": 50.0, "message": "searching"}},
		{"status", map[string]any{"message": "indexed"}},
		{"log", map[string]any{"level": "warn", "message": "slow disk"}},
		{"artifact", map[string]any{"name": "hits.txt", "mime": "text/plain", "chunk": "part one,", "final": false}},
		{"artifact", map[string]any{"name": "hits.txt", "mime": "text/plain", "chunk": "part two", "final": true}},
	}
	same := func(got, want map[string]any) bool {
		return encode(t, asJSON(t, got)) == encode(t, want)
	}
	for name, codec := range map[string]client.Codec{"json": client.JSON, "direct": client.Direct} {
		for _, streaming := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/streaming=%v", name, streaming), func(t *testing.T) {
				c := reportHost(t, codec)
				var mu sync.Mutex
				var wire []client.Event
				ctx := client.WithEvents(context.Background(), func(ev client.Event) {
					mu.Lock()
					wire = append(wire, ev)
					mu.Unlock()
				})
				res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "report", Streaming: streaming, Arguments: map[string]any{"query": "go"}})
				if err != nil || !res.Success {
					t.Fatalf("%+v %v", res, err)
				}
				if len(res.Events) != len(want) {
					t.Fatalf("result events %+v", res.Events)
				}
				for i, w := range want {
					if string(res.Events[i].Kind) != w.kind || !same(res.Events[i].Data, w.data) {
						t.Errorf("result event %d: %s %v, want %s %v", i, res.Events[i].Kind, res.Events[i].Data, w.kind, w.data)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if !streaming {
					if len(wire) != 0 {
						t.Fatalf("events on the wire without streaming: %+v", wire)
					}
					return
				}
				if len(wire) != len(want) {
					t.Fatalf("wire events %+v", wire)
				}
				for i, w := range want {
					ev := wire[i]
					if ev.Type != "tool/event" || ev.Seq != i || string(ev.Kind) != w.kind || !same(ev.Data, w.data) {
						t.Errorf("wire event %d: %+v, want %s %v", i, ev, w.kind, w.data)
					}
				}
			})
		}
	}
}

// TestFileToolsRefuseSiblingAndNUL adds to TestFileTools the cases of issue
// 4's "must show" it does not reach: a symlink inside the root to a sibling
// directory whose name extends the root's (the prefix-check bug), and NUL
// bytes in the path of every file tool.
func TestFileToolsRefuseSiblingAndNUL(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	ctx := context.Background()
	sibling := e.root + "-sibling"
	if err := os.MkdirAll(sibling, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sibling) })
	if err := os.WriteFile(filepath.Join(sibling, "s.txt"), []byte("SIBLING"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sibling, filepath.Join(e.root, "sib")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "ok.txt"), []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name, tool string
		args       map[string]any
		why        string // in the error: refused for this reason, not another
	}{
		{"read via sibling symlink", "read_file", map[string]any{"path": "sib/s.txt"}, "escapes"},
		{"write via sibling symlink", "write_file", map[string]any{"path": "sib/new.txt", "content": "x"}, "escapes"},
		{"list sibling symlink", "list_dir", map[string]any{"path": "sib"}, "escapes"},
		{"cwd sibling symlink", "run_command", map[string]any{"argv": []any{"cat", "s.txt"}, "cwd": "sib"}, "symbolic link"},
		{"read NUL", "read_file", map[string]any{"path": "ok.txt\x00"}, "NUL byte"},
		{"write NUL", "write_file", map[string]any{"path": "new\x00.txt", "content": "x"}, "NUL byte"},
		{"list NUL", "list_dir", map[string]any{"path": ".\x00"}, "NUL byte"},
		{"glob NUL", "glob", map[string]any{"pattern": "*\x00"}, "NUL byte"},
		{"grep glob NUL", "grep", map[string]any{"pattern": "fine", "glob": "ok.txt\x00"}, "NUL byte"},
		{"cwd NUL", "run_command", map[string]any{"argv": []any{"pwd"}, "cwd": ".\x00"}, "NUL byte"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: tc.tool, Arguments: tc.args})
			if err != nil {
				t.Fatal(err)
			}
			if res.Success || res.ErrorCode == nil || *res.ErrorCode != "TOOL_ERROR" {
				t.Fatalf("not refused: %+v data %v", res, encode(t, res.Data))
			}
			if !strings.Contains(deref(res.Error), tc.why) {
				t.Fatalf("refused for another reason: %s", deref(res.Error))
			}
			if strings.Contains(encode(t, res.Data), "SIBLING") || strings.Contains(deref(res.Error), "SIBLING") {
				t.Fatal("the sibling's content leaked")
			}
		})
	}
	// glob and grep do not follow the symlink: they find nothing behind it.
	for tool, args := range map[string]map[string]any{
		"glob": {"pattern": "sib/*"},
		"grep": {"pattern": "SIBLING", "glob": "sib/*"},
	} {
		res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: tool, Arguments: args})
		if err != nil || !res.Success || encode(t, res.Data) != `{"matches":[],"truncated":false}` {
			t.Fatalf("%s through the sibling symlink: %+v %v", tool, res, err)
		}
	}
	if _, err := os.Stat(filepath.Join(sibling, "new.txt")); err == nil {
		t.Fatal("wrote into the sibling directory")
	}
	// The same tools work on the file inside the root.
	if res, _ := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "ok.txt"}}); !res.Success {
		t.Fatalf("read inside the root: %v", deref(res.Error))
	}
}

// TestOutputCapConfigurable checks the "configurable output cap
// (default 1 MiB)" beyond the default that TestCallPaths covers: a plugin
// configured from YAML with max_output_bytes cuts result.data there and
// sets truncated, and output under the cap is whole.
func TestOutputCapConfigurable(t *testing.T) {
	root := t.TempDir()
	cfg, err := server.ParseConfig([]byte(fmt.Sprintf(`
server:
  auth_token: tok
plugins:
  - name: files
    type: tools
    cls: aep.tools.builtin
    config:
      root: %q
      max_output_bytes: 2048
`, root)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := server.New(ctx, cfg, server.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Handshake(ctx, "agent", "tok", "tools"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size      int
		truncated bool
	}{{100, false}, {10000, true}} {
		name := fmt.Sprintf("f%d.txt", tc.size)
		if err := os.WriteFile(filepath.Join(root, name), []byte(strings.Repeat("y", tc.size)), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": name}})
		if err != nil || !res.Success {
			t.Fatalf("read %s: %+v %v", name, res, err)
		}
		if res.Truncated != tc.truncated {
			t.Fatalf("read %d bytes under a 2048-byte cap: truncated %v", tc.size, res.Truncated)
		}
		if n := len(encode(t, res.Data)); n > 2048 {
			t.Fatalf("result.data of %d bytes over the 2048-byte cap", n)
		}
		if content := res.Data.(map[string]any)["content"].(string); !tc.truncated && len(content) != tc.size {
			t.Fatalf("whole file cut to %d bytes", len(content))
		}
	}
	// The plugin field serves embedders the same way.
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 64)
	res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "big", Arguments: map[string]any{"n": 1000}})
	if err != nil || !res.Success || !res.Truncated {
		t.Fatalf("big under a 64-byte cap: %+v %v", res, err)
	}
	if s, _ := res.Data.(string); len(s) != 64 {
		t.Fatalf("data of %d bytes, want the 64-byte cap", len(s))
	}
}
