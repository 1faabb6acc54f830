package memory

import (
	"fmt"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Scope is the memory scope a child (subagent) session is spawned with
// (spec §1: shared, restricted, isolated, snapshot). It decides what the
// child's working tier resolves to; persistent tiers are scoped by
// namespace and are unaffected.
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
	// store as it was when the scope was set (at spawn).
	ScopeSnapshot Scope = "snapshot"
)

// Errors of scope views. ErrReadOnly wraps wire.ErrInvalid: retrying the
// write cannot succeed.
var (
	ErrReadOnly   = fmt.Errorf("working memory is read-only in a restricted scope: %w", wire.ErrInvalid)
	ErrNoParent   = fmt.Errorf("the parent session is gone: %w", wire.ErrInvalid)
	ErrBadScope   = fmt.Errorf("unknown memory scope (shared, restricted, isolated, snapshot): %w", wire.ErrInvalid)
	ErrScopeOwner = fmt.Errorf("session is not a child of the named parent: %w", wire.ErrInvalid)
)

// Link tells the plugin a session's parent: the kernel's parent link
// (server.Session.Parent) by default; tests pass a double.
type Link interface {
	// Parent returns the id of sessionID's parent session; ok is false for
	// a root session or an unknown one.
	Parent(sessionID string) (parentID string, ok bool)
}

// kernelLink reads the parent link of the host's live sessions.
type kernelLink struct{ h *server.Host }

func (k kernelLink) Parent(id string) (string, bool) {
	s, ok := k.h.Session(id)
	if !ok || s.Parent() == nil {
		return "", false
	}
	return s.Parent().ID(), true
}

// ScopeSetter is what the subagents capability calls, without importing
// this package, on the memory plugin it finds through server.Host.PluginImpl:
//
//	type memoryScopes interface{ SetScope(child, parent, scope string) error }
//	if ms, ok := impl.(memoryScopes); ok { err = ms.SetScope(childID, parentID, "restricted") }
type ScopeSetter interface {
	SetScope(childID, parentID, scope string) error
}

// SetScope registers the memory scope of a child session, right after the
// kernel creates it and before it handles a request. The link must report
// parentID as the child's parent. For ScopeSnapshot the parent's working
// store (as the parent itself resolves it) is copied now.
func (p *Plugin) SetScope(childID, parentID, scope string) error {
	sc := Scope(scope)
	switch sc {
	case ScopeShared, ScopeRestricted, ScopeIsolated, ScopeSnapshot:
	default:
		return fmt.Errorf("scope %q: %w", scope, ErrBadScope)
	}
	if childID == "" || childID == parentID {
		return fmt.Errorf("child %q of parent %q: %w", childID, parentID, ErrScopeOwner)
	}
	if got, ok := p.link.Parent(childID); !ok || got != parentID {
		return fmt.Errorf("child %q, parent %q: %w", childID, parentID, ErrScopeOwner)
	}
	var copyOf *workingStore
	if sc == ScopeSnapshot {
		ws, _, err := p.working(parentID)
		if err != nil {
			return err
		}
		copyOf = ws.clone()
	}
	sm := p.session(childID)
	sm.mu.Lock()
	sm.scope = sc
	switch sc {
	case ScopeIsolated:
		sm.working = newWorkingStore()
	case ScopeSnapshot:
		sm.working = copyOf
	}
	sm.mu.Unlock()
	return nil
}

// maxScopeDepth bounds the walk up the parent links, which the kernel
// keeps acyclic; the bound only guards against a faulty Link.
const maxScopeDepth = 64

// working resolves the working store a session reads and writes, and
// whether it is read-only: a shared or restricted child resolves to what
// its parent resolves to, read-only if any step on the way is restricted.
func (p *Plugin) working(sessionID string) (*workingStore, bool, error) {
	ro := false
	id := sessionID
	for range maxScopeDepth {
		sm := p.session(id)
		sm.mu.Lock()
		sc, ws := sm.scope, sm.working
		sm.mu.Unlock()
		if sc != ScopeShared && sc != ScopeRestricted {
			return ws, ro, nil
		}
		parent, ok := p.link.Parent(id)
		if !ok {
			return nil, false, fmt.Errorf("session %q (memory scope %s): %w", id, sc, ErrNoParent)
		}
		ro = ro || sc == ScopeRestricted
		id = parent
	}
	return nil, false, fmt.Errorf("session %q: parent links deeper than %d", sessionID, maxScopeDepth)
}
