package toolrun

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// schemaSeeds are the schemas of TestParameters plus the shapes MCP servers
// send: type lists, nested objects, required lists with non-strings and
// names not among the properties, properties that are not objects.
var schemaSeeds = []string{
	`{"type":"object","required":["b"],"properties":{"b":{"type":"integer","description":"second"},"a":{"type":["string","null"]},"c":{}}}`,
	`{"properties":{"x":{"type":"array"}},"required":["x"]}`,
	`{}`,
	`{"type":"object","properties":{"q":{"type":"string","description":"query"},"n":{"type":"integer","minimum":1}},"required":["q"]}`,
	`{"properties":{"o":{"type":"object","properties":{"deep":{"type":"string"}}}},"required":"o"}`,
	`{"properties":{"a":5,"b":null,"c":[],"d":{"type":""},"e":{"type":["null"]},"f":{"type":[1,"null","number"]}},"required":[1,null,"a","zz"]}`,
	`{"properties":[],"required":{}}`,
	`{"properties":{"":{"type":"string","description":""},"\u00e9\ud83d\ude00":{"type":"boolean","description":5}}}`,
	`{"properties":{"dup":{"type":"string"}},"required":["dup","dup"]}`,
}

// FuzzParameters checks the schema → spec §2.5 parameter conversion on any
// JSON Schema document, as the MCP bridge decodes one: one parameter per
// property, sorted by name, each with a type and its required flag and
// description as the schema says; the same result on a second call; and
// a tool/list reply carrying them conforms to schemas/.
func FuzzParameters(f *testing.F) {
	for _, s := range schemaSeeds {
		f.Add([]byte(s))
	}
	checker, err := conformance.Module()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var schema map[string]any
		if json.Unmarshal(doc, &schema) != nil {
			return // not an object: no caller hands it over
		}
		params := Parameters(schema)
		if again := Parameters(schema); !reflect.DeepEqual(params, again) {
			t.Fatalf("two calls differ:\n%+v\n%+v", params, again)
		}
		props, _ := schema["properties"].(map[string]any)
		if len(params) != len(props) {
			t.Fatalf("%d parameters for %d properties", len(params), len(props))
		}
		required := map[string]bool{}
		if list, ok := schema["required"].([]any); ok {
			for _, n := range list {
				if s, ok := n.(string); ok {
					required[s] = true
				}
			}
		}
		for i, p := range params {
			prop, ok := props[p.Name]
			if !ok {
				t.Fatalf("parameter %q is not a property", p.Name)
			}
			if i > 0 && params[i-1].Name >= p.Name {
				t.Fatalf("parameters not sorted and unique: %q before %q", params[i-1].Name, p.Name)
			}
			if p.Type == "" {
				t.Fatalf("parameter %q has no type", p.Name)
			}
			if p.Required == nil || *p.Required != required[p.Name] {
				t.Fatalf("parameter %q: required %v, schema says %v", p.Name, p.Required, required[p.Name])
			}
			m, _ := prop.(map[string]any)
			if s, ok := m["type"].(string); ok && s != "" && p.Type != s {
				t.Fatalf("parameter %q: type %q, schema says %q", p.Name, p.Type, s)
			}
			if list, ok := m["type"].([]any); ok && p.Type != "any" && !slices.Contains(list, any(p.Type)) {
				t.Fatalf("parameter %q: type %q is not in the schema's %v", p.Name, p.Type, list)
			}
			d, ok := m["description"].(string)
			if ok != (p.Description != nil) || (ok && *p.Description != d) {
				t.Fatalf("parameter %q: description %v, schema says %q", p.Name, p.Description, d)
			}
		}
		def := msg.ToolDefinition{Name: "t", Description: "d", InputParameters: params, OutputParameters: params, Tags: []string{}, Version: "1"}
		line, err := wire.Encode(&wire.Envelope{Type: "tool/list/resp", ID: "h1", ReqID: "r1", TS: 1}, &msg.ToolListResp{Tools: []msg.ToolDefinition{def}})
		if err != nil {
			t.Fatalf("encoding the parameters: %v", err)
		}
		if err := checker.CheckHostLine(line); err != nil {
			t.Fatalf("tool/list reply with the parameters does not conform: %v\n%s", err, line)
		}
	})
}
