package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/aephost/aep/wire"
)

// Declared secrets (docs/DECISIONS.md, Declared secrets; docs/SECURITY.md,
// Secrets and session ids). A plugin that is given a secret — a toolkit
// password from toolkit/configure, an MCP token from its config or from
// mcp/server/register — declares it here, for one session or for the host.
// Before a snapshot is written the kernel searches it for every secret
// declared for the session's tree (the session, its ancestors and its
// descendants, which may share working memory) and for the host, beside
// the host token, the child tokens and [SecretHolder]s; a hit refuses the
// snapshot with an error that names the kind and the declaring plugin,
// never the value. Session secrets are forgotten when the session ends.

// MinSecretBytes is the shortest value the kernel treats as a secret: a
// shorter one is neither matched in snapshots nor scrubbed from audit
// lines, logs, metrics and traces (it would match, and mangle, ordinary
// words). The toolkits refuse a shorter secret setting at configure.
const MinSecretBytes = 8

// secretStore holds the declared secrets: session handle ("" for the
// host) → plugin name → values.
type secretStore struct {
	mu sync.Mutex
	m  map[string]map[string][]string
	// gen changes whenever a secret is declared or forgotten, so the
	// lists derived from m (per session, host-wide) are made again.
	gen atomic.Uint64
	// all is every declared value and the host token, for the log
	// scrubber, with the gen it was made at.
	all atomic.Pointer[scrubList]
}

// scrubList is a list of secret values made at a generation of the store.
type scrubList struct {
	gen  uint64
	vals []string
}

// DeclareSecrets records values as secrets the plugin was given, for the
// session with that handle (wire.Scope.SessionID), or for the host when
// sessionID is "". Empty values are ignored. Declaring a value twice is
// harmless.
func (e PluginEnv) DeclareSecrets(sessionID string, values ...string) {
	if e.Host == nil {
		return
	}
	st := &e.Host.declared
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]map[string][]string{}
	}
	byPlugin := st.m[sessionID]
	if byPlugin == nil {
		byPlugin = map[string][]string{}
		st.m[sessionID] = byPlugin
	}
	defer st.gen.Add(1)
outer:
	for _, v := range values {
		if len(v) < MinSecretBytes {
			continue
		}
		for _, have := range byPlugin[e.Name] {
			if have == v {
				continue outer
			}
		}
		byPlugin[e.Name] = append(byPlugin[e.Name], v)
	}
}

// forgetSecrets drops the secrets declared for a session that ended.
func (h *Host) forgetSecrets(handle string) {
	h.declared.mu.Lock()
	delete(h.declared.m, handle)
	h.declared.mu.Unlock()
	h.declared.gen.Add(1)
}

// namedSecret is a secret with the words that describe it in errors and
// logs, which never include the value.
type namedSecret struct {
	what, value string
}

// sessionTree returns s, its ancestors and its descendants: every session
// whose secrets s may have learned (a parent is given its children's
// tokens, and may share memory with them).
func sessionTree(s *Session) []*Session {
	var out []*Session
	for p := s.parent; p != nil; p = p.parent {
		out = append(out, p)
	}
	queue := []*Session{s}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		out = append(out, cur)
		queue = append(queue, cur.Children()...)
	}
	return out
}

// stateTree returns the handles of the sessions whose state a snapshot of
// s holds: s; its ancestors, whose memory and files a subagent shares,
// reads or was given a copy of (every scope but `isolated`); and the
// descendants that write into its own (`shared` children, transitively).
// A child of another scope keeps its own state, which s's snapshot does
// not hold, so its secrets cannot block s's snapshot.
func stateTree(s *Session) []string {
	out := []string{s.handle}
	for cur := s; cur.parent != nil && cur.child != nil && cur.child.scope != "isolated"; cur = cur.parent {
		out = append(out, cur.parent.handle)
	}
	queue := []*Session{s}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range cur.Children() {
			if c.child != nil && c.child.scope == "shared" {
				out = append(out, c.handle)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// declaredSecrets returns the secrets declared for the host and for the
// sessions whose state a snapshot of s holds (stateTree).
func (h *Host) declaredSecrets(s *Session) []namedSecret {
	return h.declaredFor(append([]string{""}, stateTree(s)...))
}

// declaredFor returns the secrets declared for the sessions of keys ("":
// the host).
func (h *Host) declaredFor(keys []string) []namedSecret {
	h.declared.mu.Lock()
	defer h.declared.mu.Unlock()
	var out []namedSecret
	for _, k := range keys {
		for plugin, vals := range h.declared.m[k] {
			for _, v := range vals {
				out = append(out, namedSecret{what: "a secret plugin " + `"` + plugin + `"` + " declared", value: v})
			}
		}
	}
	return out
}

// scrubCache is a session's list of the secrets it may know, at a
// generation of the store.
type scrubCache = scrubList

// knownSecrets returns the values s may know and put in a field of a
// request: the host token, its own token, and what was declared for the
// host and for its tree (sessionTree). The list is kept per session and
// made again only when a secret is declared or forgotten, so a request
// pays one atomic load for it.
func (h *Host) knownSecrets(s *Session) []string {
	gen := h.declared.gen.Load()
	if c := s.scrub.Load(); c != nil && c.gen == gen {
		return c.vals
	}
	vals := []string{}
	if len(h.cfg.Server.AuthToken) >= MinSecretBytes {
		vals = append(vals, h.cfg.Server.AuthToken)
	}
	keys := []string{""}
	for _, t := range sessionTree(s) {
		keys = append(keys, t.handle)
		if tok, ok := h.sessionTokens.Load(t.id); ok {
			vals = append(vals, tok.(string))
		}
	}
	for _, ns := range h.declaredFor(keys) {
		vals = append(vals, ns.value)
	}
	s.scrub.Store(&scrubCache{gen: gen, vals: vals})
	return vals
}

// allSecrets returns every declared value and the host token, for the
// log scrubber: a log line may name any session.
func (h *Host) allSecrets() []string {
	gen := h.declared.gen.Load()
	if c := h.declared.all.Load(); c != nil && c.gen == gen {
		return c.vals
	}
	vals := []string{}
	if len(h.cfg.Server.AuthToken) >= MinSecretBytes {
		vals = append(vals, h.cfg.Server.AuthToken)
	}
	h.declared.mu.Lock()
	for _, byPlugin := range h.declared.m {
		for _, vs := range byPlugin {
			vals = append(vals, vs...)
		}
	}
	h.declared.mu.Unlock()
	h.declared.all.Store(&scrubList{gen: gen, vals: vals})
	return vals
}

// scrub replaces every secret of secrets in v with "***". Values shorter
// than the shortest secret cost one comparison.
func scrub(v string, secrets []string) string {
	if len(v) < MinSecretBytes {
		return v
	}
	for _, sec := range secrets {
		if len(v) >= len(sec) && strings.Contains(v, sec) {
			v = strings.ReplaceAll(v, sec, "***")
		}
	}
	return v
}

// scrubHandler is the host logger's handler: it takes every secret out of
// a record's message and string attributes before the handler it wraps
// sees them, whatever field of a request a secret arrived in
// (docs/SECURITY.md, Declared secrets).
type scrubHandler struct {
	inner slog.Handler
	h     *Host
}

func (s *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return s.inner.Enabled(ctx, l)
}

func (s *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	secrets := s.h.allSecrets()
	extra := requestAttrs(ctx, r)
	if len(secrets) == 0 {
		if len(extra) > 0 {
			r = r.Clone()
			r.AddAttrs(extra...)
		}
		return s.inner.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, scrub(r.Message, secrets), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(scrubAttr(a, secrets))
		return true
	})
	for _, a := range extra {
		out.AddAttrs(scrubAttr(a, secrets))
	}
	return s.inner.Handle(ctx, out)
}

// requestAttrs are the attributes a record made with a request's context
// lacks and gets here, so that every line logged while a request runs
// can be found by it: the request's id and the session's public handle
// (never its transport id), and the trace and span ids when the request
// is traced (docs/operating.md, Logs).
func requestAttrs(ctx context.Context, r slog.Record) []slog.Attr {
	if ctx == nil {
		return nil
	}
	var out []slog.Attr
	if c := callOf(ctx); c != nil {
		has := map[string]bool{}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "session" || a.Key == "request_id" {
				has[a.Key] = true
			}
			return true
		})
		if !has["request_id"] {
			out = append(out, slog.String("request_id", wire.ClipID(c.id)))
		}
		if !has["session"] {
			out = append(out, slog.String("session", c.s.handle))
		}
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		out = append(out, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return out
}

func scrubAttr(a slog.Attr, secrets []string) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, scrub(v.String(), secrets))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = scrubAttr(g, secrets)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, scrub(x.Error(), secrets))
		case []string:
			out := make([]string, len(x))
			for i, e := range x {
				out[i] = scrub(e, secrets)
			}
			return slog.Any(a.Key, out)
		}
	}
	return a
}

func (s *scrubHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	secrets := s.h.allSecrets()
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = scrubAttr(a, secrets)
	}
	return &scrubHandler{inner: s.inner.WithAttrs(out), h: s.h}
}

func (s *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{inner: s.inner.WithGroup(name), h: s.h}
}
