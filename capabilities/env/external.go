package env

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/aephost/aep/gen/envproto"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// External environments (docs/env.md, Writing an environment in any
// language) run as their own processes and speak the protocol of
// schemas/envproto/envproto.json over their stdin and stdout. Each episode has its own process, started on its
// first reset in the sandbox of its session (server/sandbox, with the
// session directory as the only writable place), so nothing is shared
// between episodes, let alone sessions. A process that dies, hangs past
// call_timeout or writes anything but the protocol is killed; its episode
// ends (truncated) with an error saying why, and its next reset starts a
// fresh process. Closing the episode, or the end of its session, ends the
// process and everything it started.

// Defaults of an external environment's settings.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultMaxLineBytes = 16 << 20
	// stopGrace is how long a process may take to exit after
	// envproto/close/req before it is killed.
	stopGrace = 2 * time.Second
	// stderrTail is how much of a process's stderr the host keeps for its
	// log when the process fails.
	stderrTail = 4 << 10
)

// extDef is one configured external environment.
type extDef struct {
	cfg          ExternalEnv
	mode         sandbox.Mode
	host         *server.Host
	log          *slog.Logger
	scratch      string // session directories when there is no host
	startTimeout time.Duration
	callTimeout  time.Duration
	spec         *envproto.SpecResp // from the probe at Provision
}

// errEnded marks an error after which an external episode's process is
// gone: the episode ends (truncated) and its next reset starts a fresh
// process.
type errEnded struct{ err error }

func (e errEnded) Error() string { return e.err.Error() }
func (e errEnded) Unwrap() error { return e.err }

// loadExternal adds the configured external environments to the catalog.
// Each is started once, contained in a scratch directory, to learn its
// spaces (envproto/spec/req): env/list must answer without starting one
// per request, and a command that cannot serve the protocol is a mistake
// of the configuration, refused at start-up.
func (p *Plugin) loadExternal(ctx context.Context, dataDir string) error {
	mode := sandbox.ModeAuto
	if p.host != nil {
		mode = p.host.SandboxMode()
	}
	scratch := filepath.Join(os.TempDir(), fmt.Sprintf("aep-env-ext-%d", os.Getpid()))
	if dataDir != "" {
		scratch = filepath.Join(dataDir, "external")
	}
	for i, c := range p.External {
		if c.Name == "" || c.Command == "" {
			return fmt.Errorf("external[%d]: name and command are required", i)
		}
		if _, dup := p.catalog[c.Name]; dup {
			return fmt.Errorf("external[%d]: environment %q exists already", i, c.Name)
		}
		if c.Dir != "" {
			if _, err := confine.Rel("dir", c.Dir); err != nil {
				return fmt.Errorf("external %q: dir must be relative to the session directory: %w", c.Name, err)
			}
		}
		d := &extDef{cfg: c, mode: mode, host: p.host, log: p.log, scratch: scratch,
			startTimeout: time.Duration(c.StartTimeout), callTimeout: time.Duration(c.CallTimeout)}
		if d.startTimeout <= 0 {
			d.startTimeout = DefaultStartTimeout
		}
		if d.callTimeout <= 0 {
			d.callTimeout = time.Duration(p.StepTimeout)
		}
		if d.cfg.MaxLineBytes <= 0 {
			d.cfg.MaxLineBytes = DefaultMaxLineBytes
		}
		if d.contained() {
			if _, _, err := sandbox.Describe(mode); err != nil {
				return fmt.Errorf("external environment %q needs the configured sandbox (server.isolation.sandbox): %w", c.Name, err)
			}
		} else {
			p.log.Warn("env: sandbox is off by configuration for an external environment; its processes run uncontained", "env", c.Name)
		}
		probe, err := os.MkdirTemp(ensureDir(scratch), "probe-")
		if err != nil {
			return fmt.Errorf("external %q: %w", c.Name, err)
		}
		conn, spec, err := d.start(ctx, probe)
		if err == nil {
			conn.stop()
		}
		_ = os.RemoveAll(probe)
		if err != nil {
			return fmt.Errorf("external environment %q does not start: %w", c.Name, err)
		}
		d.spec = spec
		desc := c.Description
		if desc == "" && spec.Description != nil {
			desc = *spec.Description
		}
		// The watchdog of Plugin.run is only the backstop of the
		// process's own timeouts: a reset may include a start.
		p.catalog[c.Name] = &factory{
			spec: Spec{Name: c.Name, Description: desc, ActionSpace: spec.ActionSpace, ObservationSpace: spec.ObservationSpace},
			new: func(sessionID string) (instance, error) {
				return &extInstance{def: d, sessionID: sessionID}, nil
			},
			timeout: d.startTimeout + d.callTimeout + 5*time.Second,
		}
	}
	return nil
}

func ensureDir(d string) string {
	_ = os.MkdirAll(d, 0o755)
	return d
}

func (d *extDef) contained() bool { return d.cfg.Sandbox == nil || *d.cfg.Sandbox }

// sessionDir is where a session's processes work: its session directory
// under a host, else a directory of its own in the scratch directory.
func (d *extDef) sessionDir(sessionID string) (string, error) {
	if d.host != nil {
		sd, err := d.host.SessionDir(sessionID)
		if err != nil {
			return "", err
		}
		return sd.Path, nil
	}
	dir := filepath.Join(d.scratch, "sessions", sessionID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", hostFault{err}
	}
	return dir, nil
}

// start starts a process working in work and asks for its spec.
func (d *extDef) start(ctx context.Context, work string) (*extConn, *envproto.SpecResp, error) {
	dir := work
	if d.cfg.Dir != "" {
		rel, _ := confine.Rel("dir", d.cfg.Dir)
		var err error
		if dir, err = confine.Dir(work, "dir", rel); err != nil {
			return nil, nil, hostFault{err}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, hostFault{err}
		}
	}
	home := work
	if mech, _ := sandbox.Mechanism(d.mode); d.contained() && sandbox.TierOf(mech) == sandbox.TierNamespaces {
		home = sandbox.Workspace
	}
	envv, dropped := sandbox.Environ(d.cfg.EnvAllow, home, d.cfg.Env)
	if len(dropped) > 0 {
		d.log.Warn("env: refused variables of an external environment", "env", d.cfg.Name, "dropped", dropped)
	}
	c := &extConn{def: d, lines: make(chan []byte, 1), quit: make(chan struct{}), stderr: &tail{}}
	pr, pw := io.Pipe()
	spec := sandbox.Spec{Argv: append([]string{d.cfg.Command}, d.cfg.Args...), Dir: dir, Env: envv,
		Stdout: pw, Stderr: c.stderr}
	// An episode's process is a unit of the session's leaf work for as
	// long as it runs (server/budget.go); the probe at start-up is no
	// session's.
	leaf, err := server.AcquireLeafFrom(ctx)
	if err != nil {
		pw.Close()
		return nil, nil, err
	}
	if d.contained() {
		spec.Sandboxed, spec.Mode, spec.WorkDir, spec.ReadOnly, spec.Network = true, d.mode, work, d.cfg.ReadOnly, d.cfg.Network
		spec.Limits = sandbox.Limits{CPUTime: time.Duration(d.cfg.CPUTime), MemoryBytes: int64(d.cfg.MemoryMB) << 20, MaxProcs: d.cfg.ProcLimit}
		if d.host != nil {
			spec.Limits.FileBytes = d.host.SessionQuota()
		}
		if leaf != nil {
			if spec.Limits.MemoryBytes, spec.Limits.FileBytes, err = leaf.ReserveProcess(ctx, spec.Limits.MemoryBytes); err != nil {
				leaf.Release()
				pw.Close()
				return nil, nil, err
			}
		}
	}
	proc, err := sandbox.Start(spec)
	if err != nil {
		pw.Close()
		if leaf != nil {
			leaf.Release()
		}
		return nil, nil, hostFault{fmt.Errorf("starting %q: %w", d.cfg.Command, err)}
	}
	c.proc, c.stdin = proc, proc.Stdin
	go func() {
		// The sandbox has copied all of stdout when Done is closed.
		if leaf != nil {
			select {
			case <-proc.Done():
			case <-leaf.Context().Done():
				proc.Kill() // the session passed its disk budget
				<-proc.Done()
			}
			leaf.Release()
		}
		<-proc.Done()
		pw.Close()
	}()
	go c.read(pr)
	ctx, cancel := context.WithTimeout(ctx, d.startTimeout)
	defer cancel()
	m, err := c.call(ctx, &envproto.SpecReq{}, d.startTimeout)
	if err != nil {
		c.stop()
		return nil, nil, err
	}
	sp := m.(*envproto.SpecResp)
	return c, sp, nil
}

// extConn is one running process of an external environment.
type extConn struct {
	def     *extDef
	proc    *sandbox.Process
	stdin   io.WriteCloser
	lines   chan []byte   // closed at the end of stdout, or at a line too long
	quit    chan struct{} // closed when the process is killed: stop reading
	killed  sync.Once
	readErr error // why lines was closed early; read after it is closed
	stderr  *tail
	seq     int
	broken  error // set once the process is gone or unusable
}

// read splits stdout into lines for call.
func (c *extConn) read(r io.Reader) {
	defer close(c.lines)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, c.def.cfg.MaxLineBytes)
		if len(line) > 0 {
			select {
			case c.lines <- line:
			case <-c.quit:
				// Nobody will read more of a killed process; what it
				// still writes is drained below.
				err = io.EOF
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.readErr = err
			}
			// Keep draining so the sandbox's copy never blocks on us.
			go io.Copy(io.Discard, r)
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its newline, refusing one over max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return nil, fmt.Errorf("%w (over %d bytes)", errLineTooLong, max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return bytes.TrimRight(line, "\r\n"), err
		}
	}
}

// Request sends one request and returns its reply; it makes extConn the
// wire.Requester of envproto's generated Client.
func (c *extConn) Request(ctx context.Context, req wire.Message) (wire.Message, error) {
	return c.call(ctx, req, c.def.callTimeout)
}

// call sends req and waits at most d for its reply. Any failure other
// than the environment's own envproto/error ends the process and is an
// [errEnded].
func (c *extConn) call(ctx context.Context, req wire.Message, d time.Duration) (wire.Message, error) {
	if c.broken != nil {
		return nil, c.broken
	}
	c.seq++
	id := strconv.Itoa(c.seq)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", req.MessageType(), err)
	}
	line := make([]byte, 0, len(body)+64)
	line = append(line, `{"type":`...)
	line = wire.AppendString(line, req.MessageType())
	line = append(line, `,"id":`...)
	line = wire.AppendString(line, id)
	if len(body) > 2 {
		line = append(line, ',')
	}
	line = append(line, body[1:]...)
	line = append(line, '\n')
	timer := time.NewTimer(d)
	defer timer.Stop()
	// A process that does not read its stdin would block the write; it is
	// bounded by the same timer, through a kill that breaks the pipe.
	wrote := make(chan error, 1)
	go func() { _, err := c.stdin.Write(line); wrote <- err }()
	var reply []byte
	for reply == nil {
		select {
		case err := <-wrote:
			wrote = nil
			if err != nil {
				// The process is going; its exit status says why.
				return nil, c.fail(fmt.Errorf("it stopped reading its input (%v)", err), req)
			}
		case l, ok := <-c.lines:
			if !ok {
				if c.readErr != nil {
					return nil, c.fail(protocolError("%v", c.readErr), req)
				}
				return nil, c.fail(nil, req)
			}
			reply = l
		case <-timer.C:
			return nil, c.fail(wire.Public(fmt.Errorf("it did not answer %s within %s: %w", req.MessageType(), d, wire.ErrTimeout)), req)
		case <-ctx.Done():
			return nil, c.fail(ctx.Err(), req)
		}
	}
	m, err := c.decode(reply, id, req)
	if err != nil {
		return nil, c.fail(err, req)
	}
	if e, ok := m.(*envproto.Error); ok {
		if e.BadAction != nil && *e.BadAction {
			return nil, fmt.Errorf("%s: %w", e.Message, ErrBadAction)
		}
		return nil, wire.Publicf("environment %s: %s", c.def.cfg.Name, e.Message)
	}
	return m, nil
}

// protocolError is a reply that breaks the protocol; its text names only
// what the environment wrote (clipped), never a host path.
func protocolError(format string, args ...any) error {
	return wire.Public(fmt.Errorf("it broke the protocol (schemas/envproto/envproto.json): "+format, args...))
}

// decode checks one reply line: framing, type, req_id, required fields and
// the generated Validate of its model.
func (c *extConn) decode(line []byte, id string, req wire.Message) (wire.Message, error) {
	var sc wire.Scanned
	if err := wire.Scan(line, &sc); err != nil {
		return nil, protocolError("%v in %q", err, wire.Clip(string(line)))
	}
	want := envproto.Registry().Lookup(req.MessageType())
	e := envproto.Registry().Lookup(sc.Type)
	if e == nil || (sc.Type != want.Reply && sc.Type != "envproto/error") {
		return nil, protocolError("answered %s with type %q", req.MessageType(), wire.Clip(sc.Type))
	}
	if sc.ReqID != id {
		return nil, protocolError("answered request %s with req_id %q", id, wire.Clip(sc.ReqID))
	}
	for _, f := range e.Required {
		if !sc.Has(f) || sc.IsNull(f) {
			return nil, protocolError("%s without %q", sc.Type, f)
		}
	}
	m, err := wire.DecodeBody(e, line)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return nil, protocolError("%s: %v", sc.Type, wire.AsError(err).Message)
	}
	return m, nil
}

// fail ends the process after a failed call and returns the error the
// agent gets: why (nil when the process simply ended), with how the
// process ended when it did so on its own.
func (c *extConn) fail(why error, req wire.Message) error {
	if c.broken != nil {
		return c.broken
	}
	selfEnded := false
	select {
	case <-c.proc.Done():
		selfEnded = true
	default:
		if why == nil {
			// stdout closed first; the exit follows at once.
			select {
			case <-c.proc.Done():
				selfEnded = true
			case <-time.After(stopGrace):
			}
		}
	}
	c.kill()
	res := c.proc.Result()
	var err error
	switch {
	case selfEnded && res.Err() != nil:
		// A limit of the sandbox or a death by signal: its own code
		// (docs/DECISIONS.md, Sandbox outcomes).
		err = fmt.Errorf("environment %s: its process ended while answering %s: %w", c.def.cfg.Name, req.MessageType(), res.Err())
	case selfEnded || why == nil:
		err = wire.Publicf("environment %s: its process exited (status %d) while answering %s", c.def.cfg.Name, res.ExitCode, req.MessageType())
	case errors.Is(why, context.Canceled), errors.Is(why, context.DeadlineExceeded):
		err = why
	case errors.Is(why, wire.ErrTimeout):
		err = fmt.Errorf("environment %s: %w; its process was killed", c.def.cfg.Name, why)
	default:
		err = fmt.Errorf("environment %s: %w; its process was killed", c.def.cfg.Name, why)
		if wire.AsError(why).Internal {
			err = wire.Public(err)
		}
	}
	c.def.log.Warn("env: external environment process ended", "env", c.def.cfg.Name, "error", err,
		"outcome", res.Outcome, "exit_code", res.ExitCode, "stderr", c.stderr.String())
	c.broken = errEnded{err}
	return c.broken
}

func (c *extConn) kill() {
	c.killed.Do(func() { close(c.quit) })
	c.proc.Kill()
	<-c.proc.Done()
	_ = c.stdin.Close()
}

// stop ends the process: envproto/close/req, then stdin closed, then a
// kill if it has not exited within stopGrace.
func (c *extConn) stop() {
	if c.broken == nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		_, _ = c.call(ctx, &envproto.CloseReq{}, stopGrace)
		cancel()
	}
	_ = c.stdin.Close()
	select {
	case <-c.proc.Done():
	case <-time.After(stopGrace):
	}
	c.kill()
	if c.broken == nil {
		c.broken = errEnded{errors.New("the environment process was stopped")}
	}
}

// extInstance is one episode of an external environment.
type extInstance struct {
	def       *extDef
	sessionID string
	conn      *extConn // nil before the first reset and after the process ended
}

func (x *extInstance) client() envproto.Client { return envproto.Client{Requester: x.conn} }

// ended forgets a process that is gone, so the next reset starts another.
func (x *extInstance) ended(err error) error {
	var e errEnded
	if errors.As(err, &e) {
		x.conn = nil
	}
	return err
}

func (x *extInstance) reset(ctx context.Context, seed *int64, options json.RawMessage) (Obs, error) {
	if x.conn == nil {
		work, err := x.def.sessionDir(x.sessionID)
		if err != nil {
			return Obs{}, err
		}
		conn, _, err := x.def.start(ctx, work)
		if err != nil {
			return Obs{}, err
		}
		x.conn = conn
	}
	req := &envproto.ResetReq{}
	if seed != nil {
		v := int(*seed)
		req.Seed = &v
	}
	if len(options) > 0 {
		req.Options = &options
	}
	r, err := x.client().EnvprotoReset(ctx, req)
	if err != nil {
		return Obs{}, x.ended(err)
	}
	return Obs{Observation: r.Observation, Info: deref(r.Info)}, nil
}

func (x *extInstance) step(ctx context.Context, action json.RawMessage) (Step, error) {
	if x.conn == nil {
		return Step{}, errEnded{wire.Publicf("environment %s: its process has ended; reset the episode", x.def.cfg.Name)}
	}
	r, err := x.client().EnvprotoStep(ctx, &envproto.StepReq{Action: action})
	if err != nil {
		return Step{}, x.ended(err)
	}
	return Step{Observation: r.Observation, Info: deref(r.Info), Reward: r.Reward, Terminated: r.Terminated, Truncated: r.Truncated}, nil
}

func (x *extInstance) render() (string, error) {
	if x.conn == nil {
		return fmt.Sprintf("environment %s: no process (reset the episode)", x.def.cfg.Name), nil
	}
	r, err := x.client().EnvprotoRender(context.Background(), &envproto.RenderReq{})
	if err != nil {
		return "", x.ended(err)
	}
	return r.Text, nil
}

func (x *extInstance) close() error {
	if x.conn != nil {
		x.conn.stop()
		x.conn = nil
	}
	return nil
}

// stateful: episodes of environments whose spec says `snapshots` survive
// session snapshots through envproto/state and envproto/restore; others
// come back closed (docs/DECISIONS.md, State).
func (x *extInstance) stateful() Stateful {
	if x.def.spec != nil && x.def.spec.Snapshots != nil && *x.def.spec.Snapshots {
		return x
	}
	return nil
}

// extState is an external episode in a session snapshot: the
// environment's own state, absent when the episode had no process (its
// next reset starts one, as it would have).
type extState struct {
	State *string `json:"state,omitempty"`
}

// SaveState asks the process for its state.
func (x *extInstance) SaveState() ([]byte, error) {
	if x.conn == nil {
		return json.Marshal(extState{})
	}
	r, err := x.client().EnvprotoState(context.Background(), &envproto.StateReq{})
	if err != nil {
		return nil, x.ended(err)
	}
	return json.Marshal(extState{State: &r.State})
}

// LoadState starts a process in the session's sandbox and hands it the
// saved state.
func (x *extInstance) LoadState(b []byte) error {
	var st extState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if st.State == nil {
		return nil
	}
	work, err := x.def.sessionDir(x.sessionID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), x.def.startTimeout+x.def.callTimeout)
	defer cancel()
	conn, _, err := x.def.start(ctx, work)
	if err != nil {
		return err
	}
	x.conn = conn
	if _, err := x.client().EnvprotoRestore(ctx, &envproto.RestoreReq{State: *st.State}); err != nil {
		x.close()
		return err
	}
	return nil
}

func deref(r *json.RawMessage) json.RawMessage {
	if r == nil {
		return nil
	}
	return *r
}

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > stderrTail {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
