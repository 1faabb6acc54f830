package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

// ModuleID is the module of the built-in tools.
const ModuleID = "aep.tools.builtin"

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module ModuleID, the tools capability,
// named tools.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: ModuleID, Capability: "tools", DefaultName: "tools.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Plugin serves tool/list and tool/call for one registry. As the module
// "aep.tools.builtin" it holds the built-in workspace tools; [NewPlugin]
// serves a registry of the embedder's own tools.
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/tools.json, docs/config.md).
	Settings `yaml:",inline"`

	reg    *toolrun.Registry
	custom bool
	opts   toolrun.Options
	ws     *workspace   // without a host: the one workspace at Root
	host   *server.Host // with one: each session's directory (server/persist/dirs.go)
}

// NewPlugin returns a plugin serving reg's tools instead of the built-ins.
func NewPlugin(reg *toolrun.Registry) *Plugin { return &Plugin{reg: reg, custom: true} }

// Registry returns the plugin's registry.
func (p *Plugin) Registry() *toolrun.Registry { return p.reg }

// Provision opens the workspace and registers the built-in tools.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	p.opts = toolrun.Options{MaxOutputBytes: p.MaxOutputBytes, MaxStreamBytes: p.MaxStreamBytes, Logger: env.Logger}
	if env.Host != nil {
		p.opts.Policy = env.Host.Config().Server.ToolPolicy
	}
	if p.custom {
		return nil
	}
	execOK := p.Exec == nil || *p.Exec
	mode := sandbox.ModeAuto
	var quota int64
	if env.Host != nil {
		// Each session works in its own directory; Root is not used.
		p.host = env.Host
		mode, quota = env.Host.SandboxMode(), env.Host.SessionQuota()
		if execOK {
			if _, _, err := sandbox.Describe(mode); err != nil {
				return fmt.Errorf("run_command needs the configured sandbox (server.isolation.sandbox): %w", err)
			}
		}
		p.reg = toolrun.NewRegistry()
		return registerBuiltins(p.reg, execOK, runContained(mode, quota))
	}
	if p.Root == "" {
		base := env.DataDir
		if base == "" {
			base = "aep-data"
		}
		p.Root = filepath.Join(base, "workspace")
	}
	if err := os.MkdirAll(p.Root, 0o755); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	ws, err := openWorkspace(p.Root)
	if err != nil {
		return err
	}
	p.ws = ws
	p.reg = toolrun.NewRegistry()
	return registerBuiltins(p.reg, execOK, runContained(mode, quota))
}

// Cleanup closes the workspace.
func (p *Plugin) Cleanup() error {
	if p.ws != nil {
		return p.ws.root.Close()
	}
	return nil
}

// Claims makes the plugin's tool names unique across plugins (docs/DECISIONS.md, Dispatch).
func (p *Plugin) Claims() []server.Claim {
	if p.reg == nil {
		return nil
	}
	names := p.reg.Names()
	out := make([]server.Claim, len(names))
	for i, n := range names {
		out[i] = server.Claim{Kind: "tool", Name: n}
	}
	return out
}

// ToolList answers with the plugin's page of matching tools; the kernel
// merges the pages of every tool-serving plugin (docs/DECISIONS.md, Dispatch).
func (p *Plugin) ToolList(ctx context.Context, s wire.Scope, req *msg.ToolListReq) (*msg.ToolListResp, error) {
	return p.reg.List(req, p.opts), nil
}

// ToolCall runs a tool this plugin owns and declines other names, so the
// owner answers and the UNKNOWN_TOOL fallback covers the rest.
func (p *Plugin) ToolCall(ctx context.Context, s wire.Scope, req *msg.ToolCallReq) (*msg.ToolCallResp, error) {
	t, ok := p.reg.Lookup(req.ToolName)
	if !ok {
		return nil, wire.ErrDecline
	}
	if !p.custom {
		ws, err := p.workspace(s.SessionID())
		if err != nil {
			return nil, err
		}
		if ws != p.ws {
			defer ws.root.Close()
		}
		ctx = context.WithValue(ctx, wsKey{}, ws)
	}
	res := toolrun.Run(ctx, s, req, t.Subject(), p.opts, func(ctx context.Context) (toolrun.Output, error) {
		return t.Run(ctx, req.Arguments)
	})
	return &msg.ToolCallResp{Result: *res}, nil
}

// workspace opens the session's directory (spec §5 rule 4: one session
// never reaches another's files).
func (p *Plugin) workspace(sessionID string) (*workspace, error) {
	if p.host == nil {
		return p.ws, nil
	}
	d, err := p.host.SessionDir(sessionID)
	if err != nil {
		return nil, err
	}
	ws, err := openWorkspace(d.Path)
	if err != nil {
		return nil, err
	}
	ws.readOnly = d.ReadOnly
	ws.quota = func(n int64) error { return p.host.CheckWrite(sessionID, n) }
	return ws, nil
}

var (
	_ msg.ToolHandler     = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
	_ server.Claimer      = (*Plugin)(nil)
)
