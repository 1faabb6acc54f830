package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aephost/aep/wire"
)

// dispatch routes one request to its plugins (SPEC 1 dispatch rules 3–4,
// DESIGN Dispatch): an exclusive route has one plugin; otherwise every plugin
// is called in descending priority and each answers or declines. Replies of
// list types are merged; for other types the first answer is the reply.
// When all decline, the type's fallback answers.
func (h *Host) dispatch(ctx context.Context, c *call, e *wire.Entry, req wire.Message) (wire.Message, error) {
	r := h.routes[e.Type]
	if r == nil || len(r.plugins) == 0 {
		if e.Fallback != nil {
			return e.Fallback(req), nil
		}
		return nil, &wire.Error{Code: wire.CodeCapabilityMissing, Capability: e.Capability, Message: "no plugin serves " + e.Type}
	}
	var answer wire.Message
	for _, p := range r.plugins {
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
			return e.Fallback(req), nil
		}
		return nil, &wire.Error{Code: wire.CodeRuntimeError, Capability: e.Capability, Message: "every plugin declined " + e.Type}
	}
	if e.Page != nil {
		// Each plugin answered with its own page after the cursor; the
		// first `limit` of their union, by key, is the host's page.
		e.Page(req, answer)
	}
	return answer, nil
}

// invoke calls one plugin's handler with panic recovery and audits the call
// (SPEC 1.7: every handler invocation is audited, best-effort).
func (h *Host) invoke(ctx context.Context, c *call, p *plugin, e *wire.Entry, req wire.Message) (resp wire.Message, err error) {
	t0 := time.Now()
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, h.panicError(c, p.Name, v)
		}
		rec := h.auditRecord(c, p, e, req, t0, err)
		if err == nil && c.answered == nil {
			// The answering plugin's record waits for the reply's size;
			// subscribers get it now, before the reply leaves.
			c.answerRec = rec
			h.notify(*rec)
			return
		}
		h.record(*rec)
	}()
	return e.Invoke(ctx, p.Impl, c, req)
}

func (h *Host) auditRecord(c *call, p *plugin, e *wire.Entry, req wire.Message, t0 time.Time, err error) *AuditRecord {
	rec := &AuditRecord{
		TS: t0, SessionID: c.s.id, ReqID: c.id, Type: e.Type, Capability: e.Capability,
		Plugin: p.Name, Success: err == nil, InputBytes: c.inBytes,
		DurationMS: float64(time.Since(t0).Microseconds()) / 1000,
	}
	if cr, ok := req.(interface{ GetCorrelationID() string }); ok {
		rec.CorrelationID = cr.GetCorrelationID()
	}
	if at, ok := req.(interface{ AuditTarget() string }); ok {
		rec.Target = at.AuditTarget()
	}
	switch {
	case errors.Is(err, wire.ErrDecline):
		rec.Success, rec.Declined = true, true
	case err != nil:
		rec.ErrorCode = string(wire.AsError(err).Code)
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
