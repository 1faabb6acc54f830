// Package sandbox runs one command as a child process, either plainly (its
// own process group, a wall-clock timeout) or confined: under bubblewrap when
// `bwrap` is installed, else in Linux namespaces set up by the host itself,
// with limits on CPU time, memory, process count and wall-clock time. It is
// the one place where the proc and skills capabilities start processes, and
// the one place that turns how a process ended into an outcome
// (docs/DECISIONS.md, Sandbox outcomes):
//
//  1. the host's wall-clock kill, SIGXCPU, or SIGKILL after the CPU limit → [Timeout];
//  2. a rise of the cgroup's oom_kill count (or, with the rlimit fallback, an
//     abnormal end at the memory limit, see [Result]) → [OutOfMemory];
//  3. a signal the owner asked for ([Process.Signal], [Process.Kill]) → [Signaled];
//  4. any other death by signal → [Crashed];
//  5. otherwise [Exited] with the exit code.
//
// Confined runs go through a small init: the host binary re-executed (see
// package initproc), which joins the cgroups, applies the rlimits, starts the command
// as its child and reports how it ended on a status pipe. bwrap alone cannot
// tell an exit code of 139 from a death by SIGSEGV (it reports 128+signal),
// and a command that is pid 1 of its namespace ignores signals it sends itself.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aephost/aep/wire"
)

// Mode selects the confinement mechanism of a sandboxed run.
type Mode string

// Modes of [Spec.Mode].
const (
	// ModeAuto uses bubblewrap when `bwrap` is found, else namespaces.
	ModeAuto Mode = "auto"
	// ModeBwrap requires bubblewrap; without it nothing runs.
	ModeBwrap Mode = "bwrap"
	// ModeNamespaces sets up the namespaces and mounts in the host's own init.
	ModeNamespaces Mode = "namespaces"
)

// Limits bound one run. Zero fields mean no limit.
type Limits struct {
	// Timeout is wall-clock time; the host kills the process group when it passes.
	Timeout time.Duration
	// CPUTime is RLIMIT_CPU of the command (soft limit; the hard limit is one
	// second more): SIGXCPU at the soft limit, SIGKILL at the hard one. It is
	// per process, so a command that forks spreads its budget; Timeout bounds the whole.
	CPUTime time.Duration
	// MemoryBytes is the cgroup memory limit (v1 memory.limit_in_bytes, v2
	// memory.max) when a cgroup can be made, else RLIMIT_DATA of the command.
	MemoryBytes int64
	// AddressReserve is added to MemoryBytes where it is enforced as
	// RLIMIT_DATA, which counts address space a runtime reserves and
	// never touches: a Go program (the sql toolkit's worker) maps some
	// 80-112 MiB of heap bookkeeping before it allocates anything. A
	// cgroup counts only what is used, and gets MemoryBytes alone.
	AddressReserve int64
	// MaxProcs is the pids cgroup limit when one can be made, else RLIMIT_NPROC
	// (which the kernel does not enforce for root).
	MaxProcs int
	// FileBytes is RLIMIT_FSIZE of a confined command: no file it writes
	// grows past it (a session's byte quota, docs/SECURITY.md, Isolation).
	FileBytes int64
}

// Spec describes one run.
type Spec struct {
	Argv []string
	// Dir is the working directory (a host path).
	Dir string
	// Env is the complete environment of the command (KEY=value); nil
	// means only [DefaultPath]. argv[0] is looked up in its PATH.
	Env []string
	// Sandboxed selects a confined run; the remaining fields apply only then,
	// except Limits.Timeout, which always applies.
	Sandboxed bool
	Mode      Mode
	// WorkDir is the one writable directory of a confined run (default Dir).
	WorkDir string
	// WorkReadOnly shows the work directory read-only (a restricted
	// subagent's view of its parent's files).
	WorkReadOnly bool
	// ReadOnly are further host paths made visible read-only (bwrap hides
	// /tmp behind a private tmpfs, so e.g. a skill folder there needs this).
	ReadOnly []string
	// Network keeps the host's network; otherwise the run has its own empty
	// network namespace and no connection can be opened.
	Network bool
	Limits  Limits
	// Stdout and Stderr receive the output; they are written from the
	// copying goroutines, never while any lock of the caller is needed by
	// the child, so a slow consumer of them is the caller's choice.
	Stdout, Stderr io.Writer
}

// Outcome is how a run ended.
type Outcome string

// Outcomes, in the order of precedence used to decide them.
const (
	Running     Outcome = "running"
	Timeout     Outcome = "timeout"
	OutOfMemory Outcome = "out_of_memory"
	Signaled    Outcome = "signaled"
	Crashed     Outcome = "crashed"
	Exited      Outcome = "exited"
)

// Result is how a run ended.
type Result struct {
	Outcome  Outcome
	ExitCode int            // -1 unless Exited
	Signal   syscall.Signal // the terminating signal, 0 if none
	Started  time.Time
	Ended    time.Time
	CPU      time.Duration // user+system time of the command
	// Reason says why the outcome was chosen, for error messages.
	Reason string
}

// Err is nil for runs that exited or were stopped by their owner; for the
// others it wraps the sentinel that wire.AsError maps to the outcome's code
// (docs/DECISIONS.md, Sandbox outcomes).
func (r Result) Err() error {
	switch r.Outcome {
	case Timeout:
		return wire.Public(fmt.Errorf("%s: %w", r.Reason, wire.ErrTimeout))
	case OutOfMemory:
		return wire.Public(fmt.Errorf("%s: %w", r.Reason, wire.ErrOutOfMemory))
	case Crashed:
		return wire.Public(fmt.Errorf("%s: %w", r.Reason, wire.ErrSandboxCrash))
	}
	return nil
}

func newRunID() string { return wire.RandomHex(8) }

// DefaultPath is the environment of a run whose Spec.Env is nil.
const DefaultPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// ErrSetup is the cause when a confined run cannot be set up as configured;
// nothing was started.
var ErrSetup = errors.New("sandbox cannot be set up")

// Process is a started run.
type Process struct {
	// Pid is the host pid of the direct child (bwrap or the init for
	// confined runs); its process group has the same id.
	Pid int
	// Stdin is the write end of the command's standard input.
	Stdin io.WriteCloser

	spec      Spec
	cmd       *exec.Cmd
	cg        *cgroups
	control   *os.File    // confined: requests to the init (signals)
	status    *statusFile // confined: read end of the init's status report
	done      chan struct{}
	started   time.Time // set before the waiting goroutine starts; never changed
	timer     *time.Timer
	refill    *time.Timer  // namespaces mode on a spare: asks for the next spare unless the run ended first
	errTail   *limitWriter // confined: the tail of stderr
	rlimitMem bool         // confined: memory limited by RLIMIT_DATA, not a cgroup
	tier      Tier         // confined: the tier the run got
	runID     string       // confined: the value of RunMarker in its processes
	newRoot   string       // namespaces mode: the directory its root was built on
	output    *output      // namespaces mode: the init's stdout and stderr

	mu        sync.Mutex
	timedOut  bool
	requested syscall.Signal // last signal the owner sent
	res       Result
}

// Start starts a run. A confined run that cannot be set up as configured
// returns an error wrapping [ErrSetup] and starts nothing.
func Start(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("empty argv: %w", wire.ErrInvalid)
	}
	if spec.Env == nil {
		spec.Env = []string{DefaultPath}
	}
	p := &Process{spec: spec, done: make(chan struct{})}
	var err error
	if spec.Sandboxed {
		err = p.startConfined()
	} else {
		err = p.startPlain()
	}
	if err != nil {
		return nil, err
	}
	if spec.Limits.Timeout > 0 {
		p.timer = time.AfterFunc(spec.Limits.Timeout, func() {
			p.mu.Lock()
			p.timedOut = true
			p.mu.Unlock()
			p.killAll()
		})
	}
	go p.wait()
	return p, nil
}

func (p *Process) startPlain() error {
	cmd := exec.Command(p.spec.Argv[0], p.spec.Argv[1:]...)
	cmd.Dir = p.spec.Dir
	cmd.Env = p.spec.Env
	cmd.Stdout, cmd.Stderr = orDiscard(p.spec.Stdout), orDiscard(p.spec.Stderr)
	// Its own process group, so the whole tree is signalled and killed at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that keeps the output pipes open must not hold Wait forever.
	cmd.WaitDelay = 500 * time.Millisecond
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.E2BIG) {
			return fmt.Errorf("starting %q: %s: %w", p.spec.Argv[0], execReason(err), syscall.E2BIG)
		}
		return fmt.Errorf("starting %q: %w", p.spec.Argv[0], err)
	}
	p.cmd, p.Stdin, p.Pid = cmd, in, cmd.Process.Pid
	p.started = time.Now()
	return nil
}

// SignalName is the conventional name of sig, e.g. "SIGTERM".
func SignalName(sig syscall.Signal) string {
	for name, s := range signals {
		if s == sig {
			return name
		}
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// ParseSignal accepts a signal name, upper case, with or without the SIG prefix.
func ParseSignal(name string) (syscall.Signal, bool) {
	// Exactly the names schemas/proc.json lists (upper case, SIG optional):
	// no case folding, whose Unicode rules would take names the contract
	// refuses ("ſigterm").
	n := name
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	s, ok := signals[n]
	return s, ok
}

// signals are the names proc/signal accepts.
var signals = map[string]syscall.Signal{
	"SIGHUP": syscall.SIGHUP, "SIGINT": syscall.SIGINT, "SIGQUIT": syscall.SIGQUIT,
	"SIGABRT": syscall.SIGABRT, "SIGKILL": syscall.SIGKILL, "SIGUSR1": syscall.SIGUSR1,
	"SIGSEGV": syscall.SIGSEGV, "SIGUSR2": syscall.SIGUSR2, "SIGPIPE": syscall.SIGPIPE,
	"SIGALRM": syscall.SIGALRM, "SIGTERM": syscall.SIGTERM, "SIGCONT": syscall.SIGCONT,
	"SIGSTOP": syscall.SIGSTOP, "SIGTSTP": syscall.SIGTSTP, "SIGXCPU": syscall.SIGXCPU,
	"SIGWINCH": syscall.SIGWINCH,
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Done is closed when the run has ended and its Result is known.
func (p *Process) Done() <-chan struct{} { return p.done }

// Result returns how the run ended; Outcome is Running before Done.
func (p *Process) Result() Result {
	select {
	case <-p.done:
		return p.res
	default:
		return Result{Outcome: Running, ExitCode: -1, Started: p.started}
	}
}

// Wait waits for the end of the run or of ctx.
func (p *Process) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.done:
		return p.res, nil
	case <-ctx.Done():
		return p.Result(), ctx.Err()
	}
}

// Signal sends sig on behalf of the owner: to the process group of a plain
// run, to the command (through its init) in a confined one. A run that ends
// by it is [Signaled], not [Crashed].
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return errors.New("process has ended")
	default:
	}
	p.mu.Lock()
	p.requested = sig
	p.mu.Unlock()
	if sig == syscall.SIGKILL {
		p.killAll()
		return nil
	}
	if p.control != nil {
		if _, err := p.control.Write([]byte{byte(sig)}); err != nil {
			return fmt.Errorf("signalling the sandbox: %w", err)
		}
		return nil
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Kill ends the whole run at once (SIGKILL to its process group and to every
// process of its cgroups) on behalf of the owner.
func (p *Process) Kill() { _ = p.Signal(syscall.SIGKILL) }

// Tier is the isolation tier of a confined run ("" for a plain one).
func (p *Process) Tier() Tier { return p.tier }

// killAll is SIGKILL to everything of the run, whoever asks.
func (p *Process) killAll() {
	if p.tier == TierSupervised {
		// The init ends the command's group and every descendant it
		// reaped as subreaper, then reports; SIGKILL would orphan them.
		// If it does not end soon, it is killed and the host sweeps.
		_ = syscall.Kill(p.Pid, syscall.SIGTERM)
		done := p.done
		time.AfterFunc(2*time.Second, func() {
			select {
			case <-done:
			default:
				_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
			}
		})
		return
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	if p.cg != nil {
		p.cg.killAll()
	}
}

// wait reaps the child and decides the outcome. In the namespaces mode
// the init's report that its PID namespace is empty (Report.Reaped) ends
// the run: the result waits for the output, not for the init's exit and
// the teardown of its namespaces, which follow off the result's path.
func (p *Process) wait() {
	var rep *report
	early := false
	if p.output != nil && p.status != nil {
		rep = readReport(p.status)
		early = rep != nil && rep.Reaped
		if early {
			endedOnReport.Add(1)
		}
	}
	var err error
	var st *os.ProcessState
	if !early {
		err = p.cmd.Wait()
		st = p.cmd.ProcessState
	}
	if p.output != nil {
		p.output.wait(outputGrace)
	}
	ended := time.Now()
	if p.timer != nil {
		p.timer.Stop()
	}
	// Whatever the command left behind in its group or cgroups goes with
	// it; in tier (b), whatever was re-parented to the host. After a
	// Reaped report nothing is left but the init, which is exiting and
	// not yet reaped, so its pid is still its own.
	switch {
	case p.tier == TierSupervised:
		sweepHost(p.runID)
	case early:
		if p.cg != nil {
			p.cg.killAll()
		}
	default:
		p.killAll()
	}
	if p.status != nil {
		if p.output == nil {
			rep = readReport(p.status)
		}
		if p.rlimitMem && rep != nil {
			rep.MemFail = memoryFailure(rep, p.spec.Limits.MemoryBytes, p.errTail.String())
		}
		p.status.Close()
		p.control.Close()
	}
	var oomKills int64
	if p.cg != nil {
		oomKills = p.cg.oomKills()
		p.cg.remove()
	}
	p.mu.Lock()
	res := decide(p.spec.Limits, st, err, rep, oomKills, p.timedOut, p.requested, p.status != nil)
	p.mu.Unlock()
	res.Started, res.Ended = p.started, ended
	countOutcome(res.Outcome)
	p.res = res
	close(p.done)
	if p.refill != nil && p.refill.Stop() {
		askSpare()
	}
	if early {
		// Reaped only now: a signal sent before the result was out must
		// not reach another process that took the pid.
		_ = p.cmd.Wait()
	}
	if p.newRoot != "" {
		os.Remove(p.newRoot)
	}
}

// endedOnReport counts the runs whose result came on a Reaped report.
var endedOnReport atomic.Int64

// decide applies the precedence of docs/DECISIONS.md, Sandbox outcomes. rep is the
// init's report for confined runs (nil if the init died first).
func decide(lim Limits, st *os.ProcessState, waitErr error, rep *report, oomKills int64, timedOut bool, requested syscall.Signal, confined bool) Result {
	res := Result{ExitCode: -1}
	var ws syscall.WaitStatus
	if st != nil {
		ws, _ = st.Sys().(syscall.WaitStatus)
		res.CPU = st.UserTime() + st.SystemTime()
	}
	switch {
	case rep != nil && rep.Signal != 0:
		res.Signal = syscall.Signal(rep.Signal)
		res.CPU = time.Duration(rep.CPUMicros) * time.Microsecond
	case rep != nil:
		res.ExitCode = rep.Exit
		res.CPU = time.Duration(rep.CPUMicros) * time.Microsecond
	case st != nil && ws.Signaled():
		res.Signal = ws.Signal()
	case st != nil && ws.Exited():
		res.ExitCode = ws.ExitStatus()
	default:
		res.Signal = syscall.SIGKILL
	}
	cpuOver := lim.CPUTime > 0 && res.CPU >= lim.CPUTime
	switch {
	case timedOut:
		res.Outcome, res.Reason = Timeout, fmt.Sprintf("killed after the wall-clock limit of %s", lim.Timeout)
	case res.Signal == syscall.SIGXCPU || (res.Signal == syscall.SIGKILL && cpuOver):
		res.Outcome, res.Reason = Timeout, fmt.Sprintf("exceeded the CPU time limit of %s", lim.CPUTime)
	case oomKills > 0:
		res.Outcome, res.Reason = OutOfMemory, fmt.Sprintf("killed at the memory limit of %d bytes (cgroup oom_kill count %d)", lim.MemoryBytes, oomKills)
	case rep != nil && rep.MemFail:
		res.Outcome, res.Reason = OutOfMemory, fmt.Sprintf("failed at the memory limit of %d bytes (peak RSS %d bytes)", lim.MemoryBytes, rep.MaxRSS)
	case requested != 0 && res.Signal != 0:
		res.Outcome, res.Reason = Signaled, "stopped by "+SignalName(res.Signal)
	case res.Signal != 0:
		res.Outcome, res.Reason = Crashed, "killed by "+SignalName(res.Signal)
	case confined && rep == nil:
		// The init never reported: the sandbox itself failed around the command.
		res.Outcome, res.Reason = Crashed, fmt.Sprintf("the sandbox ended without a report (status %v)", waitErr)
	default:
		res.Outcome, res.Reason = Exited, fmt.Sprintf("exited with code %d", res.ExitCode)
	}
	return res
}
