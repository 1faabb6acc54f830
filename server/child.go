package server

// Child sessions (spec §1: subagents; docs/DECISIONS.md, Transports: child sessions).
// The kernel owns what makes a child a session of its own: its link to the
// parent, its own handshake token, its capability subset, its depth in the
// session tree and its step limit. Capabilities learn about a new child
// through [ChildObserver] (the memory plugin sets the child's scope view
// there), so the subagents plugin never looks another plugin up.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aephost/aep/wire"
)

// The memory scopes of spec §1's subagent paragraph.
var memoryScopes = map[string]bool{"shared": true, "restricted": true, "isolated": true, "snapshot": true}

// Errors of SpawnChild and of connecting to a child.
var (
	// ErrNotWaitingChild is returned when connecting to a session that is
	// not a child session waiting for its handshake.
	ErrNotWaitingChild = errors.New("not a child session waiting for its handshake")
	// errAttached is returned when connecting in process to a waiting child
	// that another connection already reaches.
	errAttached = errors.New("session already has a connection")
)

// ChildOptions describes a child session to [Host.SpawnChild].
type ChildOptions struct {
	// Name is the subagent's name, for lists and logs.
	Name string
	// Capabilities are the canonical names the child may enable; each must
	// be enabled for the parent.
	Capabilities []string
	// MemoryScope is shared, restricted, isolated or snapshot (spec §1).
	MemoryScope string
	// MaxDepth is the deepest depth (a top-level session is at depth 0) that
	// any session of the child's subtree may have, the child included; 0
	// means the parent's limit. A child's limit never exceeds its parent's.
	MaxDepth int
	// MaxSteps is the number of requests the child may make; 0 is unlimited.
	MaxSteps int
}

// ChildObserver is implemented by plugins that keep state for child
// sessions. ChildSpawned runs synchronously in [Host.SpawnChild], after the
// child exists and before anyone can reach it; an error aborts the spawn
// and the child is closed.
type ChildObserver interface {
	ChildSpawned(ctx context.Context, childID, parentID, memoryScope string) error
}

// childInfo is what the kernel keeps about a child session; it is set
// before the child can be reached and never changes.
type childInfo struct {
	name       string
	scope      string
	caps       []string
	depth      int
	depthLimit int
	maxSteps   int
	created    time.Time
}

// ChildInfo describes a child session.
type ChildInfo struct {
	Name         string
	MemoryScope  string
	Capabilities []string
	Depth        int
	// DepthLimit is the deepest depth the child's subtree may reach.
	DepthLimit int
	// MaxSteps is the step limit (0: none); Steps the requests admitted so far.
	MaxSteps int
	Steps    int
	Created  time.Time
}

// SpawnChild creates a child session of parent that waits for its
// handshake, with its own random token, which it returns and which only
// this child accepts (spec §5, docs/DECISIONS.md, Transports). Capabilities must be a
// subset of the parent's, and the child's depth must be within the
// parent's depth limit and opts.MaxDepth. Every [ChildObserver] is told
// before SpawnChild returns; if one fails, the child is closed and the
// error returned.
func (h *Host) SpawnChild(ctx context.Context, parent *Session, opts ChildOptions) (*Session, string, error) {
	if parent == nil || !parent.Live() {
		return nil, "", fmt.Errorf("spawn: %w: the parent session is not live", wire.ErrInvalid)
	}
	if !memoryScopes[opts.MemoryScope] {
		return nil, "", fmt.Errorf("spawn: memory scope %q: %w: want shared, restricted, isolated or snapshot", opts.MemoryScope, wire.ErrInvalid)
	}
	if opts.MaxDepth < 0 || opts.MaxSteps < 0 {
		return nil, "", fmt.Errorf("spawn: %w: negative limit", wire.ErrInvalid)
	}
	caps := map[string]bool{}
	for _, c := range opts.Capabilities {
		if !parent.Enabled(c) {
			return nil, "", fmt.Errorf("spawn: capability %q: %w: it is not enabled for the parent session, and a child gets a subset of its parent's", c, wire.ErrDenied)
		}
		caps[c] = true
	}
	depth, limit := 1, opts.MaxDepth
	if pi := parent.child; pi != nil {
		depth = pi.depth + 1
		if limit == 0 || limit > pi.depthLimit {
			limit = pi.depthLimit
		}
	}
	if limit > 0 && depth > limit {
		return nil, "", &wire.Error{Code: wire.CodeRuntimeError,
			Message: fmt.Sprintf("depth limit: a subagent at depth %d is beyond the limit of %d", depth, limit),
			Detail:  map[string]any{"reason": "depth_limit", "depth": depth, "limit": limit}}
	}
	names := make([]string, 0, len(caps))
	for c := range caps {
		names = append(names, c)
	}
	sort.Strings(names)
	token := GenerateToken()
	sum := sha256.Sum256([]byte(token))
	child, err := h.newSession(nil, parent, &sum, &childInfo{name: opts.Name, scope: opts.MemoryScope, caps: names,
		depth: depth, depthLimit: limit, maxSteps: opts.MaxSteps})
	if err != nil {
		return nil, "", fmt.Errorf("spawn: %w", err)
	}
	// Link under the parent's lock: Close marks the parent closed before it
	// takes the lock to collect its children, so either this sees the close
	// or the close sees this child.
	parent.mu.Lock()
	if sessionState(parent.state.Load()) == stateClosed {
		parent.mu.Unlock()
		child.Close()
		return nil, "", fmt.Errorf("spawn: %w: the parent session ended", ErrSessionClosed)
	}
	if parent.kids == nil {
		parent.kids = map[*Session]struct{}{}
	}
	parent.kids[child] = struct{}{}
	parent.mu.Unlock()
	if err := h.prepareChildDir(child, parent, opts.MemoryScope); err != nil {
		child.Close()
		return nil, "", fmt.Errorf("spawn: %w", err)
	}
	for _, o := range h.childObservers {
		if err := o.v.ChildSpawned(ctx, child.handle, parent.handle, opts.MemoryScope); err != nil {
			child.Close()
			return nil, "", fmt.Errorf("spawn: plugin %q: %w", o.p.Name, err)
		}
	}
	h.log.Info("child session spawned", "session", child.handle, "parent", parent.handle, "depth", depth, "memory_scope", opts.MemoryScope)
	return child, token, nil
}

// Child returns what the kernel knows about a child session; ok is false
// for a top-level session.
func (s *Session) Child() (ChildInfo, bool) {
	ci := s.child
	if ci == nil {
		return ChildInfo{}, false
	}
	return ChildInfo{Name: ci.name, MemoryScope: ci.scope, Capabilities: append([]string(nil), ci.caps...),
		Depth: ci.depth, DepthLimit: ci.depthLimit, MaxSteps: ci.maxSteps, Steps: int(s.steps.Load()), Created: ci.created}, true
}

// Depth returns the session's depth in its session tree (0 for a top-level session).
func (s *Session) Depth() int {
	if s.child == nil {
		return 0
	}
	return s.child.depth
}

// Children returns the session's child sessions that have not ended.
func (s *Session) Children() []*Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Session, 0, len(s.kids))
	for k := range s.kids {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// State names the session's state: waiting (for its handshake), live,
// draining or closed.
func (s *Session) State() string {
	switch sessionState(s.state.Load()) {
	case stateNew:
		return "waiting"
	case stateLive:
		return "live"
	case stateDraining:
		return "draining"
	}
	return "closed"
}

// takeStep counts one request of a child session against its step limit
// and keeps its ancestors from expiring while it works. It returns the
// error that refuses the request past the limit, or nil. The error is a
// runtime_error (retryable per spec §7's table, as every runtime_error)
// with detail.reason "step_limit": no retry on this session can succeed.
func (s *Session) takeStep() *wire.Error {
	ci := s.child
	if ci == nil {
		return nil
	}
	n := s.steps.Add(1)
	if ci.maxSteps > 0 && n > int64(ci.maxSteps) {
		s.steps.Add(-1)
		return &wire.Error{Code: wire.CodeRuntimeError,
			Message: fmt.Sprintf("step limit: this subagent may make %d requests and has made them all", ci.maxSteps),
			Detail:  map[string]any{"reason": "step_limit", "limit": ci.maxSteps}}
	}
	for p := s.parent; p != nil; p = p.parent {
		p.touch()
	}
	return nil
}

// closeChildren closes the session's children (each closes its own), and
// unlinks the session from its parent. Close calls it once the session is
// marked closed, so no child can be added afterwards.
func (s *Session) closeChildren() {
	s.mu.Lock()
	kids := make([]*Session, 0, len(s.kids))
	for k := range s.kids {
		kids = append(kids, k)
	}
	s.kids = nil
	s.mu.Unlock()
	for _, k := range kids {
		k.Close()
	}
	if p := s.parent; p != nil {
		p.mu.Lock()
		delete(p.kids, s)
		p.mu.Unlock()
	}
}

// ConnectLinesTo attaches an in-process JSON pipe to a child session that
// waits for its handshake (docs/DECISIONS.md, Transports: a client reaches a child by
// its id and handshakes with the child's own token).
func (h *Host) ConnectLinesTo(sessionID string, buffer int) (*LinePipe, error) {
	q := newQueue[[]byte](buffer)
	s, err := h.attachChild(sessionID, lineSink{q})
	if err != nil {
		return nil, err
	}
	return &LinePipe{s: s, q: q}, nil
}

// ConnectDirectTo attaches an in-process direct pipe to a child session
// that waits for its handshake; see [Host.ConnectLinesTo].
func (h *Host) ConnectDirectTo(sessionID string, buffer int) (*DirectPipe, error) {
	q := newQueue[*wire.Packet](buffer)
	s, err := h.attachChild(sessionID, directSink{q})
	if err != nil {
		return nil, err
	}
	return &DirectPipe{s: s, q: q}, nil
}

func (h *Host) attachChild(id string, sink Sink) (*Session, error) {
	s, ok := h.Session(id)
	if !ok || !s.HostMade() || sessionState(s.state.Load()) != stateNew {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotWaitingChild)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sink != nil {
		return nil, fmt.Errorf("session %q: %w", id, errAttached)
	}
	s.sink = sink
	return s, nil
}

// closeOrDetach ends the connection of sink to s. A session the host made
// (a child, a fork, an operator's) that has not handshaken yet only loses
// the connection and waits on for its handshake, until its handshake
// timeout: whoever attached and failed to handshake — another tenant
// holding its id, say — leaves it as it was for the one it was made for.
// Any other session ends with its connection.
func (s *Session) closeOrDetach(sink Sink) {
	if s.HostMade() && sessionState(s.state.Load()) == stateNew {
		s.mu.Lock()
		if s.sink == sink && sessionState(s.state.Load()) == stateNew {
			s.sink = nil
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	s.Close()
}
