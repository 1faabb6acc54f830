package tools_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/uidlock"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
)

// Isolation of the tools capability (docs/SECURITY.md, Isolation), with the
// default configuration's sandbox mode (auto).

func call(t *testing.T, c *client.Client, tool string, args map[string]any) *msg.ToolResult {
	t.Helper()
	res, err := c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func secondClient(t *testing.T, e *env) *client.Client {
	t.Helper()
	return aeptest.Connect(t, e.h, "tools")
}

// TestSessionsDoNotShareFiles: session B cannot read, list or overwrite
// what session A wrote, with the file tools or with run_command.
func TestSessionsDoNotShareFiles(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	if r := call(t, e.c, "write_file", map[string]any{"path": "a.txt", "content": "from A"}); !r.Success {
		t.Fatalf("write: %+v", r)
	}
	b := secondClient(t, e)
	if r := call(t, b, "read_file", map[string]any{"path": "a.txt"}); r.Success {
		t.Fatalf("B read A's file: %s", encode(t, r.Data))
	}
	if r := call(t, b, "list_dir", map[string]any{}); strings.Contains(encode(t, r.Data), "a.txt") {
		t.Fatalf("B listed A's file: %s", encode(t, r.Data))
	}
	call(t, b, "write_file", map[string]any{"path": "a.txt", "content": "from B"})
	r := call(t, b, "run_command", map[string]any{"argv": []any{"sh", "-c", "cat ../*/a.txt /tmp/aep-sessions-*/*/a.txt " + e.root + "/a.txt 2>/dev/null; echo x > " + e.root + "/a.txt"}})
	if strings.Contains(encode(t, r.Data), "from A") {
		t.Fatalf("B's command read A's file: %s", encode(t, r.Data))
	}
	if got := call(t, e.c, "read_file", map[string]any{"path": "a.txt"}); !strings.Contains(encode(t, got.Data), `"content":"from A"`) {
		t.Fatalf("A's file changed: %s", encode(t, got.Data))
	}
}

// TestRunCommandSeesNoSecret: the host token is not in run_command's
// environment, and neither the config file nor the data dir can be read.
func TestRunCommandSeesNoSecret(t *testing.T) {
	t.Setenv("AEP_AUTH_TOKEN", "token-in-env")
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	data := e.h.DataDir()
	os.WriteFile(filepath.Join(data, "config.yaml"), []byte("server:\n  auth_token: token-in-config\n"), 0o644)
	os.WriteFile(filepath.Join(data, "aep.db"), []byte("token-in-store"), 0o644)
	r := call(t, e.c, "run_command", map[string]any{"argv": []any{"sh", "-c",
		fmt.Sprintf("env; cat %s/config.yaml %s/aep.db /proc/%d/environ 2>/dev/null; ls %s 2>/dev/null", data, data, os.Getpid(), data)}})
	out := encode(t, r.Data)
	for _, s := range []string{"token-in-env", "token-in-config", "token-in-store", "aep.db"} {
		if strings.Contains(out, s) {
			t.Errorf("run_command saw %q: %s", s, out)
		}
	}
}

// TestRunCommandGrandchildEndsWithSession: a setsid grandchild left by
// run_command is gone within 5 s of the session's shutdown (at the latest:
// it goes with the call already).
func TestRunCommandGrandchildEndsWithSession(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	tag := fmt.Sprintf("%d.%d", 6000+time.Now().UnixNano()%1000, os.Getpid())
	call(t, e.c, "run_command", map[string]any{"argv": []any{"sh", "-c", "setsid sh -c 'exec sleep " + tag + "' </dev/null >/dev/null 2>&1 & echo ok"}})
	e.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if !running("sleep " + tag) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the setsid grandchild outlived the session")
}

func running(tag string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), tag) && !strings.Contains(string(st), ") Z ") {
			return true
		}
	}
	return false
}

// TestRunCommandForkBomb: the pids limit stops a fork bomb and the host
// answers another session meanwhile.
func TestRunCommandForkBomb(t *testing.T) {
	uidlock.Hold(t, sandbox.SandboxUID)
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	done := make(chan *msg.ToolResult, 1)
	go func() {
		res, _ := e.c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: "run_command",
			Arguments: map[string]any{"argv": []any{"sh", "-c", "b() { b | b & }; b; sleep 2"}, "timeout": 5}})
		done <- res
	}()
	time.Sleep(500 * time.Millisecond)
	b := secondClient(t, e)
	if r := call(t, b, "run_command", map[string]any{"argv": []any{"echo", "alive"}}); !strings.Contains(encode(t, r.Data), "alive") {
		t.Fatalf("host not responsive beside the bomb: %s", encode(t, r.Data))
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the fork bomb was not stopped")
	}
}
