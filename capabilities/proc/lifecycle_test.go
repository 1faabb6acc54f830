package proc_test

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// TestSessionCloseKillsEverything: closing a session kills its processes'
// whole process groups; the direct children are reaped (kill(pid, 0) fails).
func TestSessionCloseKillsEverything(t *testing.T) {
	for _, sandboxed := range []bool{false, true} {
		t.Run("sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
			if sandboxed && os.Geteuid() != 0 {
				t.Skip("sandboxed processes need root")
			}
			h := newHost(t, &proc.Plugin{Settings: proc.Settings{Sandbox: &sandboxed}})
			c := aeptest.Connect(t, h, "proc")
			var pids []int
			for i := 0; i < 3; i++ {
				pids = append(pids, spawn(t, c, "sleep", "1000").Pid)
			}
			// A grandchild in the same process group.
			marker := sleepMarker(t)
			tree := spawn(t, c, "sh", "-c", "sleep "+marker+" & wait")
			pids = append(pids, tree.Pid)
			deadline := time.Now().Add(10 * time.Second)
			for !runningWith(marker) {
				if time.Now().After(deadline) {
					t.Fatal("the grandchild never ran")
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, 0); err != nil {
					t.Fatalf("pid %d not running before close: %v", pid, err)
				}
			}
			c.Close()
			deadline = time.Now().Add(10 * time.Second)
			for _, pid := range pids {
				for syscall.Kill(pid, 0) == nil {
					if time.Now().After(deadline) {
						t.Fatalf("pid %d still exists after its session closed", pid)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			for runningWith(marker) {
				if time.Now().After(deadline) {
					t.Fatal("the grandchild still runs after its session closed")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

func TestHostCloseKillsEverything(t *testing.T) {
	p := &proc.Plugin{Settings: proc.Settings{Workspace: t.TempDir()}}
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("proc", p)})
	c := aeptest.Connect(t, h, "proc")
	pid := spawn(t, c, "sleep", "1000").Pid
	h.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d survived the host", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRestoreReportsLost(t *testing.T) {
	h := newHost(t, &proc.Plugin{})
	c := aeptest.Connect(t, h, "proc")
	ctx := aeptest.Context(t)
	before := spawn(t, c, "sleep", "1000")
	snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	after := spawn(t, c, "sleep", "1000")
	if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	st, err := c.ProcStatus(ctx, &msg.ProcStatusReq{ProcID: before.ProcID})
	if err != nil || st.Process.State != msg.ProcRecordStateLost || st.Process.Pid != 0 {
		t.Fatalf("restored process: %+v %v", st, err)
	}
	_, err = c.ProcStatus(ctx, &msg.ProcStatusReq{ProcID: after.ProcID})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
	// The processes running at the restore are gone, the snapshot's were never brought back.
	for _, pid := range []int{before.Pid, after.Pid} {
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d survived the restore", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	_ = before
}

// TestSessionExpiryKillsProcesses: a session that expires (idle timeout)
// takes its processes with it, whole process groups, as closing it does.
func TestSessionExpiryKillsProcesses(t *testing.T) {
	cfg := aeptest.Config(func(c *server.Config) { c.Server.Limits.IdleTimeout = server.Duration(300 * time.Millisecond) })
	h := aeptest.NewHost(t, cfg, []server.PluginSpec{aeptest.Plugin("proc", &proc.Plugin{Settings: proc.Settings{Workspace: t.TempDir()}})}, server.WithDataDir(t.TempDir()))
	c := aeptest.Connect(t, h, "proc")
	pid := spawn(t, c, "sleep", "1000").Pid
	marker := sleepMarker(t)
	tree := spawn(t, c, "sh", "-c", "sleep "+marker+" & wait")
	deadline := time.Now().Add(10 * time.Second)
	for !runningWith(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the grandchild never ran")
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
	for runningWith(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the grandchild still runs after its session expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
