package server

import (
	"context"

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

// SessionSnapshot saves the session's state (spec §1.6; see snapshot.go).
func (p *sessionPlugin) SessionSnapshot(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotReq) (*msg.SessionSnapshotResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	target := string(req.Target)
	if target == "" {
		target = string(msg.SessionSnapshotReqTargetFile) // the schema's default
	}
	t, err := p.h.takeSnapshot(ctx, s, target, kindRequest)
	if err != nil {
		return nil, err
	}
	return &msg.SessionSnapshotResp{SnapshotID: t.id, Bytes: t.bytes, Target: msg.SessionSnapshotRespTarget(target), Files: t.files}, nil
}

// SessionRestore restores a snapshot into the current session (spec §3).
func (p *sessionPlugin) SessionRestore(ctx context.Context, sc wire.Scope, req *msg.SessionRestoreReq) (*msg.SessionRestoreResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	var id string
	switch {
	case req.SnapshotID != nil:
		id = *req.SnapshotID
	case req.FromSession != nil:
		var err error
		if id, err = p.h.newestSnapshotOf(ctx, *req.FromSession); err != nil {
			return nil, err
		}
	}
	restored, files, err := p.h.restoreSession(ctx, s, id)
	if err != nil {
		return nil, err
	}
	return &msg.SessionRestoreResp{SnapshotID: id, Restored: restored, Files: files}, nil
}

func rand16() string { return wire.RandomHex(8) }

// errSessionEnded answers a request whose session ended while it ran; no
// retry on that session can succeed.
var errSessionEnded = &wire.Error{Code: wire.CodeRuntimeError, Message: "session ended", Detail: map[string]any{"reason": "session_ended"}}

// SessionFork forks the session count ways (fork.go).
func (p *sessionPlugin) SessionFork(ctx context.Context, sc wire.Scope, req *msg.SessionForkReq) (*msg.SessionForkResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	snap := ""
	if req.SnapshotID != nil {
		snap = *req.SnapshotID
	}
	return p.h.forkSession(ctx, s, req.Count, snap)
}

// SessionTrajectoryExport exports recorded trajectory records (trajectory.go).
func (p *sessionPlugin) SessionTrajectoryExport(ctx context.Context, sc wire.Scope, req *msg.SessionTrajectoryExportReq) (*msg.SessionTrajectoryExportResp, error) {
	s, ok := p.h.SessionByHandle(sc.SessionID())
	if !ok {
		return nil, errSessionEnded
	}
	return p.h.exportTrajectory(ctx, s, req)
}
