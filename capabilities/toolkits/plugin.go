package toolkits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/egress"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

// ModuleID is the module of the built-in toolkits.
const ModuleID = "aep.toolkits.builtin"

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module ModuleID, the toolkits capability,
// named toolkits.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: ModuleID, Capability: "toolkits", DefaultName: "toolkits.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// Plugin serves toolkit/list and toolkit/configure, and tool/list and
// tool/call for the toolkits configured in each session (docs/DECISIONS.md, Dispatch:
// the toolkits plugin also serves tools).
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/toolkits.json, docs/config.md).
	Settings `yaml:",inline"`

	kits       map[string]*Toolkit
	owner      map[string]*Toolkit // tool name → toolkit
	opts       toolrun.Options
	env        server.PluginEnv
	mode       sandbox.Mode      // the sandbox SQLite workers run in
	quota      int64             // RLIMIT_FSIZE of a worker: the session directory's quota
	endpoints  *egress.Endpoints // settings postgres_endpoints
	references map[string]string // settings reference_databases: name → host path
	// sessions holds each session's configured toolkits; the kernel closes
	// their backends when the session ends and before a restore.
	sessions *server.SessionState[session]
}

// session is one session's configured toolkits.
type session struct {
	mu      sync.Mutex
	running map[string]*instance
}

type instance struct {
	kit     *Toolkit
	backend Backend
	reg     *toolrun.Registry
	// public is the config without secrets, the only form that is kept.
	public map[string]any
	// withSecrets says a secret setting was given: a fork cannot
	// re-configure the toolkit from public alone (RestoreFork).
	withSecrets bool
}

// Defaults of the settings (schemas/config/toolkits.json).
const (
	defaultSQLiteMemory  = 128 << 20
	defaultQueryTimeout  = 30 // seconds
	defaultMaxValueBytes = 16 << 20
)

// Provision prepares the built-in toolkits.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	p.env = env
	if env.Host == nil {
		return errors.New("the toolkits need a host: their files live in each session's directory")
	}
	p.opts = toolrun.Options{MaxOutputBytes: p.MaxOutputBytes, Logger: env.Logger, Policy: env.Host.Config().Server.ToolPolicy}
	p.mode, p.quota = env.Host.SandboxMode(), env.Host.SessionQuota()
	if p.SQLiteDir != "" {
		env.Logger.Warn("toolkits: sqlite_dir is no longer used; SQLite databases live in each session's directory (docs/UPGRADING.md)", "sqlite_dir", p.SQLiteDir)
	}
	if p.SQLiteMemoryBytes == 0 {
		p.SQLiteMemoryBytes = defaultSQLiteMemory
	}
	if p.QueryTimeout == 0 {
		p.QueryTimeout = defaultQueryTimeout
	}
	if p.MaxValueBytes == 0 {
		p.MaxValueBytes = defaultMaxValueBytes
	}
	if p.MaxOutputBytes == 0 {
		p.MaxOutputBytes = toolrun.DefaultMaxOutputBytes
	}
	var err error
	if p.endpoints, err = egress.ParseEndpoints(p.PostgresEndpoints); err != nil {
		return fmt.Errorf("postgres_endpoints: %w", err)
	}
	p.references = map[string]string{}
	for _, r := range p.ReferenceDatabases {
		if !filepath.IsAbs(r.Path) {
			return fmt.Errorf("reference_databases %q: path %q must be absolute", r.Name, r.Path)
		}
		if _, dup := p.references[r.Name]; dup {
			return fmt.Errorf("reference_databases: %q is listed twice", r.Name)
		}
		if fi, err := os.Stat(r.Path); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("reference_databases %q: %s is not a regular file", r.Name, r.Path)
		}
		p.references[r.Name] = filepath.Clean(r.Path)
	}
	p.sessions = server.NewSessionState(env, func(string) *session {
		return &session{running: map[string]*instance{}}
	}, func(_ string, s *session) { s.closeAll() })
	p.kits, p.owner = map[string]*Toolkit{}, map[string]*Toolkit{}
	for _, k := range []*Toolkit{p.sqlToolkit()} {
		if err := k.compile(); err != nil {
			return err
		}
		p.kits[k.Name] = k
		for _, t := range k.Tools {
			p.owner[t] = k
		}
	}
	return nil
}

// Claims owns the toolkits' tool names host-wide, so no other plugin can
// serve a tool of the same name (docs/DECISIONS.md, Dispatch).
func (p *Plugin) Claims() []server.Claim {
	var out []server.Claim
	for name := range p.owner {
		out = append(out, server.Claim{Kind: "tool", Name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// lookupSession returns the session's toolkits, or nil before its first configure.
func (p *Plugin) lookupSession(id string) *session {
	s, _ := p.sessions.Get(id)
	return s
}

// ToolkitList reports every toolkit with the session's configured flag and
// state (spec §4.2 Toolkit list); filter_tags matches any of the tags.
func (p *Plugin) ToolkitList(ctx context.Context, s wire.Scope, req *msg.ToolkitListReq) (*msg.ToolkitListResp, error) {
	sess := p.lookupSession(s.SessionID())
	names := make([]string, 0, len(p.kits))
	for n := range p.kits {
		names = append(names, n)
	}
	sort.Strings(names)
	resp := &msg.ToolkitListResp{Toolkits: []msg.ToolkitDefinition{}}
	for _, n := range names {
		k := p.kits[n]
		if len(req.FilterTags) > 0 && !hasAny(k.Tags, req.FilterTags) {
			continue
		}
		var inst *instance
		if sess != nil {
			sess.mu.Lock()
			inst = sess.running[n]
			sess.mu.Unlock()
		}
		resp.Toolkits = append(resp.Toolkits, k.definition(inst != nil, inst != nil && inst.backend.Alive(ctx)))
	}
	return resp, nil
}

func hasAny(have, want []string) bool {
	for _, w := range want {
		for _, h := range have {
			if h == w {
				return true
			}
		}
	}
	return false
}

// ToolkitConfigure applies spec §2.9: an unknown name is declined (the
// fallback answers status error, rule 1); the config is validated (rules 2,
// 3); the backend is opened and pinged (rule 4); success replaces any earlier
// configuration of the toolkit in this session (rule 5). The config is never
// logged, and only its non-secret part is kept (rule 6).
func (p *Plugin) ToolkitConfigure(ctx context.Context, s wire.Scope, req *msg.ToolkitConfigureReq) (*msg.ToolkitConfigureResp, error) {
	k, ok := p.kits[req.ToolkitName]
	if !ok {
		return nil, wire.ErrDecline
	}
	fail := func(text string) (*msg.ToolkitConfigureResp, error) {
		return &msg.ToolkitConfigureResp{ToolkitName: k.Name, Status: msg.ToolkitConfigureRespStatusError, Message: text}, nil
	}
	// A secret shorter than the kernel's shortest is refused: it could
	// be neither found in a snapshot nor scrubbed from a log without
	// mangling ordinary words (server.MinSecretBytes).
	for _, name := range k.Secrets() {
		if v, ok := req.Config[name].(string); ok && v != "" && len(v) < server.MinSecretBytes {
			return fail(fmt.Sprintf("field %q: a secret setting must be at least %d bytes", name, server.MinSecretBytes))
		}
	}
	// Declare the secret settings before anything else: the agent holds
	// them whatever configure answers, and may copy them into state that
	// a snapshot would save (server/secrets.go).
	for _, name := range k.Secrets() {
		if v, ok := req.Config[name].(string); ok {
			p.env.DeclareSecrets(s.SessionID(), v)
		}
	}
	cfg, err := k.validate(map[string]any(req.Config))
	if err != nil {
		return fail(err.Error())
	}
	if text, err := p.configure(ctx, s.SessionID(), k, cfg); err != nil || text != "" {
		if err != nil {
			return nil, err
		}
		return fail(text)
	}
	return &msg.ToolkitConfigureResp{ToolkitName: k.Name, Status: msg.ToolkitConfigureRespStatusOk, Message: "configured"}, nil
}

// configure opens k's backend with the validated cfg and makes it the
// session's configuration of k. A refusal the agent may read comes back as
// text (secrets scrubbed); err is a failure of the session itself.
func (p *Plugin) configure(ctx context.Context, sessionID string, k *Toolkit, cfg map[string]any) (string, error) {
	d, err := p.env.Host.SessionDir(sessionID)
	if err != nil {
		return "", err
	}
	// Absolute: a sandbox binds it, and the default data dir is relative.
	dir, err := filepath.Abs(d.Path)
	if err != nil {
		return "", err
	}
	backend, err := k.Open(ctx, Place{Dir: dir, ReadOnly: d.ReadOnly, Session: sessionID}, cfg)
	if err != nil {
		return scrub("backend: "+err.Error(), cfg, k.Secrets()), nil
	}
	public := map[string]any{}
	for n, v := range cfg {
		public[n] = v
	}
	withSecrets := false
	for _, sec := range k.Secrets() {
		if _, ok := public[sec]; ok {
			withSecrets = true
		}
		delete(public, sec)
	}
	inst := &instance{kit: k, backend: backend, reg: toolrun.NewRegistry(), public: public, withSecrets: withSecrets}
	for _, t := range backend.Tools() {
		t.Def.Toolkit = &k.Name
		if err := inst.reg.Add(toolrun.NewTool(t.Def, t.Run)); err != nil {
			backend.Close()
			return err.Error(), nil
		}
	}
	sess, err := p.sessions.GetOrCreate(sessionID)
	if err != nil {
		backend.Close()
		return "", err
	}
	sess.mu.Lock()
	old := sess.running[k.Name]
	sess.running[k.Name] = inst
	sess.mu.Unlock()
	if old != nil {
		old.backend.Close()
	}
	return "", nil
}

// ToolList answers with the tools of the session's configured toolkits
// (spec §3: they appear only after configure, with toolkit set).
func (p *Plugin) ToolList(ctx context.Context, s wire.Scope, req *msg.ToolListReq) (*msg.ToolListResp, error) {
	sess := p.lookupSession(s.SessionID())
	resp := &msg.ToolListResp{Tools: []msg.ToolDefinition{}}
	if sess == nil {
		return resp, nil
	}
	sess.mu.Lock()
	var all []*toolrun.Tool
	for _, inst := range sess.running {
		for _, n := range inst.reg.Names() {
			t, _ := inst.reg.Lookup(n)
			all = append(all, t)
		}
	}
	sess.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].Def.Name < all[j].Def.Name })
	return toolrun.Select(all, req, p.opts), nil
}

// ToolCall runs a tool of a toolkit configured in the session. A toolkit
// tool called before configure is a TOOL_ERROR saying so; names of no
// toolkit are declined, leaving them to other plugins or UNKNOWN_TOOL.
func (p *Plugin) ToolCall(ctx context.Context, s wire.Scope, req *msg.ToolCallReq) (*msg.ToolCallResp, error) {
	k, ok := p.owner[req.ToolName]
	if !ok {
		return nil, wire.ErrDecline
	}
	var t *toolrun.Tool
	if sess := p.lookupSession(s.SessionID()); sess != nil {
		sess.mu.Lock()
		if inst := sess.running[k.Name]; inst != nil {
			t, _ = inst.reg.Lookup(req.ToolName)
		}
		sess.mu.Unlock()
	}
	if t == nil {
		return &msg.ToolCallResp{Result: *toolrun.Failure(req.ToolName, msg.ToolResultErrorCodeTOOLERROR,
			fmt.Sprintf("toolkit %q is not configured in this session; send toolkit/configure first", k.Name))}, nil
	}
	if req.Timeout == nil || *req.Timeout <= 0 {
		// A statement is bounded even when the agent gives no timeout
		// (settings query_timeout).
		withDefault := *req
		withDefault.Timeout = &p.QueryTimeout
		req = &withDefault
	}
	res := toolrun.Run(ctx, s, req, t.Subject(), p.opts, func(ctx context.Context) (toolrun.Output, error) {
		return t.Run(ctx, req.Arguments)
	})
	return &msg.ToolCallResp{Result: *res}, nil
}

func (s *session) closeAll() {
	s.mu.Lock()
	running := s.running
	s.running = map[string]*instance{}
	s.mu.Unlock()
	for _, inst := range running {
		inst.backend.Close()
	}
}

// snapshotState is what a snapshot keeps: which toolkits were configured and
// their non-secret settings, for the record. Secrets are never in it.
type snapshotState struct {
	Configured map[string]map[string]any `json:"configured"`
	// WithSecrets names the toolkits configured with a secret setting,
	// whose value is not here.
	WithSecrets []string `json:"with_secrets,omitempty"`
}

// Snapshot saves the non-secret configuration (spec §2.9 rule 6).
func (p *Plugin) Snapshot(ctx context.Context, id string) ([]byte, error) {
	st := snapshotState{Configured: map[string]map[string]any{}}
	if sess := p.lookupSession(id); sess != nil {
		sess.mu.Lock()
		for n, inst := range sess.running {
			st.Configured[n] = inst.public
			if inst.withSecrets {
				st.WithSecrets = append(st.WithSecrets, n)
			}
		}
		sort.Strings(st.WithSecrets)
		sess.mu.Unlock()
	}
	return json.Marshal(st)
}

// Restore leaves every toolkit not configured: their secrets were never
// saved, so they cannot reconnect (docs/DECISIONS.md, State). The kernel
// has closed the session's backends just before.
func (p *Plugin) Restore(ctx context.Context, id string, state []byte) error {
	var st snapshotState
	if len(state) > 0 {
		if err := json.Unmarshal(state, &st); err != nil {
			return fmt.Errorf("toolkits snapshot: %w", err)
		}
	}
	return nil
}

// RestoreFork re-configures in a fork each toolkit the source configured
// without a secret setting, from its saved settings (docs/DECISIONS.md,
// Session fork); one configured with a secret is left not configured, as
// a restore leaves it, since its secret was never saved: the fork's agent
// configures it again. Each toolkit not re-configured is reported.
func (p *Plugin) RestoreFork(ctx context.Context, id string, state []byte) ([]msg.NotForked, error) {
	var st snapshotState
	if len(state) > 0 {
		if err := json.Unmarshal(state, &st); err != nil {
			return nil, fmt.Errorf("toolkits snapshot: %w", err)
		}
	}
	names := make([]string, 0, len(st.Configured))
	for n := range st.Configured {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []msg.NotForked{}
	for _, n := range names {
		k, ok := p.kits[n]
		if !ok {
			out = append(out, msg.NotForked{Kind: "toolkit", ID: n, Reason: "this host no longer serves the toolkit"})
			continue
		}
		if slices.Contains(st.WithSecrets, n) {
			out = append(out, msg.NotForked{Kind: "toolkit", ID: n, Reason: "configured with a secret setting, which is never copied: the fork has it not configured; send toolkit/configure"})
			continue
		}
		cfg, err := k.validate(st.Configured[n])
		text := ""
		if err != nil {
			text = err.Error()
		} else if text, err = p.configure(ctx, id, k, cfg); err != nil {
			return nil, err
		}
		if text != "" {
			out = append(out, msg.NotForked{Kind: "toolkit", ID: n, Reason: "re-configuring it in the fork failed: " + text})
		}
	}
	return out, nil
}

// HoldFiles brings every SQLite database under dir to a consistent state
// and holds its worker until release, while the kernel copies the
// directory (a sql snapshot's files, a fork, a snapshot-scoped child).
func (p *Plugin) HoldFiles(ctx context.Context, dir string) (release func(), err error) {
	var holders []holder
	p.sessions.Each(func(_ string, s *session) {
		s.mu.Lock()
		for _, inst := range s.running {
			if h, ok := inst.backend.(holder); ok {
				holders = append(holders, h)
			}
		}
		s.mu.Unlock()
	})
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	for _, h := range holders {
		r, err := h.Hold(ctx, dir)
		if err != nil {
			release()
			return nil, err
		}
		releases = append(releases, r)
	}
	return release, nil
}

// holder is a backend whose files the kernel may copy only held.
type holder interface {
	Hold(ctx context.Context, dir string) (release func(), err error)
}

// Cleanup closes every session's backends.
func (p *Plugin) Cleanup() error {
	if p.sessions != nil {
		p.sessions.DropAll()
	}
	return nil
}

var (
	_ msg.ToolkitHandler  = (*Plugin)(nil)
	_ msg.ToolHandler     = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ server.Claimer      = (*Plugin)(nil)
	_ persist.Snapshotter = (*Plugin)(nil)
	_ persist.Forker      = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
	_ persist.FileHolder  = (*Plugin)(nil)
)
