package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/server/sandbox"
)

// A spare init's mount namespace is a copy of the host's when it started.
// A file system mounted on the work directory since then is what the host
// sees there; the spare sees the directory below it. The spare must refuse
// the run and the run start cold, seeing what the host sees.
func TestSpareWithStaleViewStartsCold(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "which"), []byte("below the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sandbox.WaitSpare(t)
	if err := syscall.Mount("tmpfs", work, "tmpfs", 0, "mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(work, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(work, "which"), []byte("on the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, out, errOut := run(t, sandbox.Spec{Argv: []string{"cat", "which"}, Dir: work, Sandboxed: true, Mode: sandbox.ModeNamespaces})
	if res.Outcome != sandbox.Exited || res.ExitCode != 0 || out != "on the mount\n" {
		t.Fatalf("got %+v, stdout %q, stderr %q; want the file the host sees", res, out, errOut)
	}
}

// Spare inits serve one run each: consecutive runs see their own work
// directories and none sees a file another run left in /tmp.
func TestSpareServesOneRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	for i, name := range []string{"first", "second", "third"} {
		sandbox.WaitSpare(t)
		work := t.TempDir()
		os.WriteFile(filepath.Join(work, "name"), []byte(name), 0o644)
		script := `test ! -e /tmp/left && echo x > /tmp/left && cat /workspace/name`
		res, out, errOut := run(t, sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: work, Sandboxed: true, Mode: sandbox.ModeNamespaces})
		if res.Outcome != sandbox.Exited || res.ExitCode != 0 || out != name {
			t.Fatalf("run %d: %+v, stdout %q, stderr %q", i, res, out, errOut)
		}
	}
}

// The next spare is made once a run that took one ends, not while the run
// starts (both would compete for the CPU); a run that goes on long gets
// it made after the refill delay.
func TestSpareRefilledAfterTheRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	waitReady := func(what string) {
		t.Helper()
		for i := 0; i < 1000; i++ {
			if ready, _ := sandbox.Spares(); ready > 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no spare became ready %s", what)
	}
	settleSpares(t)
	sandbox.SetSpareRefillDelay(t, time.Hour)
	p, err := sandbox.Start(sandbox.Spec{Argv: []string{"cat"}, Dir: t.TempDir(), Sandboxed: true, Mode: sandbox.ModeNamespaces})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if ready, making := sandbox.Spares(); ready != 0 || making {
		t.Fatalf("while the run goes on: %d spares ready, making %v; want none", ready, making)
	}
	p.Stdin.Close()
	if res := <-waitResult(p); res.Outcome != sandbox.Exited || res.ExitCode != 0 {
		t.Fatalf("run: %+v", res)
	}
	waitReady("after the run ended")

	sandbox.SetSpareRefillDelay(t, 50*time.Millisecond)
	p, err = sandbox.Start(sandbox.Spec{Argv: []string{"cat"}, Dir: t.TempDir(), Sandboxed: true, Mode: sandbox.ModeNamespaces})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitReady("while a long run goes on")
	select {
	case <-p.Done():
		t.Fatal("the long run ended early")
	default:
	}
}

// A run that finds the next spare being made waits for it and takes it;
// the spare it took is replaced when it ends, not the moment it is taken
// (which would put the making of another beside that run's start).
func TestSpareTakenAsMadeIsNotReplacedAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	settleSpares(t)
	sandbox.SetSpareRefillDelay(t, time.Hour)
	first, err := sandbox.Start(sandbox.Spec{Argv: []string{"true"}, Dir: t.TempDir(), Sandboxed: true, Mode: sandbox.ModeNamespaces})
	if err != nil {
		t.Fatal(err)
	}
	if res := <-waitResult(first); res.Outcome != sandbox.Exited {
		t.Fatalf("first run: %+v", res)
	}
	// Its end asks for the next spare: start the second run while that
	// is being made.
	for i := 0; ; i++ {
		if ready, making := sandbox.Spares(); making || ready > 0 {
			break
		}
		if i == 1000 {
			t.Fatal("no spare is made after the first run")
		}
		time.Sleep(time.Millisecond)
	}
	second, err := sandbox.Start(sandbox.Spec{Argv: []string{"cat"}, Dir: t.TempDir(), Sandboxed: true, Mode: sandbox.ModeNamespaces})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Kill()
	for i := 0; i < 20; i++ {
		if ready, making := sandbox.Spares(); ready != 0 || making {
			t.Fatalf("while the second run goes on: %d spares ready, making %v; want none until it ends", ready, making)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// In the namespaces mode a run's result comes on the init's report that
// its PID namespace is empty, before the init's exit and its namespaces'
// teardown: when the result is out, a background process the command
// left holding its stdout has ended, and the output is whole. On a spare
// and cold alike.
func TestNamespacesRunEndsOnTheInitsReport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	for _, spare := range []bool{true, false} {
		t.Run(map[bool]string{true: "spare", false: "cold"}[spare], func(t *testing.T) {
			if spare {
				sandbox.WaitSpare(t)
			} else {
				sandbox.WithoutSpares(t)
			}
			tag := fmt.Sprintf("%d.%d", 5000+time.Now().UnixNano()%1000, os.Getpid())
			// 256 KiB written at once, more than a pipe holds, then a
			// background sleep that keeps stdout and stderr open.
			script := fmt.Sprintf(`head -c 262144 /dev/zero; (exec sleep %s; echo late) & echo err >&2`, tag)
			before := sandbox.EndedOnReport()
			res, out, errOut := run(t, sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: t.TempDir(), Sandboxed: true, Mode: sandbox.ModeNamespaces})
			if left := findProc("sleep " + tag); len(left) > 0 {
				t.Fatalf("at the result, processes of the run are left: %v", left)
			}
			if res.Outcome != sandbox.Exited || res.ExitCode != 0 || len(out) != 262144 || errOut != "err\n" {
				t.Fatalf("result %+v, %d bytes of stdout, stderr %q; want exit 0, 262144 bytes and \"err\\n\"", res, len(out), errOut)
			}
			if got := sandbox.EndedOnReport() - before; got != 1 {
				t.Fatalf("%d runs ended on the init's report; want this one", got)
			}
		})
	}
}

// settleSpares waits until a spare is ready and no ask for one is
// pending: earlier tests' runs ask for a spare as they end, and those
// asks must find the pool full before a test takes the spare.
func settleSpares(t *testing.T) {
	t.Helper()
	sandbox.WaitSpare(t)
	for settled := 0; settled < 3; {
		time.Sleep(20 * time.Millisecond)
		if ready, making := sandbox.Spares(); ready == 1 && !making {
			settled++
		} else {
			settled = 0
		}
	}
}

func waitResult(p *sandbox.Process) <-chan sandbox.Result {
	c := make(chan sandbox.Result, 1)
	go func() { <-p.Done(); c <- p.Result() }()
	return c
}
