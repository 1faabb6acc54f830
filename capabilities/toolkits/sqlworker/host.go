package sqlworker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/server/sandbox"
)

// Spec says where a worker runs and how it is bounded.
type Spec struct {
	// Mode is the sandbox mode of the host's contained processes.
	Mode sandbox.Mode
	// WorkDir is the session directory (a host path): the worker's one
	// writable place, /workspace in tier (a).
	WorkDir string
	// WorkReadOnly shows it read-only (a restricted subagent).
	WorkReadOnly bool
	// Path is the database's host path: below WorkDir, or one of
	// References.
	Path string
	// References are host paths of read-only reference databases the
	// worker may see (shown read-only at the same path).
	References []string
	// ReadOnly opens the database read-only.
	ReadOnly bool
	// MemoryBytes bounds the worker's memory (cgroup, else RLIMIT_DATA).
	MemoryBytes int64
	// FileBytes is RLIMIT_FSIZE: no file the worker writes grows past it.
	FileBytes int64
	// MaxValueBytes bounds a string or blob a statement makes.
	MaxValueBytes int
	// MaxResponseBytes bounds a response frame the host reads.
	MaxResponseBytes int
}

// maxProcs is the worker's pids limit: the Go runtime's threads (cgroup
// v1 counts threads) and nothing else; SQLite starts no process.
const maxProcs = 32

// addressReserve is the address space the worker's Go runtime reserves
// before it allocates (measured at 80 MiB for a static build, 112 MiB
// with cgo's thread stacks), granted beside its memory bound where that
// bound is RLIMIT_DATA.
const addressReserve = 160 << 20

// startTimeout bounds a worker's start: the sandbox, the runtime, the open.
const startTimeout = 15 * time.Second

// killGrace is how long past a call's deadline the host waits for the
// worker's own interrupt before it kills the worker.
const killGrace = 2 * time.Second

// ErrGone is the cause of a call to a worker that has ended; the caller
// starts a new one.
var ErrGone = errors.New("the SQLite worker has ended")

// Worker is a running worker, one call at a time.
type Worker struct {
	proc   *sandbox.Process
	stdin  io.WriteCloser
	outR   *io.PipeReader
	frames chan frame
	slot   chan struct{}
	tail   *tail
	gone   atomic.Bool
	once   sync.Once
}

type frame struct {
	r   Response
	err error
}

// Start starts a worker for spec and waits until its database is open. An
// error the agent caused (a missing file in read_only, a file that is not
// a database) is an *Error of kind KindOpen.
func Start(ctx context.Context, spec Spec) (*Worker, error) {
	exe, err := sandbox.Executable()
	if err != nil {
		return nil, fmt.Errorf("the SQLite worker needs the host binary: %w", err)
	}
	mech, err := sandbox.Mechanism(spec.Mode)
	if err != nil {
		return nil, err
	}
	seen := spec.Path
	if sandbox.TierOf(mech) == sandbox.TierNamespaces {
		if rel, err := filepath.Rel(spec.WorkDir, spec.Path); err == nil && filepath.IsLocal(rel) {
			seen = filepath.Join(sandbox.Workspace, rel)
		}
	}
	raw, err := json.Marshal(Config{Path: seen, ReadOnly: spec.ReadOnly, MaxValueBytes: spec.MaxValueBytes})
	if err != nil {
		return nil, err
	}
	env := []string{sandbox.DefaultPath, "GOMAXPROCS=1", Env + "=" + string(raw)}
	if spec.MemoryBytes > 0 {
		// The Go collector works harder before the sandbox's bound is near.
		env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", spec.MemoryBytes*3/4))
	}
	outR, outW := io.Pipe()
	w := &Worker{outR: outR, frames: make(chan frame, 1), slot: make(chan struct{}, 1), tail: &tail{}}
	p, err := sandbox.Start(sandbox.Spec{
		Argv: []string{exe}, Dir: spec.WorkDir, Env: env, Sandboxed: true, Mode: spec.Mode,
		WorkDir: spec.WorkDir, WorkReadOnly: spec.WorkReadOnly,
		ReadOnly: append([]string{exe}, spec.References...),
		Stdout:   outW, Stderr: w.tail,
		Limits: sandbox.Limits{MemoryBytes: spec.MemoryBytes, AddressReserve: addressReserve, MaxProcs: maxProcs, FileBytes: spec.FileBytes},
	})
	if err != nil {
		outR.Close()
		return nil, err
	}
	w.proc, w.stdin = p, p.Stdin
	max := spec.MaxResponseBytes
	if max <= 0 {
		max = 4 << 20
	}
	go w.read(max)
	go func() {
		<-p.Done()
		w.gone.Store(true)
		outW.Close()
	}()
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	select {
	case f := <-w.frames:
		err := f.r.Err()
		if f.err != nil {
			err = w.explain(fmt.Errorf("%w before its database was open", ErrGone))
		}
		if err != nil {
			w.Close()
			return nil, err
		}
		return w, nil
	case <-sctx.Done():
		w.Close()
		return nil, fmt.Errorf("the SQLite worker did not start within %s", startTimeout)
	}
}

// read passes every frame the worker writes to the call waiting for it.
func (w *Worker) read(max int) {
	br := bufio.NewReaderSize(w.outR, 64<<10)
	for {
		var r Response
		err := readFrame(br, max, &r)
		w.frames <- frame{r: r, err: err}
		if err != nil {
			// A broken frame leaves the stream unreadable: the worker goes.
			w.kill()
			return
		}
	}
}

// Do runs one request within ctx's deadline. A worker that does not answer
// within killGrace of the deadline is killed and the call fails with
// ErrGone's cause; so does a call to a worker that died (its sandbox
// outcome says why: out of memory, crashed).
func (w *Worker) Do(ctx context.Context, req Request) (Response, error) {
	select {
	case w.slot <- struct{}{}:
	case <-ctx.Done():
		return Response{}, ctx.Err()
	}
	defer func() { <-w.slot }()
	return w.call(ctx, req)
}

// Hold brings the database's files to a consistent state (a WAL database
// checkpointed into its main file) and keeps the worker from running any
// statement until release is called: the files may then be copied whole.
func (w *Worker) Hold(ctx context.Context) (release func(), err error) {
	select {
	case w.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if _, err := w.call(ctx, Request{Op: OpCheckpoint}); err != nil && !errors.Is(err, ErrGone) {
		<-w.slot
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { <-w.slot }) }, nil
}

func (w *Worker) call(ctx context.Context, req Request) (Response, error) {
	if w.gone.Load() {
		return Response{}, w.explain(ErrGone)
	}
	if deadline, ok := ctx.Deadline(); ok {
		req.TimeoutMS = max(1, time.Until(deadline).Milliseconds())
	}
	if err := writeFrame(w.stdin, req); err != nil {
		w.kill()
		return Response{}, w.explain(ErrGone)
	}
	select {
	case f := <-w.frames:
		return w.answer(f)
	case <-ctx.Done():
	}
	// The worker interrupts a statement at the deadline it was given; a
	// cancelled call, or a statement that does not stop, is ended with
	// the worker.
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case f := <-w.frames:
		return w.answer(f)
	case <-t.C:
		w.kill()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Response{}, &Error{Kind: KindTimeout, Text: "the statement did not stop at its timeout; the SQLite worker was ended"}
		}
		return Response{}, ctx.Err()
	}
}

func (w *Worker) answer(f frame) (Response, error) {
	if f.err != nil {
		return Response{}, w.explain(ErrGone)
	}
	return f.r, f.r.Err()
}

// explain adds how the worker ended to err, once it has.
func (w *Worker) explain(err error) error {
	if !errors.Is(err, ErrGone) {
		return err
	}
	select {
	case <-w.proc.Done():
	case <-time.After(time.Second):
		return err
	}
	switch res := w.proc.Result(); res.Outcome {
	case sandbox.OutOfMemory:
		return &Error{Kind: KindMemory, Text: "the SQLite worker ran out of memory and was ended"}
	case sandbox.Timeout:
		return &Error{Kind: KindTimeout, Text: "the SQLite worker ran past its time and was ended"}
	case sandbox.Crashed:
		return fmt.Errorf("%w: it crashed (%s)", ErrGone, sandbox.SignalName(res.Signal))
	}
	return err
}

func (w *Worker) kill() {
	w.gone.Store(true)
	w.proc.Kill()
}

// Done is closed when the worker has ended.
func (w *Worker) Done() <-chan struct{} { return w.proc.Done() }

// Kill ends the worker at once.
func (w *Worker) Kill() { w.kill() }

// Alive reports whether the worker still runs.
func (w *Worker) Alive() bool { return !w.gone.Load() }

// Close ends the worker: its standard input is closed, which ends it
// after the statement it runs; a worker still there a second later is
// killed.
func (w *Worker) Close() error {
	w.once.Do(func() {
		w.stdin.Close()
		select {
		case <-w.proc.Done():
		case <-time.After(time.Second):
			w.kill()
			<-w.proc.Done()
		}
		w.outR.Close()
	})
	return nil
}

// Stderr is the end of what the worker wrote to its standard error.
func (w *Worker) Stderr() string { return w.tail.String() }

// tail keeps the last bytes written.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = append(t.b[:0], t.b[len(t.b)-4096:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
