package proc_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// newHost starts a host with a data directory serving p as plugin "proc";
// p.Workspace defaults to a temp dir.
func newHost(t testing.TB, p *proc.Plugin) *server.Host {
	t.Helper()
	if p.Workspace == "" {
		p.Workspace = t.TempDir()
	}
	return aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("proc", p)}, server.WithDataDir(t.TempDir()))
}

func spawn(t testing.TB, c *client.Client, argv ...string) msg.ProcRecord {
	t.Helper()
	r, err := c.ProcSpawn(aeptest.Context(t), &msg.ProcSpawnReq{Argv: argv})
	if err != nil {
		t.Fatalf("spawn %v: %v", argv, err)
	}
	return r.Process
}

func wait(t testing.TB, c *client.Client, id string) (*msg.ProcWaitResp, error) {
	t.Helper()
	return c.ProcWait(aeptest.Context(t), &msg.ProcWaitReq{ProcID: id})
}

func readAll(t testing.TB, c *client.Client, id string) (string, string) {
	t.Helper()
	r, err := c.ProcRead(aeptest.Context(t), &msg.ProcReadReq{ProcID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout.Data, r.Stderr.Data
}

// alive: the pid exists and is not a zombie waiting for a reaper that is
// not ours (the grandchild's parent died first).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// sleepMarker is a sleep duration no other process uses: a grandchild
// started as `sleep <marker>` is found by its command line, which works
// when it runs in a PID namespace of its own (where `$!` is not a host pid).
func sleepMarker(t *testing.T) string {
	return fmt.Sprintf("1000.%06d%03d", time.Now().Nanosecond()/1000, len(t.Name())%1000)
}

// runningWith reports whether a live (not zombie) process has argv
// "sleep" marker.
func runningWith(marker string) bool {
	ents, _ := os.ReadDir("/proc")
	want := "sleep\x00" + marker + "\x00"
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == want && alive(pid) {
			return true
		}
	}
	return false
}
