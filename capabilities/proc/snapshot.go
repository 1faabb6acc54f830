package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// savedProc is one process in a session snapshot: only what its record
// shows. Processes cannot be saved, so a restore reports them lost (docs/DECISIONS.md, State).
type savedProc struct {
	ID        string    `json:"id"`
	Argv      []string  `json:"argv"`
	Cwd       string    `json:"cwd"`
	Sandboxed bool      `json:"sandboxed"`
	Started   time.Time `json:"started"`
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
				out.Procs = append(out.Procs, savedProc{ID: pr.id, Argv: pr.argv, Cwd: pr.cwd, Sandboxed: pr.sandboxed, Started: pr.started})
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
