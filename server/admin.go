package server

// The kernel's side of the admin API (docs/operating.md, Admin API;
// server/httpapi/admin.go serves it on the operator listener). These are
// the entry points an operator acts through: list and inspect sessions,
// terminate one, snapshot one, open a session for a tenant, undrain, and
// audit each action with the operator as its actor. Draining is
// [Host.Drain] (drain.go) followed by [Host.EndSessions]; reloading the
// tenants is [Host.ReloadTenants] (tenant.go), as SIGHUP does. Snapshots
// go through takeSnapshot and storedSnapshots, the persistence code's own
// entry points, so nothing here depends on how snapshots are kept.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// terminatedLinger is how long a terminated session's connection (a
// WebSocket) stays open, answering each request errTerminated, before it
// closes: the client learns why its session is gone from its next request
// rather than from a connection that vanished. It matches the WebSocket
// re-attach grace, the time a client is expected to take to notice.
const terminatedLinger = 30 * time.Second

// ConnectionSink is a [Sink] that may hold a client's connection (a
// WebSocket) after its session ended. When the operator terminated the
// session, the kernel closes such a sink only after terminatedLinger, and
// answers the requests that arrive meanwhile errTerminated; other sinks
// close at once (HTTP: the session id is then unknown, 404).
type ConnectionSink interface {
	Sink
	HoldsConnection() bool
}

// errTerminated answers every request of a session the operator
// terminated: in flight when it happened, or sent afterwards on a
// connection that lingers. Not retryable: the session is gone.
func errTerminated() *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: "the operator terminated this session",
		Detail: map[string]any{"reason": "terminated"}}
}

// ErrNoSuchSession is the admin API's answer for a handle no session has.
var ErrNoSuchSession = errors.New("no session has this handle")

// ErrNoSuchTenant refuses to open a session for a tenant the host does not
// have.
var ErrNoSuchTenant = errors.New("no tenant has this name")

// OperatorActor is the actor of admin actions and of the requests of
// sessions the operator opened, in audit lines.
const OperatorActor = "operator"

// SnapshotNote names one snapshot of a session.
type SnapshotNote struct {
	ID     string
	Target string // file or sql
	Kind   string // request, drain or auto
	At     time.Time
	Bytes  int
}

// noteSnapshot records that snapshot id of s was written.
func (s *Session) noteSnapshot(id, target, kind string, bytes int) {
	s.newest.Store(&SnapshotNote{ID: id, Target: target, Kind: kind, At: time.Now(), Bytes: bytes})
}

// SessionReport is what the admin API tells of one session: names,
// owner, state and use, never its transport id (a bearer secret).
type SessionReport struct {
	Handle string
	// Tenant is empty while a session opened by an agent waits for its
	// handshake (its secret names the tenant).
	Tenant  string
	AgentID string
	// State is pending (waiting for its handshake), live, draining (after
	// shutdown) or closed.
	State string
	// Transport is http, websocket, stdio, inprocess, subagent, other, or
	// none for a host-made session no client attached to yet.
	Transport      string
	Created        time.Time
	LastActive     time.Time
	InFlight       int
	ParentHandle   string
	OperatorOpened bool
	Forked         bool
	// Capabilities are the capabilities enabled by the handshake.
	Capabilities []string
	// Budgets are the session's budgets and their use, for a handshaken
	// session.
	Budgets *msg.SessionBudgets
	// Newest is the newest snapshot this host wrote of the session.
	Newest *SnapshotNote
}

// report describes s; with budgets, its budgets' use (which measures its
// directory).
func (h *Host) report(s *Session, budgets bool) SessionReport {
	r := SessionReport{Handle: s.handle, Tenant: s.Tenant(), Created: s.created, LastActive: time.Unix(0, s.lastActive.Load()),
		OperatorOpened: s.operatorOpened, Forked: s.forked, Newest: s.newest.Load()}
	switch sessionState(s.state.Load()) {
	case stateNew:
		r.State = "pending"
	case stateLive:
		r.State = "live"
	case stateDraining:
		r.State = "draining"
	default:
		r.State = "closed"
	}
	if s.parent != nil {
		r.ParentHandle = s.parent.handle
	}
	s.mu.Lock()
	r.AgentID, r.InFlight = s.agentID, s.pending
	sink := s.sink
	for _, c := range s.accepted {
		if c.Enabled {
			r.Capabilities = append(r.Capabilities, CanonicalCapability(c.Name))
		}
	}
	s.mu.Unlock()
	r.Transport = "none"
	if sink != nil || s.parent != nil {
		r.Transport = transportOf(s, sink)
	}
	if budgets && r.State != "pending" {
		r.Budgets = h.budgetUse(s)
	}
	return r
}

// AdminSessions lists the host's sessions for the admin API, oldest
// first, at most limit of them (limit ≤ 0: all), with their budgets.
// Sessions an agent opened that wait for their handshake are anyone's to
// open and are only counted (pending); host-made ones waiting for their
// agent (a subagent's, a fork, an operator's) are listed. total is how
// many would be listed without the limit.
func (h *Host) AdminSessions(limit int) (list []SessionReport, total, pending int) {
	all := h.sessionList()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].created.Equal(all[j].created) {
			return all[i].created.Before(all[j].created)
		}
		return all[i].handle < all[j].handle
	})
	for _, s := range all {
		if sessionState(s.state.Load()) == stateNew && !s.HostMade() {
			pending++
			continue
		}
		total++
		if limit > 0 && len(list) >= limit {
			continue
		}
		list = append(list, h.report(s, true))
	}
	return list, total, pending
}

// AdminSession describes the session with this public handle.
func (h *Host) AdminSession(handle string) (SessionReport, error) {
	s, ok := h.SessionByHandle(handle)
	if !ok {
		return SessionReport{}, ErrNoSuchSession
	}
	return h.report(s, true), nil
}

// SessionSnapshots lists the stored snapshots the session with this
// handle may restore or list as its own (its own and its lineage's),
// newest first, at most limit.
func (h *Host) SessionSnapshots(ctx context.Context, handle string, limit int) ([]SnapshotNote, error) {
	s, ok := h.SessionByHandle(handle)
	if !ok {
		return nil, ErrNoSuchSession
	}
	return h.snapshotsOf(ctx, s, limit)
}

// TerminateSession ends the session with this handle at the operator's
// word: requests in flight are answered runtime_error with detail.reason
// terminated, its processes and subagents end with it (as at any session
// end: every plugin drops its state), its transport id is unknown from
// now on, and a client holding a WebSocket gets the same answer to its
// next request for terminatedLinger before the connection closes. It
// returns the session as it was just before.
func (h *Host) TerminateSession(handle string) (SessionReport, error) {
	s, ok := h.SessionByHandle(handle)
	if !ok || s.closing() {
		return SessionReport{}, ErrNoSuchSession
	}
	r := h.report(s, false)
	s.terminated.Store(true)
	h.tombstones.add(s.id)
	s.Close()
	h.log.Info("session terminated by the operator", "session", s.handle, "tenant", r.Tenant, "agent_id", r.AgentID)
	return r, nil
}

// tombstoneTTL and maxTombstones bound how long, and how many, terminated
// sessions' ids are remembered: long enough for a client to come back and
// learn its session was terminated rather than lost.
const (
	tombstoneTTL  = 10 * time.Minute
	maxTombstones = 10000
)

// tombstones are the transport ids of sessions the operator terminated,
// oldest first, each until tombstoneTTL.
type tombstones struct {
	mu    sync.Mutex
	at    map[string]time.Time
	order []string
}

func (t *tombstones) add(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at == nil {
		t.at = map[string]time.Time{}
	}
	t.expireLocked(time.Now())
	for len(t.order) >= maxTombstones {
		delete(t.at, t.order[0])
		t.order = t.order[1:]
	}
	t.at[id] = time.Now()
	t.order = append(t.order, id)
}

func (t *tombstones) expireLocked(now time.Time) {
	n := 0
	for n < len(t.order) && now.Sub(t.at[t.order[n]]) > tombstoneTTL {
		delete(t.at, t.order[n])
		n++
	}
	t.order = t.order[n:]
}

// WasTerminated reports whether the session with transport id id was
// terminated by the operator in the last tombstoneTTL: transports answer
// its id with a 404 that says so (a client must not move it).
func (h *Host) WasTerminated(id string) bool {
	h.tombstones.mu.Lock()
	defer h.tombstones.mu.Unlock()
	at, ok := h.tombstones.at[id]
	return ok && time.Since(at) <= tombstoneTTL
}

// SnapshotTaken says what an operator's snapshot wrote.
type SnapshotTaken struct {
	SnapshotNote
	Files *msg.SnapshotFiles
}

// SnapshotForOperator snapshots the session with this handle to target
// ("sql" or "file"; "" takes sql when the host has a store, else file),
// as session/snapshot would at the session's request; any session may
// restore the id it returns (session/restore/req snapshot_id).
func (h *Host) SnapshotForOperator(ctx context.Context, handle, target string) (SnapshotTaken, error) {
	s, ok := h.SessionByHandle(handle)
	if !ok || s.closing() {
		return SnapshotTaken{}, ErrNoSuchSession
	}
	if target == "" {
		target = "file"
		if h.store != nil {
			target = "sql"
		}
	}
	if !s.Live() {
		return SnapshotTaken{}, fmt.Errorf("session %s has not handshaken: nothing to snapshot: %w", handle, wire.ErrInvalid)
	}
	t, err := h.persist.SessionSnapshot(ctx, s.view(), &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
	if err != nil {
		return SnapshotTaken{}, err
	}
	return SnapshotTaken{SnapshotNote: SnapshotNote{ID: t.SnapshotID, Target: target, Kind: kindRequest, At: time.Now(), Bytes: t.Bytes}, Files: t.Files}, nil
}

// OperatorSession is a session the operator opened for a tenant.
type OperatorSession struct {
	// ID is the session's transport id (a bearer secret), Token the one
	// secret its handshake accepts: the host made it for this session
	// alone, so no tenant secret is needed or sent.
	ID, Token string
	Handle    string
	Tenant    string
	// Expires is when the session ends unless an agent attached to it
	// and handshook (server.limits.handshake_timeout).
	Expires time.Time
}

// maxOperatorCaps bounds the capability list of an operator's session.
const maxOperatorCaps = 64

// OpenForOperator opens a session for the tenant with this name, as the
// operator: it waits for an agent to attach by its id on any transport
// (as a subagent's session does) and to handshake with the returned token
// within server.limits.handshake_timeout. The tenant's capabilities,
// budgets and totals apply; caps, when given, narrow the capabilities
// further. session/info marks it operator_opened, and audit lines of its
// requests carry the operator as their actor.
func (h *Host) OpenForOperator(tenantName string, caps []string) (OperatorSession, error) {
	var t *tenant
	h.tenants.mu.RLock()
	for _, x := range h.tenants.list {
		if x.name == tenantName && !x.removed.Load() {
			t = x
		}
	}
	h.tenants.mu.RUnlock()
	if t == nil {
		return OperatorSession{}, fmt.Errorf("%w: %q", ErrNoSuchTenant, wire.Clip(tenantName))
	}
	if len(caps) > maxOperatorCaps {
		return OperatorSession{}, fmt.Errorf("%d capabilities: at most %d: %w", len(caps), maxOperatorCaps, wire.ErrInvalid)
	}
	var allowed map[string]bool
	if caps != nil {
		allowed = map[string]bool{"session": true}
		for _, c := range caps {
			if len(c) == 0 || len(c) > 64 {
				return OperatorSession{}, fmt.Errorf("capability %q: want 1 to 64 bytes: %w", wire.Clip(c), wire.ErrInvalid)
			}
			allowed[CanonicalCapability(c)] = true
		}
	}
	token := GenerateToken()
	sum := sha256.Sum256([]byte(token))
	s, err := h.newSession(nil, nil, &sum, nil, func(x *Session) {
		x.operatorOpened, x.tenant, x.childCaps = true, t, allowed
		x.budget = newBudget(t.limits())
	})
	if err != nil {
		return OperatorSession{}, err
	}
	h.log.Info("session opened by the operator", "session", s.handle, "tenant", t.name)
	return OperatorSession{ID: s.id, Token: token, Handle: s.handle, Tenant: t.name,
		Expires: s.created.Add(time.Duration(h.cfg.Server.Limits.HandshakeTimeout))}, nil
}

// actor is who acts through the session in audit lines: the operator for
// a session the operator opened and its subagents, else "" (its agent).
func (s *Session) actor() string {
	for x := s; x != nil; x = x.parent {
		if x.operatorOpened {
			return OperatorActor
		}
	}
	return ""
}

// OperatorOpened reports whether the operator opened the session.
func (s *Session) OperatorOpened() bool { return s.operatorOpened }

// Terminated reports whether the operator terminated the session.
func (s *Session) Terminated() bool { return s.terminated.Load() }

// EndSessions ends the sessions with these handles, as the host's close
// would: after a drain that saved them (their snapshots are in the
// store), so their clients move to another host and restore them. It
// returns how many it ended.
func (h *Host) EndSessions(handles []string) int {
	n := 0
	for _, hd := range handles {
		if s, ok := h.SessionByHandle(hd); ok && !s.closing() {
			s.Close()
			n++
		}
	}
	return n
}

// Undrain ends a drain (docs/operating.md, Admin API): the host accepts
// new sessions again, /readyz answers 200 (its store permitting), and
// sessions a snapshotting drain sealed and left open admit requests
// again. It reports whether the host was draining.
func (h *Host) Undrain() bool {
	was := h.draining.Swap(false)
	h.sealed.Store(false)
	h.drainNotes.Clear()
	h.drainDeadline.Store(0)
	if was {
		h.log.Info("undrained: new sessions accepted again")
	}
	return was
}

// AdminAction is one admin API action, for its audit line.
type AdminAction struct {
	// Action names it: sessions.list, session.inspect, session.terminate,
	// session.snapshot, session.open, drain, undrain, reload.
	Action string
	// Session is the public handle acted on, and Tenant its tenant.
	Session, Tenant string
	// Target is what else the action names (a snapshot id).
	Target string
	// Code is "" on success, else what the API answered (not_found, …).
	Code     string
	Started  time.Time
	Duration time.Duration
}

// AuditAdmin writes the audit line of an admin action, with the operator
// as its actor and type admin/<action>. It goes to the audit log only:
// in-process audit subscribers follow agents' requests.
func (h *Host) AuditAdmin(a AdminAction) {
	h.auditor.Record(AuditRecord{TS: a.Started, SessionID: a.Session, Tenant: a.Tenant, Type: "admin/" + a.Action,
		Success: a.Code == "", ErrorCode: a.Code, DurationMS: float64(a.Duration.Microseconds()) / 1000,
		Target: a.Target, Actor: OperatorActor})
}
