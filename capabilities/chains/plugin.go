// Package chains is the chains capability (spec §1 table, 2.11): directed
// acyclic graphs of action, branch, map, gather and reduce nodes, run in
// topological order with independent nodes in parallel. Action and map
// nodes reach other capabilities only through the kernel's internal
// dispatch ([wire.Scope.Dispatch]), as a client would (spec §1 dispatch
// rule 5, docs/DECISIONS.md, Dispatch), so this package imports no other capability.
// Templates resolve with gjson paths and expressions run on expr-lang;
// docs/chains.md describes the graph language.
package chains

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

// ModuleID is the module of the chains capability.
const ModuleID = "aep.chains.builtin"

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module ModuleID, the chains capability,
// named chains.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: ModuleID, Capability: "chains", DefaultName: "chains.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Plugin serves the chain namespace.
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/chains.json, docs/config.md).
	Settings `yaml:",inline"`

	reg *wire.Registry
	log *slog.Logger
	// sessions holds each session's stored chains; the kernel forgets them
	// when the session ends and before a restore.
	sessions *server.SessionState[sessionChains]
}

// sessionChains is one session's stored chains, by name.
type sessionChains struct {
	mu   sync.Mutex
	defs map[string]stored
}

// stored is a defined chain: compiled for runs, and its definition for
// snapshots.
type stored struct {
	g   *graph
	def msg.ChainDefinition
}

// Provision takes the host's type registry, which builds the requests of
// action nodes.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	if env.Host != nil {
		p.reg = env.Host.Registry()
	} else {
		p.reg = msg.Registry()
	}
	if p.MaxDefinitions == 0 {
		p.MaxDefinitions = 256
	}
	p.log = env.Logger
	p.sessions = server.NewSessionState(env, func(string) *sessionChains {
		return &sessionChains{defs: map[string]stored{}}
	}, nil)
	return nil
}

// Validate checks the settings.
func (p *Plugin) Validate() error {
	if p.MaxDefinitions < 0 {
		return fmt.Errorf("max_definitions must not be negative")
	}
	return nil
}

// ChainDefine validates a chain and stores it under a name for the session.
func (p *Plugin) ChainDefine(ctx context.Context, s wire.Scope, req *msg.ChainDefineReq) (*msg.ChainDefineResp, error) {
	g, err := compile(&req.Chain, p.reg)
	if err != nil {
		return nil, err
	}
	sc, err := p.sessions.GetOrCreate(s.SessionID())
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, ok := sc.defs[req.Name]; !ok && len(sc.defs) >= p.MaxDefinitions {
		return nil, fmt.Errorf("%w: the session already stores %d chains", wire.ErrInvalid, len(sc.defs))
	}
	sc.defs[req.Name] = stored{g: g, def: req.Chain}
	return &msg.ChainDefineResp{Name: req.Name, Nodes: len(req.Chain.Nodes)}, nil
}

// ChainRun validates and runs a chain, inline or stored.
func (p *Plugin) ChainRun(ctx context.Context, s wire.Scope, req *msg.ChainRunReq) (*msg.ChainRunResp, error) {
	// The timeout's bounds and "exactly one of name or chain" are the
	// schema's (schemas/chains.json), checked by the generated Validate.
	var g *graph
	switch {
	case req.Name != nil:
		if sc, ok := p.sessions.Get(s.SessionID()); ok {
			sc.mu.Lock()
			g = sc.defs[*req.Name].g
			sc.mu.Unlock()
		}
		if g == nil {
			return nil, fmt.Errorf("%w: no chain named %q is defined in this session", wire.ErrNotFound, *req.Name)
		}
	default:
		var err error
		if g, err = compile(req.Chain, p.reg); err != nil {
			return nil, err
		}
	}
	var input []byte
	if req.Input != nil {
		input = *req.Input
	}
	return execute(ctx, s, p.reg, p.log, g, input, req.MaxConcurrency, secondsToDuration(req.Timeout))
}

var (
	_ msg.ChainHandler    = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ server.Validator    = (*Plugin)(nil)
	_ persist.Snapshotter = (*Plugin)(nil)
)
