package proc_test

import (
	"context"
	"errors"
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
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

const token = "secret"

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newHost(t testing.TB, p *proc.Plugin) *server.Host {
	t.Helper()
	if p.Workspace == "" {
		p.Workspace = t.TempDir()
	}
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	h, err := server.New(context.Background(), cfg, server.WithDataDir(t.TempDir()),
		server.WithPlugin(server.PluginSpec{Name: "proc", Type: "proc", Impl: p}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func connect(t testing.TB, h *server.Host) *client.Client {
	t.Helper()
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Handshake(context.Background(), "agent", token, "proc"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func spawn(t testing.TB, c *client.Client, argv ...string) msg.ProcRecord {
	t.Helper()
	r, err := c.ProcSpawn(ctxT(t), &msg.ProcSpawnReq{Argv: argv})
	if err != nil {
		t.Fatalf("spawn %v: %v", argv, err)
	}
	return r.Process
}

func wait(t testing.TB, c *client.Client, id string) (*msg.ProcWaitResp, error) {
	t.Helper()
	return c.ProcWait(ctxT(t), &msg.ProcWaitReq{ProcID: id})
}

func wantErr(t testing.TB, err error, code wire.Code, sub string) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code || !strings.Contains(we.Message, sub) {
		t.Fatalf("want %s error containing %q, got %v", code, sub, err)
	}
}

func readAll(t testing.TB, c *client.Client, id string) (string, string) {
	t.Helper()
	r, err := c.ProcRead(ctxT(t), &msg.ProcReadReq{ProcID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout.Data, r.Stderr.Data
}

func TestCatRoundTrip(t *testing.T) {
	c := connect(t, newHost(t, &proc.Plugin{}))
	ctx := ctxT(t)
	rec := spawn(t, c, "cat")
	if rec.State != msg.ProcRecordStateRunning || rec.Pid <= 0 {
		t.Fatalf("record %+v", rec)
	}
	for _, part := range []string{"hello ", "world\n"} {
		w, err := c.ProcWrite(ctx, &msg.ProcWriteReq{ProcID: rec.ProcID, Data: &part})
		if err != nil || w.Written != len(part) {
			t.Fatalf("write: %+v %v", w, err)
		}
	}
	if _, err := c.ProcWrite(ctx, &msg.ProcWriteReq{ProcID: rec.ProcID, Eof: true}); err != nil {
		t.Fatal(err)
	}
	wr, err := wait(t, c, rec.ProcID)
	if err != nil {
		t.Fatal(err)
	}
	p := wr.Process
	if p.State != msg.ProcRecordStateExited || p.ExitCode == nil || *p.ExitCode != 0 || p.EndedAt == nil || *p.EndedAt < p.StartedAt {
		t.Fatalf("record after eof: %+v", p)
	}
	r, err := c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout.Data != "hello world\n" || r.Stdout.NextCursor != 12 || !r.Stdout.Eof || r.Stdout.Dropped != 0 {
		t.Fatalf("stdout %+v", r.Stdout)
	}
	// Reading on from the cursor gives nothing more.
	r, _ = c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID, StdoutCursor: 6, MaxBytes: ptr(3)})
	if r.Stdout.Data != "wor" || r.Stdout.NextCursor != 9 {
		t.Fatalf("cursor read %+v", r.Stdout)
	}
	if _, err := c.ProcWrite(ctx, &msg.ProcWriteReq{ProcID: rec.ProcID, Data: ptr("late")}); err == nil {
		t.Fatal("write after eof succeeded")
	}
}

func ptr[T any](v T) *T { return &v }

func TestSignals(t *testing.T) {
	c := connect(t, newHost(t, &proc.Plugin{}))
	cases := []struct {
		signal string
		state  msg.ProcRecordState
		name   string
	}{
		{"TERM", msg.ProcRecordStateSignaled, "SIGTERM"},
		{"SIGINT", msg.ProcRecordStateSignaled, "SIGINT"},
		{"kill", msg.ProcRecordStateSignaled, "SIGKILL"},
	}
	for _, cs := range cases {
		t.Run(cs.signal, func(t *testing.T) {
			rec := spawn(t, c, "sleep", "1000")
			if _, err := c.ProcSignal(ctxT(t), &msg.ProcSignalReq{ProcID: rec.ProcID, Signal: cs.signal}); err != nil {
				t.Fatal(err)
			}
			wr, err := wait(t, c, rec.ProcID)
			if err != nil {
				t.Fatal(err)
			}
			if wr.Process.State != cs.state || wr.Process.Signal == nil || *wr.Process.Signal != cs.name {
				t.Fatalf("after %s: %+v", cs.signal, wr.Process)
			}
		})
	}
	rec := spawn(t, c, "sleep", "1000")
	_, err := c.ProcSignal(ctxT(t), &msg.ProcSignalReq{ProcID: rec.ProcID, Signal: "SIGBOGUS"})
	wantErr(t, err, wire.CodeSchemaViolation, "unknown signal")
	k, err := c.ProcKill(ctxT(t), &msg.ProcKillReq{ProcID: rec.ProcID})
	if err != nil || k.Process.State != msg.ProcRecordStateSignaled {
		t.Fatalf("kill: %+v %v", k, err)
	}
}

func TestLimitOutcomes(t *testing.T) {
	c := connect(t, newHost(t, &proc.Plugin{}))
	cases := []struct {
		name    string
		argv    []string
		timeout float64
		code    wire.Code
		state   msg.ProcRecordState
	}{
		{"wall-clock timeout", []string{"sleep", "1000"}, 0.2, wire.CodeTimeout, msg.ProcRecordStateTimeout},
		{"crash", []string{"sh", "-c", "kill -SEGV $$"}, 0, wire.CodeSandboxCrash, msg.ProcRecordStateCrashed},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			r, err := c.ProcSpawn(ctxT(t), &msg.ProcSpawnReq{Argv: cs.argv, Timeout: &cs.timeout})
			if err != nil {
				t.Fatal(err)
			}
			_, err = wait(t, c, r.Process.ProcID)
			wantErr(t, err, cs.code, r.Process.ProcID)
			st, _ := c.ProcStatus(ctxT(t), &msg.ProcStatusReq{ProcID: r.Process.ProcID})
			if st.Process.State != cs.state {
				t.Fatalf("state %s, want %s", st.Process.State, cs.state)
			}
		})
	}
	// A wait with its own timeout on a running process is no error.
	rec := spawn(t, c, "sleep", "1000")
	wr, err := c.ProcWait(ctxT(t), &msg.ProcWaitReq{ProcID: rec.ProcID, Timeout: ptr(0.05)})
	if err != nil || !wr.TimedOut || wr.Process.State != msg.ProcRecordStateRunning {
		t.Fatalf("wait with timeout: %+v %v", wr, err)
	}
}

func TestOutputPastCapTruncated(t *testing.T) {
	const buf = 4096
	c := connect(t, newHost(t, &proc.Plugin{BufferBytes: buf}))
	rec := spawn(t, c, "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2")
	if _, err := wait(t, c, rec.ProcID); err != nil {
		t.Fatal(err)
	}
	r, err := c.ProcRead(ctxT(t), &msg.ProcReadReq{ProcID: rec.ProcID})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout.Data) != buf || r.Stdout.Dropped != 100000-buf || r.Stdout.Cursor != 100000-buf || r.Stdout.NextCursor != 100000 || !r.Stdout.Eof {
		t.Fatalf("stdout: len %d cursor %d next %d dropped %d eof %v", len(r.Stdout.Data), r.Stdout.Cursor, r.Stdout.NextCursor, r.Stdout.Dropped, r.Stdout.Eof)
	}
	if r.Stderr.Data != "done\n" {
		t.Fatalf("stderr %q", r.Stderr.Data)
	}
}

// TestSlowReaderStallsNoOne: a process whose output nobody reads keeps
// running (its pipe is drained into the ring), and another session's
// processes and requests go on meanwhile.
func TestSlowReaderStallsNoOne(t *testing.T) {
	h := newHost(t, &proc.Plugin{BufferBytes: 64 << 10})
	a, b := connect(t, h), connect(t, h)
	flood := spawn(t, a, "yes", "flood")
	progress := func() int {
		r, err := a.ProcRead(ctxT(t), &msg.ProcReadReq{ProcID: flood.ProcID, MaxBytes: ptr(1)})
		if err != nil {
			t.Fatal(err)
		}
		return r.Stdout.Dropped
	}
	before := progress()
	for i := 0; i < 5; i++ {
		rec := spawn(t, b, "cat")
		if _, err := b.ProcWrite(ctxT(t), &msg.ProcWriteReq{ProcID: rec.ProcID, Data: ptr("x" + strconv.Itoa(i)), Eof: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := wait(t, b, rec.ProcID); err != nil {
			t.Fatal(err)
		}
		if out, _ := readAll(t, b, rec.ProcID); out != "x"+strconv.Itoa(i) {
			t.Fatalf("session b got %q", out)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for progress() <= before+(1<<20) {
		if time.Now().After(deadline) {
			t.Fatal("the unread process stopped producing output: its pipe is not drained")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A follow read that hits its byte cap returns; nothing follows its reply.
	var mu sync.Mutex
	events, replied := 0, false
	ctx := client.WithEvents(ctxT(t), func(e client.Event) {
		mu.Lock()
		defer mu.Unlock()
		if replied {
			t.Error("event after the reply")
		}
		events++
	})
	r, err := a.ProcRead(ctx, &msg.ProcReadReq{ProcID: flood.ProcID, Follow: true, MaxBytes: ptr(50000), StdoutCursor: 1 << 40})
	mu.Lock()
	replied = true
	mu.Unlock()
	if err != nil || r.Streamed == nil || *r.Streamed != 50000 || events == 0 {
		t.Fatalf("follow: %+v %v events %d", r, err, events)
	}
}

func TestFollowEventsBeforeReply(t *testing.T) {
	c := connect(t, newHost(t, &proc.Plugin{}))
	rec := spawn(t, c, "sh", "-c", "echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three")
	var got []string
	var seqs []int
	ctx := client.WithEvents(ctxT(t), func(e client.Event) {
		if e.Type != "proc/event" || e.Kind != wire.EventArtifact {
			t.Errorf("event %+v", e)
		}
		got = append(got, e.Data["name"].(string)+":"+e.Data["chunk"].(string))
		seqs = append(seqs, e.Seq)
	})
	r, err := c.ProcRead(ctx, &msg.ProcReadReq{ProcID: rec.ProcID, Follow: true, FollowTimeout: ptr(10.0)})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, "|")
	if !strings.Contains(joined, "stdout:one\n") || !strings.Contains(joined, "stderr:two\n") || !strings.Contains(joined, "stdout:three\n") ||
		strings.Index(joined, "one") > strings.Index(joined, "two") || strings.Index(joined, "two") > strings.Index(joined, "three") {
		t.Fatalf("events %q", got)
	}
	for i, s := range seqs {
		if s != i {
			t.Fatalf("seq %v", seqs)
		}
	}
	if !r.Stdout.Eof || !r.Stderr.Eof || r.Stdout.NextCursor != 10 || r.Stdout.Data != "" || *r.Streamed != 14 {
		t.Fatalf("reply %+v", r)
	}
}

func TestSpawnRules(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(ws+"/s", 0o755); err != nil {
		t.Fatal(err)
	}
	c := connect(t, newHost(t, &proc.Plugin{Workspace: ws, MaxProcs: 2}))
	ctx := ctxT(t)
	os.MkdirAll(ws+"/"+c.SessionID()+"/sub", 0o755)
	os.Symlink("/etc", ws+"/"+c.SessionID()+"/out")
	cases := []struct {
		name string
		req  msg.ProcSpawnReq
		code wire.Code
		sub  string
	}{
		{"parent dir", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: ptr("../s")}, wire.CodeSchemaViolation, "cwd"},
		{"absolute", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: ptr("/etc")}, wire.CodeSchemaViolation, "cwd"},
		{"symlink out", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: ptr("out")}, wire.CodeSchemaViolation, "leaves its root"},
		{"missing", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: ptr("nope")}, wire.CodeSchemaViolation, "cwd"},
		{"no such program", msg.ProcSpawnReq{Argv: []string{"/nonexistent/prog"}}, wire.CodeRuntimeError, "spawn"},
		{"empty argv[0]", msg.ProcSpawnReq{Argv: []string{""}}, wire.CodeSchemaViolation, "argv"},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			_, err := c.ProcSpawn(ctx, &cs.req)
			wantErr(t, err, cs.code, cs.sub)
		})
	}
	// The environment: allowlisted host variables and the request's, never LD_*.
	r, err := c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sh", "-c", `pwd; echo "${LD_PRELOAD:-none} ${BASH_ENV:-none} $FOO"`}, Cwd: ptr("sub"),
		Env: msg.ProcSpawnReqEnv{"LD_PRELOAD": "/tmp/evil.so", "BASH_ENV": "/tmp/x", "FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.DroppedEnv, ",") != "BASH_ENV,LD_PRELOAD" || r.Process.Cwd != "sub" {
		t.Fatalf("spawn: %+v", r)
	}
	wait(t, c, r.Process.ProcID)
	if out, _ := readAll(t, c, r.Process.ProcID); !strings.HasSuffix(out, "/sub\nnone none bar\n") {
		t.Fatalf("output %q", out)
	}
	// The cap on running processes.
	spawn(t, c, "sleep", "1000")
	spawn(t, c, "sleep", "1000")
	_, err = c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sleep", "1"}})
	wantErr(t, err, wire.CodeRuntimeError, "limit")
	l, err := c.ProcList(ctx, &msg.ProcListReq{RunningOnly: true})
	if err != nil || len(l.Processes) != 2 {
		t.Fatalf("list: %+v %v", l, err)
	}
	_, err = c.ProcStatus(ctx, &msg.ProcStatusReq{ProcID: "p-nope"})
	wantErr(t, err, wire.CodeSchemaViolation, "unknown proc_id")
}

// TestSessionCloseKillsEverything: closing a session kills its processes'
// whole process groups; the direct children are reaped (kill(pid, 0) fails).
func TestSessionCloseKillsEverything(t *testing.T) {
	for _, sandboxed := range []bool{false, true} {
		t.Run("sandboxed="+strconv.FormatBool(sandboxed), func(t *testing.T) {
			if sandboxed && os.Geteuid() != 0 {
				t.Skip("sandboxed processes need root")
			}
			h := newHost(t, &proc.Plugin{Sandbox: sandboxed})
			c := connect(t, h)
			var pids []int
			for i := 0; i < 3; i++ {
				pids = append(pids, spawn(t, c, "sleep", "1000").Pid)
			}
			// A grandchild in the same process group.
			tree := spawn(t, c, "sh", "-c", "sleep 1000 & echo $!; wait")
			pids = append(pids, tree.Pid)
			var grandchild int
			deadline := time.Now().Add(10 * time.Second)
			for grandchild == 0 && !sandboxed {
				out, _ := readAll(t, c, tree.ProcID)
				grandchild, _ = strconv.Atoi(strings.TrimSpace(out))
				if time.Now().After(deadline) {
					t.Fatal("no grandchild pid")
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
			if grandchild != 0 {
				for alive(grandchild) {
					if time.Now().After(deadline) {
						t.Fatalf("grandchild %d still runs after its session closed", grandchild)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
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

func TestHostCloseKillsEverything(t *testing.T) {
	p := &proc.Plugin{Workspace: t.TempDir()}
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	h, err := server.New(context.Background(), cfg, server.WithPlugin(server.PluginSpec{Name: "proc", Type: "proc", Impl: p}))
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, h)
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
	c := connect(t, h)
	ctx := ctxT(t)
	before := spawn(t, c, "sleep", "1000")
	snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	after := spawn(t, c, "sleep", "1000")
	if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: snap.SnapshotID}); err != nil {
		t.Fatal(err)
	}
	st, err := c.ProcStatus(ctx, &msg.ProcStatusReq{ProcID: before.ProcID})
	if err != nil || st.Process.State != msg.ProcRecordStateLost || st.Process.Pid != 0 {
		t.Fatalf("restored process: %+v %v", st, err)
	}
	_, err = c.ProcStatus(ctx, &msg.ProcStatusReq{ProcID: after.ProcID})
	wantErr(t, err, wire.CodeSchemaViolation, "unknown proc_id")
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

// TestSandboxedProcess runs a process confined: its signals and limits.
func TestSandboxedProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if sandbox.BwrapPath() == "" && os.Getenv("CI") != "" {
		t.Fatal("bwrap is not installed")
	}
	c := connect(t, newHost(t, &proc.Plugin{Sandbox: true, CPUTime: server.Duration(time.Second), MemoryMB: 64}))
	rec := spawn(t, c, "sleep", "1000")
	if !rec.Sandboxed {
		t.Fatal("not sandboxed")
	}
	if _, err := c.ProcSignal(ctxT(t), &msg.ProcSignalReq{ProcID: rec.ProcID, Signal: "TERM"}); err != nil {
		t.Fatal(err)
	}
	wr, err := wait(t, c, rec.ProcID)
	if err != nil || wr.Process.State != msg.ProcRecordStateSignaled || *wr.Process.Signal != "SIGTERM" {
		t.Fatalf("sandboxed TERM: %+v %v", wr, err)
	}
	cases := []struct {
		argv []string
		code wire.Code
	}{
		{[]string{"sh", "-c", "kill -SEGV $$"}, wire.CodeSandboxCrash},
		{[]string{"sh", "-c", "while :; do :; done"}, wire.CodeTimeout},
		{[]string{"perl", "-e", `my @a; push @a, "x" x (1<<20) for 1..512`}, wire.CodeOutOfMemory},
	}
	for _, cs := range cases {
		rec := spawn(t, c, cs.argv...)
		_, err := wait(t, c, rec.ProcID)
		wantErr(t, err, cs.code, rec.ProcID)
	}
}
