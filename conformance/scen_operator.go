package conformance

import "context"

// operatorSession: a session the operator opened through the host's admin
// API (docs/operating.md, Admin API) is reached by its id, refuses the
// tenant's secret (the kit's token), opens with the token issued for it
// alone and says so in session/info; that token opens no session of the
// kit's own making, and an agent's own session says nothing of the
// operator.
func (k *kit) operatorSession(ctx context.Context) error {
	c := CheckSessionOperator
	if k.opts.OperatorSession == nil {
		k.skip("needs "+needOperator, c)
		return nil
	}
	if k.target.Attach == nil {
		k.skip("needs "+needAttach, c)
		return nil
	}
	sid, token, err := k.opts.OperatorSession(ctx)
	if err != nil {
		k.fail(c, "opening a session as the operator: %v", err)
		return nil
	}
	conn, err := k.target.Attach(ctx, sid)
	if err != nil {
		k.fail(c, "reaching the operator's session by its id: %v", err)
		return nil
	}
	s := k.newSession(conn, "operator")
	defer s.close(ctx)
	caps := []string{"session"}
	m, err := s.handshake(ctx, caps, k.opts.Token)
	if err != nil {
		k.fail(c, "the operator's session's handshake with the tenant's secret: %v", err)
		return nil
	}
	k.expect(c, m.Type == "handshake/resp" && m.OK != nil && !*m.OK && m.Error != nil && m.Error.Code == "unauthorized",
		"the operator's session accepted the tenant's secret, want handshake/resp ok false, unauthorized: %s", clip(m.raw))
	if m.OK != nil && *m.OK {
		return nil
	}
	m, err = s.handshake(ctx, caps, token)
	if err != nil || m.OK == nil || !*m.OK {
		k.fail(c, "the operator's session's handshake with its own token: %v %s", err, m)
		return nil
	}
	k.expect(c, m.SessionID == sid, "the operator's session's handshake names session_id %q, opened as %q", m.SessionID, sid)
	if r := s.call(ctx, "session/info/req", nil); k.want(c, r, "session/info/resp", "the operator's session's session/info") {
		on, ok := boolean(r.body, "operator_opened")
		k.expect(c, ok && on, "the operator's session's session/info does not say operator_opened true: %s", r)
	}
	// The issued token opens no other session.
	other, err := k.open(ctx)
	if err != nil {
		return err
	}
	other.label = "not the operator's"
	m, err = other.handshake(ctx, caps, token)
	if err != nil {
		k.fail(c, "a new session's handshake with the operator's session's token: %v", err)
	} else {
		k.expect(c, m.OK != nil && !*m.OK && m.Error != nil && m.Error.Code == "unauthorized",
			"the operator's session's token opened another session, want ok false, unauthorized: %s", clip(m.raw))
	}
	other.close(ctx)
	// An agent's own session says nothing of the operator.
	own := k.sessionFor(ctx, c, "own", caps)
	if own == nil {
		return nil
	}
	defer own.close(ctx)
	if r := own.call(ctx, "session/info/req", nil); k.want(c, r, "session/info/resp", "an agent's session/info") {
		on, _ := boolean(r.body, "operator_opened")
		k.expect(c, !on, "an agent's own session says operator_opened true: %s", r)
	}
	return nil
}
