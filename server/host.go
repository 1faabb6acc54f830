package server

import (
	"sync/atomic"

	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// capabilityAliases maps the prior SDK's spellings to ours (docs/DECISIONS.md, Wire).
var capabilityAliases = map[string]string{"learning": "learn", "skill": "skills"}

// sessionCapability names the kernel's own session/ namespace. It is always
// on (docs/DECISIONS.md, Wire): every handshaken session, a subagent's
// included, may send session/* whatever it requested, so a handshake that
// requests it reports it enabled, and [Session.Enabled] says so for every
// session (docs/DECISIONS.md, Capability gating: session is always on).
const sessionCapability = "session"

// CanonicalCapability returns the capability name an agent's spelling means.
func CanonicalCapability(name string) string {
	if c, ok := capabilityAliases[name]; ok {
		return c
	}
	return name
}

// Option configures a Host.
type Option func(*hostOptions)

type hostOptions struct {
	registry *wire.Registry
	logger   *slog.Logger
	auditor  Auditor
	plugins  []PluginSpec
	dataDir  string
	store    *store.Store
	tracer   trace.Tracer // nil: no spans (server/observe.go)
}

// WithRegistry replaces the type registry (tests add their own namespaces).
func WithRegistry(r *wire.Registry) Option { return func(o *hostOptions) { o.registry = r } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(o *hostOptions) { o.logger = l } }

// WithAuditor sets the audit sink; the default records nothing.
func WithAuditor(a Auditor) Option { return func(o *hostOptions) { o.auditor = a } }

// WithPlugin adds a plugin instance after those of the config.
func WithPlugin(p PluginSpec) Option {
	return func(o *hostOptions) { o.plugins = append(o.plugins, p) }
}

// WithDataDir sets the data directory handed to plugins.
func WithDataDir(dir string) Option { return func(o *hostOptions) { o.dataDir = dir } }

// WithStore sets the shared store: the kernel keeps "sql" snapshots in it and
// plugins get it as [PluginEnv.Store]. The caller opens and closes it.
func WithStore(st *store.Store) Option { return func(o *hostOptions) { o.store = st } }

// Host is a running aep kernel.
type Host struct {
	cfg     Config
	reg     *wire.Registry
	log     *slog.Logger
	auditor Auditor
	claims  *Claims
	dataDir string
	store   *store.Store

	plugins []*plugin
	byName  map[string]*plugin
	routes  map[string]*route
	served  map[string]bool // capabilities some plugin serves

	// The optional interfaces of the loaded plugins, found once at start
	// (server/persist finds its own: Host.persist).
	observers       []pluginAs[SessionObserver]
	childObservers  []pluginAs[ChildObserver]
	budgetReporters []pluginAs[BudgetReporter]

	hooksMu    sync.Mutex
	stateHooks map[string][]func(sessionID string) // plugin name → SessionState drops
	token      [32]byte
	started    time.Time

	mu       sync.Mutex
	sessions map[string]*Session // by transport id
	handles  map[string]*Session // by public handle (handle.go)
	pending  pendingPool         // sessions waiting for their handshake (pending.go)
	counted  int                 // sessions counted against max_sessions
	closed   bool
	stop     chan struct{}
	janitor  sync.WaitGroup

	// sessionTokens holds the handshake token of each live session whose
	// token is not the host's: a child's own, or a tenant's secret (its own
	// secret, unlike the host's), so snapshots can be checked for it and
	// trajectories, audit lines and spans scrubbed of it (secrets.go).
	sessionTokens sync.Map // session id → string

	proxies  TrustedProxies     // server.trusted_proxies (throttle.go)
	throttle *handshakeThrottle // failed handshakes per address (throttle.go)

	// declared holds the secrets plugins declared (secrets.go).
	declared secretStore
	// inspect guards the inspector's taps and watches; watch is the
	// latter, nil while no page shows the host (inspect.go).
	inspect inspectHooks
	watch   atomic.Pointer[watchList]
	// dirs are the session directories with running processes, watched
	// for their disk budget; persistentTotal the bytes of persistent
	// memory the store holds (budget.go).
	dirs            dirWatches
	persistentTotal atomic.Int64
	// tenants are the host's named secrets (tenant.go).
	tenants tenants
	// tombstones remember the sessions the operator terminated (admin.go).
	tombstones tombstones

	subsMu sync.RWMutex
	subs   map[int]func(AuditRecord)
	subSeq int

	// The operator's surface (server/observe.go, server/drain.go).
	met      *metrics
	tracer   trace.Tracer
	draining atomic.Bool
	// sealed is set by a drain that snapshots its sessions: from then on
	// no session admits a request (they are answered shutting_down), so
	// nothing is answered that the snapshots do not hold (drain.go).
	sealed atomic.Bool
	// drainNotes holds, by top-level *Session, what a snapshotting drain
	// did with it (drain.go, drainNote); drainDeadline is when that drain
	// ends (unix nanos, 0: no deadline).
	drainNotes    sync.Map
	drainDeadline atomic.Int64

	// keys holds each plugin's instance key by name (datadir.go).
	keys map[string]string

	// persist keeps what outlives sessions' connections: snapshots,
	// forks, trajectories, automatic snapshots and the session
	// directories (server/persistence.go).
	persist persistence
	// crashWindow is set when the kernel records sessions' unsaved
	// changes (server.snapshots.crash_window with a store).
	crashWindow bool
}

// New provisions the plugins of cfg and returns a running host. On error
// every plugin started so far has been cleaned up.
func New(ctx context.Context, cfg Config, opts ...Option) (*Host, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	o := hostOptions{registry: msg.Registry(), logger: slog.New(slog.DiscardHandler), auditor: nopAuditor{}}
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Server.AuthToken == "" && len(cfg.Server.Tenants) == 0 {
		return nil, errors.New("server.auth_token is empty and no server.tenants are configured")
	}
	h := &Host{
		cfg: cfg, reg: o.registry, log: o.logger, auditor: o.auditor, claims: NewClaims(),
		dataDir: o.dataDir, store: o.store, token: sha256.Sum256([]byte(cfg.Server.AuthToken)), started: time.Now(),
		sessions: map[string]*Session{}, handles: map[string]*Session{}, stop: make(chan struct{}), subs: map[int]func(AuditRecord){},
	}
	h.tracer = o.tracer
	if _, err := h.configureTenants(cfg); err != nil {
		return nil, err
	}
	// Whatever field of a request a secret arrives in, no log line holds it.
	h.log = slog.New(&scrubHandler{inner: o.logger.Handler(), h: h})
	h.persist = h.newPersistence()
	h.crashWindow = h.persist.CrashWindow() > 0
	h.logIsolation()
	h.pending.max = cfg.Server.Limits.MaxPendingSessions
	h.throttle = newHandshakeThrottle(cfg.Server.Limits.FailedHandshakeBurst, time.Duration(cfg.Server.Limits.FailedHandshakeInterval))
	proxies, err := ParseTrustedProxies(cfg.Server.TrustedProxies)
	if err != nil {
		return nil, err
	}
	h.proxies = proxies
	specs, _, err := instantiate(cfg)
	if err != nil {
		return nil, err
	}
	// The kernel's own plugin serves the session namespace; it runs first so
	// that config plugins cannot shadow it by accident.
	specs = append([]PluginSpec{{Name: "session", Type: "session", Impl: &sessionPlugin{h: h}}}, specs...)
	specs = append(specs, o.plugins...)
	h.reg = withModuleNamespaces(h.reg, specs)
	h.keys = instanceKeys(specs)
	h.movePluginDirs(specs)
	h.plugins, err = start(ctx, h.reg, specs, h.pluginEnv, h.claims)
	if err != nil {
		return nil, err
	}
	h.byName = make(map[string]*plugin, len(h.plugins))
	for _, p := range h.plugins {
		h.byName[p.Name] = p
	}
	h.observers = implementing[SessionObserver](h.plugins)
	h.childObservers = implementing[ChildObserver](h.plugins)
	h.budgetReporters = implementing[BudgetReporter](h.plugins)
	h.routes = buildRoutes(h.reg, h.plugins)
	h.met = newMetrics(h, cfg.Operator.MaxToolLabels)
	// A capability is served when some plugin's handlers answer its
	// namespace; a config `type` alone never makes it so.
	h.served = map[string]bool{"session": true} // the kernel's own
	for _, r := range h.routes {
		if len(r.plugins) > 0 && r.entry.Capability != "" {
			h.served[r.entry.Capability] = true
		}
	}
	h.startPersistence()
	h.janitor.Add(1)
	go h.expire()
	return h, nil
}

// withModuleNamespaces adds to reg the namespaces that the plugins'
// modules bring (ModuleInfo.Namespaces) and reg lacks.
func withModuleNamespaces(reg *wire.Registry, specs []PluginSpec) *wire.Registry {
	for _, sp := range specs {
		if sp.Impl == nil {
			continue
		}
		ns := sp.Impl.Module().Namespaces
		if ns == nil {
			continue
		}
		fresh := true
		for _, n := range ns.Namespaces() {
			if reg.Namespace(n.Name) != nil {
				fresh = false
			}
		}
		if fresh {
			reg = reg.Union(ns)
		}
	}
	return reg
}

func (h *Host) pluginEnv(p PluginSpec) PluginEnv {
	dir := ""
	if h.dataDir != "" {
		dir = filepath.Join(h.dataDir, h.keys[p.Name])
	}
	return PluginEnv{Name: p.Name, Type: p.Type, DataDir: dir, Logger: h.log.With("plugin", p.Name), Claims: h.claims, Host: h, Store: h.store}
}

// Config returns the host's effective configuration.
func (h *Host) Config() Config { return h.cfg }

// Registry returns the host's type registry.
func (h *Host) Registry() *wire.Registry { return h.reg }

// Logger returns the host's logger.
func (h *Host) Logger() *slog.Logger { return h.log }

// DataDir returns the host's data directory ("" when none).
func (h *Host) DataDir() string { return h.dataDir }

// Served returns the capabilities that some plugin serves, sorted.
func (h *Host) Served() []string {
	out := make([]string, 0, len(h.served))
	for c := range h.served {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Plugins returns the names of the loaded plugins in start order.
func (h *Host) Plugins() []string {
	out := make([]string, len(h.plugins))
	for i, p := range h.plugins {
		out[i] = p.Name
	}
	return out
}

// PluginImpl returns the implementation of a loaded plugin by name.
func (h *Host) PluginImpl(name string) (Plugin, bool) {
	p, ok := h.byName[name]
	if !ok {
		return nil, false
	}
	return p.Impl, true
}

// ErrTooManySessions is returned when the host is at server.limits.max_sessions.
var ErrTooManySessions = errors.New("too many sessions")

// ErrClosed is returned by a host that has been closed.
var ErrClosed = errors.New("host closed")

// NewSession creates a session that waits for its handshake. The transport
// attaches a Sink to receive what the host sends. The session joins the
// pending pool, evicting its oldest member when the pool is full, so it is
// refused only by a closed host (pending.go).
func (h *Host) NewSession(sink Sink, opts ...SessionOption) (*Session, error) {
	return h.newSession(sink, nil, nil, nil, opts...)
}

// newSession registers a new session. A child session's info and token are
// set before it is registered, so no one who finds it sees it half made.
func (h *Host) newSession(sink Sink, parent *Session, token *[32]byte, ci *childInfo, opts ...SessionOption) (*Session, error) {
	var evicted *Session
	defer func() {
		if evicted != nil {
			h.evict(evicted) // after h.mu is released: Close takes it
		}
	}()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.draining.Load() && parent == nil {
		return nil, ErrDraining
	}
	s := newSession(h, sink, parent, token)
	for _, o := range opts {
		o(s)
	}
	if parent != nil || s.forked || s.operatorOpened {
		// A child or a fork is made by a live agent, and an operator's
		// session by the operator: it counts from the start.
		if err := h.countLocked(s); err != nil {
			return nil, err
		}
	} else {
		evicted = h.addPendingLocked(s)
	}
	if ci != nil {
		ci.created = s.created
		s.child = ci
		s.childCaps = make(map[string]bool, len(ci.caps))
		for _, c := range ci.caps {
			s.childCaps[c] = true
		}
	}
	h.sessions[s.id] = s
	h.handles[s.handle] = s
	h.sessionsChanged()
	return s, nil
}

// Session returns a session by its transport id. Only transports look
// sessions up this way; plugins use [Host.SessionByHandle].
func (h *Host) Session(id string) (*Session, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	return s, ok
}

// LiveSessions returns the number of handshaken sessions.
func (h *Host) LiveSessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sessions {
		if s.Live() {
			n++
		}
	}
	return n
}

func (h *Host) forget(s *Session) {
	h.mu.Lock()
	delete(h.sessions, s.id)
	delete(h.handles, s.handle)
	h.releaseLocked(s)
	h.mu.Unlock()
	if r := s.rec.Load(); r != nil {
		r.Close() // before the session's secrets are forgotten: they redact it
	}
	h.inspectEnded(s) // likewise: an inspector page cuts them from what it shows
	h.sessionTokens.Delete(s.id)
	h.sessionsChanged()
	h.persist.SessionClosing(s.view())
	h.dropState("", s.handle)
	h.forgetSecrets(s.handle)
	for _, o := range h.observers {
		o.v.SessionClosed(s.handle)
	}
	// Its directory goes now that its processes are gone; on a host that
	// is closing or draining, its automatic snapshot stays: it is what the
	// session may move with (server/persist/autosnap.go).
	h.mu.Lock()
	going := h.closed || h.draining.Load()
	h.mu.Unlock()
	h.persist.SessionEnded(s.view(), going)
}

// expire closes sessions that stayed idle or never handshook (docs/DECISIONS.md, Dispatch defaults).
func (h *Host) expire() {
	defer h.janitor.Done()
	lim := h.cfg.Server.Limits
	tick := time.Duration(min(lim.IdleTimeout, lim.HandshakeTimeout)) / 4
	tick = max(tick, 5*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.mu.Lock()
			var stale []*Session
			for _, s := range h.sessions {
				if s.expired(now, time.Duration(lim.HandshakeTimeout), time.Duration(lim.IdleTimeout)) {
					stale = append(stale, s)
				}
			}
			h.mu.Unlock()
			for _, s := range stale {
				h.log.Info("session expired", "session", s.handle)
				s.Close()
			}
		}
	}
}

// closeWaitWorkers bounds how long Close waits for session workers that
// are still finishing after their session was cancelled.
const closeWaitWorkers = 10 * time.Second

// Close ends every session and cleans up the plugins.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	sessions := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	close(h.stop)
	h.persist.Stop()
	h.janitor.Wait()
	for _, s := range sessions {
		s.Close()
	}
	// Workers record their audit line after the reply; wait for them, but
	// not forever for a handler that ignores cancellation.
	wctx, wcancel := context.WithTimeout(ctx, closeWaitWorkers)
	defer wcancel()
	for _, s := range sessions {
		if werr := s.waitWorkers(wctx); werr != nil {
			h.log.Warn("closing without waiting for a handler", "err", werr)
			break
		}
	}
	if werr := h.persist.Close(wctx); werr != nil {
		h.log.Warn("closing without writing every trajectory record", "err", werr)
	}
	err := cleanup(h.plugins)
	if c, ok := h.auditor.(interface{ Close(context.Context) error }); ok {
		err = errors.Join(err, c.Close(ctx))
	}
	return err
}

// tokenOK compares in constant time: both sides are hashed first, so neither
// the content nor the length of the secret leaks through timing (spec §5).
func tokenOK(want [32]byte, got string) bool {
	sum := sha256.Sum256([]byte(got))
	var diff byte
	for i := range want {
		diff |= want[i] ^ sum[i]
	}
	return diff == 0
}

// GenerateToken returns a random token for hosts started without one.
func GenerateToken() string { return rand.Text() }
