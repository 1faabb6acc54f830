package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module aep.env.builtin, the env capability,
// named env.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "aep.env.builtin", Capability: "env", DefaultName: "env.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Defaults of the plugin's settings.
const (
	DefaultDataRoot    = "/workspace/data" // spec §2.11
	DefaultMaxEpisodes = 256
	DefaultStepTimeout = 30 * time.Second
	DefaultInlineMax   = 64 << 10
	maxTombstones      = 1024
)

// Plugin serves the env namespace. Its exported fields are its settings
// (the `config` of its plugin entry, decoded strictly).
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/env.json, docs/config.md).
	Settings `yaml:",inline"`

	log     *slog.Logger
	catalog map[string]*factory
	names   []string
	dataErr error // why the data plane is unavailable, if it is
	host    *server.Host
	// inSession: each session's data root is data/ in its session directory.
	inSession bool

	// sessions holds each session's episodes; the kernel drops a
	// session's entry (closing its episodes) when the session ends and
	// before a restore.
	sessions *server.SessionState[sessionEnvs]
}

// sessionEnvs is one session's episodes. Other sessions never see them
// (spec §5 rule 4).
type sessionEnvs struct {
	mu       sync.Mutex
	episodes map[string]*episode
	gone     map[string]string // closed episode id → why, for clear errors
	goneFIFO []string
}

// Episode statuses (docs/env.md): running until a step terminates or
// truncates it; reset makes it running again; close removes it.
const (
	statusRunning    = "running"
	statusTerminated = "terminated"
	statusTruncated  = "truncated"
)

type episode struct {
	mu      sync.Mutex // one step at a time
	id      string
	envName string
	f       *factory
	inst    instance
	status  string
	step    int
	total   float64
	obs     json.RawMessage
	dead    error // set when the episode was closed under a running step
}

// Provision builds the catalog and prepares the data root. A data root
// that cannot be created does not stop the host: env/data/* then answers
// a clear error (docs/DECISIONS.md, State).
func (p *Plugin) Provision(ctx context.Context, penv server.PluginEnv) error {
	p.log = penv.Logger
	if p.MaxEpisodes <= 0 {
		p.MaxEpisodes = DefaultMaxEpisodes
	}
	if p.StepTimeout <= 0 {
		p.StepTimeout = server.Duration(DefaultStepTimeout)
	}
	if p.InlineMaxBytes <= 0 {
		p.InlineMaxBytes = DefaultInlineMax
	}
	p.host = penv.Host
	if p.DataRoot == "" || p.DataRoot == DefaultDataRoot {
		p.DataRoot = DefaultDataRoot
		p.inSession = penv.Host != nil
	}
	if penv.Host != nil && penv.DataDir != "" {
		if p.StagingRoot == "" {
			p.StagingRoot = filepath.Join(penv.DataDir, "staging")
		}
		if p.BaselineDir == "" {
			p.BaselineDir = filepath.Join(penv.DataDir, "baseline")
		}
	}
	p.sessions = server.NewSessionState(penv, newSessionEnvs, func(_ string, se *sessionEnvs) {
		p.closeAll(se, errors.New("its session ended"))
	})
	p.catalog = map[string]*factory{}
	names := p.Envs
	if len(names) == 0 {
		names = Registered()
	}
	for _, n := range names {
		f, ok := lookupRegistered(n)
		if !ok {
			return fmt.Errorf("envs: unknown environment %q; registered: %v", n, Registered())
		}
		p.catalog[n] = f
	}
	if err := p.loadExternal(ctx, penv.DataDir); err != nil {
		return err
	}
	if err := p.provisionData(); err != nil {
		p.dataErr = err
		p.log.Warn("env data plane unavailable", "error", err)
	}
	if p.TasksDir != "" {
		if err := p.loadTasks(penv.DataDir); err != nil {
			return err
		}
	}
	for n := range p.catalog {
		p.names = append(p.names, n)
	}
	sort.Strings(p.names)
	return nil
}

func (p *Plugin) provisionData() error {
	var err error
	if !p.inSession {
		abs, err := filepath.Abs(p.DataRoot)
		if err != nil {
			return err
		}
		p.DataRoot = abs
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return fmt.Errorf("data root %q cannot be created: %w", abs, err)
		}
	}
	for _, d := range []*string{&p.StagingRoot, &p.BaselineDir} {
		if *d == "" {
			continue
		}
		if *d, err = filepath.Abs(*d); err != nil {
			return err
		}
		if err := os.MkdirAll(*d, 0o755); err != nil {
			return fmt.Errorf("%q cannot be created: %w", *d, err)
		}
	}
	return nil
}

// Cleanup closes every episode of every session.
func (p *Plugin) Cleanup() error {
	if p.sessions != nil {
		p.sessions.DropAll()
	}
	return nil
}

func newSessionEnvs(string) *sessionEnvs {
	return &sessionEnvs{episodes: map[string]*episode{}, gone: map[string]string{}}
}

// closeAll closes the episodes of a session the kernel dropped (its
// session ended, or a restore replaces them); a request racing with it
// finds episodes == nil. The session's data root is left for the operator.
func (p *Plugin) closeAll(se *sessionEnvs, why error) {
	se.mu.Lock()
	eps := se.episodes
	se.episodes = nil
	se.mu.Unlock()
	for _, ep := range eps {
		p.closeEpisode(ep, why)
	}
}

// closeEpisode closes an episode once its running step, if any, is done.
func (p *Plugin) closeEpisode(ep *episode, why error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.dead == nil {
		ep.dead = why
		if err := ep.inst.close(); err != nil {
			p.log.Warn("closing episode", "episode_id", ep.id, "env", ep.envName, "error", err)
		}
	}
}

// session returns the session's episodes, or nil when it has none yet.
func (p *Plugin) session(id string) *sessionEnvs {
	se, _ := p.sessions.Get(id)
	return se
}

// Errors of episode lookups: conditions of state, which no schema can see,
// so never schema_violation (docs/DECISIONS.md, Errors of state). Retrying
// the same request cannot succeed.
var (
	ErrUnknownEpisode = fmt.Errorf("unknown episode: %w", wire.ErrNotFound)
	ErrClosedEpisode  = wire.Reason("episode_closed", errors.New("episode is closed"))
	ErrFinished       = wire.Reason("episode_closed", errors.New("episode is finished; reset it before stepping"))
	ErrUnknownEnv     = fmt.Errorf("unknown environment: %w", wire.ErrNotFound)
	ErrEpisodeCap     = fmt.Errorf("episode limit reached; close an episode first: %w", wire.ErrDenied)
)

// lookup finds an open episode of the session.
func (p *Plugin) lookup(sessionID, id string) (*episode, error) {
	if se := p.session(sessionID); se != nil {
		se.mu.Lock()
		ep := se.episodes[id]
		why, gone := se.gone[id]
		se.mu.Unlock()
		if ep != nil {
			return ep, nil
		}
		if gone {
			return nil, fmt.Errorf("episode %q (%s): %w", id, why, ErrClosedEpisode)
		}
	}
	return nil, fmt.Errorf("episode %q: %w", id, ErrUnknownEpisode)
}

func (se *sessionEnvs) bury(id, why string) {
	delete(se.episodes, id)
	if _, ok := se.gone[id]; !ok {
		se.goneFIFO = append(se.goneFIFO, id)
		if len(se.goneFIFO) > maxTombstones {
			delete(se.gone, se.goneFIFO[0])
			se.goneFIFO = se.goneFIFO[1:]
		}
	}
	se.gone[id] = why
}

// alive checks an episode under its lock.
func (ep *episode) alive() error {
	if ep.dead != nil {
		return fmt.Errorf("episode %q (%v): %w", ep.id, ep.dead, ErrClosedEpisode)
	}
	return nil
}

// run calls fn under the per-step timeout: inline environments run on the
// caller's goroutine; others on a watched one. A step that overruns closes
// the episode, whose state is then unknown.
//
// A panic of the environment's code becomes a [*server.PanicError] and
// closes the episode too. A watched goroutine is outside the kernel's
// recover, so the panic would end the whole host; an inline one would leave
// ep.mu held, and closing the session would then hang (spec §7 condition 4:
// an uncaught exception in a handler becomes an error message).
func (p *Plugin) run(ctx context.Context, sessionID string, ep *episode, fn func(ctx context.Context) error) error {
	if p.host != nil {
		// Processes the environment starts spend the session's budget.
		ctx = p.host.WithBudget(ctx, sessionID)
	}
	if ep.f.spec.Inline {
		return p.afterPanic(sessionID, ep, p.runInline(ctx, ep, fn))
	}
	what := ep.what()
	d := time.Duration(p.StepTimeout)
	if ep.f.timeout > 0 {
		d = ep.f.timeout
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	done := make(chan error, 1)
	go func() { done <- server.Protect(p.log, what, func() error { return fn(sctx) }) }()
	select {
	case err := <-done:
		cancel()
		return p.afterPanic(sessionID, ep, err)
	case <-sctx.Done():
		cause := sctx.Err()
		go func() { <-done; cancel(); _ = ep.inst.close() }()
		why := fmt.Errorf("a step exceeded the step timeout of %s", d)
		if errors.Is(cause, context.Canceled) {
			why = errors.New("a step was cancelled")
		}
		p.kill(sessionID, ep, why)
		if errors.Is(cause, context.DeadlineExceeded) {
			return wire.Public(fmt.Errorf("episode %q closed: %v: %w", ep.id, why, wire.ErrTimeout))
		}
		return fmt.Errorf("episode %q closed: %w", ep.id, cause)
	}
}

// runInline runs fn on the caller's goroutine, a panic recovered as
// [server.Protect] does; the step loop's hot path makes no closure and no
// description unless there is a panic.
func (p *Plugin) runInline(ctx context.Context, ep *episode, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = server.Recovered(p.log, ep.what(), v)
		}
	}()
	return fn(ctx)
}

// what names ep in the log record of a panic.
func (ep *episode) what() string {
	return fmt.Sprintf("environment %s, episode %s", ep.envName, ep.id)
}

// afterPanic closes ep when err is a panic of its environment, whose state
// is then unknown; it returns err. The panic value stays in the log: the
// agent gets a generic error with the correlation id, and the episode's
// "closed" reason names only that id.
func (p *Plugin) afterPanic(sessionID string, ep *episode, err error) error {
	if err == nil {
		return nil
	}
	var pe *server.PanicError
	if errors.As(err, &pe) {
		p.kill(sessionID, ep, err)
		_ = ep.inst.close()
		return fmt.Errorf("episode %q closed: %w", ep.id, err)
	}
	return err
}

// kill marks ep dead for why and buries it; the caller holds ep.mu.
func (p *Plugin) kill(sessionID string, ep *episode, why error) {
	ep.dead = why
	if se := p.session(sessionID); se != nil {
		se.mu.Lock()
		se.bury(ep.id, why.Error())
		se.mu.Unlock()
	}
}

func newEpisodeID() string { return "ep-" + wire.RandomHex(6) }

func (p *Plugin) factory(name string) (*factory, error) {
	f, ok := p.catalog[name]
	if !ok {
		return nil, fmt.Errorf("environment %q (served: %v): %w", name, p.names, ErrUnknownEnv)
	}
	return f, nil
}

// EnvList answers env/list/req.
func (p *Plugin) EnvList(ctx context.Context, s wire.Scope, req *msg.EnvListReq) (*msg.EnvListResp, error) {
	out := &msg.EnvListResp{Envs: make([]msg.EnvInfo, 0, len(p.names))}
	for _, n := range p.names {
		f := p.catalog[n]
		out.Envs = append(out.Envs, msg.EnvInfo{EnvName: n, Description: f.spec.Description,
			ActionSpace: f.spec.ActionSpace, ObservationSpace: f.spec.ObservationSpace, Snapshots: f.snapshots()})
	}
	return out, nil
}

// EnvCatalog describes the environments served, without a session and
// without starting any (Snapshots is left false): the OpenEnv face
// (server/openenv) serves each one, and its /schema and /metadata answer
// before any token is presented.
func (p *Plugin) EnvCatalog() []msg.EnvInfo {
	out := make([]msg.EnvInfo, 0, len(p.names))
	for _, n := range p.names {
		f := p.catalog[n]
		out = append(out, msg.EnvInfo{EnvName: n, Description: f.spec.Description,
			ActionSpace: f.spec.ActionSpace, ObservationSpace: f.spec.ObservationSpace})
	}
	return out
}

// snapshots reports whether the environment's episodes survive snapshots.
func (f *factory) snapshots() bool {
	inst, err := f.new("")
	if err != nil {
		return false
	}
	defer inst.close()
	return inst.stateful() != nil
}

// EnvSpaces answers env/spaces/req.
func (p *Plugin) EnvSpaces(ctx context.Context, s wire.Scope, req *msg.EnvSpacesReq) (*msg.EnvSpacesResp, error) {
	// EnvSpacesReq.Validate (schemas/env.json) has refused empty names and,
	// but for a Go caller that bypassed it, a request with neither selector.
	var name string
	switch {
	case req.EnvName != nil:
		name = *req.EnvName
	case req.EpisodeID != nil:
		ep, err := p.lookup(s.SessionID(), *req.EpisodeID)
		if err != nil {
			return nil, err
		}
		name = ep.envName
	default:
		return nil, &wire.FieldError{Field: "env_name", Reason: "env_name or episode_id is required"}
	}
	f, err := p.factory(name)
	if err != nil {
		return nil, err
	}
	return &msg.EnvSpacesResp{EnvName: name, ActionSpace: f.spec.ActionSpace, ObservationSpace: f.spec.ObservationSpace}, nil
}

// EnvReset answers env/reset/req: a new episode, or a restart of an open one.
func (p *Plugin) EnvReset(ctx context.Context, s wire.Scope, req *msg.EnvResetReq) (*msg.EnvResetResp, error) {
	f, err := p.factory(req.EnvName)
	if err != nil {
		return nil, err
	}
	var seed *int64
	if req.Seed != nil {
		v := int64(*req.Seed)
		seed = &v
	}
	var opts json.RawMessage
	if req.Options != nil {
		opts = *req.Options
	}
	if req.EpisodeID != nil && *req.EpisodeID != "" {
		ep, err := p.lookup(s.SessionID(), *req.EpisodeID)
		if err != nil {
			return nil, err
		}
		if ep.envName != req.EnvName {
			return nil, wire.Reason("wrong_environment", fmt.Errorf("episode %q runs %q, not %q", ep.id, ep.envName, req.EnvName))
		}
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if err := ep.alive(); err != nil {
			return nil, err
		}
		o, err := p.resetLocked(ctx, s.SessionID(), ep, seed, opts)
		if err != nil {
			return nil, err
		}
		return &msg.EnvResetResp{EpisodeID: ep.id, EnvName: ep.envName, Observation: o.Observation, Info: infoOf(o.Info)}, nil
	}

	se, err := p.sessions.GetOrCreate(s.SessionID())
	if err != nil {
		return nil, err
	}
	se.mu.Lock()
	if se.episodes == nil {
		se.mu.Unlock()
		return nil, errors.New("the session's episodes were closed")
	}
	if len(se.episodes) >= p.MaxEpisodes {
		se.mu.Unlock()
		return nil, fmt.Errorf("session has %d open episodes, the limit: %w", p.MaxEpisodes, ErrEpisodeCap)
	}
	inst, err := f.new(s.SessionID())
	if err != nil {
		se.mu.Unlock()
		return nil, fmt.Errorf("starting %q: %w", req.EnvName, err)
	}
	ep := &episode{id: newEpisodeID(), envName: req.EnvName, f: f, inst: inst}
	ep.mu.Lock() // held until the first reset is done: nobody steps it earlier
	se.episodes[ep.id] = ep
	se.mu.Unlock()
	o, err := p.resetLocked(ctx, s.SessionID(), ep, seed, opts)
	ep.mu.Unlock()
	if err != nil {
		se.mu.Lock()
		delete(se.episodes, ep.id)
		se.mu.Unlock()
		if ep.dead == nil {
			_ = inst.close()
		}
		return nil, err
	}
	return &msg.EnvResetResp{EpisodeID: ep.id, EnvName: ep.envName, Observation: o.Observation, Info: infoOf(o.Info)}, nil
}

// resetLocked resets ep; the caller holds ep.mu.
func (p *Plugin) resetLocked(ctx context.Context, sessionID string, ep *episode, seed *int64, opts json.RawMessage) (Obs, error) {
	if p.host != nil {
		// A task episode's files live in the session's directory, under its
		// quota and with its lifetime; a read-only one (a restricted
		// subagent's, its parent's) cannot hold them, so work_root does.
		if d, err := p.host.SessionDir(sessionID); err == nil && !d.ReadOnly {
			ctx = context.WithValue(ctx, taskWorkKey{}, filepath.Join(d.Path, sessionTasks))
		}
	}
	var o Obs
	err := p.run(ctx, sessionID, ep, func(ctx context.Context) error {
		var err error
		o, err = ep.inst.reset(ctx, seed, opts)
		return err
	})
	if err != nil {
		return Obs{}, fmt.Errorf("reset of %q: %w", ep.envName, err)
	}
	if len(o.Observation) == 0 {
		o.Observation = json.RawMessage("null")
	}
	ep.status, ep.step, ep.total, ep.obs = statusRunning, 0, 0, o.Observation
	return o, nil
}

// stepLocked steps ep; the caller holds ep.mu and has checked it is running.
func (p *Plugin) stepLocked(ctx context.Context, sessionID string, ep *episode, action json.RawMessage) (Step, error) {
	var st Step
	err := p.run(ctx, sessionID, ep, func(ctx context.Context) error {
		var err error
		st, err = ep.inst.step(ctx, action)
		return err
	})
	if err != nil {
		var ended errEnded
		if errors.As(err, &ended) {
			// The process is gone (docs/env.md, Writing an environment
			// in any language): the episode ends and its next reset
			// starts a fresh one.
			ep.status = statusTruncated
		}
		return Step{}, err
	}
	if len(st.Observation) == 0 {
		st.Observation = json.RawMessage("null")
	}
	ep.step++
	ep.total += st.Reward
	ep.obs = st.Observation
	switch {
	case st.Terminated:
		ep.status = statusTerminated
	case st.Truncated:
		ep.status = statusTruncated
	}
	return st, nil
}

func (ep *episode) checkStep() error {
	if err := ep.alive(); err != nil {
		return err
	}
	if ep.status != statusRunning {
		return fmt.Errorf("episode %q is %s: %w", ep.id, ep.status, ErrFinished)
	}
	return nil
}

// EnvStep answers env/step/req.
func (p *Plugin) EnvStep(ctx context.Context, s wire.Scope, req *msg.EnvStepReq) (*msg.EnvStepResp, error) {
	ep, err := p.lookup(s.SessionID(), req.EpisodeID)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.checkStep(); err != nil {
		return nil, err
	}
	st, err := p.stepLocked(ctx, s.SessionID(), ep, req.Action)
	if err != nil {
		return nil, err
	}
	return &msg.EnvStepResp{EpisodeID: ep.id, Observation: st.Observation, Reward: st.Reward,
		Terminated: st.Terminated, Truncated: st.Truncated, Info: infoOf(st.Info), Step: ep.step}, nil
}

// EnvObserve answers env/observe/req.
func (p *Plugin) EnvObserve(ctx context.Context, s wire.Scope, req *msg.EnvObserveReq) (*msg.EnvObserveResp, error) {
	ep, err := p.lookup(s.SessionID(), req.EpisodeID)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.alive(); err != nil {
		return nil, err
	}
	return &msg.EnvObserveResp{EpisodeID: ep.id, EnvName: ep.envName, Observation: ep.obs,
		Status: msg.EnvObserveRespStatus(ep.status), Step: ep.step, TotalReward: ep.total}, nil
}

// EnvRender answers env/render/req.
func (p *Plugin) EnvRender(ctx context.Context, s wire.Scope, req *msg.EnvRenderReq) (*msg.EnvRenderResp, error) {
	ep, err := p.lookup(s.SessionID(), req.EpisodeID)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.alive(); err != nil {
		return nil, err
	}
	text, err := ep.inst.render()
	if err != nil {
		return nil, fmt.Errorf("render of %q: %w", ep.envName, err)
	}
	return &msg.EnvRenderResp{EpisodeID: ep.id, Text: text}, nil
}

// EnvClose answers env/close/req.
func (p *Plugin) EnvClose(ctx context.Context, s wire.Scope, req *msg.EnvCloseReq) (*msg.EnvCloseResp, error) {
	ep, err := p.lookup(s.SessionID(), req.EpisodeID)
	if err != nil {
		return nil, err
	}
	if se := p.session(s.SessionID()); se != nil {
		se.mu.Lock()
		se.bury(ep.id, "closed by env/close")
		se.mu.Unlock()
	}
	p.closeEpisode(ep, errors.New("closed by env/close"))
	return &msg.EnvCloseResp{EpisodeID: ep.id, Closed: true}, nil
}

// emptyInfo is the info of a reset or step whose environment gave none
// (the schema requires one, as Gymnasium always returns a dict).
var emptyInfo = json.RawMessage("{}")

func infoOf(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return emptyInfo[:len(emptyInfo):len(emptyInfo)]
	}
	return b
}

func infoPtr(b json.RawMessage) *json.RawMessage {
	i := infoOf(b)
	return &i
}

func raw(b json.RawMessage) *json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return &b
}

var (
	_ msg.EnvHandler      = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
	_ persist.Snapshotter = (*Plugin)(nil)
)
