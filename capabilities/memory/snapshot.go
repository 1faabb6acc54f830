package memory

import (
	"context"
	"encoding/json"

	"github.com/aephost/aep/server/persist"
)

// savedSession is the memory plugin's part of a session snapshot: the
// memory_ids (so they keep working after a restore) and the working store.
// Persistent tiers are not in it: they live in the store and outlast the
// session anyway (docs/DECISIONS.md, State).
type savedSession struct {
	Version int               `json:"version"`
	Handles map[string]handle `json:"handles"`
	Scope   Scope             `json:"scope,omitempty"`
	Working []savedWorking    `json:"working"`
}

// Snapshot saves the session's memory_ids and the working store it
// resolves to (a shared or restricted child saves what it sees).
func (p *Plugin) Snapshot(ctx context.Context, sessionID string) ([]byte, error) {
	sm, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		return nil, err
	}
	sc, _ := p.scopeOf(sessionID)
	sm.mu.Lock()
	out := savedSession{Version: 1, Handles: make(map[string]handle, len(sm.handles)), Scope: sc}
	for id, h := range sm.handles {
		out.Handles[id] = h
	}
	sm.mu.Unlock()
	ws, _, err := p.working(sessionID)
	if err != nil {
		return nil, err
	}
	out.Working = ws.save()
	return json.Marshal(out)
}

// Restore replaces the session's memory_ids and working store with the
// saved ones (the kernel has dropped the session's memory just before). A
// shared or restricted child's working store is its parent's, which only
// the parent's restore may change: such a child gets its memory_ids back
// and keeps reading its parent's store. Refusing instead would leave the
// child without the ids the kernel dropped, and make the kernel's
// rollback, which restores the state taken just before, fail too.
func (p *Plugin) Restore(ctx context.Context, sessionID string, state []byte) error {
	var saved savedSession
	if err := persist.DecodeState("memory", state, 1, &saved); err != nil {
		return err
	}
	sm, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		return err
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if saved.Handles == nil {
		saved.Handles = map[string]handle{}
	}
	// A restored memory_id reaches the namespaces of the restoring session's
	// tenant, whatever the saved state says: a session never holds a
	// handle on another tenant's persistent tiers.
	tenant := ""
	if p.host != nil {
		tenant = p.host.TenantKey(sessionID)
	}
	for id, h := range saved.Handles {
		h.Tenant = tenant
		saved.Handles[id] = h
	}
	sm.handles = saved.Handles
	if sc, _ := p.scopeOf(sessionID); sc != ScopeShared && sc != ScopeRestricted {
		sm.working = loadWorking(saved.Working)
	}
	return nil
}
