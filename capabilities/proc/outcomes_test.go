package proc_test

import (
	"os"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

func TestSignals(t *testing.T) {
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{}), "proc")
	cases := []struct {
		signal msg.ProcSignalReqSignal
		state  msg.ProcRecordState
		name   string
	}{
		{"TERM", msg.ProcRecordStateSignaled, "SIGTERM"},
		{"SIGINT", msg.ProcRecordStateSignaled, "SIGINT"},
		{"KILL", msg.ProcRecordStateSignaled, "SIGKILL"},
	}
	for _, cs := range cases {
		t.Run(string(cs.signal), func(t *testing.T) {
			rec := spawn(t, c, "sleep", "1000")
			if _, err := c.ProcSignal(aeptest.Context(t), &msg.ProcSignalReq{ProcID: rec.ProcID, Signal: cs.signal}); err != nil {
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
	_, err := c.ProcSignal(aeptest.Context(t), &msg.ProcSignalReq{ProcID: rec.ProcID, Signal: "SIGBOGUS"})
	aeptest.WantError(t, err, wire.CodeSchemaViolation, `"signal": must be one of`)
	k, err := c.ProcKill(aeptest.Context(t), &msg.ProcKillReq{ProcID: rec.ProcID})
	if err != nil || k.Process.State != msg.ProcRecordStateSignaled {
		t.Fatalf("kill: %+v %v", k, err)
	}
}

func TestLimitOutcomes(t *testing.T) {
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{}), "proc")
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
			r, err := c.ProcSpawn(aeptest.Context(t), &msg.ProcSpawnReq{Argv: cs.argv, Timeout: &cs.timeout})
			if err != nil {
				t.Fatal(err)
			}
			_, err = wait(t, c, r.Process.ProcID)
			aeptest.WantError(t, err, cs.code, r.Process.ProcID)
			st, _ := c.ProcStatus(aeptest.Context(t), &msg.ProcStatusReq{ProcID: r.Process.ProcID})
			if st.Process.State != cs.state {
				t.Fatalf("state %s, want %s", st.Process.State, cs.state)
			}
		})
	}
	// A wait with its own timeout on a running process is no error.
	rec := spawn(t, c, "sleep", "1000")
	wr, err := c.ProcWait(aeptest.Context(t), &msg.ProcWaitReq{ProcID: rec.ProcID, Timeout: aeptest.Ptr(0.05)})
	if err != nil || !wr.TimedOut || wr.Process.State != msg.ProcRecordStateRunning {
		t.Fatalf("wait with timeout: %+v %v", wr, err)
	}
}

// TestSandboxedProcess runs a process confined: its signals and limits.
func TestSandboxedProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if sandbox.BwrapPath() == "" && os.Getenv("CI") != "" {
		t.Fatal("bwrap is not installed")
	}
	c := aeptest.Connect(t, newHost(t, &proc.Plugin{Settings: proc.Settings{Sandbox: aeptest.Ptr(true), CPUTime: server.Duration(time.Second), MemoryMB: 64}}), "proc")
	rec := spawn(t, c, "sleep", "1000")
	if !rec.Sandboxed {
		t.Fatal("not sandboxed")
	}
	if _, err := c.ProcSignal(aeptest.Context(t), &msg.ProcSignalReq{ProcID: rec.ProcID, Signal: "TERM"}); err != nil {
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
		aeptest.WantError(t, err, cs.code, rec.ProcID)
	}
}
