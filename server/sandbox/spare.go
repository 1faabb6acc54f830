package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aephost/aep/server/sandbox/initproc"
)

// Spares (docs/DECISIONS.md, Sandbox, proc, skills: spare inits). Most of
// a cold start in the namespaces mode is the init's own: cloning the
// namespaces, executing the host binary (its runtime and package
// initialisation), and mounting the root. None of that depends on the
// run, so the host keeps one init that has done it ready: started with
// the namespaces of a run without network, its tmpfs root holding the
// system paths, /dev, /tmp and /proc, waiting on its control pipe. A run
// takes it, sends its instructions (argv, environment, work directory,
// read-only paths, uid, limits, the paths of its cgroups), and the init
// binds the work directory, pivots into the root, joins the cgroups
// through the command's first step and starts the command exactly as a
// cold init does. A spare serves one run and is never reused; the next is
// made once that run ends or has run for [spareRefillDelay], off the
// request path and not beside the run's start.
//
// The spare's mount namespace is a copy of the host's at the time it
// started: a run whose work directory or read-only paths are, as the
// spare sees them, not the files the host sees (a mount made since) is
// refused by the spare and started cold.

// spareCount is how many spares the host keeps ready.
const spareCount = 1

var spares struct {
	once   sync.Once
	pool   chan *spare // nil after a spare could not be made
	refill chan struct{}
	making atomic.Bool // a spare is being made
	off    atomic.Bool // a spare could not be made: cold starts only
}

// spareWait bounds how long a run waits for a spare being made; a cold
// start does the same work, so waiting is never slower unless the making
// is stuck.
const spareWait = 2 * time.Second

// spare is an init waiting for its run.
type spare struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *switchWriter // the command's stdout, once given a run
	errOut  *switchWriter // its stderr, through errs
	errs    *limitWriter
	status  *os.File
	br      *bufio.Reader
	control *os.File
	newRoot string
	output  *output
}

// Prewarm makes a spare init ready for mode when it resolves to the
// namespaces mechanism, so that even the host's first run starts warm.
// Other modes have none.
func Prewarm(m Mode) {
	if mech, err := Mechanism(m); err == nil && mech == "namespaces" {
		startSpareMaker()
		askSpare()
	}
}

// startSpareMaker starts the goroutine that makes spares. It keeps its OS
// thread for the life of the process: PR_SET_PDEATHSIG fires when the
// thread that started a child ends, and a spare must live until it is
// used or the host ends.
func startSpareMaker() {
	spares.once.Do(func() {
		spares.pool = make(chan *spare, spareCount)
		spares.refill = make(chan struct{}, 1)
		go func() {
			runtime.LockOSThread()
			for range spares.refill {
				// The spares missing when asked, and no more: one that a
				// waiting run takes the moment it is made must not be
				// replaced at once, beside that run's start (the run's
				// end asks for it, see [spareRefillDelay]).
				for missing := cap(spares.pool) - len(spares.pool); missing > 0 && !spares.off.Load(); missing-- {
					spares.making.Store(true)
					sp, err := makeSpare()
					if err != nil {
						// A waiting run gets nil and starts cold, as
						// every run does from now on.
						spares.off.Store(true)
					}
					spares.pool <- sp
					spares.making.Store(false)
				}
			}
		}()
	})
}

func askSpare() {
	select {
	case spares.refill <- struct{}{}:
	default:
	}
}

// spareRefillDelay is how long a run that took a spare may run before
// the next spare is made anyway; a shorter one asks for it when it ends
// (Process.wait). Made at once, the next spare (an exec of the host
// binary) would compete with the run for the CPU just when the run's
// latency counts.
var spareRefillDelay = 250 * time.Millisecond

// takeSpare returns a ready spare, or nil. Without one it asks for the
// next at once; with one, the caller asks (see [spareRefillDelay]).
func takeSpare() *spare {
	if sparesDisabled.Load() {
		return nil
	}
	startSpareMaker()
	var sp *spare
	select {
	case sp = <-spares.pool:
	default:
		if spares.making.Load() {
			t := time.NewTimer(spareWait)
			select {
			case sp = <-spares.pool:
			case <-t.C:
			}
			t.Stop()
		}
	}
	if sp == nil {
		askSpare()
	}
	return sp
}

// sparesDisabled makes every run start cold (tests of the cold path).
var sparesDisabled atomic.Bool

// makeSpare starts an init in the namespaces of a run without network
// and waits until it has made its root.
func makeSpare() (*spare, error) {
	exe, err := self()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "aep-root-")
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(initConfig{Spare: true, Namespaces: true, NewRoot: root})
	cmd := exec.Command(exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: namespaceFlags(false), Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Dir = "/"
	cmd.Env = []string{initEnv + "=" + string(raw)}
	sp := &spare{cmd: cmd, out: &switchWriter{}, errOut: &switchWriter{}, newRoot: root}
	sp.errs = &limitWriter{w: sp.errOut}
	cmd.WaitDelay = 500 * time.Millisecond
	statusR, statusW, err := os.Pipe()
	if err != nil {
		os.Remove(root)
		return nil, err
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		os.Remove(root)
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{statusW, controlR}
	if sp.stdin, err = cmd.StdinPipe(); err == nil {
		if sp.output, err = pipeOutput(cmd); err == nil {
			if err = cmd.Start(); err != nil {
				sp.output.closeAll()
			} else {
				sp.output.started(sp.out, sp.errs)
			}
		}
	}
	statusW.Close()
	controlR.Close()
	sp.status, sp.control, sp.br = statusR, controlW, bufio.NewReader(statusR)
	if err != nil {
		sp.status.Close()
		sp.control.Close()
		os.Remove(root)
		return nil, err
	}
	if rep, err := readFirst(sp.br); err != nil || !rep.Ready {
		sp.discard()
		if err == nil {
			err = errors.New(rep.SetupError)
		}
		return nil, err
	}
	return sp, nil
}

// discard ends a spare that will not run anything, off the caller's path.
func (sp *spare) discard() {
	_ = syscall.Kill(-sp.cmd.Process.Pid, syscall.SIGKILL)
	go func() {
		_ = sp.cmd.Wait()
		sp.output.wait(outputGrace)
		sp.status.Close()
		sp.control.Close()
		os.Remove(sp.newRoot)
	}()
}

// startOnSpare gives the run to sp. done is false when the spare could not
// take it for reasons of its own (it died, or its view of the run's paths
// is stale): the caller then starts the run cold, which decides. Otherwise
// err is the run's start error, as a cold start would give it.
func (p *Process) startOnSpare(sp *spare, cfg initConfig) (done bool, err error) {
	cfg.Env = p.spec.Env
	if p.cg != nil {
		cfg.CgroupDirs = p.cg.dirs()
		cfg.Cgroups = len(cfg.CgroupDirs)
	}
	for _, path := range append([]string{cfg.WorkDir}, cfg.ReadOnly...) {
		if id, ok := initproc.IDOf(path); ok {
			cfg.Paths = append(cfg.Paths, id)
		}
	}
	sp.out.set(orDiscard(p.spec.Stdout))
	sp.errOut.set(orDiscard(p.spec.Stderr))
	if err := writeInstructions(sp.control, cfg); err != nil {
		sp.out.set(nil)
		sp.errOut.set(nil)
		sp.discard()
		return errors.Is(err, ErrSetup), err
	}
	p.cmd, p.Stdin, p.Pid = sp.cmd, sp.stdin, sp.cmd.Process.Pid
	p.started = time.Now()
	p.control, p.errTail = sp.control, sp.errs
	rep, rerr := readFirst(sp.br)
	if rerr != nil || !rep.Started {
		sp.out.set(nil)
		sp.errOut.set(nil)
		sp.discard()
		p.cmd, p.Stdin, p.Pid, p.control = nil, nil, 0, nil
		if rerr != nil || rep.Stale || rep.Program == "" {
			return false, nil
		}
		return true, startError("namespaces", rep, sp.errs)
	}
	p.newRoot, p.output = sp.newRoot, sp.output
	p.status = &statusFile{File: sp.status, br: sp.br}
	return true, nil
}

// switchWriter writes to a writer set later, and discards until then.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	if w == nil {
		return len(b), nil
	}
	return w.Write(b)
}
