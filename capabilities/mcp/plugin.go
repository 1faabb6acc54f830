// Package mcp is the mcp capability (spec §1, table: mcp): a bridge to
// servers of the Model Context Protocol through github.com/mark3labs/mcp-go,
// which no other package imports, so that library's API changes touch this
// package only. Servers are declared in the plugin config (stdio or
// streamable HTTP, shared by every session) or registered at run time by a
// session (streamable HTTP on the allowlist only: docs/DECISIONS.md, Security defaults).
// Their allowed tools are served as plain tools named `<server_id>__<tool>`
// through tool/list and tool/call and run through server/toolrun; resources
// and prompts are served by mcp/resource/* and mcp/prompt/*. Module
// "aep.mcp.bridge".
package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/egress"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

// ModuleID is the module of the MCP bridge.
const ModuleID = "aep.mcp.bridge"

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module ModuleID, the mcp capability,
// named mcp.bridge in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: ModuleID, Capability: "mcp", DefaultName: "mcp.bridge", New: func() server.Plugin { return new(Plugin) }}
}

// Plugin is the MCP bridge. Its settings are the plugin's `config`; values
// may use ${ENV} (expanded when the host config is loaded), which is how
// secrets such as tokens in headers or env reach it.
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/mcp.json, docs/config.md).
	Settings `yaml:",inline"`

	name    string
	env     server.PluginEnv
	opts    toolrun.Options
	config  map[string]*conn
	mu      sync.Mutex // guards config and every sessionServers' conns
	bySess  *server.SessionState[sessionServers]
	claimMu sync.Mutex
	claims  map[server.Claim]int // (session, tool name) → connections holding it
}

// sessionServers are the servers one session registered at run time.
type sessionServers struct {
	conns map[string]*conn // guarded by Plugin.mu
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Provision checks the configured servers and connects them. A server that
// cannot connect does not stop the host: it reports status error and is
// retried with backoff on next use.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	p.name, p.env = env.Name, env
	if p.env.Claims == nil {
		p.env.Claims = server.NewClaims()
	}
	p.opts = toolrun.Options{MaxOutputBytes: p.MaxOutputBytes, Logger: env.Logger}
	if env.Host != nil {
		p.opts.Policy = env.Host.Config().Server.ToolPolicy
	}
	if p.ConnectTimeout <= 0 {
		p.ConnectTimeout = 15
	}
	if p.BackoffMax <= 0 {
		p.BackoffMax = 30
	}
	if p.MaxSessionServers <= 0 {
		p.MaxSessionServers = 16
	}
	for i, a := range p.AllowURLs {
		if _, err := checkURL(a.Prefix); err != nil {
			return fmt.Errorf("allow_urls[%d]: %w", i, err)
		}
		env.DeclareSecrets("", headerSecrets(a.Headers)...)
	}
	for _, sc := range p.Servers {
		env.DeclareSecrets("", headerSecrets(sc.Headers)...)
		env.DeclareSecrets("", envSecrets(sc.Env)...)
	}
	p.config, p.claims = map[string]*conn{}, map[server.Claim]int{}
	p.bySess = server.NewSessionState(env, func(string) *sessionServers {
		return &sessionServers{conns: map[string]*conn{}}
	}, p.closeSession)
	for i, sc := range p.Servers {
		if !idPattern.MatchString(sc.ID) {
			return fmt.Errorf("servers[%d]: id %q: want lower-case letters, digits and '-' (at most 32, no '_')", i, sc.ID)
		}
		if _, dup := p.config[sc.ID]; dup {
			return fmt.Errorf("servers[%d]: id %q declared twice", i, sc.ID)
		}
		if (sc.Command == "") == (sc.URL == "") {
			return fmt.Errorf("servers[%d] %q: set exactly one of command and url", i, sc.ID)
		}
		if sc.URL != "" {
			if _, err := checkURL(sc.URL); err != nil {
				return fmt.Errorf("servers[%d] %q: %w", i, sc.ID, err)
			}
		}
		s := spec{ID: sc.ID, Origin: msg.MCPServerInfoOriginConfig, Command: sc.Command, Args: sc.Args, Env: sc.Env,
			URL: sc.URL, Headers: sc.Headers, ToolAllow: sc.ToolAllowList, ConnectTimeout: p.seconds(sc.ConnectTimeout),
			ProtocolVersion: sc.ProtocolVersion}
		p.config[sc.ID] = p.newConn(s, "")
	}
	var wg sync.WaitGroup
	for _, c := range p.config {
		wg.Add(1)
		go func() { defer wg.Done(); c.client(ctx) }()
	}
	wg.Wait()
	return nil
}

func (p *Plugin) seconds(v float64) time.Duration {
	if v <= 0 {
		v = p.ConnectTimeout
	}
	return time.Duration(v * float64(time.Second))
}

// newConn makes the connection of a configured server (session "") or of
// one a session registered, whose tool names that session alone owns.
func (p *Plugin) newConn(s spec, session string) *conn {
	return newConn(s, p.env.Logger, time.Duration(p.BackoffMax*float64(time.Second)),
		func(name string) error { return p.claim(session, name) },
		func(name string) { p.release(session, name) })
}

// claim owns a proxied tool name in the host's register, host-wide for a
// configured server and for one session for a registered one: a tool name
// has one owner, and tool/call goes to it (docs/DECISIONS.md, "Dispatch").
// Connections of one scope may share a name, so claims are counted.
func (p *Plugin) claim(session, name string) error {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	k := server.Claim{Kind: session, Name: name}
	if p.claims[k] == 0 {
		if err := p.env.Claims.Claim(session, server.Claim{Kind: "tool", Name: name}, p.name); err != nil {
			return err
		}
	}
	p.claims[k]++
	return nil
}

func (p *Plugin) release(session, name string) {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	k := server.Claim{Kind: session, Name: name}
	p.claims[k]--
	if p.claims[k] <= 0 {
		delete(p.claims, k)
		p.env.Claims.Release(session, server.Claim{Kind: "tool", Name: name}, p.name)
	}
}

// checkURL accepts absolute http(s) URLs without user info, so a secret
// cannot hide in the part of a URL that server lists report.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an absolute http or https URL", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("url: user info is not allowed; put credentials in headers")
	}
	return u, nil
}

// allowed returns the allowlist entry admitting raw.
func (p *Plugin) allowed(raw string) (*AllowURL, bool) {
	for i := range p.AllowURLs {
		a := &p.AllowURLs[i]
		if egress.URLPrefixMatch(a.Prefix, raw) {
			return a, true
		}
	}
	return nil, false
}

// find returns the server id visible to the session: its own or configured.
func (p *Plugin) find(sessionID, id string) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ss, ok := p.bySess.Get(sessionID); ok && ss.conns[id] != nil {
		return ss.conns[id]
	}
	return p.config[id]
}

// visible returns every server the session sees, sorted by id.
func (p *Plugin) visible(sessionID string) []*conn {
	ss, _ := p.bySess.Get(sessionID)
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*conn, 0, len(p.config))
	for _, c := range p.config {
		out = append(out, c)
	}
	if ss != nil {
		for _, c := range ss.conns {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].spec.ID < out[j].spec.ID })
	return out
}

// registration is a run-time registration without its secret headers: what
// a snapshot keeps.
type registration struct {
	ServerID      string   `json:"server_id"`
	URL           string   `json:"url"`
	ToolAllowList []string `json:"tool_allow_list,omitempty"`
	Timeout       float64  `json:"timeout,omitempty"`
}

// register checks and connects a run-time registration. It leaves a server
// that failed to connect registered (status error; it reconnects with
// backoff): Restore wants that, since no agent is there to register again;
// McpServerRegister takes such a registration back.
func (p *Plugin) register(ctx context.Context, sessionID string, r registration, headers map[string]string) (*conn, error) {
	if !idPattern.MatchString(r.ServerID) {
		return nil, fmt.Errorf("server_id %q: want lower-case letters, digits and '-' (at most 32, no '_')", r.ServerID)
	}
	if _, err := checkURL(r.URL); err != nil {
		return nil, err
	}
	entry, ok := p.allowed(r.URL)
	if !ok {
		return nil, fmt.Errorf("url %q is not on the mcp plugin's allow_urls; stdio servers come only from config (docs/DECISIONS.md, Security defaults)", r.URL)
	}
	h := map[string]string{}
	for k, v := range entry.Headers {
		h[k] = v
	}
	for k, v := range headers {
		h[k] = v
	}
	s := spec{ID: r.ServerID, Origin: msg.MCPServerInfoOriginSession, URL: r.URL, Headers: h,
		ToolAllow: r.ToolAllowList, ConnectTimeout: p.seconds(r.Timeout)}
	c := p.newConn(s, sessionID)
	ss, err := p.bySess.GetOrCreate(sessionID)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if _, dup := p.config[r.ServerID]; dup {
		p.mu.Unlock()
		return nil, fmt.Errorf("server_id %q is a configured server", r.ServerID)
	}
	m := ss.conns
	if m == nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("register: %w", server.ErrSessionEnded)
	}
	if _, dup := m[r.ServerID]; dup {
		p.mu.Unlock()
		return nil, fmt.Errorf("server_id %q is already registered in this session; unregister it first", r.ServerID)
	}
	if len(m) >= p.MaxSessionServers {
		p.mu.Unlock()
		return nil, fmt.Errorf("this session already has %d servers (max_session_servers)", len(m))
	}
	m[r.ServerID] = c
	c.reg = r
	p.mu.Unlock()
	c.client(ctx)
	return c, nil
}

// McpServerRegister answers mcp/server/register.
func (p *Plugin) McpServerRegister(ctx context.Context, s wire.Scope, req *msg.MCPServerRegisterReq) (*msg.MCPServerRegisterResp, error) {
	r := registration{ServerID: req.ServerID, URL: req.URL, ToolAllowList: req.ToolAllowList}
	if req.Timeout != nil {
		r.Timeout = *req.Timeout
	}
	// The agent's headers are the session's secrets (server/secrets.go).
	p.env.DeclareSecrets(s.SessionID(), headerSecrets(req.Headers)...)
	c, err := p.register(ctx, s.SessionID(), r, req.Headers)
	if err != nil {
		text := err.Error()
		return &msg.MCPServerRegisterResp{Ok: false, Error: &text}, nil
	}
	in := c.info()
	resp := &msg.MCPServerRegisterResp{Ok: in.Status == msg.MCPServerInfoStatusReady, Server: &in}
	if !resp.Ok {
		// A registration that did not connect is taken back whole: the
		// agent sees why in the reply and registers again when the server
		// is up (docs/DECISIONS.md, MCP registration failures).
		p.drop(s.SessionID(), c)
		resp.Error = in.LastError
	}
	return resp, nil
}

// drop removes c from the session's registrations if it is still there and
// closes it, which releases the tool names it claimed.
func (p *Plugin) drop(sessionID string, c *conn) {
	ss, _ := p.bySess.Get(sessionID)
	p.mu.Lock()
	if ss != nil && ss.conns[c.spec.ID] == c {
		delete(ss.conns, c.spec.ID)
	}
	p.mu.Unlock()
	c.close()
}

// McpServerList answers mcp/server/list.
func (p *Plugin) McpServerList(ctx context.Context, s wire.Scope, req *msg.MCPServerListReq) (*msg.MCPServerListResp, error) {
	resp := &msg.MCPServerListResp{Servers: []msg.MCPServerInfo{}}
	for _, c := range p.visible(s.SessionID()) {
		in := c.info()
		if req.StatusFilter != nil && *req.StatusFilter != "" && string(in.Status) != *req.StatusFilter {
			continue
		}
		resp.Servers = append(resp.Servers, in)
	}
	return resp, nil
}

// McpServerUnregister answers mcp/server/unregister.
func (p *Plugin) McpServerUnregister(ctx context.Context, s wire.Scope, req *msg.MCPServerUnregisterReq) (*msg.MCPServerUnregisterResp, error) {
	ss, _ := p.bySess.Get(s.SessionID())
	p.mu.Lock()
	var c *conn
	if ss != nil {
		c = ss.conns[req.ServerID]
		delete(ss.conns, req.ServerID)
	}
	_, configured := p.config[req.ServerID]
	p.mu.Unlock()
	resp := &msg.MCPServerUnregisterResp{ServerID: req.ServerID, Ok: c != nil}
	switch {
	case c != nil:
		c.close()
	case configured:
		text := "configured servers cannot be unregistered"
		resp.Error = &text
	default:
		text := "this session registered no server with this id"
		resp.Error = &text
	}
	return resp, nil
}

// server returns a connected client of a server visible to the session.
func (p *Plugin) server(ctx context.Context, sessionID, id string) (*conn, *mcpClient, error) {
	c := p.find(sessionID, id)
	if c == nil {
		return nil, nil, fmt.Errorf("%w: no MCP server %q in this session", wire.ErrNotFound, id)
	}
	cli, err := c.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, cli, nil
}

// failed records a transport failure of a resource or prompt request.
func (c *conn) failed(ctx context.Context, cli *mcpClient, err error) error {
	if isTransport(err) && ctx.Err() == nil {
		c.broken(cli, err)
	}
	return wire.Reason(ReasonServerError, fmt.Errorf("mcp server %q: %w", c.spec.ID, err))
}

// ReasonServerError is the detail.reason of a resource or prompt request
// the MCP server refused or failed: its text is the server's answer to the
// client, written for it, as a tool's error text is in a tool result.
const ReasonServerError = "mcp_server_error"

// McpResourceList answers one page of resources/list.
func (p *Plugin) McpResourceList(ctx context.Context, s wire.Scope, req *msg.MCPResourceListReq) (*msg.MCPResourceListResp, error) {
	c, cli, err := p.server(ctx, s.SessionID(), req.ServerID)
	if err != nil {
		return nil, err
	}
	r := mcpgo.ListResourcesRequest{}
	if req.Cursor != nil {
		r.Params.Cursor = mcpgo.Cursor(*req.Cursor)
	}
	res, err := cli.ListResourcesByPage(ctx, r)
	if err != nil {
		return nil, c.failed(ctx, cli, err)
	}
	resp := &msg.MCPResourceListResp{ServerID: req.ServerID, Resources: make([]msg.MCPResource, 0, len(res.Resources))}
	for _, rs := range res.Resources {
		out := msg.MCPResource{Uri: rs.URI, Name: rs.Name}
		if rs.Description != "" {
			d := rs.Description
			out.Description = &d
		}
		if rs.MIMEType != "" {
			m := rs.MIMEType
			out.MimeType = &m
		}
		resp.Resources = append(resp.Resources, out)
	}
	if res.NextCursor != "" {
		n := string(res.NextCursor)
		resp.NextCursor = &n
	}
	return resp, nil
}

// McpResourceRead answers resources/read.
func (p *Plugin) McpResourceRead(ctx context.Context, s wire.Scope, req *msg.MCPResourceReadReq) (*msg.MCPResourceReadResp, error) {
	c, cli, err := p.server(ctx, s.SessionID(), req.ServerID)
	if err != nil {
		return nil, err
	}
	r := mcpgo.ReadResourceRequest{}
	r.Params.URI = req.Uri
	res, err := cli.ReadResource(ctx, r)
	if err != nil {
		return nil, c.failed(ctx, cli, err)
	}
	resp := &msg.MCPResourceReadResp{ServerID: req.ServerID, Contents: make([]msg.MCPResourceContents, 0, len(res.Contents))}
	for _, ct := range res.Contents {
		var out msg.MCPResourceContents
		switch v := ct.(type) {
		case mcpgo.TextResourceContents:
			out = msg.MCPResourceContents{Uri: v.URI, MimeType: strPtr(v.MIMEType), Text: &v.Text}
		case *mcpgo.TextResourceContents:
			out = msg.MCPResourceContents{Uri: v.URI, MimeType: strPtr(v.MIMEType), Text: &v.Text}
		case mcpgo.BlobResourceContents:
			out = msg.MCPResourceContents{Uri: v.URI, MimeType: strPtr(v.MIMEType), Blob: &v.Blob}
		case *mcpgo.BlobResourceContents:
			out = msg.MCPResourceContents{Uri: v.URI, MimeType: strPtr(v.MIMEType), Blob: &v.Blob}
		default:
			continue
		}
		resp.Contents = append(resp.Contents, out)
	}
	return resp, nil
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// McpPromptList answers one page of prompts/list.
func (p *Plugin) McpPromptList(ctx context.Context, s wire.Scope, req *msg.MCPPromptListReq) (*msg.MCPPromptListResp, error) {
	c, cli, err := p.server(ctx, s.SessionID(), req.ServerID)
	if err != nil {
		return nil, err
	}
	r := mcpgo.ListPromptsRequest{}
	if req.Cursor != nil {
		r.Params.Cursor = mcpgo.Cursor(*req.Cursor)
	}
	res, err := cli.ListPromptsByPage(ctx, r)
	if err != nil {
		return nil, c.failed(ctx, cli, err)
	}
	resp := &msg.MCPPromptListResp{ServerID: req.ServerID, Prompts: make([]msg.MCPPrompt, 0, len(res.Prompts))}
	for _, pr := range res.Prompts {
		out := msg.MCPPrompt{Name: pr.Name, Description: strPtr(pr.Description), Arguments: []msg.MCPPromptArgument{}}
		for _, a := range pr.Arguments {
			out.Arguments = append(out.Arguments, msg.MCPPromptArgument{Name: a.Name, Description: strPtr(a.Description), Required: a.Required})
		}
		resp.Prompts = append(resp.Prompts, out)
	}
	if res.NextCursor != "" {
		n := string(res.NextCursor)
		resp.NextCursor = &n
	}
	return resp, nil
}

// McpPromptGet answers prompts/get.
func (p *Plugin) McpPromptGet(ctx context.Context, s wire.Scope, req *msg.MCPPromptGetReq) (*msg.MCPPromptGetResp, error) {
	c, cli, err := p.server(ctx, s.SessionID(), req.ServerID)
	if err != nil {
		return nil, err
	}
	r := mcpgo.GetPromptRequest{}
	r.Params.Name = req.Name
	r.Params.Arguments = req.Arguments
	res, err := cli.GetPrompt(ctx, r)
	if err != nil {
		return nil, c.failed(ctx, cli, err)
	}
	resp := &msg.MCPPromptGetResp{ServerID: req.ServerID, Description: strPtr(res.Description), Messages: make([]msg.MCPPromptMessage, 0, len(res.Messages))}
	for _, m := range res.Messages {
		content := map[string]any{}
		if b, err := json.Marshal(m.Content); err == nil {
			json.Unmarshal(b, &content)
		}
		resp.Messages = append(resp.Messages, msg.MCPPromptMessage{Role: string(m.Role), Content: content})
	}
	return resp, nil
}

// ToolList answers with the allowed tools of every server the session
// sees. A server that is down is reconnected (within its
// backoff) and otherwise contributes no tools.
func (p *Plugin) ToolList(ctx context.Context, s wire.Scope, req *msg.ToolListReq) (*msg.ToolListResp, error) {
	conns := p.visible(s.SessionID())
	lists := make([][]*toolrun.Tool, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); lists[i] = c.toolList(ctx) }()
	}
	wg.Wait()
	var all []*toolrun.Tool
	for _, l := range lists {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Def.Name < all[j].Def.Name })
	return toolrun.Select(all, req, p.opts), nil
}

// ToolCall runs a proxied tool through server/toolrun. The kernel routes
// only the names this plugin claimed (a connected server's allowed tools);
// a name that no longer matches one (the server dropped the tool since) is
// declined, so the UNKNOWN_TOOL fallback answers.
func (p *Plugin) ToolCall(ctx context.Context, s wire.Scope, req *msg.ToolCallReq) (*msg.ToolCallResp, error) {
	id, _, ok := strings.Cut(req.ToolName, Separator)
	if !ok {
		return nil, wire.ErrDecline
	}
	c := p.find(s.SessionID(), id)
	if c == nil {
		return nil, wire.ErrDecline
	}
	pt := c.lookup(req.ToolName)
	if pt == nil {
		// Not connected yet or since a failure: connect, then look again.
		if _, err := c.client(ctx); err != nil {
			return &msg.ToolCallResp{Result: *toolrun.Failure(req.ToolName, msg.ToolResultErrorCodeTOOLERROR, err.Error())}, nil
		}
		if pt = c.lookup(req.ToolName); pt == nil {
			return nil, wire.ErrDecline
		}
	}
	res := toolrun.Run(ctx, s, req, pt.tool.Subject(), p.opts, func(ctx context.Context) (toolrun.Output, error) {
		return c.call(ctx, pt, req.Arguments)
	})
	return &msg.ToolCallResp{Result: *res}, nil
}

// closeSession disconnects the servers a session registered; the kernel
// runs it when the session ends or before a restore.
func (p *Plugin) closeSession(_ string, ss *sessionServers) {
	p.mu.Lock()
	m := ss.conns
	ss.conns = nil
	p.mu.Unlock()
	for _, c := range m {
		c.close()
	}
}

// snapshotState is the session's run-time registrations, without headers.
type snapshotState struct {
	Servers []registration `json:"servers"`
}

// Snapshot records the session's run-time registrations;
// headers are secrets and are left out (docs/DECISIONS.md, State).
func (p *Plugin) Snapshot(ctx context.Context, id string) ([]byte, error) {
	st := snapshotState{Servers: []registration{}}
	ss, _ := p.bySess.Get(id)
	p.mu.Lock()
	if ss != nil {
		for _, c := range ss.conns {
			st.Servers = append(st.Servers, c.reg)
		}
	}
	p.mu.Unlock()
	sort.Slice(st.Servers, func(i, j int) bool { return st.Servers[i].ServerID < st.Servers[j].ServerID })
	return json.Marshal(st)
}

// Restore replaces the session's registrations with the saved ones and
// reconnects them; each is checked against today's allowlist again.
func (p *Plugin) Restore(ctx context.Context, id string, state []byte) error {
	var st snapshotState
	if len(state) > 0 {
		if err := json.Unmarshal(state, &st); err != nil {
			return fmt.Errorf("mcp snapshot: %w", err)
		}
	}
	var errs []string
	for _, r := range st.Servers {
		if _, err := p.register(ctx, id, r, nil); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		p.env.Logger.Warn("mcp restore left out registrations", "session", id, "errors", strings.Join(errs, "; "))
	}
	return nil
}

// Cleanup disconnects every server.
func (p *Plugin) Cleanup() error {
	p.bySess.DropAll()
	p.mu.Lock()
	all := []*conn{}
	for _, c := range p.config {
		all = append(all, c)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	wg.Wait()
	return nil
}

var (
	_ msg.McpHandler      = (*Plugin)(nil)
	_ msg.ToolHandler     = (*Plugin)(nil)
	_ server.Provisioner  = (*Plugin)(nil)
	_ persist.Snapshotter = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
)

// plainHeaders are headers that carry no credential; every other header
// value of an MCP server's config or registration is declared a secret,
// since servers authenticate by custom headers too (X-Api-Key, …).
var plainHeaders = map[string]bool{"accept": true, "accept-language": true, "content-type": true, "user-agent": true,
	"cache-control": true, "mcp-protocol-version": true}

// headerSecrets returns the header values to declare secrets: each value,
// and for "<scheme> <credential>" values (Authorization: Bearer …) the
// credential alone too, which an agent may copy without its scheme.
func headerSecrets(h map[string]string) []string {
	var out []string
	for k, v := range h {
		if plainHeaders[strings.ToLower(k)] || v == "" {
			continue
		}
		out = append(out, v)
		if _, cred, ok := strings.Cut(v, " "); ok && len(strings.TrimSpace(cred)) >= 8 {
			out = append(out, strings.TrimSpace(cred))
		}
	}
	return out
}

// secretEnvName matches the names of environment variables that hold
// credentials by the usual conventions (GITHUB_TOKEN, OPENAI_API_KEY,
// DB_PASSWORD, …); their values in a stdio server's env are declared.
var secretEnvName = regexp.MustCompile(`(?i)(token|secret|passw|api_?key|private_?key|access_?key|auth|credential|cookie|session)`)

// envSecrets returns the values of a stdio server's env that hold credentials.
func envSecrets(env map[string]string) []string {
	var out []string
	for k, v := range env {
		if secretEnvName.MatchString(k) {
			out = append(out, v)
		}
	}
	return out
}
