package memory

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aephost/aep/server"
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
	sm := p.session(sessionID)
	sm.mu.Lock()
	out := savedSession{Version: 1, Handles: make(map[string]handle, len(sm.handles)), Scope: sm.scope}
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
// saved ones. A shared or restricted child's working store is its parent's,
// which a child's restore must not overwrite: it is refused.
func (p *Plugin) Restore(ctx context.Context, sessionID string, state []byte) error {
	var saved savedSession
	if err := server.DecodeState("memory", state, 1, &saved); err != nil {
		return err
	}
	sm := p.session(sessionID)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.scope == ScopeShared || sm.scope == ScopeRestricted {
		return fmt.Errorf("memory snapshot: session %q uses its parent's working memory (scope %s); restore the parent: %w", sessionID, sm.scope, ErrReadOnly)
	}
	if saved.Handles == nil {
		saved.Handles = map[string]handle{}
	}
	sm.handles = saved.Handles
	sm.working = loadWorking(saved.Working)
	return nil
}
