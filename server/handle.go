package server

// Session handles (docs/DECISIONS.md, Session handles; docs/SECURITY.md,
// Secrets and session ids). A session has two names:
//
//   - its transport id (Session.ID, "s-…"), which the handshake reports and
//     a transport takes (X-Session-Id, an in-process attach). Whoever holds
//     it can post requests into the session, so it is a bearer secret and
//     is told to no other session: the one exception is the subagent/spawn
//     reply, which hands a child's id to the session that created the
//     child, with the child's own token, so its agent can connect;
//   - its public handle (Session.Handle, "h-…"), random and unrelated to
//     the id, fixed for the session's life. Plugins know a session only by
//     it (wire.Scope.SessionID, SessionState keys, observers, snapshots),
//     and audit lines, logs, learn records and subagent records carry it.
//     It opens nothing on any transport.
//
// A restore keeps the handle of the session restored into, as it keeps the
// agent id; the snapshot records the saved session's handle for
// information only.

// newHandle returns a new public handle: 128 random bits, so one handle
// tells nothing about another and none can be guessed.
func newHandle() string { return "h-" + rand16() + rand16() }

// Handle returns the session's public handle.
func (s *Session) Handle() string { return s.handle }

// SessionByHandle returns a session by its public handle, the id plugins
// get from [wire.Scope.SessionID].
func (h *Host) SessionByHandle(handle string) (*Session, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.handles[handle]
	return s, ok
}
