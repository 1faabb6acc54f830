package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// sessionPlugin is the kernel's own plugin for the always-on session namespace.
type sessionPlugin struct{ h *Host }

var _ msg.SessionHandler = (*sessionPlugin)(nil)

func (p *sessionPlugin) SessionInfo(ctx context.Context, sc wire.Scope, req *msg.SessionInfoReq) (*msg.SessionInfoResp, error) {
	s, ok := p.h.Session(sc.SessionID())
	if !ok {
		return nil, wire.Errorf(wire.CodeRuntimeError, "session ended")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &msg.SessionInfoResp{SessionID: s.id, AgentID: s.agentID, AcceptedCaps: append([]msg.CapabilityEntry{}, s.accepted...),
		MaxParallel: p.h.cfg.Server.MaxParallel, InFlight: s.pending}
	if s.parent != nil {
		pid := s.parent.id
		resp.ParentID = &pid
	}
	return resp, nil
}

func (p *sessionPlugin) SessionSnapshot(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotReq) (*msg.SessionSnapshotResp, error) {
	return nil, wire.Errorf(wire.CodeRuntimeError, "snapshots need a store; none is configured on this host")
}

func (p *sessionPlugin) SessionRestore(ctx context.Context, sc wire.Scope, req *msg.SessionRestoreReq) (*msg.SessionRestoreResp, error) {
	return nil, wire.Errorf(wire.CodeRuntimeError, "snapshots need a store; none is configured on this host")
}

func rand16() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
