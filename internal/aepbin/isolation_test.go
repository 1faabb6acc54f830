package aepbin_test

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
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/internal/uidlock"
	"github.com/aephost/aep/server/sandbox"
)

// Isolation with the real `aep` binary (docs/SECURITY.md, Isolation): the
// host is `aep serve --stdio`, with no config file (the default
// configuration), as root and as uid 65534, and with tier (b) forced by a
// config file while unprivileged. Each test logs the tier the host picked.

func TestMain(m *testing.M) {
	// These tests fork-bomb as uid 65534 and as the sandbox's uid; other
	// packages' tests running as those uids wait (internal/uidlock).
	release := uidlock.Main(aepbin.NobodyUID, sandbox.SandboxUID)
	code := m.Run()
	release()
	aepbin.Cleanup()
	os.Exit(code)
}

// hostModes are the ways the host runs in these tests.
var hostModes = []struct {
	name string
	opts aepbin.Options
	tier string // the tier the host must pick ("" any)
}{
	{"default", aepbin.Options{}, ""},
	{"default-uid65534", aepbin.Options{Nobody: true}, ""},
	{"supervised-uid65534", aepbin.Options{Nobody: true, Config: "server:\n  isolation:\n    sandbox: supervised\n"}, string(sandbox.TierSupervised)},
}

func forModes(t *testing.T, fn func(t *testing.T, h *aepbin.Host)) {
	for _, m := range hostModes {
		t.Run(m.name, func(t *testing.T) {
			h := aepbin.Start(t, m.opts)
			if got := h.Tier(); got == "" || m.tier != "" && got != m.tier {
				t.Fatalf("the host picked tier %q, want %q", got, m.tier)
			}
			fn(t, h)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func spawn(t *testing.T, c *client.Client, argv ...string) msg.ProcRecord {
	t.Helper()
	r, err := c.ProcSpawn(ctx(t), &msg.ProcSpawnReq{Argv: argv})
	if err != nil {
		t.Fatalf("proc/spawn %v: %v", argv, err)
	}
	return r.Process
}

// output waits for a process and returns its stdout and stderr.
func output(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	if _, err := c.ProcWait(ctx(t), &msg.ProcWaitReq{ProcID: id}); err != nil {
		t.Logf("proc/wait: %v", err)
	}
	r, err := c.ProcRead(ctx(t), &msg.ProcReadReq{ProcID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout.Data + r.Stderr.Data
}

func runCommand(t *testing.T, c *client.Client, script string) string {
	t.Helper()
	res, err := c.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"sh", "-c", script}}})
	if err != nil {
		t.Fatalf("run_command: %v", err)
	}
	return fmt.Sprintf("%v %v", res.Data, res.Error)
}

func waitRunning(t *testing.T, tag string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !aepbin.Running(tag); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no process %q started", tag)
		}
	}
}

// TestSetsidGrandchildGoneAfterShutdown: a setsid grandchild of proc/spawn
// and of run_command is gone within 5 s of `shutdown`.
func TestSetsidGrandchildGoneAfterShutdown(t *testing.T) {
	forModes(t, func(t *testing.T, h *aepbin.Host) {
		procTag, toolTag := aepbin.SleepTag(), aepbin.SleepTag()
		spawn(t, h.Client, "sh", "-c", "setsid sleep "+procTag+" </dev/null >/dev/null 2>&1 & exec sleep "+procTag)
		runCommand(t, h.Client, "setsid sh -c 'exec sleep "+toolTag+"' </dev/null >/dev/null 2>&1 & echo started")
		waitRunning(t, procTag)
		if err := h.Client.Shutdown(ctx(t), 1); err != nil {
			t.Fatal(err)
		}
		for _, tag := range []string{procTag, toolTag} {
			if !aepbin.GoneWithin(tag, 5*time.Second) {
				t.Errorf("a process %q outlived shutdown by 5 s", tag)
			}
		}
	})
}

// TestEveryChildGoneAfterHostKilled: after kill -9 of the host, every
// process proc/spawn and run_command started is gone (within 5 s),
// setsid grandchildren included.
func TestEveryChildGoneAfterHostKilled(t *testing.T) {
	forModes(t, func(t *testing.T, h *aepbin.Host) {
		procTag, toolTag := aepbin.SleepTag(), aepbin.SleepTag()
		spawn(t, h.Client, "sh", "-c", "setsid sleep "+procTag+" </dev/null >/dev/null 2>&1 & exec sleep "+procTag)
		go func() {
			// Still running when the host dies.
			_, _ = h.Client.CallTool(context.Background(), &msg.ToolCallReq{ToolName: "run_command",
				Arguments: map[string]any{"argv": []any{"sh", "-c", "setsid sleep " + toolTag + " </dev/null >/dev/null 2>&1 & sleep " + toolTag}}})
		}()
		waitRunning(t, procTag)
		waitRunning(t, toolTag)
		if err := h.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		for _, tag := range []string{procTag, toolTag} {
			if !aepbin.GoneWithin(tag, 5*time.Second) {
				t.Errorf("a process %q outlived kill -9 of the host by 5 s", tag)
			}
		}
	})
}

// TestForkBombUnderProc: a fork bomb spawned with proc stays under the
// pids limit, the host answers meanwhile, and the bomb ends with nothing
// left of it.
func TestForkBombUnderProc(t *testing.T) {
	forModes(t, func(t *testing.T, h *aepbin.Host) {
		tag := aepbin.SleepTag()
		r, err := h.Client.ProcSpawn(ctx(t), &msg.ProcSpawnReq{Argv: []string{"sh", "-c", "b() { b | b & }; b; sleep " + tag},
			Timeout: ptr(8.0)})
		if err != nil {
			t.Fatal(err)
		}
		peak := 0
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				peak = max(peak, descendants(h.Cmd.Process.Pid))
			}
		}()
		time.Sleep(time.Second)
		if _, err := h.Client.ProcList(ctx(t), &msg.ProcListReq{}); err != nil {
			t.Fatalf("host not responsive beside the bomb: %v", err)
		}
		if h.Tier() != string(sandbox.TierSupervised) {
			// In tier (b) with an unprivileged host RLIMIT_NPROC counts
			// every process of the uid, the host's new runs included
			// (docs/SECURITY.md, Isolation): the host answers, but starts
			// nothing until the bomb is gone.
			alive := spawn(t, h.Client, "echo", "alive")
			if out := output(t, h.Client, alive.ProcID); !strings.Contains(out, "alive") {
				t.Fatalf("host cannot start a process beside the bomb: %q", out)
			}
		}
		if _, err := h.Client.ProcWait(ctx(t), &msg.ProcWaitReq{ProcID: r.Process.ProcID}); err != nil {
			t.Logf("the bomb ended: %v", err)
		}
		close(stop)
		<-sampled
		// The pids limit bounds the command's processes; a few more are
		// the sandbox's own (bwrap, the init, its first shell).
		if limit := sandbox.DefaultMaxProcs + 16; peak > limit {
			t.Fatalf("the bomb reached %d processes, beyond the pids limit (%d)", peak, limit)
		}
		t.Logf("peak processes under the host: %d", peak)
		if !aepbin.GoneWithin(tag, 5*time.Second) {
			t.Fatal("a process of the bomb outlived it")
		}
	})
}

// TestNoSecretReachable: no process of proc or run_command reads the
// host's token from its environment, the host's, the config file or the
// data dir (the store).
func TestNoSecretReachable(t *testing.T) {
	forModes(t, func(t *testing.T, h *aepbin.Host) {
		cfg := filepath.Join(h.DataDir, "secret.yaml")
		if err := os.WriteFile(cfg, []byte("server:\n  auth_token: "+aepbin.Token+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("env; cat %s %s/aep.db /proc/%d/environ 2>&1; ls -la %s 2>&1", cfg, h.DataDir, h.Cmd.Process.Pid, h.DataDir)
		outs := map[string]string{
			"proc":        output(t, h.Client, spawn(t, h.Client, "sh", "-c", script).ProcID),
			"run_command": runCommand(t, h.Client, script),
		}
		for who, out := range outs {
			for _, s := range []string{aepbin.Token, "audit.jsonl", "SQLite format"} {
				if strings.Contains(out, s) {
					t.Errorf("%s saw %q:\n%s", who, s, out)
				}
			}
		}
	})
}

// descendants counts the live processes below pid.
func descendants(root int) int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[0] != "Z" {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	n := 0
	for pid := range parent {
		for p, hops := parent[pid], 0; p != 0 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				n++
				break
			}
		}
	}
	return n
}

func ptr[T any](v T) *T { return &v }
