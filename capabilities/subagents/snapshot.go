package subagents

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

// Snapshots (docs/DECISIONS.md, State: snapshots record the subagent tree). A snapshot
// of a session holds the records of its whole subtree as they are at that
// moment — never a token: the kernel keeps only hashes of those. On
// restore the records come back as history: a subagent whose session is
// not live in the restored session's subtree is reported ended, with
// reason "restored", since its session, its connection and its token did
// not survive (a snapshot cannot re-create an agent on the other end).
// Live subagents of the session restored into are kept as they are.

const stateVersion = 1

type savedState struct {
	Version   int                  `json:"version"`
	SessionID string               `json:"session_id"`
	Subagents []msg.SubagentRecord `json:"subagents"`
}

// RestoredReason is the reason of a record brought back by a restore.
const RestoredReason = "restored from a snapshot: its session did not survive"

// Snapshot saves the records of the session's subtree.
func (p *Plugin) Snapshot(ctx context.Context, sessionID string) ([]byte, error) {
	p.mu.Lock()
	sub := p.subtreeLocked(sessionID)
	p.mu.Unlock()
	st := savedState{Version: stateVersion, SessionID: sessionID, Subagents: make([]msg.SubagentRecord, 0, len(sub))}
	for _, r := range sub {
		st.Subagents = append(st.Subagents, p.wireRecord(r))
	}
	return json.Marshal(st)
}

// Restore replaces the session's ended subagent records with those of the
// snapshot, which all come back ended (live subagents stay).
func (p *Plugin) Restore(ctx context.Context, sessionID string, state []byte) error {
	var st savedState
	if err := persist.DecodeState("subagents", state, stateVersion, &st); err != nil {
		return err
	}
	for i := range st.Subagents {
		if err := st.Subagents[i].Validate(); err != nil {
			return fmt.Errorf("subagents state: %w", wire.Nest(fmt.Sprintf("subagents[%d]", i), err))
		}
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	// Keep the live records (and what is under them); drop the rest.
	var kept []*record
	for _, r := range p.tree[sessionID] {
		if r.sess != nil {
			kept = append(kept, r)
			continue
		}
		if !r.Restored {
			p.dropLocked(r.ID)
		}
	}
	liveHere := map[string]bool{}
	for _, r := range p.subtreeLocked(sessionID) {
		if r.sess != nil {
			liveHere[r.ID] = true
		}
	}
	for _, w := range st.Subagents {
		if liveHere[w.SubagentID] {
			continue
		}
		r := &record{ID: w.SubagentID, Name: w.Name, ParentID: w.ParentID, Scope: string(w.MemoryScope),
			Caps: w.Capabilities, Depth: w.Depth, MaxDepth: w.MaxDepth, MaxSteps: w.MaxSteps, Steps: w.Steps,
			Status: string(w.Status), Created: wire.FromEpoch(w.CreatedAt), Restored: true}
		if r.ParentID == st.SessionID {
			r.ParentID = sessionID
		}
		if w.Reason != nil {
			r.Reason = *w.Reason
		}
		if w.EndedAt != nil {
			r.Ended = wire.FromEpoch(*w.EndedAt)
		}
		if r.Status != StatusEnded && r.Status != StatusTerminated {
			r.Status, r.Reason, r.Ended = StatusEnded, RestoredReason, now
		}
		kept = append(kept, r)
	}
	if kept == nil {
		delete(p.tree, sessionID)
	} else {
		p.tree[sessionID] = kept
	}
	return nil
}
