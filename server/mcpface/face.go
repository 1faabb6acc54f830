// Package mcpface is aep's face as an MCP server: every MCP session is
// backed by one aep session, opened through the kernel's public API (an
// in-process client that handshakes with the capabilities of the config's
// mcp_face block), and MCP requests become aep messages: tools/list and
// tools/call become tool/list and tool/call (events as progress, MCP
// cancellation as aep cancel), and the memory and env tools become memory/*
// and env/* requests. It is a transport like server/httpapi: it imports no
// capability, and the kernel applies the same token check, throttle, caps,
// tool policy and audit as on aep's own transports (docs/mcp.md).
package mcpface

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// DefaultCapabilities are requested when mcp_face.capabilities is empty.
var DefaultCapabilities = []string{"tools", "memory", "env", "skills", "toolkits", "mcp"}

// ErrUnauthorized is returned when the kernel refuses the token.
var ErrUnauthorized = errors.New("mcp face: the aep handshake refused the token")

// Face serves one host's sessions as MCP. It is safe for concurrent use.
type Face struct {
	h    *server.Host
	cfg  server.MCPFaceConfig
	log  *slog.Logger
	caps []string

	mu       sync.Mutex
	sessions map[string]*httpSession // legacy streamable HTTP sessions by Mcp-Session-Id
	closed   bool
}

// New returns the MCP face of h, configured by h's mcp_face block.
func New(h *server.Host) *Face {
	cfg := h.Config().MCPFace
	caps := cfg.Capabilities
	if len(caps) == 0 {
		caps = DefaultCapabilities
	}
	if cfg.AgentID == "" {
		cfg.AgentID = "mcp"
	}
	return &Face{h: h, cfg: cfg, log: h.Logger().With("transport", "mcp"), caps: caps, sessions: map[string]*httpSession{}}
}

// exposed reports whether mcp_face.tools lets the MCP client see name.
func (f *Face) exposed(name string) bool {
	if len(f.cfg.Tools) == 0 {
		return true
	}
	for _, p := range f.cfg.Tools {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// backend is one aep session and the MCP server that fronts it. Each MCP
// session gets its own mcp-go server, so its tool list, its list-changed
// notifications and its in-flight cancellations are its own and never
// another session's.
type backend struct {
	f       *Face
	c       *client.Client
	srv     *mcpserver.MCPServer
	granted map[string]bool
	token   [32]byte // sha256 of the token the session was opened with

	mu     sync.Mutex
	listed map[string]string // aep tool name → fingerprint of its definition, as last listed
	extra  map[string]bool   // the face's own tools (memory_*, env_*, ...)
	skills map[string]string // skill tool name → fingerprint of its skill, as last discovered (skills.go)
	memID  string

	delivery *progressLedger // progress before results over HTTP (delivery.go)
}

// open handshakes a new aep session with token and builds its MCP server.
// addr, when valid, is the client's address for the handshake throttle.
func (f *Face) open(ctx context.Context, token string, addr netip.Addr) (*backend, error) {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return nil, server.ErrClosed
	}
	var opts []server.SessionOption
	if addr.IsValid() {
		opts = append(opts, server.WithRemoteAddr(addr))
	}
	p, err := f.h.ConnectDirect(256, opts...)
	if err != nil {
		return nil, fmt.Errorf("mcp face: new session: %w", err)
	}
	c := client.New(p)
	resp, err := c.Handshake(ctx, f.cfg.AgentID, token, f.caps...)
	if err != nil {
		_ = c.Close()
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeUnauthorized {
			return nil, fmt.Errorf("%w: %s", ErrUnauthorized, we.Message)
		}
		return nil, fmt.Errorf("mcp face: handshake: %w", err)
	}
	b := &backend{f: f, c: c, delivery: newProgressLedger(), granted: map[string]bool{}, listed: map[string]string{}, extra: map[string]bool{}, skills: map[string]string{},
		token: sha256.Sum256([]byte(token))}
	for _, a := range resp.AcceptedCaps {
		if a.Enabled {
			b.granted[a.Name] = true
		}
	}
	hooks := &mcpserver.Hooks{}
	// tools/list reads the session's tools afresh, so a toolkit configured
	// or an MCP server registered shows, and a change is notified.
	hooks.AddBeforeListTools(func(ctx context.Context, _ any, _ *mcp.ListToolsRequest) { b.refresh(ctx); b.refreshSkills(ctx) })
	hooks.AddBeforeCallTool(func(ctx context.Context, _ any, m *mcp.CallToolRequest) { b.ensure(ctx, m.Params.Name) })
	sopts := []mcpserver.ServerOption{
		mcpserver.WithToolCapabilities(true),
		mcpserver.WithRecovery(),
		mcpserver.WithLogging(), // a tool's output as notifications/message (eventSender)
		mcpserver.WithHooks(hooks),
		mcpserver.WithToolFilter(b.filter),
		mcpserver.WithInstructions("Tools, memory and environments of an aep session (docs/mcp.md)."),
	}
	if b.granted["memory"] {
		sopts = append(sopts, mcpserver.WithResourceCapabilities(false, false))
	}
	b.srv = mcpserver.NewMCPServer("aep", version(), sopts...)
	b.addFaceTools()
	if b.granted["memory"] {
		b.addMemoryResources(hooks)
	}
	b.refresh(ctx)
	b.refreshSkills(ctx)
	return b, nil
}

// tokenMatches reports, in constant time, whether token is the one b was
// opened with.
func (b *backend) tokenMatches(token string) bool {
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], b.token[:]) == 1
}

func (b *backend) close() { _ = b.c.Close() }

// hidden marks tools registered only so that a call of a name the session
// did not list reaches aep, which answers it (UNKNOWN_TOOL, or a deferred
// tool): tools/list leaves them out.
const hiddenKey = "aep/hidden"

// filter leaves the hidden forwarders out of tools/list. mcp-go also
// applies it to each call, with the called tool alone, so a single tool
// passes: callTool decides what a call may reach.
func (b *backend) filter(_ context.Context, tools []mcp.Tool) []mcp.Tool {
	if len(tools) == 1 {
		return tools // a call's check: the forwarder decides (callTool)
	}
	out := tools[:0:0]
	for _, t := range tools {
		if t.Meta != nil && t.Meta.AdditionalFields[hiddenKey] == true {
			continue
		}
		out = append(out, t)
	}
	return out
}

// refresh lists the session's tools and brings the MCP server's registry in
// line; mcp-go notifies the client (notifications/tools/list_changed) when
// it changes.
func (b *backend) refresh(ctx context.Context) {
	if !b.granted["tools"] {
		return
	}
	var defs []msg.ToolDefinition
	req := &msg.ToolListReq{}
	for {
		resp, err := b.c.ListTools(ctx, req)
		if err != nil {
			b.f.log.Debug("mcp face: tool/list failed", "err", err)
			return
		}
		defs = append(defs, resp.Tools...)
		if resp.NextCursor == nil || *resp.NextCursor == "" {
			break
		}
		req = &msg.ToolListReq{Cursor: resp.NextCursor}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[string]bool{}
	var add []mcpserver.ServerTool
	for _, d := range defs {
		if b.extra[d.Name] || !b.f.exposed(d.Name) {
			// The face's own tool of that name wins; a tool mcp_face.tools
			// does not expose is never registered (a call of it is
			// refused by callTool through a hidden forwarder).
			continue
		}
		seen[d.Name] = true
		fp := fingerprint(d)
		if b.listed[d.Name] == fp {
			continue
		}
		b.listed[d.Name] = fp
		add = append(add, mcpserver.ServerTool{Tool: toMCPTool(d), Handler: b.callTool})
	}
	var gone []string
	for name := range b.listed {
		if !seen[name] {
			gone = append(gone, name)
			delete(b.listed, name)
		}
	}
	if len(add) > 0 {
		b.srv.AddTools(add...)
	}
	if len(gone) > 0 {
		b.srv.DeleteTools(gone...)
	}
}

// ensure makes a call of a name the session has not listed reach aep: the
// session's tools are listed again (a tool may have appeared), and a name
// still unknown gets a hidden forwarder, so aep's own answer (UNKNOWN_TOOL,
// or the result of a deferred tool) reaches the client as a tool result.
func (b *backend) ensure(ctx context.Context, name string) {
	if b.srv.GetTool(name) != nil {
		return
	}
	b.refresh(ctx)
	if strings.HasPrefix(name, skillPrefix) {
		b.refreshSkills(ctx) // a skill registered or added since the last list
	}
	if b.srv.GetTool(name) != nil || name == "" {
		return
	}
	t := mcp.NewTool(name, mcp.WithDescription("not listed by this session"))
	t.Meta = &mcp.Meta{AdditionalFields: map[string]any{hiddenKey: true}}
	b.srv.AddTool(t, b.callTool)
}

// callTool forwards an MCP tools/call to aep's tool/call. When the client
// can receive the call's events (eventSender: a progress token, or a log
// level that admits a tool's output) the call streams, and its events
// become notifications; the client's cancellation ends ctx, which makes
// the client send aep `cancel` for the call.
func (b *backend) callTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	if !b.f.exposed(name) {
		return toolError(msg.ToolResultErrorCodeTOOLDENIED, fmt.Sprintf("tool %q is not exposed to MCP clients (mcp_face.tools)", name)), nil
	}
	areq := &msg.ToolCallReq{ToolName: name, Arguments: arguments(req)}
	cctx := ctx
	if send := b.eventSender(ctx, name, req.Params.Meta); send != nil {
		areq.Streaming = true
		cctx = client.WithEvents(ctx, send)
	}
	res, err := b.c.CallTool(cctx, areq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("tool/call %s: %w", name, err)
	}
	out := toMCPResult(res)
	b.delivery.settle(ctx)
	if b.granted["toolkits"] || b.granted["mcp"] {
		// A tool may change the session's tools (an MCP server's own list
		// changed); listing again here notifies before the result.
		b.refresh(ctx)
	}
	return out, nil
}

// eventSender returns what turns a call's aep events into MCP
// notifications, or nil when the client can receive none (then the call
// does not stream):
//
//   - a `progress` event (data.pct, data.message) becomes
//     notifications/progress for the call's progress token, total 100;
//   - a `log` event (a line of a tool's output: data.message, data.level,
//     data.stream) becomes notifications/message at its level, logger
//     "aep/<tool>", when the client's log level admits it (logging/setLevel,
//     or the request's own level on the 2026-07-28 revision), and, with a
//     progress token, also notifications/progress carrying the line as its
//     message.
//
// Progress must increase, so a log line's progress is one more than the
// last notification's (the first is 1) and a repeated, falling or zero pct
// is skipped.
func (b *backend) eventSender(ctx context.Context, tool string, meta *mcp.Meta) func(client.Event) {
	srv := mcpserver.ServerFromContext(ctx)
	if srv == nil {
		return nil
	}
	var token mcp.ProgressToken
	if meta != nil {
		token = meta.ProgressToken
	}
	level, logs := clientLogLevel(ctx)
	// A tool's output is info (stdout) and error (stderr): the call streams
	// for a progress token, or for a client that asked for info or more.
	if token == nil && !(logs && mcp.LoggingLevelInfo.ShouldSendTo(level)) {
		return nil
	}
	var mu sync.Mutex
	last := 0.0
	progress := func(value float64, total float64, message string) {
		mu.Lock()
		if value <= last {
			mu.Unlock()
			return
		}
		last = value
		mu.Unlock()
		params := map[string]any{"progressToken": token, "progress": value}
		if total > 0 {
			params["total"] = total
		}
		if message != "" {
			params["message"] = message
		}
		if err := srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params); err != nil {
			slog.Debug("mcp face: progress notification not sent", "err", err)
			return
		}
		b.delivery.queued()
	}
	return func(ev client.Event) {
		message, _ := ev.Data["message"].(string)
		switch ev.Kind {
		case wire.EventKind("progress"):
			if token == nil {
				return
			}
			pct, _ := ev.Data["pct"].(float64)
			if n, ok := ev.Data["pct"].(int); ok {
				pct = float64(n)
			}
			progress(pct, 100, message)
		case wire.EventKind("log"):
			if token != nil {
				mu.Lock()
				next := last + 1
				mu.Unlock()
				progress(next, 0, message)
			}
			lv := mcpLevel(ev.Data["level"])
			if !logs || !lv.ShouldSendTo(level) {
				return
			}
			data := map[string]any{"message": message}
			if st, ok := ev.Data["stream"].(string); ok {
				data["stream"] = st
			}
			if err := srv.SendLogMessageToClient(ctx, mcp.NewLoggingMessageNotification(lv, "aep/"+tool, data)); err != nil {
				slog.Debug("mcp face: log notification not sent", "err", err)
				return
			}
			b.delivery.queued()
		}
	}
}

// clientLogLevel is the lowest level the client takes log notifications at
// for this request: the request's own on the 2026-07-28 revision (none
// when it names none), else its session's (logging/setLevel; mcp-go's
// default is error).
func clientLogLevel(ctx context.Context) (mcp.LoggingLevel, bool) {
	if info := mcpserver.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return info.LogLevel, info.LogLevel != ""
	}
	if s, ok := mcpserver.ClientSessionFromContext(ctx).(mcpserver.SessionWithLogging); ok {
		return s.GetLogLevel(), true
	}
	return "", false
}

// mcpLevel maps an aep log event's level to MCP's (RFC 5424 names); an
// unknown or missing one is info.
func mcpLevel(v any) mcp.LoggingLevel {
	s, _ := v.(string)
	switch s = strings.ToLower(s); s {
	case "warn":
		return mcp.LoggingLevelWarning
	case "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency":
		return mcp.LoggingLevel(s)
	}
	return mcp.LoggingLevelInfo
}

// arguments returns the call's arguments as aep wants them: an object.
func arguments(req mcp.CallToolRequest) any {
	if len(req.Params.RawArguments) > 0 {
		var v map[string]any
		if json.Unmarshal(req.Params.RawArguments, &v) == nil && v != nil {
			return v
		}
	}
	if m := req.GetArguments(); len(m) > 0 {
		return m
	}
	return map[string]any{}
}

// toMCPResult maps a spec §2.6 result: data that is an object is the
// structuredContent (and, as MCP asks, its JSON is the text too); a failure
// is an MCP tool error (isError) whose text starts with the error_code,
// which _meta carries as well.
func toMCPResult(r *msg.ToolResult) *mcp.CallToolResult {
	if !r.Success {
		code := msg.ToolResultErrorCodeTOOLERROR
		if r.ErrorCode != nil {
			code = *r.ErrorCode
		}
		text := ""
		if r.Error != nil {
			text = *r.Error
		}
		return toolError(code, text)
	}
	out := &mcp.CallToolResult{}
	text := ""
	// Over the direct codec data is the tool's own Go value, so whether it
	// is an object is decided on its JSON.
	var raw []byte
	if r.Data != nil {
		raw, _ = json.Marshal(r.Data)
	}
	if len(raw) > 0 && raw[0] == '{' {
		var obj map[string]any
		if json.Unmarshal(raw, &obj) == nil {
			out.StructuredContent = obj
		}
	}
	switch {
	case out.StructuredContent != nil:
		text = string(raw)
	case r.Summary != nil:
		if s, ok := r.Summary.(string); ok {
			text = s
		} else {
			b, _ := json.Marshal(r.Summary)
			text = string(b)
		}
	case r.Data != nil:
		if s, ok := r.Data.(string); ok {
			text = s
		} else {
			text = string(raw)
		}
	}
	out.Content = []mcp.Content{mcp.NewTextContent(text)}
	if r.Truncated {
		out.Meta = &mcp.Meta{AdditionalFields: map[string]any{"aep/truncated": true}}
	}
	return out
}

// ErrorCodeKey is the _meta key of a failed call's aep error_code.
const ErrorCodeKey = "aep/error_code"

func toolError(code msg.ToolResultErrorCode, text string) *mcp.CallToolResult {
	r := mcp.NewToolResultError(string(code) + ": " + text)
	r.Meta = &mcp.Meta{AdditionalFields: map[string]any{ErrorCodeKey: string(code)}}
	return r
}

// toMCPTool maps a spec §2.5 definition. The input schema is the tool's
// own, else one built from input_parameters; an output schema is passed
// only when it describes an object, as MCP requires. Annotations come from
// what aep knows: idempotent, and the tags the built-in tools carry.
func toMCPTool(d msg.ToolDefinition) mcp.Tool {
	t := mcp.Tool{Name: d.Name, Description: d.Description}
	in := map[string]any(d.InputSchema)
	if len(in) == 0 {
		props, req := map[string]any{}, []string{}
		for _, p := range d.InputParameters {
			s := map[string]any{"type": p.Type}
			if p.Description != nil {
				s["description"] = *p.Description
			}
			props[p.Name] = s
			if p.Required != nil && *p.Required {
				req = append(req, p.Name)
			}
		}
		in = map[string]any{"type": "object", "properties": props}
		if len(req) > 0 {
			in["required"] = req
		}
	}
	if in["type"] == nil {
		in["type"] = "object"
	}
	t.RawInputSchema, _ = json.Marshal(in)
	if out := map[string]any(d.OutputSchema); out["type"] == "object" {
		t.RawOutputSchema, _ = json.Marshal(out)
	}
	t.Annotations = annotations(d)
	return t
}

func annotations(d msg.ToolDefinition) mcp.ToolAnnotation {
	has := func(tags ...string) bool {
		for _, t := range tags {
			if slices.Contains(d.Tags, t) {
				return true
			}
		}
		return false
	}
	a := mcp.ToolAnnotation{}
	idem := d.Idempotent
	a.IdempotentHint = &idem
	writes := has("write", "exec", "process", "destructive")
	ro := !writes && has("read", "search", "readonly", "read-only")
	a.ReadOnlyHint = &ro
	if writes {
		a.DestructiveHint = &writes
	}
	// Proxied MCP tools and toolkits reach systems outside the host.
	open := has("mcp", "network") || d.Toolkit != nil
	a.OpenWorldHint = &open
	return a
}

func fingerprint(d msg.ToolDefinition) string {
	b, _ := json.Marshal(d)
	sum := sha256.Sum256(b)
	return string(sum[:])
}
