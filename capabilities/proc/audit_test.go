package proc_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// TestFollowEndsAtItsTimeout: a follow read of a process that keeps running
// streams what there is and replies when follow_timeout passes, with the
// process still running and the streams open; no event follows the reply.
func TestFollowEndsAtItsTimeout(t *testing.T) {
	c := connect(t, newHost(t, &proc.Plugin{}))
	rec := spawn(t, c, "sh", "-c", "echo first; exec sleep 1000")
	var mu sync.Mutex
	var chunks []string
	replied := false
	ctx := client.WithEvents(ctxT(t), func(e client.Event) {
		mu.Lock()
		defer mu.Unlock()
		if replied {
			t.Error("event after the reply")
		}
		if e.Type == "proc/event" && e.Kind == wire.EventArtifact {
			chunks = append(chunks, e.Data["name"].(string)+":"+e.Data["chunk"].(string))
		}
	})
	r, err := c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID, Follow: true, FollowTimeout: ptr(0.3)})
	mu.Lock()
	replied = true
	got := strings.Join(chunks, "|")
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got != "stdout:first\n" || r.State != string(msg.ProcRecordStateRunning) || r.Stdout.Eof || r.Stderr.Eof ||
		r.Streamed == nil || *r.Streamed != 6 || r.Stdout.NextCursor != 6 {
		t.Fatalf("follow of a running process: events %q, reply %+v", got, r)
	}
	// Reading on from the reply's cursor picks up where the follow stopped.
	r2, err := c.ProcRead(ctxT(t), &msg.ProcReadReq{ProcID: rec.ProcID, StdoutCursor: r.Stdout.NextCursor})
	if err != nil || r2.Stdout.Data != "" || r2.Stdout.Cursor != 6 {
		t.Fatalf("read after follow: %+v %v", r2, err)
	}
}

// TestEnvironmentAllowlist: a process inherits only the host variables on
// env_allow (loader variables dropped even when listed), HOME is its
// workspace, and argv reaches the program as it is, with no shell between.
func TestEnvironmentAllowlist(t *testing.T) {
	t.Setenv("AEP_AUDIT_LISTED", "listed-value")
	t.Setenv("AEP_AUDIT_UNLISTED", "must-not-leak")
	t.Setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
	ws := t.TempDir()
	c := connect(t, newHost(t, &proc.Plugin{Workspace: ws, EnvAllow: []string{"PATH", "AEP_AUDIT_LISTED", "GLIBC_TUNABLES"}}))
	rec := spawn(t, c, "env")
	if _, err := wait(t, c, rec.ProcID); err != nil {
		t.Fatal(err)
	}
	out, _ := readAll(t, c, rec.ProcID)
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	want := map[string]string{"PATH": os.Getenv("PATH"), "AEP_AUDIT_LISTED": "listed-value", "HOME": ws + "/" + c.SessionID()}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("environment %v, want only %v", env, want)
	}

	argv := []string{"printf", "%s|", "$HOME", "`id`", "a b", ";", "*", "$(true)"}
	rec = spawn(t, c, argv...)
	if _, err := wait(t, c, rec.ProcID); err != nil {
		t.Fatal(err)
	}
	if out, _ := readAll(t, c, rec.ProcID); out != strings.Join(argv[2:], "|")+"|" {
		t.Fatalf("argv went through a shell: %q", out)
	}
}

// TestSessionExpiryKillsProcesses: a session that expires (idle timeout)
// takes its processes with it, whole process groups, as closing it does.
func TestSessionExpiryKillsProcesses(t *testing.T) {
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	cfg.Server.Limits.IdleTimeout = server.Duration(300 * time.Millisecond)
	h, err := server.New(context.Background(), cfg, server.WithDataDir(t.TempDir()),
		server.WithPlugin(server.PluginSpec{Name: "proc", Type: "proc", Impl: &proc.Plugin{Workspace: t.TempDir()}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	c := connect(t, h)
	pid := spawn(t, c, "sleep", "1000").Pid
	tree := spawn(t, c, "sh", "-c", "sleep 1000 & echo $!; wait")
	var grandchild int
	deadline := time.Now().Add(10 * time.Second)
	for grandchild == 0 {
		out, _ := readAll(t, c, tree.ProcID)
		grandchild, _ = strconv.Atoi(strings.TrimSpace(out))
		if time.Now().After(deadline) {
			t.Fatal("no grandchild pid")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Silence from here: the session expires.
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, ok := h.Session(c.SessionID()); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle session did not expire")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range []int{pid, tree.Pid} {
		for syscall.Kill(p, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still exists after its session expired", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for alive(grandchild) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still runs after its session expired", grandchild)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
