package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

// Separator joins a server id and an MCP tool name into the proxied tool's
// name, `<server_id>__<tool>`. Server ids cannot hold '_', so the first "__"
// always splits a name back unambiguously, and two servers' tools of the
// same name never collide (docs/DECISIONS.md, MCP).
const Separator = "__"

// spec is how to reach one MCP server.
type spec struct {
	ID     string
	Origin msg.MCPServerInfoOrigin
	// Command, Args and Env start a stdio server (config only).
	Command string
	Args    []string
	Env     map[string]string
	// URL and Headers reach a streamable-HTTP server.
	URL     string
	Headers map[string]string
	// ToolAllow holds path.Match patterns of MCP tool names; empty allows all.
	ToolAllow      []string
	ConnectTimeout time.Duration
	// ProtocolVersion pins the version the client asks for; "" lets mcp-go
	// negotiate (2026-07-28 first, falling back to 2025-11-25).
	ProtocolVersion string
}

func (s spec) transport() msg.MCPServerInfoTransport {
	if s.Command != "" {
		return msg.MCPServerInfoTransportStdio
	}
	return msg.MCPServerInfoTransportHttp
}

func (s spec) allows(tool string) bool {
	if len(s.ToolAllow) == 0 {
		return true
	}
	for _, p := range s.ToolAllow {
		if ok, _ := path.Match(p, tool); ok {
			return true
		}
	}
	return false
}

// proxied is one allowed MCP tool as a plain tool.
type proxied struct {
	tool    *toolrun.Tool
	mcpName string
}

// conn is the bridge's connection to one MCP server. It connects lazily and
// reconnects on the next use after a failure, waiting out an exponential
// backoff after failed connects ( reconnect with backoff).
type conn struct {
	spec       spec
	log        *slog.Logger
	backoffMax time.Duration
	// claim and release keep the tool names owned in server.Claims.
	claim   func(name string) error
	release func(name string)

	// dial serialises connects; mu guards the state below and is never held
	// while connecting, so status, lists and close answer at once while a
	// slow server connects.
	dial sync.Mutex
	// legacyListen (under dial): the server is an HTTP server on 2025-11-25
	// announcing tool changes, so connects open the standing GET stream.
	legacyListen bool
	mu           sync.Mutex
	cli          *mcpclient.Client
	abort        context.CancelFunc // ends the connect under way, if any
	closed       bool
	status       msg.MCPServerInfoStatus
	lastErr      string
	failures     int
	nextTry      time.Time
	proto        string
	serverName   string
	serverVer    string
	resources    int
	prompts      int
	connectedAt  time.Time
	tools        map[string]*proxied // proxied name → tool
	claimed      []string

	reg registration // what a snapshot keeps (session servers)

	progress sync.Map // progress token → func(mcp.ProgressNotificationParams)

	// refreshing is set while a tools/list after list_changed runs;
	// refreshAgain asks it to list once more (a change arrived meanwhile).
	refreshing, refreshAgain atomic.Bool
}

var progressSeq atomic.Uint64

// errClosed is the cause when a server was unregistered or the host stops.
var errClosed = wire.Reason(ReasonUnavailable, errors.New("mcp server connection closed"))

// ReasonUnavailable is the detail.reason of a request to an MCP server the
// bridge cannot reach now. Its text is the server's last_error, which
// mcp/server/list shows the agent anyway.
const ReasonUnavailable = "mcp_server_unavailable"

func newConn(s spec, log *slog.Logger, backoffMax time.Duration, claim func(string) error, release func(string)) *conn {
	return &conn{spec: s, log: log, backoffMax: backoffMax, claim: claim, release: release,
		status: msg.MCPServerInfoStatusConnecting, tools: map[string]*proxied{}}
}

// client returns a connected client, connecting first when needed. After a
// failed connect it refuses until the backoff has passed, so a dead server
// costs one connect attempt per backoff period, not one per request.
func (c *conn) client(ctx context.Context) (*mcpclient.Client, error) {
	if cli, done, err := c.ready(); done {
		return cli, err
	}
	c.dial.Lock()
	defer c.dial.Unlock()
	// Another caller may have connected (or failed) while this one waited.
	if cli, done, err := c.ready(); done {
		return cli, err
	}
	cctx, abort := context.WithCancel(ctx)
	defer abort()
	c.mu.Lock()
	c.status, c.abort = msg.MCPServerInfoStatusConnecting, abort
	c.mu.Unlock()
	cli, hello, err := c.connect(cctx, c.legacyListen)
	if err == nil && c.spec.URL != "" && !c.legacyListen && hello.listChanged && !mcp.IsModernProtocol(hello.proto) {
		// A 2025-11-25 HTTP server sends notifications outside a call
		// (tools/list_changed) only on a standing GET stream, which mcp-go
		// opens only on a transport that stays on that version. Now that
		// the server is known to speak it, connect again with the stream.
		c.legacyListen = true
		cli.Close()
		cli, hello, err = c.connect(cctx, true)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abort = nil
	if c.closed {
		err = errors.Join(errClosed, err)
	}
	if err != nil && c.closed {
		if cli != nil {
			cli.Close()
		}
		return nil, errClosed
	}
	if err != nil {
		c.failures++
		d := time.Duration(1<<min(c.failures-1, 16)) * 250 * time.Millisecond
		if d > c.backoffMax {
			d = c.backoffMax
		}
		c.nextTry = time.Now().Add(d)
		if !c.closed {
			c.status = msg.MCPServerInfoStatusError
		}
		c.lastErr = err.Error()
		c.log.Warn("mcp connect failed", "server", c.spec.ID, "err", err, "retry_in", d)
		return nil, wire.Reason(ReasonUnavailable, fmt.Errorf("mcp server %q: connect: %w", c.spec.ID, err))
	}
	c.proto, c.serverName, c.serverVer = hello.proto, hello.name, hello.version
	c.resources, c.prompts = hello.resources, hello.prompts
	c.setToolsLocked(hello.tools)
	c.cli, c.failures, c.nextTry = cli, 0, time.Time{}
	if hello.listChanged && mcp.IsModernProtocol(hello.proto) {
		// 2026-07-28 delivers list_changed only on a subscriptions/listen
		// stream the client opens; it lives as long as the connection.
		if _, err := cli.ListenAsync(context.Background(), mcp.SubscriptionFilter{ToolsListChanged: true}, func(err error) {
			c.log.Debug("mcp subscriptions/listen ended", "server", c.spec.ID, "err", err)
		}); err != nil {
			c.log.Debug("mcp subscriptions/listen not opened", "server", c.spec.ID, "err", err)
		}
	}
	c.status, c.connectedAt = msg.MCPServerInfoStatusReady, time.Now()
	return cli, nil
}

// ready answers client without connecting when it can: done is false when
// a connect is due.
func (c *conn) ready() (cli *mcpclient.Client, done bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, true, errClosed
	case c.cli != nil:
		return c.cli, true, nil
	}
	if wait := time.Until(c.nextTry); wait > 0 {
		return nil, true, wire.Reason(ReasonUnavailable, fmt.Errorf("mcp server %q is unavailable (%s); next reconnect in %s", c.spec.ID, c.lastErr, wait.Round(time.Millisecond)))
	}
	return nil, false, nil
}

// hello is what a connect learns about the server.
type hello struct {
	proto, name, version string
	resources, prompts   int
	tools                []mcp.Tool
	// listChanged: the server announces changes of its tool list.
	listChanged bool
}

// connect starts the transport, negotiates the protocol and lists the
// server's tools, all within the connect timeout. It touches no state of c
// but the notification hook.
func (c *conn) connect(ctx context.Context, listen bool) (*mcpclient.Client, hello, error) {
	var h hello
	ctx, cancel := context.WithTimeout(ctx, c.spec.ConnectTimeout)
	defer cancel()
	var (
		tr  transport.Interface
		err error
	)
	if c.spec.Command != "" {
		tr = transport.NewStdioWithOptions(c.spec.Command, envList(c.spec.Env), c.spec.Args, transport.WithCommandFunc(command))
	} else {
		opts := []transport.StreamableHTTPCOption{transport.WithHTTPHeaders(c.spec.Headers),
			transport.WithHTTPLogger(slog.New(debugHandler{c.log.Handler()}).With("mcp_server", c.spec.ID))}
		if listen {
			// Only for servers known to speak 2025-11-25, whose notifications
			// outside a call come on no other stream.
			//lint:ignore SA1019 deprecated for 2026-07-28 servers only, which never get here
			opts = append(opts, transport.WithContinuousListening())
		}
		tr, err = transport.NewStreamableHTTP(c.spec.URL, opts...)
		if err != nil {
			return nil, h, err
		}
	}
	var opts []mcpclient.ClientOption
	if c.spec.ProtocolVersion != "" {
		opts = append(opts, mcpclient.WithProtocolVersion(c.spec.ProtocolVersion))
	}
	cli := mcpclient.NewClient(tr, opts...)
	// The process must outlive the connect timeout, so it starts under a
	// context of its own; Close ends it.
	if err := cli.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, h, err
	}
	cli.OnNotification(c.notified)
	fail := func(err error) (*mcpclient.Client, hello, error) {
		cli.Close()
		if ctx.Err() != nil {
			return nil, h, fmt.Errorf("no answer within %s: %w", c.spec.ConnectTimeout, err)
		}
		return nil, h, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "aep", Version: "1.0"}
	init.Params.ProtocolVersion = c.spec.ProtocolVersion
	res, err := cli.Initialize(ctx, init)
	if err != nil {
		return fail(fmt.Errorf("initialize: %w", err))
	}
	h.proto, h.name, h.version = res.ProtocolVersion, res.ServerInfo.Name, res.ServerInfo.Version
	h.listChanged = res.Capabilities.Tools != nil && res.Capabilities.Tools.ListChanged
	// A server that offers no tools (only resources or prompts) need not
	// answer tools/list, and mcp-go's does not: asking would fail the connect.
	if res.Capabilities.Tools != nil {
		listed, err := cli.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			return fail(fmt.Errorf("tools/list: %w", err))
		}
		h.tools = listed.Tools
	}
	if res.Capabilities.Resources != nil {
		if r, err := cli.ListResources(ctx, mcp.ListResourcesRequest{}); err == nil {
			h.resources = len(r.Resources)
		}
	}
	if res.Capabilities.Prompts != nil {
		if p, err := cli.ListPrompts(ctx, mcp.ListPromptsRequest{}); err == nil {
			h.prompts = len(p.Prompts)
		}
	}
	return cli, h, nil
}

// setToolsLocked converts the allowed tools and claims their names; a name
// another plugin owns is left out and reported as the last error.
func (c *conn) setToolsLocked(list []mcp.Tool) {
	for _, n := range c.claimed {
		c.release(n)
	}
	c.claimed = nil
	c.tools = map[string]*proxied{}
	var refused []string
	for _, t := range list {
		if !c.spec.allows(t.Name) {
			continue
		}
		name := c.spec.ID + Separator + t.Name
		if err := c.claim(name); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		c.claimed = append(c.claimed, name)
		c.tools[name] = &proxied{tool: toolrun.NewTool(definition(c.spec.ID, name, c.serverVer, t), nil), mcpName: t.Name}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		c.lastErr = "tools left out: " + strings.Join(refused, "; ")
	}
}

// broken drops the connection after a transport failure, so the next use
// reconnects at once (a server that died mid-call, or was restarted).
func (c *conn) broken(cli *mcpclient.Client, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cli != cli || c.closed {
		return
	}
	c.cli = nil
	c.status, c.lastErr = msg.MCPServerInfoStatusError, err.Error()
	c.log.Warn("mcp server connection lost", "server", c.spec.ID, "err", err)
	go cli.Close()
}

// close disconnects for good and releases the tool names.
func (c *conn) close() {
	c.mu.Lock()
	cli := c.cli
	if c.abort != nil {
		c.abort()
	}
	c.cli, c.closed = nil, true
	c.status = msg.MCPServerInfoStatusDisconnected
	for _, n := range c.claimed {
		c.release(n)
	}
	c.claimed = nil
	c.tools = map[string]*proxied{}
	c.mu.Unlock()
	if cli != nil {
		cli.Close()
	}
}

// toolList returns the proxied tools, connecting first if needed; a server
// that cannot connect contributes no tools (its status says why).
func (c *conn) toolList(ctx context.Context) []*toolrun.Tool {
	if _, err := c.client(ctx); err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*toolrun.Tool, 0, len(c.tools))
	for _, p := range c.tools {
		out = append(out, p.tool)
	}
	return out
}

func (c *conn) lookup(name string) *proxied {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools[name]
}

func (c *conn) info() msg.MCPServerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := msg.MCPServerInfo{ServerID: c.spec.ID, Origin: c.spec.Origin, Transport: c.spec.transport(),
		Status: c.status, ToolsCount: len(c.tools), ResourcesCount: c.resources, PromptsCount: c.prompts}
	if c.spec.URL != "" {
		u := c.spec.URL
		in.URL = &u
	}
	for _, kv := range []struct {
		dst **string
		v   string
	}{{&in.ProtocolVersion, c.proto}, {&in.ServerName, c.serverName}, {&in.ServerVersion, c.serverVer}, {&in.LastError, c.lastErr}} {
		if kv.v != "" {
			v := kv.v
			*kv.dst = &v
		}
	}
	if !c.connectedAt.IsZero() {
		t := float64(c.connectedAt.UnixMilli()) / 1000
		in.ConnectedAt = &t
	}
	return in
}

// notified turns notifications/progress of a running call into a progress
// event of that call.
func (c *conn) notified(n mcp.JSONRPCNotification) {
	if n.Method == mcp.MethodNotificationToolsListChanged {
		c.refreshTools()
		return
	}
	if n.Method != string(mcp.MethodNotificationProgress) {
		return
	}
	tok := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
	if fn, ok := c.progress.Load(tok); ok {
		var p mcp.ProgressNotificationParams
		b, _ := json.Marshal(n.Params.AdditionalFields)
		if json.Unmarshal(b, &p) == nil {
			fn.(func(mcp.ProgressNotificationParams))(p)
		}
	}
}

// refreshTools lists the server's tools again after it announced a change
// (notifications/tools/list_changed), so tool/list shows added tools and
// drops removed ones without a reconnect. It runs off the notification
// goroutine; notifications that arrive during a refresh cause one more.
func (c *conn) refreshTools() {
	c.refreshAgain.Store(true)
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer func() {
			c.refreshing.Store(false)
			if c.refreshAgain.Load() { // arrived as this one finished
				c.refreshTools()
			}
		}()
		for c.refreshAgain.Swap(false) {
			c.mu.Lock()
			cli, closed := c.cli, c.closed
			c.mu.Unlock()
			if cli == nil || closed {
				c.refreshAgain.Store(false) // the next connect lists the tools anyway
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.spec.ConnectTimeout)
			listed, err := cli.ListTools(ctx, mcp.ListToolsRequest{})
			cancel()
			if err != nil {
				c.refreshAgain.Store(false)
				c.log.Warn("mcp tools/list after list_changed failed", "server", c.spec.ID, "err", err)
				return
			}
			c.mu.Lock()
			if c.cli == cli && !c.closed {
				c.setToolsLocked(listed.Tools)
			}
			c.mu.Unlock()
		}
	}()
}

// call runs one MCP tool. Arguments pass through unchanged; the context's
// cancellation reaches the server (mcp-go sends notifications/cancelled on
// stdio; on HTTP the request's stream ends). A transport failure that is not
// the caller's own timeout or cancel marks the connection broken.
func (c *conn) call(ctx context.Context, p *proxied, args any) (toolrun.Output, error) {
	cli, err := c.client(ctx)
	if err != nil {
		return toolrun.Output{}, err
	}
	if args == nil {
		args = map[string]any{}
	}
	tok := fmt.Sprintf("aep-%d", progressSeq.Add(1))
	c.progress.Store(tok, func(pn mcp.ProgressNotificationParams) {
		pct := int(pn.Progress)
		if pn.Total > 0 {
			pct = int(pn.Progress * 100 / pn.Total)
		}
		m := pn.Message
		if m == "" {
			if pn.Total > 0 {
				m = fmt.Sprintf("%g/%g", pn.Progress, pn.Total)
			} else {
				m = fmt.Sprintf("%g", pn.Progress)
			}
		}
		toolrun.Progress(ctx, pct, m)
	})
	defer c.progress.Delete(tok)
	req := mcp.CallToolRequest{}
	req.Params.Name = p.mcpName
	req.Params.Arguments = args
	req.Params.Meta = &mcp.Meta{ProgressToken: tok}
	res, err := cli.CallTool(ctx, req)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && ctx.Err() == nil {
			c.broken(cli, err)
			return toolrun.Output{}, fmt.Errorf("mcp server %q failed during the call (%w); the bridge reconnects on the next call", c.spec.ID, err)
		}
		return toolrun.Output{}, fmt.Errorf("mcp server %q: %w", c.spec.ID, err)
	}
	out := output(res)
	if res.IsError {
		text, _ := out.Summary.(string)
		if text == "" {
			text = "the MCP tool reported an error"
		}
		return toolrun.Output{}, &toolrun.ExitError{Output: out, Err: errors.New(text)}
	}
	return out, nil
}

// summaryMax bounds the summary, a one-liner (spec §2.6).
const summaryMax = 200

// output maps an MCP tool result: data is structuredContent when given,
// else the content blocks as MCP JSON; the summary is the text blocks
// joined, cut to one line (docs/DECISIONS.md, MCP).
func output(res *mcp.CallToolResult) toolrun.Output {
	var texts []string
	blocks := make([]any, 0, len(res.Content))
	for _, ct := range res.Content {
		if t, ok := mcp.AsTextContent(ct); ok {
			texts = append(texts, t.Text)
		}
		var m any
		if b, err := json.Marshal(ct); err == nil && json.Unmarshal(b, &m) == nil {
			blocks = append(blocks, m)
		}
	}
	var data any = blocks
	if res.StructuredContent != nil {
		data = res.StructuredContent
		if len(res.RawStructuredContent) > 0 {
			var m any
			if json.Unmarshal(res.RawStructuredContent, &m) == nil {
				data = m
			}
		}
	}
	sum := strings.Join(texts, " ")
	if i := strings.IndexByte(sum, '\n'); i >= 0 {
		sum = sum[:i]
	}
	if len(sum) > summaryMax {
		sum = strings.ToValidUTF8(sum[:summaryMax], "") + "…"
	}
	return toolrun.Output{Data: data, Summary: sum}
}

// definition converts an MCP tool into a spec §2.5 definition: the input
// schema is kept whole, and its top-level properties become parameters.
func definition(serverID, name, version string, t mcp.Tool) msg.ToolDefinition {
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	schema := map[string]any{}
	if len(t.RawInputSchema) > 0 {
		json.Unmarshal(t.RawInputSchema, &schema)
	} else if b, err := json.Marshal(t.InputSchema); err == nil {
		json.Unmarshal(b, &schema)
	}
	if _, ok := schema["type"]; !ok {
		schema["type"] = "object"
	}
	def := msg.ToolDefinition{
		Name: name, Description: desc, InputSchema: schema,
		InputParameters: toolrun.Parameters(schema),
		Streaming:       true, // MCP progress notifications become events
		Idempotent:      t.Annotations.IdempotentHint != nil && *t.Annotations.IdempotentHint,
		Tags:            []string{"mcp", serverID},
		Version:         version,
		DeferLoading:    t.DeferLoading,
	}
	if t.OutputSchema.Type != "" {
		out := map[string]any{}
		if b, err := json.Marshal(t.OutputSchema); err == nil && json.Unmarshal(b, &out) == nil {
			def.OutputSchema = out
			def.OutputParameters = toolrun.Parameters(out)
		}
	}
	return def
}

// command starts a stdio server with only PATH, HOME and the configured
// environment: the host's own environment (its auth token, store DSN…) is
// not the server's business (docs/DECISIONS.md, MCP).
func command(ctx context.Context, name string, env []string, args []string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	base := []string{}
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			base = append(base, k+"="+v)
		}
	}
	cmd.Env = append(base, env...)
	return cmd, nil
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
