package sandbox_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/server/sandbox"
)

// TestProcessCountLimit: the process-count limit (Limits.MaxProcs,
// a pids cgroup) stops a command that keeps forking, in every mode, while
// the same command without the limit forks all it wants. The command starts
// background sleeps and prints how many it has started; dash gives up at the
// first fork the cgroup refuses. The limit is 12, not smaller: the pids
// cgroup counts tasks, and the init (a Go program, in the cgroup from before
// the command starts) holds several threads of it, so a limit of 5 or less
// leaves no room to start the command at all.
func TestProcessCountLimit(t *testing.T) {
	const want = 20
	script := "i=0; while [ $i -lt " + strconv.Itoa(want) + " ]; do sleep 30 & i=$((i+1)); echo $i; done"
	started := func(out string) int {
		f := strings.Fields(out)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(f[len(f)-1])
		return n
	}
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			cases := []struct {
				name     string
				maxProcs int
				check    func(n int) bool
				what     string
			}{
				{"unlimited", 0, func(n int) bool { return n == want }, "all"},
				// The command's shell is one of the limit's processes; the
				// sandbox's own init is outside the run's cgroups.
				{"limited to 12", 12, func(n int) bool { return n == 11 }, "exactly 11"},
				{"limited to 3", 3, func(n int) bool { return n == 2 }, "exactly 2"},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					res, out, errOut := run(t, sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: t.TempDir(), Sandboxed: true, Mode: mode,
						Limits: sandbox.Limits{MaxProcs: c.maxProcs, Timeout: 20 * time.Second}})
					if n := started(out); !c.check(n) {
						t.Fatalf("%d of %d sleeps started, want %s (result %+v, stderr %q)", n, want, c.what, res, errOut)
					}
					if c.maxProcs > 0 && (res.Outcome != sandbox.Exited || res.ExitCode == 0) {
						t.Fatalf("a refused fork should fail the shell: %+v (stderr %q)", res, errOut)
					}
				})
			}
		})
	}
}

// TestCommandCannotReachTheInitsPipes: the init's status pipe (its report of
// how the command ended) and control pipe (the owner's signals) stay the
// init's. A command that could write the status pipe would forge its own
// outcome, e.g. turn a death by SIGSEGV into a clean exit (docs/DECISIONS.md, Sandbox
// outcomes); one that could read the control pipe would swallow the owner's
// signals.
func TestCommandCannotReachTheInitsPipes(t *testing.T) {
	forge := `echo '{"exit":0,"cpu_us":0,"max_rss":0}' >&3 2>/dev/null; kill -SEGV $$`
	peek := `for fd in 3 4 5 6 7; do [ -e /proc/self/fd/$fd ] && echo "fd $fd open"; done; true` // status, control, cgroup.procs, the ready pipe
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			// With and without cgroup limits: the init's fds are the same, the
			// cgroup ones are extra.
			for _, lim := range []sandbox.Limits{{}, {MemoryBytes: 256 << 20, MaxProcs: 64}} {
				res, _, errOut := run(t, sandbox.Spec{Argv: []string{"sh", "-c", forge}, Dir: t.TempDir(), Sandboxed: true, Mode: mode, Limits: lim})
				if res.Outcome != sandbox.Crashed || res.Signal != syscall.SIGSEGV {
					t.Fatalf("limits %+v: a forged report was believed: %+v (stderr %q)", lim, res, errOut)
				}
				res, out, errOut := run(t, sandbox.Spec{Argv: []string{"sh", "-c", peek}, Dir: t.TempDir(), Sandboxed: true, Mode: mode, Limits: lim})
				if res.Outcome != sandbox.Exited || out != "" {
					t.Fatalf("limits %+v: the command sees the init's pipes: %q %+v (stderr %q)", lim, out, res, errOut)
				}
			}
		})
	}
}
