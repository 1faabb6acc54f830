package main

import (
	"fmt"
	"strings"
)

// This file holds the rules that make the bundle say exactly what the host
// does, to validators in strict mode and to stock generators alike
// (README.md, Mapping rules): host objects closed, a def both sides use
// split in two, "any" written without a type list, object keywords with
// their type, and the message unions dispatching on `type`.

// anyTypes are the JSON types whose list means "any value": a type list
// holding all of them says nothing, and strict validators refuse union
// types (ajv: allowUnionTypes), so the bundle leaves `type` out.
var anyTypes = []string{"array", "boolean", "null", "number", "object", "string"}

// isAnyType reports a `type` keyword listing every JSON type.
func isAnyType(t any) bool {
	l, ok := t.([]any)
	if !ok {
		return false
	}
	seen := map[string]bool{}
	for _, x := range l {
		s, _ := x.(string)
		seen[s] = true
	}
	for _, want := range anyTypes {
		if !seen[want] {
			return false
		}
	}
	return true
}

// inputSuffix names the agent's copy of a def that both sides send.
const inputSuffix = "Input"

// refsOf adds to out the defs v refers to, transitively.
func refsOf(v any, defs map[string]any, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/$defs/")
			if !out[name] {
				out[name] = true
				refsOf(defs[name], defs, out)
			}
		}
		for _, x := range v {
			refsOf(x, defs, out)
		}
	case []any:
		for _, x := range v {
			refsOf(x, defs, out)
		}
	}
}

// sides closes the defs a host sends and splits those both sides send
// (docs/contract.md): a def reached only from host messages gets
// `additionalProperties: false` where it names its properties and says
// nothing of others; a def reached from both keeps its name, closed, for
// the host's messages, and an open copy `<Name>Input` serves the agent's
// messages, since the host ignores fields it does not know in what an
// agent sends (docs/DECISIONS.md, Wire). Defs only agents send stay open.
func (c *contract) sides() error {
	agent, host := map[string]bool{}, map[string]bool{}
	for _, m := range c.messages {
		if agentSends(m.Kind) {
			refsOf(m.body, c.defs, agent)
		} else {
			refsOf(m.body, c.defs, host)
		}
	}
	shared := map[string]string{}
	for name := range host {
		if agent[name] {
			shared[name] = name + inputSuffix
		}
	}
	for _, name := range sortedKeys(shared) {
		in := shared[name]
		if _, taken := c.defs[in]; taken {
			return fmt.Errorf("%s: the agent's copy of %s would be named %s, which a def already is", in, name, in)
		}
		if reserved[in] {
			return fmt.Errorf("the agent's copy of %s would be named %s, a built-in of a target language", name, in)
		}
		cp := retarget(deepCopy(c.defs[name]), shared)
		if m, ok := cp.(map[string]any); ok {
			desc, _ := m["description"].(string)
			m["description"] = strings.TrimSpace(fmt.Sprintf("%s as an agent sends it: the same fields, open, as the host ignores fields it does not know (%s, closed, is what a host sends). %s", name, name, desc))
		}
		c.defs[in] = cp
	}
	for _, m := range c.messages {
		if agentSends(m.Kind) {
			m.body = retarget(m.body, shared).(map[string]any)
		}
	}
	for name := range host {
		closeObject(c.defs[name])
	}
	return nil
}

// closeObject closes a schema that names its properties and says nothing
// of other fields.
func closeObject(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if _, named := m["properties"]; !named {
		return
	}
	if _, said := m["additionalProperties"]; said {
		return
	}
	m["additionalProperties"] = false
}

// retarget points $refs to the renamed defs.
func retarget(v any, names map[string]string) any {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			if to, ok := names[strings.TrimPrefix(ref, "#/$defs/")]; ok {
				v["$ref"] = "#/$defs/" + to
			}
		}
		for k, x := range v {
			v[k] = retarget(x, names)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = retarget(x, names)
		}
		return v
	default:
		return v
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = deepCopy(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepCopy(x)
		}
		return out
	default:
		return v
	}
}

// typedKeywords apply to one JSON type each: a schema with keywords of one
// type and no `type` says that type too, as strict validators ask (ajv's
// strictTypes). Where the value has that type anyway (a message is an
// object, a list of keys an array) this changes nothing; elsewhere (a
// detail that is a string) it keeps a condition from holding vacuously.
var typedKeywords = []struct {
	typ      string
	keywords []string
}{
	{"object", []string{"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired"}},
	{"array", []string{"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"}},
	{"string", []string{"minLength", "maxLength", "pattern"}},
	{"number", []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
}

// schemaMaps are keywords whose value maps names to schemas.
var schemaMaps = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "dependentSchemas": true}

// schemaLists are keywords whose value lists schemas.
var schemaLists = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}

// schemaOne are keywords whose value is one schema.
var schemaOne = map[string]bool{"not": true, "if": true, "then": true, "else": true, "items": true, "contains": true,
	"additionalProperties": true, "unevaluatedProperties": true, "unevaluatedItems": true, "propertyNames": true}

// strictify makes one schema, and every schema inside it, what a strict
// validator compiles without a warning: the type beside keywords of one
// type, and every `required` name declared in `properties` beside it
// (ajv's strictRequired), with an empty schema where the def's own
// properties already say what it is (a rule in `not`, `if` or `then`).
func strictify(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if _, ref := m["$ref"]; !ref {
		if _, typed := m["type"]; !typed {
			var implied []string
			for _, g := range typedKeywords {
				for _, kw := range g.keywords {
					if _, ok := m[kw]; ok {
						implied = append(implied, g.typ)
						break
					}
				}
			}
			if len(implied) == 1 {
				m["type"] = implied[0]
			}
		}
	}
	if req, ok := m["required"].([]any); ok {
		props, _ := m["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		}
		for _, r := range req {
			name, _ := r.(string)
			if _, ok := props[name]; !ok {
				props[name] = map[string]any{}
			}
		}
		m["properties"] = props
	}
	for k, x := range m {
		switch {
		case schemaMaps[k]:
			if mm, ok := x.(map[string]any); ok {
				for _, s := range mm {
					strictify(s)
				}
			}
		case schemaLists[k]:
			if l, ok := x.([]any); ok {
				for _, s := range l {
					strictify(s)
				}
			}
		case schemaOne[k]:
			strictify(x)
		}
	}
}

// dispatch is a message union that validators read by `type`: the type
// must be one of the union's, and each type's message applies through an
// if/then. A validator then names what is wrong with the message the line
// says it is, not one failure per member, as a oneOf of the members makes
// it do (ajv reports every branch; `not`/`if` are evaluated after it).
// Generators read the members from the Any… unions beside it.
func dispatch(desc string, ms []*message) map[string]any {
	types := make([]any, 0, len(ms))
	rules := make([]any, 0, len(ms))
	for _, m := range ms {
		types = append(types, m.Type)
		rules = append(rules, map[string]any{
			"if": map[string]any{
				"type":       "object",
				"properties": map[string]any{"type": map[string]any{"const": m.Type}},
				"required":   []any{"type"},
			},
			"then": refTo(m.Def),
		})
	}
	return map[string]any{
		"description": desc,
		"type":        "object",
		"required":    []any{"type"},
		"properties":  map[string]any{"type": map[string]any{"type": "string", "enum": types}},
		"allOf":       rules,
	}
}

// noOurKeywords fails when the bundle's text names one of our keywords
// (`x-aep-…`), in a key or in prose: the published contract speaks only
// standard JSON Schema.
func noOurKeywords(v any, path string) error {
	switch v := v.(type) {
	case map[string]any:
		keys := sortedKeys(v)
		for _, k := range keys {
			if strings.Contains(k, "x-aep") {
				return fmt.Errorf("%s: key %q is one of our keywords", path, k)
			}
			if err := noOurKeywords(v[k], path+"/"+k); err != nil {
				return err
			}
		}
	case []any:
		for i, x := range v {
			if err := noOurKeywords(x, fmt.Sprintf("%s/%d", path, i)); err != nil {
				return err
			}
		}
	case string:
		if strings.Contains(v, "x-aep") {
			return fmt.Errorf("%s: the text names one of our keywords (x-aep-…): %.120s", path, v)
		}
	}
	return nil
}
