package toolrun

import (
	"sort"

	"github.com/aephost/aep/gen/msg"
)

// Parameters lists the top-level properties of an object JSON Schema as
// spec §2.5 tool parameters, sorted by name, for every plugin that describes
// tools by schema (typed Go tools, MCP tools). `required` may be a []string
// (schemas built in Go) or a []any (schemas decoded from JSON); a `type`
// list such as ["string","null"] gives its first non-null type, and a
// property without a type is "any".
func Parameters(schema map[string]any) []msg.ToolParameter {
	props, _ := schema["properties"].(map[string]any)
	req := map[string]bool{}
	switch r := schema["required"].(type) {
	case []string:
		for _, n := range r {
			req[n] = true
		}
	case []any:
		for _, n := range r {
			if s, ok := n.(string); ok {
				req[s] = true
			}
		}
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]msg.ToolParameter, 0, len(names))
	for _, n := range names {
		p, _ := props[n].(map[string]any)
		tp := msg.ToolParameter{Name: n, Type: typeName(p["type"])}
		if d, ok := p["description"].(string); ok {
			tp.Description = &d
		}
		r := req[n]
		tp.Required = &r
		out = append(out, tp)
	}
	return out
}

func typeName(v any) string {
	switch t := v.(type) {
	case string:
		if t != "" {
			return t
		}
	case []any:
		for _, m := range t {
			if s, ok := m.(string); ok && s != "null" {
				return s
			}
		}
	}
	return "any"
}
