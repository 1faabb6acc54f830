package server

import (
	"errors"
	"math"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// handshake answers handshake/req (spec §2.4, 5, 9; docs/DECISIONS.md, Wire). It always
// answers; on failure ok is false, the error names the code and the session
// stays unhandshaken, so no session exists for the agent. It returns the
// code of a refusal, "" when the handshake succeeded, for the metrics.
func (s *Session) handshake(env *wire.Envelope, req *msg.HandshakeReq) (code wire.Code) {
	h := s.h
	reply := func(resp *msg.HandshakeResp) {
		resp.MaxParallel = h.cfg.Server.MaxParallel
		if resp.AcceptedCaps == nil {
			resp.AcceptedCaps = []msg.CapabilityEntry{}
		}
		// The id is cut like an error's: this reply may go to anyone who
		// opened a session (wire.ClipID).
		s.send(&wire.Packet{Envelope: wire.Envelope{Type: "handshake/resp", ID: wire.NewID(), ReqID: wire.ClipID(env.ID)}, Msg: resp})
	}
	refuse := func(e *wire.Error) {
		code = e.Code
		reason := e.Message
		reply(&msg.HandshakeResp{Ok: false, Reason: &reason,
			Error: &msg.ErrorBody{Code: string(e.Code), Message: e.Message, Detail: e.Detail, Retryable: e.Retryable()}})
	}
	fail := func(code wire.Code, reason string) { refuse(&wire.Error{Code: code, Message: reason}) }
	switch {
	case sessionState(s.state.Load()) != stateNew:
		// A well-formed handshake on a live session is a condition of state,
		// not of shape: runtime_error with a reason, never schema_violation
		// (docs/DECISIONS.md, Errors of state). The session stays as it was.
		refuse(alreadyHandshaken())
		return code
	case env.Proto == "":
		fail(wire.CodeSchemaViolation, `missing field "proto"`)
		return code
	case env.Proto != wire.ProtoVersion:
		// spec §9 rule 2.
		fail(wire.CodeVersionMismatch, "protocol version "+wire.Clip(env.Proto)+" is not supported; this host speaks "+wire.ProtoVersion)
		return code
	}

	// Failed handshakes are throttled per session and per client address
	// (throttle.go): a client out of budget is refused without its token
	// being looked at, so it learns nothing until the budget refills.
	now := time.Now()
	att, wait, ok := beginAttempt(now, s.handshakeLimiter(), s.addrLimiter())
	if !ok {
		secs := math.Ceil(wait.Seconds())
		h.log.Debug("handshake throttled", "session", s.handle, "remote", s.remote, "retry_after_seconds", secs)
		refuse(&wire.Error{Code: wire.CodeRuntimeError, Message: "too many failed handshakes; try again later",
			Detail: map[string]any{"reason": "throttled", "retry_after_seconds": secs}})
		return code
	}
	if !s.authenticate(req.AuthToken) {
		// spec §5 rule 3: not retryable; the fix is to correct auth_token.
		// The reserved budget stays spent.
		h.log.Debug("handshake failed: invalid auth_token", "session", s.handle, "remote", s.remote)
		fail(wire.CodeUnauthorized, "invalid auth_token")
		return code
	}
	att.refund(now)
	if err := h.promote(s); err != nil {
		if errors.Is(err, ErrTooManySessions) {
			refuse(&wire.Error{Code: wire.CodeRuntimeError, Message: "the host is at server.limits.max_sessions; try again later",
				Detail: map[string]any{"reason": "too_many_sessions"}})
			return code
		}
		if errors.Is(err, errTenantSessions) {
			refuse(&wire.Error{Code: wire.CodeRuntimeError, Message: "your tenant is at its total of sessions on this host; try again later",
				Detail: map[string]any{"reason": "tenant_sessions", "limit": s.tenant.total().Sessions}})
			return
		}
		fail(wire.CodeRuntimeError, "the session was closed")
		return code
	}
	if s.token != nil || (req.AuthToken != h.cfg.Server.AuthToken && len(req.AuthToken) >= MinSecretBytes) {
		// A token that is not the host's (a child's own, a tenant's
		// secret) is a secret of this session: snapshots are checked for
		// it, and trajectories, audit lines and spans are scrubbed of it
		// wherever the agent puts it (secrets.go). The scrub list made
		// before now did not hold it.
		h.sessionTokens.Store(s.id, req.AuthToken)
		s.scrub.Store(nil)
		h.sessionsChanged()
	}
	// A child's capabilities are a subset of its parent's; an operator's
	// session may be narrowed when it is opened (admin.go).
	allowed := s.childCaps
	// session/ is served to every session, asked for or not, a subagent's
	// too: its entry says so rather than enabled false for a namespace
	// whose requests are answered (spec §2.2, §7 condition 3).
	enabled := map[string]bool{sessionCapability: true}
	accepted := make([]msg.CapabilityEntry, 0, len(req.AgentCaps))
	for _, name := range req.AgentCaps {
		c := CanonicalCapability(name)
		// A capability the tenant lacks is answered enabled: false, as one
		// the host does not serve (spec §2.2, §7 condition 3); session is
		// the kernel's own, served to every session.
		on := c == sessionCapability || h.served[c] && (allowed == nil || allowed[c]) && (s.tenant == nil || s.tenant.allows(c))
		if on {
			enabled[c] = true
		}
		// One entry per requested capability, echoing the agent's spelling (spec §2.2).
		accepted = append(accepted, msg.CapabilityEntry{Name: name, Enabled: on})
	}
	s.mu.Lock()
	s.agentID = req.AgentID
	s.accepted = accepted
	s.mu.Unlock()
	s.enabled.Store(&enabled)
	if !s.state.CompareAndSwap(int32(stateNew), int32(stateLive)) {
		refuse(alreadyHandshaken())
		return code
	}
	s.changed(time.Now()) // saved within the crash window, though it did nothing yet
	id := s.id
	resp := &msg.HandshakeResp{Ok: true, SessionID: &id, AcceptedCaps: accepted}
	if r := h.recorderFor(s, req); r != nil {
		r.Agent("request", env, req)
		s.rec.Store(r)
		on := true
		resp.RecordTrajectory = &on
	}
	reply(resp)
	return ""
}

// handshakeRefused answers a handshake/req that failed its schema with
// handshake/resp ok false and that error, as a handshake that decoded and
// failed is answered: an agent reads the outcome of every handshake from
// handshake/resp (docs/DECISIONS.md, Wire).
func (s *Session) handshakeRefused(reqID string, e *wire.Error) {
	reason := e.Message
	// Unauthenticated: the req_id is cut as an error's is, or a 1 MiB id
	// would be a 1 MiB reply held in the pending session's buffer.
	s.send(&wire.Packet{Envelope: wire.Envelope{Type: "handshake/resp", ID: wire.NewID(), ReqID: wire.ClipID(reqID)}, Msg: &msg.HandshakeResp{
		Ok: false, Reason: &reason, MaxParallel: s.h.cfg.Server.MaxParallel, AcceptedCaps: []msg.CapabilityEntry{},
		Error: &msg.ErrorBody{Code: string(e.Code), Message: e.Message, Detail: e.Detail, Retryable: e.Code.Retryable()},
	}})
}

// alreadyHandshaken answers a handshake/req on a session that has already
// handshaken: the handshake changes nothing, and repeating it cannot help.
func alreadyHandshaken() *wire.Error {
	return &wire.Error{Code: wire.CodeRuntimeError, Message: "this session has already handshaken; it goes on as it was",
		Detail: map[string]any{"reason": "already_handshaken"}}
}
