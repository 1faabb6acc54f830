package server

// The kernel's side of the admin API (docs/operating.md, Admin API;
// server/httpapi/admin.go serves it on the operator listener). The
// entry points an operator acts through — list and inspect sessions,
// terminate one, snapshot one, open a session for a tenant, end sessions
// after a drain, undrain, and audit each action with the operator as its
// actor — are operator.Host (server/operator), which operatorView
// implements here and [Host.Operator] hands out; this is the only file of
// the kernel that names server/operator. Draining is [Host.Drain]
// (drain.go) followed by EndSessions; reloading the tenants is
// [Host.ReloadTenants] (tenant.go), as SIGHUP does. Snapshots go through
// the persistence interface (persistence.go), so nothing here depends on
// how snapshots are kept.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/operator"
	"github.com/aephost/aep/wire"
)

// Operator returns the host as its operator acts on it: the admin API's
// entry points (server/operator).
func (h *Host) Operator() operator.Host { return operatorView{h} }

// operatorView is the host as server/operator sees it.
type operatorView struct{ h *Host }

var _ operator.Host = operatorView{}

// snapshotNote names a snapshot of a session (Session.newest,
// persistence.go's snapshotsOf).
type snapshotNote = operator.SnapshotNote

// connectionSink is a sink that holds a client's connection, which the
// kernel closes terminatedLinger after the operator terminated its
// session (session.go, close).
type connectionSink = operator.ConnectionSink

// terminatedLinger is how long a terminated session's connection (a
// WebSocket) stays open, answering each request errTerminated, before it
// closes: the client learns why its session is gone from its next request
// rather than from a connection that vanished. It matches the WebSocket
// re-attach grace, the time a client is expected to take to notice.
const terminatedLinger = 30 * time.Second

// errTerminated answers every request of a session the operator
// terminated: in flight when it happened, or sent afterwards on a
// connection that lingers. Not retryable: the session is gone.
func errTerminated() *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: "the operator terminated this session",
		Detail: map[string]any{"reason": "terminated"}}
}

// noteSnapshot records that snapshot id of s was written.
func (s *Session) noteSnapshot(id, target, kind string, bytes int) {
	s.newest.Store(&snapshotNote{ID: id, Target: target, Kind: kind, At: time.Now(), Bytes: bytes})
}

// report describes s; with budgets, its budgets' use (which measures its
// directory).
func (h *Host) report(s *Session, budgets bool) operator.SessionReport {
	r := operator.SessionReport{Handle: s.handle, Tenant: s.Tenant(), Created: s.created, LastActive: time.Unix(0, s.lastActive.Load()),
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

// Sessions implements operator.Host.
func (o operatorView) Sessions(limit int) (list []operator.SessionReport, total, pending int) {
	h := o.h
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

// Session implements operator.Host.
func (o operatorView) Session(handle string) (operator.SessionReport, error) {
	s, ok := o.h.SessionByHandle(handle)
	if !ok {
		return operator.SessionReport{}, operator.ErrNoSuchSession
	}
	return o.h.report(s, true), nil
}

// Snapshots implements operator.Host.
func (o operatorView) Snapshots(ctx context.Context, handle string, limit int) ([]operator.SnapshotNote, error) {
	s, ok := o.h.SessionByHandle(handle)
	if !ok {
		return nil, operator.ErrNoSuchSession
	}
	return o.h.snapshotsOf(ctx, s, limit)
}

// Terminate implements operator.Host: a connection a client holds
// lingers terminatedLinger (session.go, close).
func (o operatorView) Terminate(handle string) (operator.SessionReport, error) {
	h := o.h
	s, ok := h.SessionByHandle(handle)
	if !ok || s.closing() {
		return operator.SessionReport{}, operator.ErrNoSuchSession
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

// WasTerminated implements operator.Host: a terminated session's id is
// remembered tombstoneTTL.
func (o operatorView) WasTerminated(id string) bool {
	t := &o.h.tombstones
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[id]
	return ok && time.Since(at) <= tombstoneTTL
}

// Snapshot implements operator.Host.
func (o operatorView) Snapshot(ctx context.Context, handle, target string) (operator.SnapshotTaken, error) {
	h := o.h
	s, ok := h.SessionByHandle(handle)
	if !ok || s.closing() {
		return operator.SnapshotTaken{}, operator.ErrNoSuchSession
	}
	if target == "" {
		target = "file"
		if h.store != nil {
			target = "sql"
		}
	}
	if !s.Live() {
		return operator.SnapshotTaken{}, fmt.Errorf("session %s has not handshaken: nothing to snapshot: %w", handle, wire.ErrInvalid)
	}
	t, err := h.persist.SessionSnapshot(ctx, s.view(), &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
	if err != nil {
		return operator.SnapshotTaken{}, err
	}
	return operator.SnapshotTaken{SnapshotNote: snapshotNote{ID: t.SnapshotID, Target: target, Kind: kindRequest, At: time.Now(), Bytes: t.Bytes}, Files: t.Files}, nil
}

// maxOperatorCaps bounds the capability list of an operator's session.
const maxOperatorCaps = 64

// Open implements operator.Host.
func (o operatorView) Open(tenantName string, caps []string) (operator.OpenedSession, error) {
	h := o.h
	var t *tenant
	h.tenants.mu.RLock()
	for _, x := range h.tenants.list {
		if x.name == tenantName && !x.removed.Load() {
			t = x
		}
	}
	h.tenants.mu.RUnlock()
	if t == nil {
		return operator.OpenedSession{}, fmt.Errorf("%w: %q", operator.ErrNoSuchTenant, wire.Clip(tenantName))
	}
	if len(caps) > maxOperatorCaps {
		return operator.OpenedSession{}, fmt.Errorf("%d capabilities: at most %d: %w", len(caps), maxOperatorCaps, wire.ErrInvalid)
	}
	var allowed map[string]bool
	if caps != nil {
		allowed = map[string]bool{"session": true}
		for _, c := range caps {
			if len(c) == 0 || len(c) > 64 {
				return operator.OpenedSession{}, fmt.Errorf("capability %q: want 1 to 64 bytes: %w", wire.Clip(c), wire.ErrInvalid)
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
		return operator.OpenedSession{}, unavailable(err)
	}
	h.log.Info("session opened by the operator", "session", s.handle, "tenant", t.name)
	return operator.OpenedSession{ID: s.id, Token: token, Handle: s.handle, Tenant: t.name,
		Expires: s.created.Add(time.Duration(h.cfg.Server.Limits.HandshakeTimeout))}, nil
}

// unavailable marks the refusals of a session the host opens no more of
// now — draining, closed, at its total or the tenant's — as
// operator.ErrUnavailable, keeping their own message and identity.
func unavailable(err error) error {
	for _, e := range []error{ErrDraining, ErrClosed, ErrTooManySessions, errTenantSessions} {
		if errors.Is(err, e) {
			return unavailableError{err}
		}
	}
	return err
}

type unavailableError struct{ err error }

func (u unavailableError) Error() string        { return u.err.Error() }
func (u unavailableError) Unwrap() error        { return u.err }
func (u unavailableError) Is(target error) bool { return target == operator.ErrUnavailable }

// actor is who acts through the session in audit lines: the operator for
// a session the operator opened and its subagents, else "" (its agent).
func (s *Session) actor() string {
	for x := s; x != nil; x = x.parent {
		if x.operatorOpened {
			return operator.Actor
		}
	}
	return ""
}

// EndSessions implements operator.Host.
func (o operatorView) EndSessions(handles []string) int {
	n := 0
	for _, hd := range handles {
		if s, ok := o.h.SessionByHandle(hd); ok && !s.closing() {
			s.Close()
			n++
		}
	}
	return n
}

// Undrain implements operator.Host (docs/operating.md, Admin API).
func (o operatorView) Undrain() bool {
	h := o.h
	was := h.draining.Swap(false)
	h.sealed.Store(false)
	h.drainNotes.Clear()
	h.drainDeadline.Store(0)
	if was {
		h.log.Info("undrained: new sessions accepted again")
	}
	return was
}

// Audit implements operator.Host.
func (o operatorView) Audit(a operator.Action) {
	o.h.auditor.Record(AuditRecord{TS: a.Started, SessionID: a.Session, Tenant: a.Tenant, Type: "admin/" + a.Action,
		Success: a.Code == "", ErrorCode: a.Code, DurationMS: float64(a.Duration.Microseconds()) / 1000,
		Target: a.Target, Actor: operator.Actor})
}
