package configcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kaptinlin/jsonschema"
	"gopkg.in/yaml.v3"
)

// Check validates the document's own sections against kernel.json and
// the `config` of every plugin whose module has a schema against that
// schema; then the checks JSON Schema cannot say (x-aep-format,
// x-aep-min-duration: formats.go). Plugins of modules without a schema
// (third-party or test modules) are left to their strict decoding. Every
// problem is returned, in line order, as [Problems].
func (d *Document) Check() error {
	k, mods, err := load()
	if err != nil {
		return err
	}
	if d.Root == nil {
		return nil
	}
	probs := d.validate(k, d.Root, "")
	if plugins := mapValue(d.Root, "plugins"); plugins != nil && plugins.Kind == yaml.SequenceNode {
		for i, pl := range plugins.Content {
			cls, cfg := mapValue(pl, "cls"), mapValue(pl, "config")
			if cls == nil || cfg == nil || cfg.Tag == "!!null" {
				continue
			}
			if s, ok := mods[cls.Value]; ok {
				probs = append(probs, d.validate(s, cfg, fmt.Sprintf("plugins[%d].config", i))...)
			}
		}
	}
	if len(probs) == 0 {
		return nil
	}
	return sortProblems(probs)
}

// validate checks the YAML node n against s; base is n's dotted key.
func (d *Document) validate(s *schema, n *yaml.Node, base string) Problems {
	inst, err := instance(n)
	if err != nil {
		return Problems{{File: d.File, Line: n.Line, Key: base, Message: err.Error()}}
	}
	var probs Problems
	if res := s.compiled.Validate(inst); !res.IsValid() {
		for _, f := range failures(res, "") {
			val := nodeAt(n, f.pointer)
			if f.err.Keyword == "type" && (val == nil || lenientString(s.at(f.pointer), val)) {
				// nil: a required key that is absent, which kaptinlin
				// also checks as null; "required" reports it.
				continue
			}
			line, key := locate(n, f.pointer)
			probs = append(probs, Problem{File: d.File, Line: line, Key: joinKey(base, key), Message: s.message(f, val)})
		}
	}
	s.extra(n, s.root, base, func(line int, key, msg string) {
		probs = append(probs, Problem{File: d.File, Line: line, Key: key, Message: msg})
	})
	return probs
}

// joinKey appends a located key (".a[0].b" or "[1]") to base.
func joinKey(base, key string) string {
	if base == "" {
		return strings.TrimPrefix(key, ".")
	}
	return base + key
}

// lenientString reports a scalar written where a string is wanted that
// YAML typed otherwise (a token of digits, a name "yes"): it decodes as
// the text written, as yaml.v3 decodes any scalar into a string. A
// duration is not lenient: "30" is no duration.
func lenientString(sch *node, val *yaml.Node) bool {
	return sch != nil && sch.Type == "string" && !isDuration(sch) && val != nil &&
		val.Kind == yaml.ScalarNode && val.Tag != "!!null"
}

func isDuration(n *node) bool { return n != nil && strings.HasSuffix(n.GoType, "Duration") }

// instance turns a YAML node into the JSON data model the schema is
// checked against: mapping keys are strings, numbers are json.Number, and
// a key whose value is null is left out (absent and null are alike).
func instance(n *yaml.Node) (any, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	v, err := dropNulls(v)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not representable as JSON: %w", err)
	}
	var out any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

func dropNulls(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			e, err := dropNulls(e)
			if err != nil {
				return nil, err
			}
			t[k] = e
		}
	case map[any]any:
		for k := range t {
			if _, ok := k.(string); !ok {
				return nil, fmt.Errorf("key %v is not a string", k)
			}
		}
		m := make(map[string]any, len(t))
		for k, e := range t {
			if e != nil {
				m[k.(string)] = e
			}
		}
		return dropNulls(m)
	case []any:
		for i, e := range t {
			e, err := dropNulls(e)
			if err != nil {
				return nil, err
			}
			t[i] = e
		}
	}
	return v, nil
}

type failure struct {
	pointer string // JSON pointer into the checked value
	err     *jsonschema.EvaluationError
}

// failures flattens an evaluation into its leaf errors. Aggregating
// keywords ("properties", "items", "$ref") only repeat what their details
// say, and an unknown key is reported at the key itself.
func failures(r *jsonschema.EvaluationResult, base string) []failure {
	at := base + r.InstanceLocation
	var out []failure
	for _, d := range r.Details {
		if !d.IsValid() {
			out = append(out, failures(d, at)...)
		}
	}
	keys := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := r.Errors[k]
		switch e.Keyword {
		case "properties", "items", "$ref", "prefixItems":
			if len(out) > 0 {
				continue
			}
		case "additionalProperties":
			// The details already name each key (as a failed false
			// schema); report them as unknown keys instead.
			out = dropUnder(out, at)
			for _, name := range quotedNames(e) {
				out = append(out, failure{pointer: at + "/" + escape(name), err: e})
			}
			continue
		case "required":
			for _, name := range quotedNames(e) {
				out = append(out, failure{pointer: at + "/" + escape(name), err: e})
			}
			continue
		case "false":
			continue
		}
		out = append(out, failure{pointer: at, err: e})
	}
	return out
}

func dropUnder(fs []failure, at string) []failure {
	var out []failure
	for _, f := range fs {
		if !strings.HasPrefix(f.pointer, at+"/") || strings.Count(f.pointer[len(at)+1:], "/") > 0 {
			out = append(out, f)
		}
	}
	return out
}

// quotedNames lists the property names an additionalProperties or
// required error names ('a', 'b').
func quotedNames(e *jsonschema.EvaluationError) []string {
	var raw string
	if v, ok := e.Params["property"].(string); ok {
		raw = v
	} else if v, ok := e.Params["properties"].(string); ok {
		raw = v
	}
	var out []string
	for _, p := range strings.Split(raw, ", ") {
		if p = strings.Trim(p, "'"); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// locate follows a JSON pointer through the YAML node n and returns the
// line of the key (or element) it ends at and the dotted key path.
func locate(n *yaml.Node, pointer string) (int, string) {
	line, key := n.Line, ""
	if pointer == "" {
		return line, key
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = unescape(tok)
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		switch {
		case n != nil && n.Kind == yaml.SequenceNode:
			key += "[" + tok + "]"
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				n = nil
				continue
			}
			n = n.Content[i]
			line = n.Line
		case isIndex(tok) && (n == nil || n.Kind != yaml.MappingNode):
			key += "[" + tok + "]"
			n = nil
		default:
			key += "." + tok
			var next *yaml.Node
			if n != nil && n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == tok {
						line, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
			n = next
		}
	}
	return line, key
}

// nodeAt returns the value node at a JSON pointer, or nil.
func nodeAt(n *yaml.Node, pointer string) *yaml.Node {
	if pointer == "" {
		return n
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = unescape(tok)
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil {
			return nil
		}
		switch n.Kind {
		case yaml.MappingNode:
			n = mapValue(n, tok)
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
	}
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// mapValue returns the value of key in the mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			for v != nil && v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

// extra runs the checks of the x-aep keywords over the YAML node n
// against the schema sch; report is called with each problem.
func (s *schema) extra(n *yaml.Node, sch *node, key string, report func(line int, key, msg string)) {
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node, sch *node, key string)
	walk = func(n *yaml.Node, sch *node, key string) {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		sch = s.resolve(sch)
		if n == nil || sch == nil || seen[n] {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			seen[n] = true
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				if k == "<<" && n.Content[i].ShortTag() == "!!merge" {
					// A merge key: the merged mapping's keys are this one's.
					walk(v, sch, key)
					if v.Kind == yaml.SequenceNode {
						for _, m := range v.Content {
							walk(m, sch, key)
						}
					}
					continue
				}
				sub := sch.Properties[k]
				if sub == nil && len(sch.AdditionalProperties) > 0 {
					var add node
					if json.Unmarshal(sch.AdditionalProperties, &add) == nil {
						sub = &add
					}
				}
				walk(v, sub, join(key, k))
			}
		case yaml.SequenceNode:
			seen[n] = true
			for i, c := range n.Content {
				walk(c, sch.Items, key+"["+strconv.Itoa(i)+"]")
			}
		case yaml.ScalarNode:
			if n.Tag == "!!null" || n.Value == "" {
				return
			}
			if sch.Format != "" {
				if check, ok := formats[sch.Format]; ok {
					if err := check(n.Value); err != nil {
						msg := err.Error()
						if !sch.WriteOnly {
							msg = strconv.Quote(n.Value) + ": " + msg
						}
						report(n.Line, key, msg)
					}
				} else {
					report(n.Line, key, "the schema names x-aep-format "+strconv.Quote(sch.Format)+", which this build does not know")
				}
			}
			if sch.MinDuration != "" {
				lo, err1 := time.ParseDuration(sch.MinDuration)
				v, err2 := time.ParseDuration(n.Value)
				if err1 == nil && err2 == nil && v < lo {
					report(n.Line, key, fmt.Sprintf("want at least %s, got %s; leave the key out for the default", sch.MinDuration, n.Value))
				}
			}
		}
	}
	walk(n, sch, key)
}
