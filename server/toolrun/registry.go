// This file is the tool registry every tool-serving plugin shares: tools
// with filtered, paginated listing (spec §2.5, §4.2); typed.go builds tools
// from Go functions whose JSON Schemas come from Go types.

package toolrun

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/aephost/aep/gen/msg"
)

// RunFunc runs a tool on its raw arguments (the escape hatch beside the
// typed [Register]): a map[string]any from the JSON codec, or any value a
// direct-codec client sent.
type RunFunc func(ctx context.Context, args any) (Output, error)

// Tool is one registered tool: its definition and how it runs.
type Tool struct {
	Def msg.ToolDefinition
	Run RunFunc
	// haystack is the lower-cased text `query` searches (name, description, tags).
	haystack string
}

// NewTool returns a tool for [Registry.Add].
func NewTool(def msg.ToolDefinition, run RunFunc) *Tool {
	if def.Tags == nil {
		def.Tags = []string{}
	}
	if def.InputParameters == nil {
		def.InputParameters = []msg.ToolParameter{}
	}
	if def.OutputParameters == nil {
		def.OutputParameters = []msg.ToolParameter{}
	}
	if def.Version == "" {
		def.Version = "1.0.0"
	}
	hay := strings.ToLower(def.Name + "\n" + def.Description + "\n" + strings.Join(def.Tags, "\n"))
	return &Tool{Def: def, Run: run, haystack: hay}
}

// Subject returns what the tool policy needs to know of t.
func (t *Tool) Subject() Subject { return Subject{Name: t.Def.Name, Tags: t.Def.Tags} }

// Registry holds tools sorted by name. It is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	byName map[string]*Tool
	sorted []*Tool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]*Tool{}} }

// Add registers t; a second tool of the same name is an error.
func (r *Registry) Add(t *Tool) error {
	if t.Def.Name == "" {
		return fmt.Errorf("tools: a tool needs a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byName[t.Def.Name]; dup {
		return fmt.Errorf("tools: tool %q registered twice", t.Def.Name)
	}
	r.byName[t.Def.Name] = t
	i := sort.Search(len(r.sorted), func(i int) bool { return r.sorted[i].Def.Name >= t.Def.Name })
	r.sorted = append(r.sorted, nil)
	copy(r.sorted[i+1:], r.sorted[i:])
	r.sorted[i] = t
	return nil
}

// Lookup returns the tool called name.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.byName[name]
	return t, ok
}

// Names returns the tool names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, len(r.sorted))
	for i, t := range r.sorted {
		out[i] = t.Def.Name
	}
	return out
}

// Len returns the number of tools.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.sorted)
}

// List answers a tool/list for this registry's tools (spec §4.2 Tool list).
// See [Select] for the filter rules.
func (r *Registry) List(req *msg.ToolListReq, opt Options) *msg.ToolListResp {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return Select(r.sorted, req, opt)
}

// Select filters tools, which must be sorted by name, and returns one page:
//   - tools with defer_loading, set by the tool or by the policy's defer
//     patterns, are skipped unless include_deferred (spec §2.5);
//   - query is a case-insensitive substring of the name, description or a tag;
//   - tags match a tool having any of them;
//   - tools the host's tool policy refuses (opt.Policy) are left out: the
//     agent could only get TOOL_DENIED from them (spec §2.9 rule 6);
//   - the filters combine with AND;
//   - cursor is the last name of the previous page, so pages are stable while
//     tools are added; limit (0: no limit) bounds the page, and next_cursor
//     is set when more matches follow (docs/DECISIONS.md, tools).
func Select(sorted []*Tool, req *msg.ToolListReq, opt Options) *msg.ToolListResp {
	start := 0
	if req.Cursor != nil && *req.Cursor != "" {
		c := *req.Cursor
		start = sort.Search(len(sorted), func(i int) bool { return sorted[i].Def.Name > c })
	}
	q := ""
	if req.Query != nil {
		q = strings.ToLower(*req.Query)
	}
	limit := 0
	if req.Limit != nil {
		limit = *req.Limit
	}
	resp := &msg.ToolListResp{Tools: []msg.ToolDefinition{}}
	for _, t := range sorted[start:] {
		def := t.Def
		if !def.DeferLoading && len(opt.Policy.Defer) > 0 && opt.Deferred(t.Subject()) {
			def.DeferLoading = true
		}
		if def.DeferLoading && !req.IncludeDeferred {
			continue
		}
		if q != "" && !strings.Contains(t.haystack, q) {
			continue
		}
		if len(req.Tags) > 0 && !anyTag(t.Def.Tags, req.Tags) {
			continue
		}
		if ok, _ := opt.Allowed(t.Subject()); !ok {
			continue
		}
		if limit > 0 && len(resp.Tools) == limit {
			last := resp.Tools[limit-1].Name
			resp.NextCursor = &last
			break
		}
		resp.Tools = append(resp.Tools, def)
	}
	return resp
}

func anyTag(have, want []string) bool {
	for _, w := range want {
		for _, h := range have {
			if h == w {
				return true
			}
		}
	}
	return false
}
