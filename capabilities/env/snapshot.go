package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aephost/aep/server/persist"
)

// savedEpisode is one episode in a session snapshot.
type savedEpisode struct {
	ID      string          `json:"id"`
	EnvName string          `json:"env_name"`
	Status  string          `json:"status"`
	Step    int             `json:"step"`
	Total   float64         `json:"total_reward"`
	Obs     json.RawMessage `json:"observation"`
	// State is the environment's own state, random state included; absent
	// for environments that cannot save state.
	State []byte `json:"state,omitempty"`
}

type savedSession struct {
	Version  int            `json:"version"`
	Episodes []savedEpisode `json:"episodes"`
}

// Snapshot saves the session's open episodes (docs/DECISIONS.md, State). The data root
// is not part of it: it is files on the host, outside the session state.
func (p *Plugin) Snapshot(ctx context.Context, sessionID string) ([]byte, error) {
	out := savedSession{Version: 1, Episodes: []savedEpisode{}}
	if se := p.session(sessionID); se != nil {
		se.mu.Lock()
		eps := make([]*episode, 0, len(se.episodes))
		for _, ep := range se.episodes {
			eps = append(eps, ep)
		}
		se.mu.Unlock()
		for _, ep := range eps {
			ep.mu.Lock()
			if ep.dead == nil {
				sv := savedEpisode{ID: ep.id, EnvName: ep.envName, Status: ep.status, Step: ep.step, Total: ep.total, Obs: ep.obs}
				if st := ep.inst.stateful(); st != nil {
					b, err := st.SaveState()
					if err != nil {
						ep.mu.Unlock()
						return nil, fmt.Errorf("saving episode %q of %q: %w", ep.id, ep.envName, err)
					}
					sv.State = b
				}
				out.Episodes = append(out.Episodes, sv)
			}
			ep.mu.Unlock()
		}
	}
	return json.Marshal(out)
}

// Restore replaces the session's episodes with the saved ones. Episodes of
// environments that cannot save state, or that this host no longer serves,
// come back closed: their ids answer "closed" with the reason. The kernel
// has dropped the session's episodes before it calls Restore; any found
// anyway (a direct caller) are closed as replaced.
func (p *Plugin) Restore(ctx context.Context, sessionID string, state []byte) error {
	var saved savedSession
	if err := persist.DecodeState("env", state, 1, &saved); err != nil {
		return err
	}
	fresh := newSessionEnvs(sessionID)
	for _, sv := range saved.Episodes {
		f, ok := p.catalog[sv.EnvName]
		if !ok {
			fresh.bury(sv.ID, fmt.Sprintf("restored closed: environment %q is not served by this host", sv.EnvName))
			continue
		}
		if sv.State == nil {
			fresh.bury(sv.ID, fmt.Sprintf("restored closed: environment %q cannot save its state", sv.EnvName))
			continue
		}
		inst, err := f.new(sessionID)
		if err != nil {
			fresh.bury(sv.ID, fmt.Sprintf("restored closed: %v", err))
			continue
		}
		st := inst.stateful()
		if st == nil {
			_ = inst.close()
			fresh.bury(sv.ID, fmt.Sprintf("restored closed: environment %q cannot save its state", sv.EnvName))
			continue
		}
		if err := st.LoadState(sv.State); err != nil {
			_ = inst.close()
			fresh.bury(sv.ID, fmt.Sprintf("restored closed: loading state: %v", err))
			continue
		}
		fresh.episodes[sv.ID] = &episode{id: sv.ID, envName: sv.EnvName, f: f, inst: inst,
			status: sv.Status, step: sv.Step, total: sv.Total, obs: sv.Obs}
	}
	se, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		p.closeAll(fresh, err)
		return err
	}
	se.mu.Lock()
	old := se.episodes
	se.episodes, se.gone, se.goneFIFO = fresh.episodes, fresh.gone, fresh.goneFIFO
	se.mu.Unlock()
	for _, ep := range old {
		p.closeEpisode(ep, errors.New("replaced by a restored snapshot"))
	}
	return nil
}
