// Package proc serves the proc capability (schemas/proc.json): long-running
// subprocesses per session, started through server/sandbox, contained in
// the host's configured tier by default (docs/SECURITY.md, Isolation),
// working in the session's directory, with their output kept in ring
// buffers that never block the child, and every process of a session
// killed with it.
package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module aep.proc.builtin, the proc capability,
// named proc.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "aep.proc.builtin", Capability: "proc", DefaultName: "proc.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Defaults of the plugin's settings.
const (
	DefaultMaxProcs     = 16
	DefaultMaxRecords   = 64
	DefaultBufferBytes  = 1 << 20
	DefaultTimeout      = time.Hour
	DefaultWriteTimeout = 10 * time.Second
	defaultFollow       = 30 * time.Second
)

// Plugin serves the proc namespace. Its exported fields are its settings.
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/proc.json, docs/config.md).
	Settings `yaml:",inline"`

	log  *slog.Logger
	host *server.Host // with one: each session's directory and quota
	mode sandbox.Mode // the tier's mode contained processes run in
	// sessions holds each session's processes; the kernel drops a
	// session's table (killing its processes) when the session ends and
	// before a restore.
	sessions *server.SessionState[table]
	// stopped is set by Cleanup: nothing more is spawned.
	stopped atomic.Bool
}

// table is one session's processes (spec §5 rule 4: no other session sees them).
type table struct {
	mu    sync.Mutex
	procs map[string]*process
	order []string // proc ids, oldest first
}

type process struct {
	id        string
	argv      []string
	cwd       string
	sandboxed bool
	started   time.Time
	sb        *sandbox.Process // nil for lost processes
	stdout    *ring
	stderr    *ring
	lost      bool
	stdinMu   sync.Mutex // one write at a time
	stdinDone bool
	// stoppedFor is why the host ended the process for the session's
	// budget (its directory passed its disk budget), "" otherwise.
	stoppedFor atomic.Pointer[string]
}

// Provision applies defaults and prepares the workspace; a confined
// configuration that cannot work on this host stops the host (docs/DECISIONS.md,
// Sandbox outcomes: nothing runs unsandboxed by surprise).
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	p.log = env.Logger
	if p.MaxProcs <= 0 {
		p.MaxProcs = DefaultMaxProcs
	}
	if p.MaxRecords < p.MaxProcs {
		p.MaxRecords = max(DefaultMaxRecords, p.MaxProcs)
	}
	if p.BufferBytes <= 0 {
		p.BufferBytes = DefaultBufferBytes
	}
	if p.Timeout <= 0 {
		p.Timeout = server.Duration(DefaultTimeout)
	}
	if p.WriteTimeout <= 0 {
		p.WriteTimeout = server.Duration(DefaultWriteTimeout)
	}
	if p.EnvAllow == nil {
		p.EnvAllow = sandbox.DefaultEnvAllow
	}
	p.host = env.Host
	p.mode = sandbox.ModeAuto
	if env.Host != nil {
		p.mode = env.Host.SandboxMode()
	}
	if p.SandboxMode != "" {
		p.mode = p.SandboxMode
	}
	if p.Workspace == "" {
		if env.DataDir != "" {
			p.Workspace = filepath.Join(env.DataDir, env.Name, "workspace")
		} else {
			p.Workspace = filepath.Join(os.TempDir(), "aep-proc")
		}
	}
	abs, err := filepath.Abs(p.Workspace)
	if err != nil {
		return err
	}
	p.Workspace = abs
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if p.contained() {
		if _, _, err := sandbox.Describe(p.mode); err != nil {
			return fmt.Errorf("proc needs the configured sandbox (server.isolation.sandbox): %w", err)
		}
	} else {
		p.log.Warn("proc: sandbox is off by configuration; processes run uncontained, as the host's uid with its view of the file system")
	}
	p.sessions = server.NewSessionState(env, func(string) *table {
		return &table{procs: map[string]*process{}}
	}, func(_ string, t *table) { t.killAll() })
	return nil
}

// contained reports whether processes run in the sandbox (the default).
func (p *Plugin) contained() bool { return p.Sandbox == nil || *p.Sandbox }

// Cleanup kills every process of every session (host shutdown).
func (p *Plugin) Cleanup() error {
	p.stopped.Store(true)
	if p.sessions != nil {
		p.sessions.DropAll()
	}
	return nil
}

// killAll kills the processes of a table the kernel dropped (its session
// ended, or a restore replaces it), whole process groups, and waits until
// they are reaped, so none outlives its session. A spawn racing with it
// finds procs == nil.
func (t *table) killAll() {
	t.mu.Lock()
	procs := make([]*process, 0, len(t.procs))
	for _, pr := range t.procs {
		procs = append(procs, pr)
	}
	t.procs = nil
	t.mu.Unlock()
	killAll(procs)
}

func killAll(procs []*process) {
	for _, pr := range procs {
		if pr.sb != nil {
			pr.sb.Kill()
		}
	}
	deadline := time.After(5 * time.Second)
	for _, pr := range procs {
		if pr.sb == nil {
			continue
		}
		select {
		case <-pr.sb.Done():
		case <-deadline:
			return
		}
	}
}

// ErrUnknownProc is the cause for a proc_id the session does not have.
var ErrUnknownProc = fmt.Errorf("unknown proc_id: %w", wire.ErrNotFound)

// Errors of a program that cannot be started, the agent's mistake: they
// name only the argv[0] it sent.
var (
	ErrNoProgram     = wire.Reason("program_not_found", errors.New("no such program"))
	ErrNotExecutable = wire.Reason("program_not_executable", errors.New("the program cannot be executed"))
)

func (p *Plugin) lookup(sessionID, id string) (*process, error) {
	t, ok := p.sessions.Get(sessionID)
	if !ok {
		return nil, fmt.Errorf("process %q: %w", id, ErrUnknownProc)
	}
	t.mu.Lock()
	pr := t.procs[id]
	t.mu.Unlock()
	if pr == nil {
		return nil, fmt.Errorf("process %q: %w", id, ErrUnknownProc)
	}
	return pr, nil
}

// workdir resolves cwd inside the session's directory (server/persist/dirs.go;
// without a host, <Workspace>/<session id>); symlinks may not lead out.
// readOnly is set for a restricted subagent, whose processes see their
// parent's files read-only.
func (p *Plugin) workdir(sessionID, cwd string) (root, dir string, readOnly bool, err error) {
	if p.host != nil {
		d, err := p.host.SessionDir(sessionID)
		if err != nil {
			return "", "", false, err
		}
		root, readOnly = d.Path, d.ReadOnly
	} else {
		root = filepath.Join(p.Workspace, sessionID)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return "", "", false, fmt.Errorf("workspace: %w", err)
		}
	}
	if cwd == "" {
		return root, root, readOnly, nil
	}
	rel, err := confine.Rel("cwd", cwd)
	if err == nil {
		dir, err = confine.Dir(root, "cwd", rel)
	}
	if err != nil {
		return "", "", false, &wire.FieldError{Field: "cwd", Reason: err.Error()}
	}
	return root, dir, readOnly, nil
}

// home is HOME of a process: the session directory as the process sees it
// (/workspace inside tier (a)).
func (p *Plugin) home(root string) string {
	if !p.contained() {
		return root
	}
	if mech, _ := sandbox.Mechanism(p.mode); sandbox.TierOf(mech) == sandbox.TierNamespaces {
		return sandbox.Workspace
	}
	return root
}

func newProcID() string { return "p-" + wire.RandomHex(6) }

func seconds(f *float64) time.Duration {
	if f == nil || *f <= 0 {
		return 0
	}
	return time.Duration(*f * float64(time.Second))
}

// ProcSpawn answers proc/spawn/req.
func (p *Plugin) ProcSpawn(ctx context.Context, s wire.Scope, req *msg.ProcSpawnReq) (*msg.ProcSpawnResp, error) {
	if req.Argv[0] == "" {
		return nil, &wire.FieldError{Field: "argv[0]", Reason: "empty command"}
	}
	root, dir, readOnly, err := p.workdir(s.SessionID(), derefStr(req.Cwd))
	if err != nil {
		return nil, err
	}
	env, dropped := sandbox.Environ(p.EnvAllow, p.home(root), req.Env)
	timeout := time.Duration(p.Timeout)
	if d := seconds(req.Timeout); d > 0 && d < timeout {
		timeout = d
	}
	// The process is a unit of the session's leaf work, its memory limit
	// in the session's sandbox memory, for as long as it runs
	// (server/budget.go). Taken before the table's lock: it may wait.
	var leaf *server.Leaf
	memory, fileBytes := p.MemoryMB<<20, int64(0)
	if p.host != nil {
		if leaf, err = p.host.AcquireLeaf(ctx, s.SessionID()); err != nil {
			return nil, err
		}
		if p.contained() {
			if memory, fileBytes, err = leaf.ReserveProcess(ctx, memory); err != nil {
				leaf.Release()
				return nil, err
			}
		}
	}
	started := false
	defer func() {
		if !started && leaf != nil {
			leaf.Release()
		}
	}()
	t, err := p.sessions.GetOrCreate(s.SessionID())
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Checked under t.mu: a Cleanup that stores stopped after this check
	// drops this table afterwards, and so kills what this spawn starts.
	if p.stopped.Load() {
		return nil, errors.New("the proc plugin has stopped")
	}
	if t.procs == nil {
		return nil, errors.New("the session is closing")
	}
	running := 0
	for _, pr := range t.procs {
		if pr.running() {
			running++
		}
	}
	if running >= p.MaxProcs {
		return nil, fmt.Errorf("the session has %d running processes, the limit: %w", running, wire.ErrDenied)
	}
	pr := &process{id: newProcID(), argv: req.Argv, cwd: relTo(root, dir), sandboxed: p.contained(),
		stdout: newRing(p.BufferBytes), stderr: newRing(p.BufferBytes)}
	spec := sandbox.Spec{Argv: req.Argv, Dir: dir, Env: env, Stdout: pr.stdout, Stderr: pr.stderr,
		Limits: sandbox.Limits{Timeout: timeout}}
	if p.contained() {
		spec.Sandboxed, spec.Mode, spec.WorkDir, spec.WorkReadOnly, spec.Network = true, p.mode, root, readOnly, p.Network
		spec.Limits.CPUTime = time.Duration(p.CPUTime)
		spec.Limits.MemoryBytes = memory
		spec.Limits.MaxProcs = p.ProcLimit
		spec.Limits.FileBytes = fileBytes
	}
	sb, err := sandbox.Start(spec)
	if err != nil {
		if errors.Is(err, wire.ErrInvalid) {
			return nil, err
		}
		return nil, startError(req.Argv[0], err)
	}
	pr.sb, pr.started = sb, time.Now()
	started = true
	go func() {
		if leaf != nil {
			select {
			case <-sb.Done():
			case <-leaf.Context().Done():
				why := leaf.Err().Error()
				pr.stoppedFor.Store(&why)
				sb.Kill()
				<-sb.Done()
			}
			leaf.Release()
		}
		<-sb.Done()
		pr.stdout.close()
		pr.stderr.close()
	}()
	t.procs[pr.id] = pr
	t.order = append(t.order, pr.id)
	t.evict(p.MaxRecords)
	return &msg.ProcSpawnResp{Process: pr.record(), DroppedEnv: dropped}, nil
}

// startError is the answer to a spawn that failed. A program that does not
// exist or cannot be executed is the agent's mistake and says so, naming
// only the argv[0] it sent; any other cause may name host paths, so it
// stays generic on the wire (the kernel logs it).
func startError(argv0 string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("spawn %q: %w", argv0, ErrNoProgram)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, exec.ErrDot):
		return fmt.Errorf("spawn %q: %w", argv0, ErrNotExecutable)
	}
	return fmt.Errorf("spawn %q: %w", argv0, err)
}

// evict forgets the oldest ended processes beyond max records.
func (t *table) evict(maxRecords int) {
	for i := 0; len(t.procs) > maxRecords && i < len(t.order); {
		pr := t.procs[t.order[i]]
		if pr != nil && pr.running() {
			i++
			continue
		}
		delete(t.procs, t.order[i])
		t.order = append(t.order[:i], t.order[i+1:]...)
	}
}

func relTo(root, dir string) string {
	r, err := filepath.Rel(root, dir)
	if err != nil {
		return "."
	}
	return r
}

func derefStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (pr *process) running() bool {
	if pr.sb == nil {
		return false
	}
	select {
	case <-pr.sb.Done():
		return false
	default:
		return true
	}
}

// record is the wire record of the process.
func (pr *process) record() msg.ProcRecord {
	rec := msg.ProcRecord{ProcID: pr.id, Argv: pr.argv, Cwd: pr.cwd, Sandboxed: pr.sandboxed,
		StartedAt: wire.Epoch(pr.started), State: msg.ProcRecordStateLost}
	if pr.sb == nil {
		rec.Reason = ptr("the process did not survive the restore of a snapshot")
		return rec
	}
	rec.Pid = pr.sb.Pid
	res := pr.sb.Result()
	if res.Outcome == sandbox.Running {
		rec.State = msg.ProcRecordStateRunning
		return rec
	}
	rec.State = msg.ProcRecordState(res.Outcome)
	rec.EndedAt = ptr(wire.Epoch(res.Ended))
	rec.Reason = ptr(res.Reason)
	if why := pr.stoppedFor.Load(); why != nil {
		rec.Reason = why
	}
	if res.Outcome == sandbox.Exited {
		rec.ExitCode = ptr(res.ExitCode)
	}
	if res.Signal != 0 {
		rec.Signal = ptr(sandbox.SignalName(res.Signal))
	}
	return rec
}

func ptr[T any](v T) *T { return &v }

// ProcWrite answers proc/write/req. The write runs beside the request so a
// process that does not read cannot hold it past WriteTimeout.
func (p *Plugin) ProcWrite(ctx context.Context, s wire.Scope, req *msg.ProcWriteReq) (*msg.ProcWriteResp, error) {
	pr, err := p.lookup(s.SessionID(), req.ProcID)
	if err != nil {
		return nil, err
	}
	if pr.sb == nil {
		return nil, fmt.Errorf("process %q was lost: %w", pr.id, wire.ErrInvalid)
	}
	if !pr.stdinMu.TryLock() {
		return nil, fmt.Errorf("process %q: another write is in progress: %w", pr.id, wire.ErrDenied)
	}
	defer pr.stdinMu.Unlock()
	if pr.stdinDone {
		return nil, fmt.Errorf("process %q: stdin is closed: %w", pr.id, wire.ErrInvalid)
	}
	data := derefStr(req.Data)
	done := make(chan struct{})
	var n int
	var werr error
	go func() {
		defer close(done)
		if data != "" {
			n, werr = io.WriteString(pr.sb.Stdin, data)
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, time.Duration(p.WriteTimeout))
	defer cancel()
	select {
	case <-done:
	case <-wctx.Done():
		// Unblock the writer; the process loses its stdin, as it would on a full pipe nobody drains.
		pr.sb.Stdin.Close()
		pr.stdinDone = true
		<-done
		return nil, wire.Public(fmt.Errorf("process %q did not read its stdin within %s: %w", pr.id, time.Duration(p.WriteTimeout), wire.ErrTimeout))
	}
	if werr != nil {
		if errors.Is(werr, syscall.EPIPE) || errors.Is(werr, os.ErrClosed) {
			return nil, wire.Reason("stdin_closed", fmt.Errorf("writing to process %q: it no longer reads its stdin", pr.id))
		}
		return nil, fmt.Errorf("writing to process %q: %w", pr.id, werr)
	}
	if req.Eof {
		pr.sb.Stdin.Close()
		pr.stdinDone = true
	}
	return &msg.ProcWriteResp{ProcID: pr.id, Written: n, Closed: ptr(pr.stdinDone)}, nil
}

func toChunk(c chunk) msg.ProcStreamChunk {
	return msg.ProcStreamChunk{Data: strings.ToValidUTF8(string(c.data), "\uFFFD"), Cursor: int(c.cursor),
		NextCursor: int(c.next), Dropped: int(c.dropped), Eof: c.eof}
}

// ProcRead answers proc/read/req.
func (p *Plugin) ProcRead(ctx context.Context, s wire.Scope, req *msg.ProcReadReq) (*msg.ProcReadResp, error) {
	pr, err := p.lookup(s.SessionID(), req.ProcID)
	if err != nil {
		return nil, err
	}
	if pr.sb == nil {
		return nil, fmt.Errorf("process %q was lost; its output with it: %w", pr.id, wire.ErrInvalid)
	}
	if !pr.running() {
		// Done comes after the output was copied: the streams are complete,
		// even if the goroutine that marks them closed has not run yet.
		pr.stdout.close()
		pr.stderr.close()
	}
	limit := p.BufferBytes
	if req.MaxBytes != nil && *req.MaxBytes < limit {
		limit = *req.MaxBytes
	}
	if !req.Follow {
		out, _ := pr.stdout.read(int64(req.StdoutCursor), limit)
		errc, _ := pr.stderr.read(int64(req.StderrCursor), limit)
		return &msg.ProcReadResp{ProcID: pr.id, Stdout: toChunk(out), Stderr: toChunk(errc), State: string(pr.record().State)}, nil
	}
	return p.follow(ctx, s, pr, req, limit)
}

// follow streams output as proc/event artifacts while the request is in
// flight, then replies with the cursors (spec §6 rule 5).
func (p *Plugin) follow(ctx context.Context, s wire.Scope, pr *process, req *msg.ProcReadReq, limit int) (*msg.ProcReadResp, error) {
	d := defaultFollow
	if f := seconds(req.FollowTimeout); f > 0 {
		d = f
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	streams := []struct {
		name   string
		r      *ring
		cursor int64
		first  int64
		drop   int64
		eof    bool
	}{{name: "stdout", r: pr.stdout, cursor: int64(req.StdoutCursor)}, {name: "stderr", r: pr.stderr, cursor: int64(req.StderrCursor)}}
	for i := range streams {
		streams[i].first = -1
	}
	sent := 0
	for {
		var waits []<-chan struct{}
		for i := range streams {
			st := &streams[i]
			if st.eof || sent >= limit {
				continue
			}
			c, ch := st.r.read(st.cursor, limit-sent)
			if st.first < 0 {
				st.first, st.drop = c.cursor, c.dropped
			}
			st.cursor, st.eof = c.next, c.eof
			if len(c.data) > 0 || c.eof {
				data := map[string]any{"name": st.name, "mime": "text/plain", "chunk": strings.ToValidUTF8(string(c.data), "\uFFFD"),
					"final": c.eof, "cursor": c.cursor, "next_cursor": c.next}
				if err := s.Emit(wire.EventArtifact, data); err != nil {
					return nil, err
				}
				sent += len(c.data)
			}
			if !c.eof {
				waits = append(waits, ch)
			}
		}
		if len(waits) == 0 || sent >= limit {
			break
		}
		stop := false
		select {
		case <-waits[0]:
		case <-waitAny(waits[1:]):
		case <-timer.C:
			stop = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if stop {
			break
		}
	}
	mk := func(i int) msg.ProcStreamChunk {
		st := streams[i]
		return msg.ProcStreamChunk{Cursor: int(st.first), NextCursor: int(st.cursor), Dropped: int(st.drop), Eof: st.eof}
	}
	return &msg.ProcReadResp{ProcID: pr.id, Stdout: mk(0), Stderr: mk(1), State: string(pr.record().State), Streamed: ptr(sent)}, nil
}

// waitAny returns the first of chs, or a channel that never fires.
func waitAny(chs []<-chan struct{}) <-chan struct{} {
	if len(chs) == 0 {
		return nil
	}
	return chs[0]
}

// ProcSignal answers proc/signal/req.
func (p *Plugin) ProcSignal(ctx context.Context, s wire.Scope, req *msg.ProcSignalReq) (*msg.ProcSignalResp, error) {
	sig, ok := sandbox.ParseSignal(string(req.Signal))
	if !ok {
		return nil, &wire.FieldError{Field: "signal", Reason: fmt.Sprintf("unknown signal %q", req.Signal)}
	}
	pr, err := p.lookup(s.SessionID(), req.ProcID)
	if err != nil {
		return nil, err
	}
	if !pr.running() {
		return nil, fmt.Errorf("process %q is not running (%s): %w", pr.id, pr.record().State, wire.ErrInvalid)
	}
	if err := pr.sb.Signal(sig); err != nil {
		if !pr.running() {
			// It ended between the check above and the signal.
			return nil, fmt.Errorf("process %q is not running: %w", pr.id, wire.ErrInvalid)
		}
		return nil, fmt.Errorf("signal %s to %q: %w", sandbox.SignalName(sig), pr.id, err)
	}
	return &msg.ProcSignalResp{Process: pr.record()}, nil
}

// ProcKill answers proc/kill/req once the process is reaped.
func (p *Plugin) ProcKill(ctx context.Context, s wire.Scope, req *msg.ProcKillReq) (*msg.ProcKillResp, error) {
	pr, err := p.lookup(s.SessionID(), req.ProcID)
	if err != nil {
		return nil, err
	}
	if pr.running() {
		pr.sb.Kill()
		select {
		case <-pr.sb.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &msg.ProcKillResp{Process: pr.record()}, nil
}

// ProcWait answers proc/wait/req. Limit outcomes are errors (docs/DECISIONS.md, Sandbox outcomes).
func (p *Plugin) ProcWait(ctx context.Context, s wire.Scope, req *msg.ProcWaitReq) (*msg.ProcWaitResp, error) {
	pr, err := p.lookup(s.SessionID(), req.ProcID)
	if err != nil {
		return nil, err
	}
	if pr.sb != nil {
		var timeout <-chan time.Time
		if d := seconds(req.Timeout); d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		} else if req.Timeout != nil {
			timeout = closedTime
		}
		select {
		case <-pr.sb.Done():
		case <-timeout:
			return &msg.ProcWaitResp{Process: pr.record(), TimedOut: true}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := pr.sb.Result().Err(); err != nil {
			rec := pr.record()
			we := wire.AsError(fmt.Errorf("process %q: %w", pr.id, err))
			we.Capability = "proc"
			we.Detail = recordDetail(rec)
			return nil, we
		}
	}
	return &msg.ProcWaitResp{Process: pr.record()}, nil
}

var closedTime = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

func recordDetail(rec msg.ProcRecord) map[string]any {
	b, _ := json.Marshal(rec)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return map[string]any{"process": m}
}

// ProcStatus answers proc/status/req.
func (p *Plugin) ProcStatus(ctx context.Context, s wire.Scope, req *msg.ProcStatusReq) (*msg.ProcStatusResp, error) {
	pr, err := p.lookup(s.SessionID(), req.ProcID)
	if err != nil {
		return nil, err
	}
	return &msg.ProcStatusResp{Process: pr.record()}, nil
}

// ProcList answers proc/list/req.
func (p *Plugin) ProcList(ctx context.Context, s wire.Scope, req *msg.ProcListReq) (*msg.ProcListResp, error) {
	out := &msg.ProcListResp{Processes: []msg.ProcRecord{}}
	t, ok := p.sessions.Get(s.SessionID())
	if !ok {
		return out, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range t.order {
		pr := t.procs[id]
		if pr == nil || req.RunningOnly && !pr.running() {
			continue
		}
		out.Processes = append(out.Processes, pr.record())
	}
	return out, nil
}

var (
	_ msg.ProcHandler     = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
	_ persist.Snapshotter = (*Plugin)(nil)
)
