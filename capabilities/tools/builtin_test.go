package tools_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

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
	if res.Success || res.ExitCode == nil || *res.ExitCode != 3 || !strings.Contains(encode(t, res.Data), `"stdout":"one\n`+workdirSeen(t, e.root)) {
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
  auth_token: %q
plugins:
  - name: files
    type: tools
    cls: aep.tools.builtin
    config:
      root: %q
      max_output_bytes: 2048
`, aeptest.Token, root)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := aeptest.Context(t)
	h := aeptest.NewHost(t, cfg, nil, server.WithDataDir(t.TempDir()))
	c := aeptest.Connect(t, h, "tools")
	// Under a host the workspace is the session's directory, not root.
	sd, err := h.SessionDir(aeptest.Handle(t, c))
	if err != nil {
		t.Fatal(err)
	}
	root = sd.Path
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
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 1024)
	res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "big", Arguments: map[string]any{"n": 10000}})
	if err != nil || !res.Success || !res.Truncated {
		t.Fatalf("big under a 1024-byte cap: %+v %v", res, err)
	}
	if s, _ := res.Data.(string); len(s) < 512 || len(encode(t, res)) > 1024 {
		t.Fatalf("data of %d bytes in a result of %d, want the 1024-byte cap filled", len(s), len(encode(t, res)))
	}
}

// TestRunCommandOutputCap runs commands whose output is many times the cap,
// in lines, in one line without a newline and in characters that the JSON
// encoding escapes: the reply, its collected events included, stays within
// max_output_bytes and every streamed event is within it too
// (docs/SECURITY.md, The edge).
func TestRunCommandOutputCap(t *testing.T) {
	const limit = 64 << 10
	e := newEnv(t, client.JSON, server.ToolPolicy{}, limit)
	tests := []struct{ name, script string }{
		{"many lines", `yes 'a line of output' | head -n 200000`},
		{"one long line", `head -c 3000000 /dev/zero | tr '\0' x`},
		{"escaped characters", `yes '<"&>' | head -n 100000`},
		{"both streams", `yes out | head -n 100000; yes err | head -n 100000 >&2`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var largest, n int
			ctx := client.WithEvents(context.Background(), func(ev client.Event) {
				b, _ := wire.Marshal(ev.Data)
				mu.Lock()
				largest, n = max(largest, len(b)), n+1
				mu.Unlock()
			})
			res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Streaming: true,
				Arguments: map[string]any{"argv": []any{"sh", "-c", tc.script}}})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Success || !res.Truncated {
				t.Fatalf("result %+v", res)
			}
			if size := len(encode(t, res)); size > limit {
				t.Fatalf("result of %d bytes over the %d-byte cap", size, limit)
			}
			out := res.Data.(map[string]any)
			if s := encode(t, out["stdout"]); len(s) < limit/4 {
				t.Fatalf("stdout of %d encoded bytes kept", len(s))
			}
			mu.Lock()
			defer mu.Unlock()
			if n == 0 || largest > limit {
				t.Fatalf("%d events streamed, the largest %d bytes", n, largest)
			}
		})
	}
}
