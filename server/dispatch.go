package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// dispatch routes one request to its plugins (spec §1 dispatch rules 3–4;
// docs/DECISIONS.md, "Dispatch"):
//   - an exclusive route has one plugin, which answers alone;
//   - an owned type (wire.Entry.Owner, tool/call) goes to the plugin that
//     claimed the name the request acts on, host-wide or for this session;
//     with no owner the type's fallback answers (UNKNOWN_TOOL);
//   - otherwise every plugin is called in descending priority and each
//     answers or declines: list replies are merged, for other types the
//     first answer is the reply, and when all decline the fallback answers.
func (h *Host) dispatch(ctx context.Context, c *call, e *wire.Entry, req wire.Message) (wire.Message, error) {
	r := h.routes[e.Type]
	if r == nil || len(r.plugins) == 0 {
		if e.Fallback != nil {
			return h.fallback(c, e, req), nil
		}
		return nil, &wire.Error{Code: wire.CodeCapabilityMissing, Capability: e.Capability, Message: "no plugin serves " + e.Type}
	}
	plugins := r.plugins
	if e.Owner != "" && !r.exclusive {
		owner := h.owner(c, e, req, r)
		if owner == nil {
			return h.fallback(c, e, req), nil
		}
		plugins = []*plugin{owner}
	}
	if e.Owner == toolOwner {
		// A tool call is a unit of the session's leaf work (budget.go).
		leaf := &Leaf{h: h, s: c.s, b: c.s.budget}
		if err := leaf.take(ctx); err != nil {
			return nil, err
		}
		defer leaf.Release()
		ctx = context.WithValue(ctx, leafKey{}, leaf)
	}
	var answer wire.Message
	for _, p := range plugins {
		resp, err := h.invoke(ctx, c, p, e, req)
		if errors.Is(err, wire.ErrDecline) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if resp == nil {
			return nil, fmt.Errorf("plugin %q answered %s with nothing", p.Name, e.Type)
		}
		switch {
		case answer == nil:
			answer = resp
			c.answered = p
		case e.Merge != nil:
			e.Merge(answer, resp)
		default:
			// Ownership is unique, so a second answer is a plugin bug; the
			// higher-priority answer stands.
			h.log.Warn("two plugins answered one request", "type", e.Type, "plugin", p.Name)
		}
	}
	if answer == nil {
		if e.Fallback != nil {
			return h.fallback(c, e, req), nil
		}
		return nil, &wire.Error{Code: wire.CodeRuntimeError, Capability: e.Capability, Message: "every plugin declined " + e.Type, Detail: map[string]any{"reason": "declined"}}
	}
	if e.Page != nil {
		// Each plugin answered with its own page after the cursor; the
		// first `limit` of their union, by key, is the host's page.
		e.Page(req, answer)
	}
	return answer, nil
}

// owner returns the route's plugin that owns what req acts on, or nil.
func (h *Host) owner(c *call, e *wire.Entry, req wire.Message, r *route) *plugin {
	at, ok := req.(interface{ AuditTarget() string })
	if !ok {
		return nil
	}
	name, ok := h.claims.Owner(c.s.handle, Claim{Kind: e.Owner, Name: at.AuditTarget()})
	if !ok {
		return nil
	}
	for _, p := range r.plugins {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// fallback answers with the type's fallback reply; the kernel audits it as
// the one line of the request, since no plugin ran.
func (h *Host) fallback(c *call, e *wire.Entry, req wire.Message) wire.Message {
	t0 := time.Now()
	resp := e.Fallback(req)
	rec := h.auditRecord(c, nil, e, req, resp, t0, nil)
	if e.Owner == toolOwner {
		// No plugin serves the name: it is the agent's invention, counted
		// under one label (it could hold anything, and would take the
		// label budget of real tools).
		h.met.tool(unknownTool, rec.ErrorCode)
	}
	c.answerRec = rec
	h.notify(*rec)
	return resp
}

// invoke calls one plugin's handler with panic recovery and audits the call
// (spec §1.7: every handler invocation is audited, best-effort).
func (h *Host) invoke(ctx context.Context, c *call, p *plugin, e *wire.Entry, req wire.Message) (resp wire.Message, err error) {
	t0 := time.Now()
	pctx, span := h.startPluginSpan(ctx, p, e)
	resp, err = h.call(pctx, c, p, e, req)
	rec := h.auditRecord(c, p, e, req, resp, t0, err)
	if span != nil {
		endSpan(span, rec.ErrorCode)
	}
	if e.Owner == toolOwner && !rec.Declined {
		h.met.tool(rec.Target, rec.ErrorCode)
	}
	if err == nil && c.answered == nil {
		// The answering plugin's record waits for the reply's size;
		// subscribers get it now, before the reply leaves.
		c.answerRec = rec
		h.notify(*rec)
		return resp, err
	}
	h.record(*rec)
	return resp, err
}

// call runs the handler; a panic becomes a [*PanicError], as in
// [Protect], without the closure Protect would cost on this hot path.
func (h *Host) call(ctx context.Context, c *call, p *plugin, e *wire.Entry, req wire.Message) (resp wire.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, Recovered(h.log, "plugin "+p.Name+" handling "+e.Type, v)
		}
	}()
	return e.Invoke(ctx, p.Impl, c, req)
}

// auditRecord builds the audit line of one handler call (p nil: the
// kernel's fallback). Its success and error_code say how the request went
// for the agent: a tool result with success false, a cancelled call or an
// error are failures, each with its code.
func (h *Host) auditRecord(c *call, p *plugin, e *wire.Entry, req, resp wire.Message, t0 time.Time, err error) *AuditRecord {
	// What the agent chose (ids, a tool's name) is scrubbed of every
	// secret the session may know: an agent may put one anywhere.
	secrets := h.knownSecrets(c.s)
	rec := &AuditRecord{
		TS: t0, SessionID: c.s.handle, Tenant: c.s.Tenant(), Actor: c.s.actor(), ReqID: scrub(c.id, secrets), Type: e.Type, Capability: e.Capability,
		Success: err == nil, InputBytes: c.inBytes,
		DurationMS: float64(time.Since(t0).Microseconds()) / 1000,
	}
	if p != nil {
		rec.Plugin = p.Name
	}
	if cr, ok := req.(interface{ GetCorrelationID() string }); ok {
		rec.CorrelationID = scrub(cr.GetCorrelationID(), secrets)
	}
	if at, ok := req.(interface{ AuditTarget() string }); ok {
		rec.Target = scrub(at.AuditTarget(), secrets)
	}
	switch {
	case errors.Is(err, wire.ErrDecline):
		rec.Success, rec.Declined = true, true
	case err != nil:
		rec.ErrorCode = string(wire.AsError(err).Code)
	case c.wasCancelled():
		rec.Success, rec.ErrorCode = false, string(c.cancelledWith().Code)
	default:
		if tr, ok := resp.(*msg.ToolCallResp); ok && !tr.Result.Success {
			rec.Success = false
			if tr.Result.ErrorCode != nil {
				rec.ErrorCode = string(*tr.Result.ErrorCode)
			}
		}
	}
	return rec
}

// flushAudit writes the answering plugin's audit record with the reply's
// size (its subscribers were told in invoke).
func (h *Host) flushAudit(c *call, outBytes int) {
	if c.answerRec != nil {
		c.answerRec.OutputBytes = outBytes
		h.auditor.Record(*c.answerRec)
		c.answerRec = nil
	}
}

// wireError is the protocol error that answers err. An error not meant for
// the agent (wire.Error.Internal) is logged here in full under a
// correlation id, and the agent gets a generic message carrying that id:
// a handler's error text may hold a path, a DSN or a library's internals.
func (h *Host) wireError(c *call, err error) *wire.Error {
	e := wire.AsError(err)
	if !e.Internal {
		return e
	}
	corr := ""
	var pe *PanicError
	if errors.As(err, &pe) {
		corr = pe.Correlation // the panic and its stack are logged already
	} else {
		corr = newCorrelation()
		h.log.Error("handler error", "correlation", corr, "session", c.s.handle, "request_id", wire.ClipID(c.id), "type", c.entry.Type, "err", err)
	}
	return &wire.Error{
		Code: e.Code, Capability: e.Capability, Err: e.Err,
		Message: e.Message + "; the host's log has it under correlation " + corr,
		Detail:  map[string]any{"correlation_id": corr},
	}
}
