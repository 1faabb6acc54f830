package chains

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/persist"
)

// savedState is the chains part of a session snapshot: the definitions
// stored with chain/define, by name. Runs in flight are not kept; a chain
// run is one request, and a request does not survive a snapshot.
type savedState struct {
	Version int                            `json:"version"`
	Chains  map[string]msg.ChainDefinition `json:"chains"`
}

const stateVersion = 1

// Snapshot saves the session's stored chain definitions.
func (p *Plugin) Snapshot(ctx context.Context, sessionID string) ([]byte, error) {
	st := savedState{Version: stateVersion, Chains: map[string]msg.ChainDefinition{}}
	if sc, ok := p.sessions.Get(sessionID); ok {
		sc.mu.Lock()
		for name, d := range sc.defs {
			st.Chains[name] = d.def
		}
		sc.mu.Unlock()
	}
	return json.Marshal(st)
}

// Restore replaces the session's stored chains with those of the snapshot.
// Each definition is compiled again against today's registry, so a chain
// naming a message type this host no longer serves is refused and nothing
// changes. The kernel has forgotten the session's chains before it calls
// Restore; the session's entry is replaced whole anyway, for a direct caller.
func (p *Plugin) Restore(ctx context.Context, sessionID string, state []byte) error {
	var st savedState
	if err := persist.DecodeState("chains", state, stateVersion, &st); err != nil {
		return err
	}
	if len(st.Chains) > p.MaxDefinitions {
		return fmt.Errorf("chains state holds %d chains; this host allows %d (max_definitions)", len(st.Chains), p.MaxDefinitions)
	}
	m := make(map[string]stored, len(st.Chains))
	for _, name := range slices.Sorted(maps.Keys(st.Chains)) {
		def := st.Chains[name]
		// The same checks as chain/define: the name's pattern, the graph's shape.
		if err := (&msg.ChainDefineReq{Name: name, Chain: def}).Validate(); err != nil {
			return fmt.Errorf("chains state: chain %q: %w", name, err)
		}
		g, err := compile(&def, p.reg)
		if err != nil {
			return fmt.Errorf("chains state: chain %q: %w", name, err)
		}
		m[name] = stored{g: g, def: def}
	}
	sc, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		return err
	}
	sc.mu.Lock()
	sc.defs = m
	sc.mu.Unlock()
	return nil
}
