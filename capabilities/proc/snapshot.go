package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/persist"
)

// savedProc is one process in a session snapshot: only what its record
// shows. Processes cannot be saved, so a restore reports them lost (docs/DECISIONS.md, State).
type savedProc struct {
	ID        string    `json:"id"`
	Argv      []string  `json:"argv"`
	Cwd       string    `json:"cwd"`
	Sandboxed bool      `json:"sandboxed"`
	Started   time.Time `json:"started"`
	// Running says the process was running when its state was taken; a
	// fork reports such processes as not forked (RestoreFork).
	Running bool `json:"running,omitempty"`
}

type savedTable struct {
	Version int         `json:"version"`
	Procs   []savedProc `json:"procs"`
}

// Snapshot saves the records of the session's processes. The environment
// given at spawn is not saved: it may hold secrets.
func (p *Plugin) Snapshot(ctx context.Context, sessionID string) ([]byte, error) {
	out := savedTable{Version: 1, Procs: []savedProc{}}
	if t, ok := p.sessions.Get(sessionID); ok {
		t.mu.Lock()
		for _, id := range t.order {
			if pr := t.procs[id]; pr != nil {
				out.Procs = append(out.Procs, savedProc{ID: pr.id, Argv: pr.argv, Cwd: pr.cwd, Sandboxed: pr.sandboxed, Started: pr.started, Running: pr.running()})
			}
		}
		t.mu.Unlock()
	}
	return json.Marshal(out)
}

// Restore replaces the session's table with the snapshot's processes, every
// one of them lost. The kernel has dropped the session's table (killing its
// processes) before it calls Restore; any found anyway (a direct caller)
// are killed.
func (p *Plugin) Restore(ctx context.Context, sessionID string, state []byte) error {
	var in savedTable
	if err := json.Unmarshal(state, &in); err != nil {
		return fmt.Errorf("proc snapshot: %w", err)
	}
	t, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		return err
	}
	t.mu.Lock()
	old := make([]*process, 0, len(t.procs))
	for _, pr := range t.procs {
		old = append(old, pr)
	}
	t.procs, t.order = map[string]*process{}, nil
	for _, sp := range in.Procs {
		t.procs[sp.ID] = &process{id: sp.ID, argv: sp.Argv, cwd: sp.Cwd, sandboxed: sp.Sandboxed, started: sp.Started, lost: true}
		t.order = append(t.order, sp.ID)
	}
	t.mu.Unlock()
	killAll(old)
	return nil
}

// RestoreFork restores the records into a fork as Restore does, every
// process lost there, and names the processes that were running: a
// process is not forked (docs/DECISIONS.md, Session fork), it keeps
// running in the source session only.
func (p *Plugin) RestoreFork(ctx context.Context, sessionID string, state []byte) ([]msg.NotForked, error) {
	if err := p.Restore(ctx, sessionID, state); err != nil {
		return nil, err
	}
	var in savedTable
	if err := json.Unmarshal(state, &in); err != nil {
		return nil, fmt.Errorf("proc snapshot: %w", err)
	}
	out := []msg.NotForked{}
	for _, sp := range in.Procs {
		if sp.Running {
			out = append(out, msg.NotForked{Kind: "process", ID: sp.ID,
				Reason: "a running process is not forked: it keeps running in the source session; the fork lists it as lost"})
		}
	}
	return out, nil
}

var _ persist.Forker = (*Plugin)(nil)
