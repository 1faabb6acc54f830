package memory

import (
	"context"
	"fmt"

	"github.com/aephost/aep/wire"
)

// Scope is the memory scope a child (subagent) session is spawned with
// (spec §1: shared, restricted, isolated, snapshot). It decides what the
// child's working tier resolves to; persistent tiers are scoped by
// namespace and are unaffected. The kernel keeps it with the child
// (server.ChildInfo.MemoryScope), so it outlives a restore of the child's
// memory.
type Scope string

// The four scopes.
const (
	// ScopeShared: the child reads and writes its parent's working store.
	ScopeShared Scope = "shared"
	// ScopeRestricted: the child reads its parent's working store; any
	// write fails with [ErrReadOnly].
	ScopeRestricted Scope = "restricted"
	// ScopeIsolated: the child has its own, empty working store.
	ScopeIsolated Scope = "isolated"
	// ScopeSnapshot: the child has its own copy of the parent's working
	// store as it was when the child was spawned.
	ScopeSnapshot Scope = "snapshot"
)

// Errors of scope views; retrying cannot succeed. A write the session's
// scope does not allow is refused by scope (denied), a condition of the
// session, never schema_violation (docs/DECISIONS.md, Errors of state).
var (
	ErrReadOnly = fmt.Errorf("working memory is read-only in a restricted scope: %w", wire.ErrDenied)
	ErrNoParent = fmt.Errorf("the parent session is gone: %w", wire.ErrInvalid)
	ErrBadScope = fmt.Errorf("unknown memory scope (shared, restricted, isolated, snapshot): %w", wire.ErrInvalid)
)

// ChildSpawned sets up the working store of a child session the kernel
// has just created (server.ChildObserver): the kernel calls it before the
// child can be reached, and a refusal aborts the spawn. Only a snapshot
// scope needs work here: the parent's working store, as the parent
// resolves it, is copied now; isolated children start empty, and shared
// or restricted ones resolve to their parent's store at each access.
func (p *Plugin) ChildSpawned(ctx context.Context, childID, parentID, memoryScope string) error {
	switch sc := Scope(memoryScope); sc {
	case ScopeShared, ScopeRestricted, ScopeIsolated:
		return nil
	case ScopeSnapshot:
		ws, _, err := p.working(parentID)
		if err != nil {
			return err
		}
		copyOf := ws.clone()
		sm, err := p.sessions.GetOrCreate(childID)
		if err != nil {
			return err
		}
		sm.mu.Lock()
		sm.working = copyOf
		sm.mu.Unlock()
		return nil
	}
	return fmt.Errorf("scope %q: %w", memoryScope, ErrBadScope)
}

// scopeOf returns a session's memory scope and its parent's id, from the
// kernel's child link; a top-level session has no scope.
func (p *Plugin) scopeOf(sessionID string) (Scope, string) {
	if p.host == nil {
		return "", ""
	}
	s, ok := p.host.SessionByHandle(sessionID)
	if !ok {
		return "", ""
	}
	ci, ok := s.Child()
	if !ok || s.Parent() == nil {
		return "", ""
	}
	return Scope(ci.MemoryScope), s.Parent().Handle()
}

// working resolves the working store a session reads and writes, and
// whether it is read-only: a shared or restricted child resolves to what
// its parent resolves to, read-only if any step on the way is restricted.
// The kernel keeps the session tree acyclic and bounded by its depth
// limit, so the walk ends.
func (p *Plugin) working(sessionID string) (*workingStore, bool, error) {
	ro := false
	id := sessionID
	for {
		sc, parent := p.scopeOf(id)
		if sc != ScopeShared && sc != ScopeRestricted {
			sm, err := p.sessions.GetOrCreate(id)
			if err != nil {
				if id != sessionID {
					return nil, false, fmt.Errorf("session %q: %w", sessionID, ErrNoParent)
				}
				return nil, false, err
			}
			sm.mu.Lock()
			ws := sm.working
			sm.mu.Unlock()
			return ws, ro, nil
		}
		ro = ro || sc == ScopeRestricted
		id = parent
	}
}
