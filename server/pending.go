package server

import (
	"container/list"
	"errors"
	"net/netip"

	"golang.org/x/time/rate"
)

// Sessions that have not handshaken are anyone's to open, so they live in
// a pool of their own (server.limits.max_pending_sessions) and never count
// against max_sessions: a flood of them evicts the oldest of them, never an
// agent, and opening a session is never refused for load. A session leaves
// the pool when its handshake succeeds and is then counted against
// max_sessions; a child session, made by a live parent, is counted from
// its creation (docs/SECURITY.md, The edge).

// ErrEvicted is the reason a pending session was closed to make room.
var ErrEvicted = errors.New("pending session evicted: too many sessions wait for their handshake")

// SessionOption configures a session that a transport opens.
type SessionOption func(*Session)

// WithRemoteAddr names the client's address, so that failed handshakes are
// throttled per address as well as per session. Transports pass the
// address they trust (server.trusted_proxies); none means per session only.
func WithRemoteAddr(a netip.Addr) SessionOption {
	return func(s *Session) { s.remote = a.Unmap() }
}

// RemoteAddr returns the client address the transport gave, if any.
func (s *Session) RemoteAddr() netip.Addr { return s.remote }

// pendingPool orders the pending top-level sessions, oldest first. It is
// guarded by Host.mu.
type pendingPool struct {
	max   int
	order list.List // of *Session
}

// addLocked puts s in the pool and returns the session it evicted, if any;
// the caller closes that one after releasing Host.mu.
func (h *Host) addPendingLocked(s *Session) *Session {
	var evicted *Session
	if h.pending.order.Len() >= h.pending.max {
		e := h.pending.order.Front()
		evicted = e.Value.(*Session)
		h.pending.order.Remove(e)
		evicted.pendingAt = nil
	}
	s.pendingAt = h.pending.order.PushBack(s)
	return evicted
}

// countLocked counts s against max_sessions, or fails when the host is full.
func (h *Host) countLocked(s *Session) error {
	if h.counted >= h.cfg.Server.Limits.MaxSessions {
		return ErrTooManySessions
	}
	if err := countTenant(s); err != nil {
		return err
	}
	h.counted++
	s.counted = true
	return nil
}

// promote moves a session that passed its handshake out of the pending
// pool and counts it. It fails when the host is at max_sessions (the
// session stays pending, and the agent may try again) or when the session
// was evicted or closed meanwhile.
func (h *Host) promote(s *Session) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.counted {
		return nil // a child, or a concurrent handshake got here first
	}
	if s.pendingAt == nil {
		return ErrClosed
	}
	if err := h.countLocked(s); err != nil {
		return err
	}
	h.pending.order.Remove(s.pendingAt)
	s.pendingAt = nil
	return nil
}

// releaseLocked takes a closing session out of the pool or the count.
func (h *Host) releaseLocked(s *Session) {
	if s.pendingAt != nil {
		h.pending.order.Remove(s.pendingAt)
		s.pendingAt = nil
	}
	if s.counted {
		s.counted = false
		h.counted--
	}
	releaseTenant(s)
}

// PendingSessions returns the number of sessions waiting for their handshake.
func (h *Host) PendingSessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending.order.Len()
}

// evict closes a session pushed out of the pending pool.
func (h *Host) evict(s *Session) {
	h.log.Info("pending session evicted", "session", s.handle, "reason", ErrEvicted.Error(), "remote", s.remote)
	s.Close()
}

// handshakeLimiter returns the session's own budget of failed handshakes.
func (s *Session) handshakeLimiter() *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hsLimit == nil {
		s.hsLimit = rate.NewLimiter(s.h.throttle.every, sessionHandshakeBurst)
	}
	return s.hsLimit
}

// addrLimiter returns the budget of the session's client address, or nil
// when the transport gave none.
func (s *Session) addrLimiter() *rate.Limiter {
	if !s.remote.IsValid() {
		return nil
	}
	return s.h.throttle.limiter(s.remote)
}
