package server

// The kernel's side of the web inspector (docs/inspector.md): taps on one
// session's messages, a watch on every answer, the secrets a page must
// never be shown, a session's recorded trajectory and the audit line of a
// view, behind the one accessor operator.Host.Inspect (server/inspect says what
// each promises). The hooks cost a message one atomic load of a nil
// pointer each while no page looks (Session.tap in receive and send,
// Host.watch in send): a tap is installed when a page subscribes to a
// session and removed when it leaves.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/inspect"
	"github.com/aephost/aep/wire"
)

// tapList is a session's taps, replaced whole when one comes or goes, so
// that a message reads it with one atomic load and no lock.
type tapList struct {
	taps []*tap
}

// tap is one installed tap.
type tap struct {
	f func(inspect.Message)
}

// watchList is the host's watches, replaced whole like tapList.
type watchList struct {
	fs []*watch
}

type watch struct {
	f func(inspect.Event)
}

// inspectHooks guards the replacement of taps and watches.
type inspectHooks struct {
	mu sync.Mutex
	// gen changes whenever the sessions or their own tokens change, for
	// inspect.Secrets.Gen (with the declared secrets' generation).
	gen atomic.Uint64
}

// inspectView implements inspect.Host over the kernel.
type inspectView struct{ h *Host }

var _ inspect.Host = inspectView{}

func (v inspectView) Tap(handle string, f func(inspect.Message)) (inspect.Tapped, error) {
	h := v.h
	s, ok := h.SessionByHandle(handle)
	if !ok || s.closing() {
		return inspect.Tapped{}, inspect.ErrNoSession
	}
	t := &tap{f: f}
	h.inspect.mu.Lock()
	old := s.tap.Load()
	var taps []*tap
	if old != nil {
		taps = old.taps
	}
	if len(taps) >= inspect.MaxTaps {
		h.inspect.mu.Unlock()
		return inspect.Tapped{}, inspect.ErrTooManyTaps
	}
	s.tap.Store(&tapList{taps: append(append([]*tap(nil), taps...), t)})
	h.inspect.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.inspect.mu.Lock()
			defer h.inspect.mu.Unlock()
			cur := s.tap.Load()
			if cur == nil {
				return
			}
			rest := make([]*tap, 0, len(cur.taps))
			for _, x := range cur.taps {
				if x != t {
					rest = append(rest, x)
				}
			}
			if len(rest) == 0 {
				s.tap.Store(nil) // no page looks: the hooks cost a nil load again
				return
			}
			s.tap.Store(&tapList{taps: rest})
		})
	}
	s.mu.Lock()
	agent := s.agentID
	s.mu.Unlock()
	return inspect.Tapped{Stop: stop, Tenant: s.Tenant(), AgentID: agent, Recorded: s.rec.Load() != nil,
		Since: time.Now(), Done: s.done}, nil
}

func (v inspectView) Watch(f func(inspect.Event)) (stop func()) {
	h := v.h
	w := &watch{f: f}
	h.inspect.mu.Lock()
	var fs []*watch
	if cur := h.watch.Load(); cur != nil {
		fs = cur.fs
	}
	h.watch.Store(&watchList{fs: append(append([]*watch(nil), fs...), w)})
	h.inspect.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.inspect.mu.Lock()
			defer h.inspect.mu.Unlock()
			cur := h.watch.Load()
			if cur == nil {
				return
			}
			rest := make([]*watch, 0, len(cur.fs))
			for _, x := range cur.fs {
				if x != w {
					rest = append(rest, x)
				}
			}
			if len(rest) == 0 {
				h.watch.Store(nil)
				return
			}
			h.watch.Store(&watchList{fs: rest})
		})
	}
}

func (v inspectView) Secrets() inspect.Secrets {
	h := v.h
	// Read the generation first: a change made while the lists are read
	// makes the next call differ.
	out := inspect.Secrets{Gen: h.declared.gen.Load()<<32 ^ h.inspect.gen.Load()}
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= MinSecretBytes && !seen[s] {
			seen[s] = true
			out.Values = append(out.Values, s)
		}
	}
	for _, s := range h.allSecrets() {
		add(s)
	}
	h.sessionTokens.Range(func(_, tok any) bool {
		add(tok.(string))
		return true
	})
	h.mu.Lock()
	for id := range h.sessions {
		add(id)
		// The random part alone names the session as well as the whole
		// id does: the host's part is no secret.
		if i := strings.LastIndexByte(id, '-'); i >= 0 {
			add(id[i+1:])
		}
	}
	h.mu.Unlock()
	h.tenants.mu.RLock()
	for _, t := range h.tenants.list {
		t.mu.RLock()
		out.TenantHashes = append(out.TenantHashes, t.hashes...)
		t.mu.RUnlock()
	}
	h.tenants.mu.RUnlock()
	return out
}

func (v inspectView) Recorded(ctx context.Context, handle string, limit int) ([]json.RawMessage, bool, error) {
	return v.h.persist.RecordedTail(ctx, handle, limit)
}

func (v inspectView) Audit(a inspect.View) {
	v.h.auditor.Record(AuditRecord{TS: a.Started, SessionID: a.Session, Tenant: a.Tenant, Type: "inspector/" + a.Action,
		Success: a.Code == "", ErrorCode: a.Code, DurationMS: float64(time.Since(a.Started).Microseconds()) / 1000,
		Target: a.Target, Actor: operatorActor})
}

// sessionsChanged marks the sessions, or their own tokens, changed, for
// inspect.Secrets.Gen.
func (h *Host) sessionsChanged() { h.inspect.gen.Add(1) }

// tapAgent gives the taps a message the agent sent.
func (t *tapList) agent(s *Session, kind string, env *wire.Envelope, m wire.Message, at time.Time) {
	line, err := wire.Encode(env, m)
	if err != nil {
		return
	}
	typ := env.Type
	if typ == "" {
		typ = m.MessageType()
	}
	t.give(inspect.Message{Dir: "agent", Kind: kind, Type: typ, ID: env.ID, At: at, Line: line, Known: s.h.knownSecrets(s)})
}

// invalid gives the taps a line that did not decode.
func (t *tapList) invalid(s *Session, line []byte, id string) {
	if len(line) > inspect.MaxInvalidLine {
		line = line[:inspect.MaxInvalidLine]
	}
	t.give(inspect.Message{Dir: "agent", Kind: "invalid", ID: id, At: time.Now(), Line: append([]byte(nil), line...),
		Known: s.h.knownSecrets(s)})
}

// host gives the taps a message the host sends.
func (t *tapList) host(s *Session, p *wire.Packet) {
	line, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		return
	}
	typ := packetType(p)
	t.give(inspect.Message{Dir: "host", Kind: sentKind(typ), Type: typ, ID: p.ID, ReqID: p.ReqID, At: time.Now(), Line: line,
		Known: s.h.knownSecrets(s)})
}

func (t *tapList) give(m inspect.Message) {
	for _, x := range t.taps {
		x.f(m)
	}
}

func packetType(p *wire.Packet) string {
	if p.Type == "" && p.Msg != nil {
		return p.Msg.MessageType()
	}
	return p.Type
}

// sentKind is the kind of a message the host sends, by its type.
func sentKind(typ string) string {
	switch {
	case typ == "error":
		return "error"
	case strings.HasSuffix(typ, "/event"):
		return "event"
	}
	return "reply"
}

// sent tells the watches of an answer s sends.
func (w *watchList) sent(s *Session, p *wire.Packet) {
	if p.ReqID == "" {
		return
	}
	typ := packetType(p)
	if strings.HasSuffix(typ, "/event") {
		return
	}
	ev := inspect.Event{Kind: "answer", Session: s.handle, Tenant: s.Tenant(), Type: typ}
	switch m := p.Msg.(type) {
	case *msg.Error:
		ev.Code = m.Code
	case *msg.HandshakeResp:
		if !m.Ok {
			ev.Code = string(wire.CodeUnauthorized)
			if m.Error != nil {
				ev.Code = m.Error.Code
			}
		}
	case *msg.ToolCallResp:
		if !m.Result.Success {
			ev.ToolFailed = true
			ev.Code = "TOOL_ERROR"
			if m.Result.ErrorCode != nil {
				ev.Code = string(*m.Result.ErrorCode)
			}
		}
	}
	for _, x := range w.fs {
		x.f(ev)
	}
}

// ended tells the taps and the watches that s ended, before its secrets
// are forgotten.
func (h *Host) inspectEnded(s *Session) {
	if t := s.tap.Load(); t != nil {
		t.give(inspect.Message{Kind: "end", At: time.Now(), Known: h.knownSecrets(s)})
	}
	if w := h.watch.Load(); w != nil {
		ev := inspect.Event{Kind: "ended", Session: s.handle, Tenant: s.Tenant()}
		for _, x := range w.fs {
			x.f(ev)
		}
	}
}
