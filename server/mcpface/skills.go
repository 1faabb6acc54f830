package mcpface

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
)

// Skills as MCP tools: each skill the session may call (skill/discover,
// newest version) is a tool `skill_<name>` whose input schema is the
// skill's, called through skill/call with progress as for tools
// (docs/DECISIONS.md, aep as an MCP server).

// skillPrefix starts the MCP name of every skill tool; `_` is used by no
// aep tool namespace, as for the face's own tools.
const skillPrefix = "skill_"

// skillToolName is the MCP name of skill name: MCP tool names allow
// letters, digits, `_`, `-` and `.`; anything else becomes `_`.
func skillToolName(name string) string {
	var b strings.Builder
	b.WriteString(skillPrefix)
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// refreshSkills lists the session's skills and brings the skill tools in
// line, as refresh does for tools.
func (b *backend) refreshSkills(ctx context.Context) {
	if !b.granted["skills"] {
		return
	}
	resp, err := b.c.SkillDiscover(ctx, &msg.SkillDiscoverReq{})
	if err != nil {
		b.f.log.Debug("mcp face: skill/discover failed", "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[string]bool{}
	var add []mcpserver.ServerTool
	for _, d := range resp.Skills {
		name := skillToolName(d.Name)
		if seen[name] || !b.f.exposed(name) {
			continue // an older version, a clash after renaming, or not exposed
		}
		seen[name] = true
		raw, _ := json.Marshal(d)
		fp := string(raw)
		if b.skills[name] == fp {
			continue
		}
		b.skills[name] = fp
		add = append(add, mcpserver.ServerTool{Tool: skillTool(name, d), Handler: b.skillHandler(d.Name)})
	}
	var gone []string
	for name := range b.skills {
		if !seen[name] {
			gone = append(gone, name)
			delete(b.skills, name)
		}
	}
	if len(add) > 0 {
		b.srv.AddTools(add...)
	}
	if len(gone) > 0 {
		b.srv.DeleteTools(gone...)
	}
}

// skillTool describes skill d as an MCP tool: its input schema (an object,
// as MCP requires) and output schema, and annotations from what aep knows:
// a skill runs sandboxed code, so it is neither read-only nor idempotent,
// and it reaches the network only when its limits allow it.
func skillTool(name string, d msg.SkillDefinition) mcp.Tool {
	in, _ := json.Marshal(d.InputSchema)
	if s, ok := objectSchema(in); ok {
		in = s
	} else {
		in = json.RawMessage(`{"type":"object"}`)
	}
	desc := d.Description
	if d.Instructions != nil && *d.Instructions != "" {
		desc += "\n\n" + *d.Instructions
	}
	t := mcp.NewToolWithRawSchema(name, fmt.Sprintf("Skill %s %s: %s", d.Name, d.Version, desc), in)
	if out, _ := json.Marshal(d.OutputSchema); len(out) > 2 {
		if s, ok := objectSchema(out); ok {
			t.RawOutputSchema = s
		}
	}
	ro, idem, destructive := false, false, false
	open := d.Limits != nil && d.Limits.Network
	t.Annotations = mcp.ToolAnnotation{Title: d.Name, ReadOnlyHint: &ro, IdempotentHint: &idem, DestructiveHint: &destructive, OpenWorldHint: &open}
	return t
}

// objectSchema returns s when it is a JSON Schema of an object.
func objectSchema(s json.RawMessage) (json.RawMessage, bool) {
	var m map[string]any
	if json.Unmarshal(s, &m) != nil || m["type"] != "object" {
		return nil, false
	}
	return s, true
}

// skillHandler calls skill name (its newest version) with the MCP call's
// arguments; a failed run is a tool error, aep errors are as for tools.
func (b *backend) skillHandler(name string) mcpserver.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.RawArguments
		if len(args) == 0 {
			args, _ = json.Marshal(req.GetArguments())
		}
		raw := json.RawMessage(args)
		areq := &msg.SkillCallReq{Name: name, Arguments: &raw}
		cctx := ctx
		if send := b.eventSender(ctx, req.Params.Name, req.Params.Meta); send != nil {
			streaming := true
			areq.Streaming = &streaming
			cctx = client.WithEvents(ctx, send)
		}
		resp, err := b.c.SkillCall(cctx, areq)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return faceError(err), nil
		}
		b.delivery.settle(ctx)
		r := resp.Result
		if !r.Success {
			text := "the skill failed"
			if r.Error != nil && *r.Error != "" {
				text = *r.Error
			}
			return mcp.NewToolResultError(text), nil
		}
		var data any
		if r.Data != nil {
			_ = json.Unmarshal(*r.Data, &data)
		}
		text, _ := json.Marshal(data)
		out := &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(string(text))}}
		if obj, ok := data.(map[string]any); ok {
			out.StructuredContent = obj
		}
		return out, nil
	}
}
