package server

// One budget per session (docs/SECURITY.md, Budgets; server.budgets).
// Each mechanism had a limit of its own, so work that took another path,
// or nested one mechanism in another, was unbounded. Here every path
// shares one budget:
//
//   - leaf work: the units of work a session and its subagents run at
//     once — tool calls in flight (the kernel takes a place for each, at
//     any nesting depth of chains), and the sandboxed processes
//     capabilities start (proc, skills, environment processes, graders,
//     the SQLite workers; run_command's process is its tool call's place).
//     Requests that only wait on their children (chain/run, subagent
//     spawns) take no place, so nested chains cannot deadlock on it. A
//     unit waits (FIFO) at most server.budgets.leaf_wait for a place.
//   - sandbox memory: the memory limits of those processes, summed; a
//     process whose capability sets no limit gets process_memory_bytes.
//   - disk: the bytes (server.isolation.session_quota_bytes) and files of
//     each session directory, whatever writes there. Host writes are
//     checked before they happen; processes get RLIMIT_FSIZE at what is
//     left, and a watcher measures the directory of every running process
//     every diskPoll: past the budget, the processes writing there are
//     ended (their leaf's context is cancelled with the budget's error)
//     and no process starts there until it holds less.
//   - persistent memory: the bytes a session tree writes to episodic and
//     semantic memory, and a host-wide total.
//   - a subagent's steps: every request its session causes, the internal
//     requests of its chains included (child.go).
//
// The tree's budget is its root's; a fork is a root of its own.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// defaultBudgets are server.budgets for keys a configuration leaves out
// (schemas/config/kernel.json).
var defaultBudgets = BudgetConfig{
	Files:                     50000,
	LeafWork:                  16,
	LeafWait:                  Duration(30 * time.Second),
	SandboxMemoryBytes:        2 << 30,
	ProcessMemoryBytes:        512 << 20,
	WorkingMemoryBytes:        64 << 20,
	PersistentMemoryBytes:     128 << 20,
	HostPersistentMemoryBytes: 4 << 30,
}

// diskPoll is how often the directory of a running process is measured;
// diskPollNear once it holds more than half of a budget, so a writer
// passes its budget by what it writes in that time at most.
const (
	diskPoll     = 100 * time.Millisecond
	diskPollNear = 20 * time.Millisecond
)

// The refusals of the budgets: runtime_error with detail.reason naming the
// budget and detail.limit its limit (one literal each, as the retryable
// table's test reads them).
func errLeafWork(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "leaf_work_budget", "limit": limit}}
}

func errSandboxMemory(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "sandbox_memory_budget", "limit": limit}}
}

func errDisk(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "disk_budget", "limit": limit}}
}

func errFiles(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "files_budget", "limit": limit}}
}

func errPersistent(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "persistent_memory_budget", "limit": limit}}
}

func errHostPersistent(limit int64, format string, args ...any) *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf(format, args...), Detail: map[string]any{"reason": "host_persistent_memory_budget", "limit": limit}}
}

// budget is the leaf work, sandbox memory and persistent memory of one
// session tree.
type budget struct {
	lim        budgetLimits
	leaves     *semaphore.Weighted
	memKiB     *semaphore.Weighted // sandbox memory, in KiB
	leavesUsed atomic.Int64
	memUsed    atomic.Int64 // bytes
	persistent atomic.Int64 // bytes written to persistent memory
}

func newBudget(lim budgetLimits) *budget {
	return &budget{lim: lim, leaves: semaphore.NewWeighted(int64(lim.LeafWork)),
		memKiB: semaphore.NewWeighted(lim.SandboxMemoryBytes >> 10)}
}

// Leaf is one unit of a session's leaf work (see above): a place in
// server.budgets.leaf_work and, for a process, its memory limit in
// sandbox_memory_bytes. Its context ends when the work must stop for the
// budget (a process's directory passed the disk budget): the holder ends
// what it runs, and [Leaf.Err] says why.
type Leaf struct {
	h      *Host
	s      *Session // whose work it is: its directory is watched
	b      *budget
	ctx    context.Context
	cancel context.CancelCauseFunc
	dir    *dirWatch // the directory its processes write, once it runs one
	mu     sync.Mutex
	memKiB int64
	// tenantMem is the bytes counted in its tenant's sandbox memory total.
	tenantMem int64
	done      bool
}

type leafKey struct{}

// LeafFrom returns the leaf a tool call runs in (the kernel takes one for
// each), or nil outside one.
func LeafFrom(ctx context.Context) *Leaf {
	l, _ := ctx.Value(leafKey{}).(*Leaf)
	return l
}

// Context ends when the leaf's work must stop for the budget.
func (l *Leaf) Context() context.Context { return l.ctx }

// Err is why the leaf's context ended (a budget's error), nil while it
// runs.
func (l *Leaf) Err() error { return context.Cause(l.ctx) }

// AcquireLeaf takes a place of sessionID's leaf work, waiting FIFO at most
// server.budgets.leaf_wait; a process started in it is added with
// [Leaf.ReserveProcess]. Release gives the place back.
func (h *Host) AcquireLeaf(ctx context.Context, sessionID string) (*Leaf, error) {
	s, ok := h.SessionByHandle(sessionID)
	if !ok {
		return nil, fmt.Errorf("leaf work: %w", ErrSessionEnded)
	}
	l := &Leaf{h: h, s: s, b: s.budget}
	if err := l.take(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Leaf) take(ctx context.Context) error {
	b := l.b
	if !b.leaves.TryAcquire(1) {
		// Busy: wait in line, at most leaf_wait.
		wctx, cancel := context.WithTimeout(ctx, time.Duration(b.lim.LeafWait))
		err := b.leaves.Acquire(wctx, 1)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errLeafWork(int64(b.lim.LeafWork),
				"the session's %d units of leaf work (tool calls and processes, its subagents' included) stayed busy for %s (server.budgets.leaf_work)",
				b.lim.LeafWork, time.Duration(b.lim.LeafWait))
		}
	}
	b.leavesUsed.Add(1)
	// The leaf outlives the request that took it when it holds a process
	// (proc/spawn): its context is its own.
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	return nil
}

// ReserveProcess adds a process with the memory limit memBytes (0: the
// host's process_memory_bytes) to the leaf: its memory is reserved in the
// session's sandbox memory, and its session directory is watched for the
// disk budget while the leaf lives; refused at once while the directory is
// over its disk budget. It returns the memory limit and the file size
// limit (what is left of the disk budget) to run the process with.
func (l *Leaf) ReserveProcess(ctx context.Context, memBytes int64) (mem, fileBytes int64, err error) {
	if memBytes <= 0 {
		memBytes = l.b.lim.ProcessMemoryBytes
	}
	if err := l.process(ctx, l.s, memBytes); err != nil {
		return 0, 0, err
	}
	return memBytes, l.dir.left(l.h), nil
}

// process reserves memBytes of sandbox memory and watches s's directory.
func (l *Leaf) process(ctx context.Context, s *Session, memBytes int64) error {
	b := l.b
	kib := (memBytes + 1023) >> 10
	if memBytes > b.lim.SandboxMemoryBytes {
		return errSandboxMemory(b.lim.SandboxMemoryBytes,
			"a process with a memory limit of %d bytes does not fit the session's sandbox memory of %d bytes (server.budgets.sandbox_memory_bytes)", memBytes, b.lim.SandboxMemoryBytes)
	}
	if err := l.h.checkTenantDisk(s.tenant); err != nil {
		return err
	}
	d, err := l.h.watchDir(s)
	if err != nil {
		return err
	}
	if err := d.refusal(l.h); err != nil {
		l.h.unwatchDir(d)
		return err
	}
	if t := s.tenant; t != nil {
		if err := t.reserveMemory(memBytes); err != nil {
			l.h.unwatchDir(d)
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(b.lim.LeafWait))
	defer cancel()
	if err := b.memKiB.Acquire(wctx, kib); err != nil {
		l.h.unwatchDir(d)
		if t := s.tenant; t != nil {
			t.memUsed.Add(-memBytes)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errSandboxMemory(b.lim.SandboxMemoryBytes,
			"the session's running processes hold its sandbox memory of %d bytes; this one's %d did not fit within %s (server.budgets.sandbox_memory_bytes)",
			b.lim.SandboxMemoryBytes, memBytes, time.Duration(b.lim.LeafWait))
	}
	b.memUsed.Add(kib << 10)
	l.mu.Lock()
	l.memKiB += kib
	l.tenantMem += memBytes
	first := l.dir == nil
	if first {
		l.dir = d
	}
	l.mu.Unlock()
	if !first {
		l.h.unwatchDir(d) // one watch per leaf
		return nil
	}
	l.h.dirs.mu.Lock()
	d.leaves[l] = struct{}{}
	l.h.dirs.mu.Unlock()
	return nil
}

// Release gives the leaf's place and memory back; a second call does
// nothing.
func (l *Leaf) Release() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	kib, d, tmem := l.memKiB, l.dir, l.tenantMem
	l.mu.Unlock()
	if kib > 0 {
		l.b.memKiB.Release(kib)
		l.b.memUsed.Add(-kib << 10)
	}
	if tmem > 0 && l.s.tenant != nil {
		l.s.tenant.memUsed.Add(-tmem)
	}
	if d != nil {
		l.h.dirs.mu.Lock()
		delete(d.leaves, l)
		l.h.dirs.mu.Unlock()
		l.h.unwatchDir(d)
	}
	l.b.leaves.Release(1)
	l.b.leavesUsed.Add(-1)
	l.cancel(nil)
}

type budgetKey struct{}

type budgetOf struct {
	h       *Host
	session string
}

// WithBudget carries in ctx the session whose budget work started under
// it spends: for capabilities that start processes deep in their own
// code (an environment's process, a task's command and grader), which
// take their leaf with [AcquireLeafFrom].
func (h *Host) WithBudget(ctx context.Context, sessionID string) context.Context {
	return context.WithValue(ctx, budgetKey{}, budgetOf{h: h, session: sessionID})
}

// AcquireLeafFrom takes a leaf of the session ctx carries ([Host.WithBudget]);
// nil and no error when it carries none (work outside any session).
func AcquireLeafFrom(ctx context.Context) (*Leaf, error) {
	b, ok := ctx.Value(budgetKey{}).(budgetOf)
	if !ok {
		return nil, nil
	}
	return b.h.AcquireLeaf(ctx, b.session)
}

// --- the disk budget ----------------------------------------------------

// dirWatch is a session directory with running processes.
type dirWatch struct {
	path   string
	quota  int64
	files  int
	refs   int
	leaves map[*Leaf]struct{}
	bytes  int64 // as last measured
	count  int
	at     time.Time
	over   error // the budget it passed, nil while within
}

// dirWatches are the watched directories of a host.
type dirWatches struct {
	mu   sync.Mutex
	dirs map[string]*dirWatch
	once sync.Once
}

// watchDir counts one more process writing s's directory.
func (h *Host) watchDir(s *Session) (*dirWatch, error) {
	d := h.sessionDirOf(s)
	h.dirs.mu.Lock()
	defer h.dirs.mu.Unlock()
	if h.dirs.dirs == nil {
		h.dirs.dirs = map[string]*dirWatch{}
	}
	w := h.dirs.dirs[d.Path]
	if w == nil {
		w = &dirWatch{path: d.Path, quota: s.budget.lim.DiskBytes, files: s.budget.lim.Files, leaves: map[*Leaf]struct{}{}}
		h.dirs.dirs[d.Path] = w
	}
	w.refs++
	h.dirs.once.Do(func() { go h.watchDisks() })
	return w, nil
}

func (h *Host) unwatchDir(w *dirWatch) {
	h.dirs.mu.Lock()
	defer h.dirs.mu.Unlock()
	w.refs--
	if w.refs <= 0 && w.over == nil {
		delete(h.dirs.dirs, w.path)
	}
}

// refusal is the budget the directory is over, measured now if the last
// measure is old; nil within.
func (w *dirWatch) refusal(h *Host) error {
	h.dirs.mu.Lock()
	fresh := time.Since(w.at) < diskPoll
	over := w.over
	h.dirs.mu.Unlock()
	if fresh {
		return over
	}
	return h.measure(w)
}

// left is what remains of the directory's byte budget: a process's
// RLIMIT_FSIZE (at least one byte: a zero limit means none).
func (w *dirWatch) left(h *Host) int64 {
	h.dirs.mu.Lock()
	defer h.dirs.mu.Unlock()
	return max(1, w.quota-w.bytes)
}

// measure walks the directory and decides whether it is over a budget;
// going over ends the processes writing there.
func (h *Host) measure(w *dirWatch) error {
	bytes, count := usage(w.path, w.files)
	h.dirs.mu.Lock()
	w.bytes, w.count, w.at = bytes, count, time.Now()
	var over error
	switch {
	case bytes > w.quota:
		over = errDisk(w.quota, "the session directory holds %d bytes, over its budget of %d (server.isolation.session_quota_bytes): its processes were ended; delete files to go on", bytes, w.quota)
	case count > w.files:
		over = errFiles(int64(w.files), "the session directory holds %d files, over its budget of %d (server.budgets.files): its processes were ended; delete files to go on", count, w.files)
	}
	was := w.over
	w.over = over
	var stop []*Leaf
	if over != nil && was == nil {
		for l := range w.leaves {
			stop = append(stop, l)
		}
	}
	if over == nil && w.refs <= 0 {
		delete(h.dirs.dirs, w.path)
	}
	h.dirs.mu.Unlock()
	for _, l := range stop {
		l.cancel(over)
	}
	if over != nil && was == nil {
		h.log.Warn("a session directory passed its budget; its processes were ended", "dir", w.path, "bytes", bytes, "files", count)
	}
	return over
}

// watchDisks measures every watched directory every diskPoll (every
// diskPollNear once it is past half a budget), for the life of the host.
func (h *Host) watchDisks() {
	t := time.NewTicker(diskPollNear)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.dirs.mu.Lock()
		ws := make([]*dirWatch, 0, len(h.dirs.dirs))
		for _, w := range h.dirs.dirs {
			every := diskPoll
			if w.bytes > w.quota/2 || w.count > w.files/2 {
				every = diskPollNear
			}
			if time.Since(w.at) >= every {
				ws = append(ws, w)
			}
		}
		h.dirs.mu.Unlock()
		for _, w := range ws {
			h.measure(w)
		}
	}
}

// usage measures dir: bytes of regular files and entries (files,
// directories, anything), the walk stopping once the entries pass
// stopAt: past the budget, by how much does not matter.
func usage(dir string, stopAt int) (bytes int64, entries int) {
	errStop := errors.New("stop")
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		entries++
		if e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		if entries > 2*stopAt+1 {
			return errStop
		}
		return nil
	})
	return bytes, max(0, entries-1) // the directory itself is not one
}

// --- persistent memory ------------------------------------------------

// SetPersistentTotal tells the host how many bytes of persistent memory
// its store holds (the memory plugin counts them when it starts).
func (h *Host) SetPersistentTotal(n int64) { h.persistentTotal.Store(n) }

// ChargePersistent counts n more bytes written to persistent memory by
// sessionID's tree (n < 0: bytes deleted), refusing a write that would
// pass the tree's budget or the host's total. An unknown session (ended)
// is charged to the host's total only.
func (h *Host) ChargePersistent(sessionID string, n int64) error {
	lim := h.cfg.Server.Budgets
	var b *budget
	var t *tenant
	if s, ok := h.SessionByHandle(sessionID); ok {
		b, t = s.budget, s.tenant
		lim.PersistentMemoryBytes = b.lim.PersistentMemoryBytes
	}
	if n > 0 {
		if b != nil && b.persistent.Load()+n > lim.PersistentMemoryBytes {
			return errPersistent(lim.PersistentMemoryBytes,
				"the session has written %d bytes of persistent memory; %d more pass its budget of %d (server.budgets.persistent_memory_bytes)",
				b.persistent.Load(), n, lim.PersistentMemoryBytes)
		}
		if h.persistentTotal.Load()+n > lim.HostPersistentMemoryBytes {
			return errHostPersistent(lim.HostPersistentMemoryBytes,
				"the host's persistent memory holds %d bytes; %d more pass its total of %d (server.budgets.host_persistent_memory_bytes)",
				h.persistentTotal.Load(), n, lim.HostPersistentMemoryBytes)
		}
	}
	if t != nil {
		if err := t.chargePersistent(n); err != nil {
			return err
		}
	}
	if b != nil {
		b.persistent.Add(n)
	}
	h.persistentTotal.Add(n)
	return nil
}

// WorkingMemoryBudgetOf is the bytes sessionID's working memory may hold:
// its tenant's budget, else the host's.
func (h *Host) WorkingMemoryBudgetOf(sessionID string) int64 {
	if s, ok := h.SessionByHandle(sessionID); ok {
		return s.budget.lim.WorkingMemoryBytes
	}
	return h.cfg.Server.Budgets.WorkingMemoryBytes
}

// BudgetReporter is implemented by plugins that hold part of a session's
// budget (the memory plugin: working memory): session/info reports what
// they say a session uses.
type BudgetReporter interface {
	// WorkingMemoryUsed is the bytes of sessionID's working memory.
	WorkingMemoryUsed(sessionID string) int64
}

// budgetUse is session/info's report of s's budgets. The caller holds s.mu.
func (h *Host) budgetUse(s *Session) *msg.SessionBudgets {
	b, lim := s.budget, s.budget.lim
	bytes, files := usage(h.sessionDirOf(s).Path, lim.Files)
	var working int64
	for _, r := range h.budgetReporters {
		working += r.v.WorkingMemoryUsed(s.handle)
	}
	out := &msg.SessionBudgets{
		LeafWork:              msg.BudgetUse{Limit: lim.LeafWork, Used: int(b.leavesUsed.Load())},
		SandboxMemoryBytes:    msg.BudgetUse{Limit: int(lim.SandboxMemoryBytes), Used: int(b.memUsed.Load())},
		DiskBytes:             msg.BudgetUse{Limit: int(lim.DiskBytes), Used: int(bytes)},
		Files:                 msg.BudgetUse{Limit: lim.Files, Used: files},
		WorkingMemoryBytes:    msg.BudgetUse{Limit: int(lim.WorkingMemoryBytes), Used: int(working)},
		PersistentMemoryBytes: msg.BudgetUse{Limit: int(lim.PersistentMemoryBytes), Used: int(b.persistent.Load())},
	}
	if ci := s.child; ci != nil && ci.maxSteps > 0 {
		out.Steps = &msg.BudgetUse{Limit: ci.maxSteps, Used: int(s.steps.Load())}
	}
	return out
}
