package mcpface

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"runtime/debug"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// The face's own tools: memory, env and the two requests that change a
// session's tools, each one aep request. Their names use `_`, which no
// aep tool namespace does, and a tool of the session with the same name is
// shadowed (docs/DECISIONS.md, aep as an MCP server).

// faceTool is one of the face's own tools.
type faceTool struct {
	cap    string // the capability the session must have been granted
	name   string
	desc   string
	schema string // JSON Schema of the arguments
	ro     bool   // readOnlyHint
	idem   bool   // idempotentHint
	run    func(ctx context.Context, b *backend, args json.RawMessage) (any, error)
}

var faceTools = []faceTool{
	{cap: "memory", name: "memory_store", desc: "Store an entry in the session's memory (tier semantic by default: persistent and searchable).",
		schema: `{"type":"object","properties":{"key":{"type":"string"},"content":{"description":"any JSON value"},"tier":{"type":"string","enum":["working","episodic","semantic"]},"tags":{"type":"array","items":{"type":"string"}},"ttl":{"type":"integer","description":"seconds"}},"required":["key","content"]}`,
		idem:   true, run: memoryStore},
	{cap: "memory", name: "memory_recall", desc: "Search the session's memory: full text over the semantic tier by default.",
		schema: `{"type":"object","properties":{"query":{"type":"string"},"tier":{"type":"string","enum":["working","episodic","semantic"]},"tags":{"type":"array","items":{"type":"string"}},"limit":{"type":"integer"}}}`,
		ro:     true, idem: true, run: memoryRecall},
	{cap: "memory", name: "memory_forget", desc: "Delete memory entries by key or tag.",
		schema: `{"type":"object","properties":{"keys":{"type":"array","items":{"type":"string"}},"tier":{"type":"string","enum":["working","episodic","semantic"]},"tags":{"type":"array","items":{"type":"string"}}}}`,
		idem:   true, run: memoryForget},
	{cap: "env", name: "env_reset", desc: "Start an episode of an environment; returns its episode_id and first observation.",
		schema: `{"type":"object","properties":{"env_name":{"type":"string"},"seed":{"type":"integer"},"options":{"type":"object"},"episode_id":{"type":"string"}},"required":["env_name"]}`,
		run: func(ctx context.Context, b *backend, a json.RawMessage) (any, error) {
			return decodeAndCall(ctx, a, b.c.EnvReset)
		}},
	{cap: "env", name: "env_step", desc: "Take one action in an episode; returns observation, reward, terminated and truncated.",
		schema: `{"type":"object","properties":{"episode_id":{"type":"string"},"action":{"description":"the environment's action"}},"required":["episode_id","action"]}`,
		run: func(ctx context.Context, b *backend, a json.RawMessage) (any, error) {
			return decodeAndCall(ctx, a, b.c.EnvStep)
		}},
	{cap: "env", name: "env_observe", desc: "Observe an episode without acting.",
		schema: `{"type":"object","properties":{"episode_id":{"type":"string"}},"required":["episode_id"]}`,
		ro:     true, idem: true,
		run: func(ctx context.Context, b *backend, a json.RawMessage) (any, error) {
			return decodeAndCall(ctx, a, b.c.EnvObserve)
		}},
	{cap: "toolkits", name: "toolkit_configure", desc: "Configure a toolkit of the session; its tools then appear (notifications/tools/list_changed).",
		schema: `{"type":"object","properties":{"toolkit_name":{"type":"string"},"config":{"type":"object"}},"required":["toolkit_name","config"]}`,
		run: func(ctx context.Context, b *backend, a json.RawMessage) (any, error) {
			r, err := decodeAndCall(ctx, a, b.c.ToolkitConfigure)
			if err == nil && r.Status != msg.ToolkitConfigureRespStatusOk {
				err = wire.Public(errors.New(r.Message))
			}
			b.refresh(ctx)
			return r, err
		}},
	{cap: "mcp", name: "mcp_server_register", desc: "Register a streamable-HTTP MCP server for this session; its tools then appear (notifications/tools/list_changed).",
		schema: `{"type":"object","properties":{"server_id":{"type":"string"},"url":{"type":"string"},"headers":{"type":"object","additionalProperties":{"type":"string"}},"tool_allow_list":{"type":"array","items":{"type":"string"}}},"required":["server_id","url"]}`,
		run: func(ctx context.Context, b *backend, a json.RawMessage) (any, error) {
			r, err := decodeAndCall(ctx, a, b.c.McpServerRegister)
			if err == nil && !r.Ok && r.Error != nil {
				err = wire.Public(errors.New(*r.Error))
			}
			b.refresh(ctx)
			return r, err
		}},
}

// decodeAndCall decodes an MCP tool's arguments into the aep request
// (whose fields are the tool's properties) and sends it.
func decodeAndCall[Req any, Resp any](ctx context.Context, args json.RawMessage, call func(context.Context, *Req) (*Resp, error)) (*Resp, error) {
	var req Req
	if len(args) > 0 {
		if err := json.Unmarshal(args, &req); err != nil {
			return nil, fmt.Errorf("%w: arguments: %v", wire.ErrInvalid, err)
		}
	}
	return call(ctx, &req)
}

// addFaceTools registers the face's tools of the granted capabilities.
func (b *backend) addFaceTools() {
	var tools []mcpserver.ServerTool
	for _, ft := range faceTools {
		if !b.granted[ft.cap] {
			continue
		}
		ft := ft
		b.extra[ft.name] = true
		ro, idem, destructive, open := ft.ro, ft.idem, false, ft.cap == "mcp"
		t := mcp.NewToolWithRawSchema(ft.name, ft.desc, json.RawMessage(ft.schema))
		t.Annotations = mcp.ToolAnnotation{ReadOnlyHint: &ro, IdempotentHint: &idem, DestructiveHint: &destructive, OpenWorldHint: &open}
		if ft.name == "memory_forget" {
			t.Annotations.DestructiveHint = &[]bool{true}[0]
		}
		tools = append(tools, mcpserver.ServerTool{Tool: t, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			args := req.Params.RawArguments
			if len(args) == 0 {
				args, _ = json.Marshal(req.GetArguments())
			}
			v, err := ft.run(ctx, b, args)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return faceError(err), nil
			}
			return structured(v), nil
		}})
	}
	if len(tools) > 0 {
		b.srv.AddTools(tools...)
	}
}

// faceError turns an aep error reply into an MCP tool error: the code and
// the message the kernel chose to show (never an internal text).
func faceError(err error) *mcp.CallToolResult {
	e := wire.AsError(err)
	r := mcp.NewToolResultError(string(e.Code) + ": " + e.Message)
	r.Meta = &mcp.Meta{AdditionalFields: map[string]any{ErrorCodeKey: string(e.Code)}}
	return r
}

// structured returns v, an aep reply, as structuredContent and its JSON text.
func structured(v any) *mcp.CallToolResult {
	raw, _ := json.Marshal(v)
	var obj map[string]any
	_ = json.Unmarshal(raw, &obj)
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(string(raw))}, StructuredContent: obj}
}

// memoryID opens the session's memory once (memory/init) and returns its id.
func (b *backend) memoryID(ctx context.Context) (string, error) {
	b.mu.Lock()
	id := b.memID
	b.mu.Unlock()
	if id != "" {
		return id, nil
	}
	r, err := b.c.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	b.memID = r.MemoryID
	b.mu.Unlock()
	return r.MemoryID, nil
}

type memArgs struct {
	Key     string          `json:"key"`
	Keys    []string        `json:"keys"`
	Content json.RawMessage `json:"content"`
	Tier    string          `json:"tier"`
	Tags    []string        `json:"tags"`
	TTL     *int            `json:"ttl"`
	Query   *string         `json:"query"`
	Limit   int             `json:"limit"`
}

func parseMem(args json.RawMessage) (memArgs, error) {
	var a memArgs
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return a, fmt.Errorf("%w: arguments: %v", wire.ErrInvalid, err)
		}
	}
	return a, nil
}

func memoryStore(ctx context.Context, b *backend, args json.RawMessage) (any, error) {
	a, err := parseMem(args)
	if err != nil {
		return nil, err
	}
	id, err := b.memoryID(ctx)
	if err != nil {
		return nil, err
	}
	tier := msg.MemoryEntryTierSemantic
	if a.Tier != "" {
		tier = msg.MemoryEntryTier(a.Tier)
	}
	if len(a.Content) == 0 {
		a.Content = json.RawMessage("null")
	}
	return b.c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{{Key: a.Key, Content: a.Content, Tier: tier, Tags: a.Tags, TTL: a.TTL}}})
}

func memoryRecall(ctx context.Context, b *backend, args json.RawMessage) (any, error) {
	a, err := parseMem(args)
	if err != nil {
		return nil, err
	}
	id, err := b.memoryID(ctx)
	if err != nil {
		return nil, err
	}
	tier := msg.MemoryRecallReqTier(msg.MemoryEntryTierSemantic)
	if a.Tier != "" {
		tier = msg.MemoryRecallReqTier(a.Tier)
	}
	return b.c.MemoryRecall(ctx, &msg.MemoryRecallReq{MemoryID: id, Query: a.Query, Tier: &tier, Tags: a.Tags, Limit: a.Limit})
}

func memoryForget(ctx context.Context, b *backend, args json.RawMessage) (any, error) {
	a, err := parseMem(args)
	if err != nil {
		return nil, err
	}
	id, err := b.memoryID(ctx)
	if err != nil {
		return nil, err
	}
	req := &msg.MemoryForgetReq{MemoryID: id, Keys: a.Keys, Tags: a.Tags}
	if a.Tier != "" {
		t := msg.MemoryForgetReqTier(a.Tier)
		req.Tier = &t
	}
	return b.c.MemoryForget(ctx, req)
}

// semanticPrefix is the URI prefix of the semantic tier's entries as MCP
// resources; the key is path-escaped after it.
const semanticPrefix = "aep://memory/semantic/"

// addMemoryResources serves the semantic tier as resources: resources/list
// lists its entries (read afresh on each list) and the template
// aep://memory/semantic/{key} reads one.
func (b *backend) addMemoryResources(hooks *mcpserver.Hooks) {
	b.srv.AddResourceTemplate(mcp.NewResourceTemplate(semanticPrefix+"{key}", "semantic memory entry",
		mcp.WithTemplateDescription("One entry of the session's semantic memory, by key."),
		mcp.WithTemplateMIMEType("application/json")), b.readMemory)
	hooks.AddBeforeListResources(func(ctx context.Context, _ any, _ *mcp.ListResourcesRequest) {
		id, err := b.memoryID(ctx)
		if err != nil {
			return
		}
		tier := msg.MemoryRecallReqTier(msg.MemoryEntryTierSemantic)
		r, err := b.c.MemoryRecall(ctx, &msg.MemoryRecallReq{MemoryID: id, Tier: &tier, Limit: 1000})
		if err != nil {
			b.f.log.Debug("mcp face: memory/recall for resources/list failed", "err", err)
			return
		}
		res := make([]mcpserver.ServerResource, 0, len(r.Hits))
		for _, h := range r.Hits {
			res = append(res, mcpserver.ServerResource{
				Resource: mcp.NewResource(semanticPrefix+url.PathEscape(h.Entry.Key), h.Entry.Key, mcp.WithMIMEType("application/json")),
				Handler:  b.readMemory})
		}
		b.srv.SetResources(res...)
	})
}

func (b *backend) readMemory(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	uri := req.Params.URI
	key, err := url.PathUnescape(strings.TrimPrefix(uri, semanticPrefix))
	if err != nil || !strings.HasPrefix(uri, semanticPrefix) || key == "" {
		return nil, fmt.Errorf("%w: not a semantic memory URI: %s", mcpserver.ErrResourceNotFound, uri)
	}
	id, err := b.memoryID(ctx)
	if err != nil {
		return nil, err
	}
	tier := msg.MemoryRetrieveReqTier(msg.MemoryEntryTierSemantic)
	r, err := b.c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{key}, Tier: &tier})
	if err != nil {
		return nil, err
	}
	if len(r.Entries) == 0 {
		return nil, fmt.Errorf("%w: %s", mcpserver.ErrResourceNotFound, uri)
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "application/json", Text: string(r.Entries[0].Content)}}, nil
}

// version is the module's version as the Go toolchain recorded it.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}
