package server

import (
	"context"
	"fmt"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// sessionPlugin is the kernel's own plugin for the always-on session namespace.
type sessionPlugin struct{ h *Host }

var _ msg.SessionHandler = (*sessionPlugin)(nil)

// Module says the kernel's session plugin is no registered module: it is
// always loaded, first.
func (p *sessionPlugin) Module() ModuleInfo {
	return ModuleInfo{ID: "aep.session.kernel", Capability: "session"}
}

func (p *sessionPlugin) SessionInfo(ctx context.Context, sc wire.Scope, req *msg.SessionInfoReq) (*msg.SessionInfoResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &msg.SessionInfoResp{SessionID: s.id, Handle: s.handle, AgentID: s.agentID, AcceptedCaps: append([]msg.CapabilityEntry{}, s.accepted...),
		MaxParallel: p.h.cfg.Server.MaxParallel, InFlight: s.pending}
	if s.parent != nil {
		// The parent's handle, never its transport id: a child holding that
		// could post requests into its parent's session (handle.go).
		ph := s.parent.handle
		resp.ParentHandle = &ph
	}
	if s.operatorOpened {
		on := true
		resp.OperatorOpened = &on
	}
	resp.Budgets = p.h.budgetUse(s)
	return resp, nil
}

// The session namespace's other requests keep sessions beyond their
// connection: server/persist answers them for the session they came from.

// SessionSnapshot saves the session's state (spec §1.6).
func (p *sessionPlugin) SessionSnapshot(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotReq) (*msg.SessionSnapshotResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	return p.h.persist.SessionSnapshot(ctx, s.view(), req)
}

// SessionRestore restores a snapshot into the current session (spec §3).
func (p *sessionPlugin) SessionRestore(ctx context.Context, sc wire.Scope, req *msg.SessionRestoreReq) (*msg.SessionRestoreResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	return p.h.persist.SessionRestore(ctx, s.view(), req)
}

func rand16() string { return wire.RandomHex(8) }

// errSessionEnded answers a request whose session ended while it ran; no
// retry on that session can succeed.
var errSessionEnded = &wire.Error{Code: wire.CodeRuntimeError, Message: "session ended", Detail: map[string]any{"reason": "session_ended"}}

// SessionFork forks the session count ways.
func (p *sessionPlugin) SessionFork(ctx context.Context, sc wire.Scope, req *msg.SessionForkReq) (*msg.SessionForkResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	return p.h.persist.SessionFork(ctx, s.view(), req)
}

// SessionSnapshotList lists the snapshots the session may see.
func (p *sessionPlugin) SessionSnapshotList(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotListReq) (*msg.SessionSnapshotListResp, error) {
	s, err := p.h.sessionOf(sc)
	if err != nil {
		return nil, err
	}
	return p.h.persist.SessionSnapshotList(ctx, s.view(), req)
}

// SessionSnapshotDelete deletes a snapshot the session may list.
func (p *sessionPlugin) SessionSnapshotDelete(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotDeleteReq) (*msg.SessionSnapshotDeleteResp, error) {
	s, err := p.h.sessionOf(sc)
	if err != nil {
		return nil, err
	}
	return p.h.persist.SessionSnapshotDelete(ctx, s.view(), req)
}

// SessionTrajectoryExport exports recorded trajectory records.
func (p *sessionPlugin) SessionTrajectoryExport(ctx context.Context, sc wire.Scope, req *msg.SessionTrajectoryExportReq) (*msg.SessionTrajectoryExportResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	return p.h.persist.SessionTrajectoryExport(ctx, s.view(), req)
}

// sessionOf is the session a request came from: plugins know sessions by
// handle, but ownership of snapshots is proven by transport ids, which
// server/persist reads from it.
func (h *Host) sessionOf(sc wire.Scope) (*Session, error) {
	s, ok := h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, fmt.Errorf("%w: the session ended", ErrSessionEnded)
	}
	return s, nil
}
