package conformance

import (
	"context"
	"sort"
	"strings"
)

// mcp: the bridge's own rules, and the fixture's configured server
// (schemas/mcp.json).
func (k *kit) mcp(ctx context.Context) error {
	if !k.offers("mcp", CheckMCPServers, CheckMCPServer) {
		return nil
	}
	s := k.sessionFor(ctx, CheckMCPServers, "mcp", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckMCPServers
	var servers []any
	m := s.call(ctx, "mcp/server/list/req", nil)
	if k.want(c, m, "mcp/server/list/resp", "mcp/server/list") {
		servers = arr(m.body, "servers")
		var ids []string
		for _, x := range servers {
			ids = append(ids, str(x, "server_id"))
		}
		k.expect(c, sort.StringsAreSorted(ids), "mcp/server/list is not sorted by server_id: %v", ids)
	}
	none := "aep-conformance-" + k.uniq
	m = s.call(ctx, "mcp/server/unregister/req", map[string]any{"server_id": none})
	if k.want(c, m, "mcp/server/unregister/resp", "unregistering an unknown server") {
		ok, _ := boolean(m.body, "ok")
		k.expect(c, !ok, "unregistering a server the session never registered is ok true")
	}
	// Port 9 (discard) on loopback: off any sane allowlist, and nothing
	// speaks MCP there either way.
	m = s.call(ctx, "mcp/server/register/req", map[string]any{"server_id": none, "url": "http://127.0.0.1:9/aep-conformance", "timeout": 2})
	if k.want(c, m, "mcp/server/register/resp", "registering a URL off the allowlist") {
		ok, _ := boolean(m.body, "ok")
		k.expect(c, !ok && str(m.body, "error") != "", "registering http://127.0.0.1:9/aep-conformance: %s, want ok false with an error", m)
	}
	k.wantNotFound(c, s.call(ctx, "mcp/resource/list/req", map[string]any{"server_id": none}), "mcp/resource/list of an unknown server")

	f := k.opts.Fixture.MCP
	if f == nil {
		k.skip("needs fixture mcp.server_id", CheckMCPServer)
		return nil
	}
	v := CheckMCPServer
	found := false
	for _, x := range servers {
		if str(x, "server_id") == f.ServerID {
			found = true
			k.expect(v, str(x, "origin") == "config", "the fixture's server %s has origin %q, want config", f.ServerID, str(x, "origin"))
		}
	}
	k.expect(v, found, "mcp/server/list lacks the fixture's server %s", f.ServerID)
	m = s.call(ctx, "mcp/server/unregister/req", map[string]any{"server_id": f.ServerID})
	if k.want(v, m, "mcp/server/unregister/resp", "unregistering the configured server") {
		ok, _ := boolean(m.body, "ok")
		k.expect(v, !ok, "a configured server was unregistered by a session")
	}
	m = s.call(ctx, "mcp/resource/list/req", map[string]any{"server_id": f.ServerID})
	if k.want(v, m, "mcp/resource/list/resp", "mcp/resource/list of the fixture's server") {
		k.expect(v, str(m.body, "server_id") == f.ServerID, "mcp/resource/list names %q", str(m.body, "server_id"))
	}
	if f.ResourceURI != "" {
		m = s.call(ctx, "mcp/resource/read/req", map[string]any{"server_id": f.ServerID, "uri": f.ResourceURI})
		if k.want(v, m, "mcp/resource/read/resp", "mcp/resource/read of the fixture's resource") {
			contents := arr(m.body, "contents")
			k.expect(v, len(contents) > 0 && str(contents[0], "uri") == f.ResourceURI, "mcp/resource/read of %s: %s", f.ResourceURI, m)
		}
	}
	m = s.call(ctx, "mcp/prompt/list/req", map[string]any{"server_id": f.ServerID})
	if k.want(v, m, "mcp/prompt/list/resp", "mcp/prompt/list of the fixture's server") && f.Prompt != nil {
		found := false
		for _, p := range arr(m.body, "prompts") {
			found = found || str(p, "name") == f.Prompt.Name
		}
		k.expect(v, found, "mcp/prompt/list lacks the fixture's prompt %s", f.Prompt.Name)
	}
	if f.Prompt != nil {
		body := map[string]any{"server_id": f.ServerID, "name": f.Prompt.Name}
		if f.Prompt.Arguments != nil {
			body["arguments"] = f.Prompt.Arguments
		}
		m = s.call(ctx, "mcp/prompt/get/req", body)
		if k.want(v, m, "mcp/prompt/get/resp", "mcp/prompt/get of the fixture's prompt") {
			k.expect(v, len(arr(m.body, "messages")) > 0, "mcp/prompt/get of %s gave no messages", f.Prompt.Name)
		}
	}
	if k.offered["tools"] {
		m = s.call(ctx, "tool/list/req", map[string]any{"include_deferred": true})
		if k.want(v, m, "tool/list/resp", "tool/list") {
			n := 0
			for _, name := range toolNames(m) {
				if strings.HasPrefix(name, f.ServerID+"__") {
					n++
				}
			}
			k.expect(v, n > 0, "tool/list holds no tool of the fixture's server named %s__<tool>", f.ServerID)
		}
		if f.Tool != nil {
			m = s.call(ctx, "tool/call/req", map[string]any{"tool_name": f.Tool.ToolName, "arguments": orEmpty(f.Tool.Arguments)})
			if k.want(v, m, "tool/call/resp", "the fixture's MCP tool call") {
				res := obj(m.body, "result")
				success, _ := boolean(res, "success")
				k.expect(v, success, "the fixture's MCP tool call %s failed: %s", f.Tool.ToolName, m)
				if f.Tool.Data != nil {
					k.expect(v, holds(res["data"], f.Tool.Data), "the fixture's MCP tool call: data %s does not hold %s", show(res["data"]), show(f.Tool.Data))
				}
			}
		}
	}
	return nil
}
