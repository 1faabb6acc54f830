// Package configcheck validates the `config` of every plugin in a host
// configuration file against its module's JSON Schema (schemas/config/)
// and reports each mistake with the file, line and key it is at, which
// strict YAML decoding alone cannot do once a plugin's settings are
// re-encoded for it (server/plugin.go, decodeSettings).
package configcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/kaptinlin/jsonschema"
	"gopkg.in/yaml.v3"

	configschemas "github.com/aephost/aep/schemas/config"
	"github.com/aephost/aep/server"
)

// Problem is one place where a file breaks a plugin's settings schema.
type Problem struct {
	File string
	Line int
	// Key is the dotted path of the offending key from the top of the
	// file, e.g. plugins[0].config.servers[1].comand.
	Key     string
	Message string
}

func (p Problem) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Key, p.Message)
}

// Problems is every problem found in one file; it is an error.
type Problems []Problem

func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

var (
	loadOnce sync.Once
	bySchema map[string]*jsonschema.Schema // module ID → compiled schema
	loadErr  error
)

// Schemas returns the compiled settings schema of every built-in module
// by module ID (cls).
func Schemas() (map[string]*jsonschema.Schema, error) {
	loadOnce.Do(func() { bySchema, loadErr = compile(configschemas.FS) })
	return bySchema, loadErr
}

func compile(fsys fs.FS) (map[string]*jsonschema.Schema, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	out := map[string]*jsonschema.Schema{}
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		var head struct {
			Module string `json:"x-aep-module"`
		}
		if err := json.Unmarshal(data, &head); err != nil || head.Module == "" {
			return nil, fmt.Errorf("schemas/config/%s: no x-aep-module", n)
		}
		// A fresh compiler per file: the schemas are self-contained and
		// nothing is ever loaded over the network.
		s, err := jsonschema.NewCompiler().Compile(data)
		if err != nil {
			return nil, fmt.Errorf("schemas/config/%s: %w", n, err)
		}
		out[head.Module] = s
	}
	return out, nil
}

// Check validates the settings of every plugin in data (a host
// configuration file named file) against its module's schema. Plugins of
// modules without a schema (third-party or test modules) are left to their
// strict decoding. ${ENV} references are expanded first, as at start-up.
func Check(file string, data []byte) error {
	schemas, err := Schemas()
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(server.ExpandEnv(data), &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	plugins := mapValue(doc.Content[0], "plugins")
	if plugins == nil || plugins.Kind != yaml.SequenceNode {
		return nil
	}
	var probs Problems
	for i, pl := range plugins.Content {
		cls := mapValue(pl, "cls")
		cfg := mapValue(pl, "config")
		if cls == nil || cfg == nil {
			continue
		}
		s, ok := schemas[cls.Value]
		if !ok {
			continue
		}
		base := fmt.Sprintf("plugins[%d].config", i)
		var v any
		if err := cfg.Decode(&v); err != nil {
			probs = append(probs, Problem{File: file, Line: cfg.Line, Key: base, Message: err.Error()})
			continue
		}
		if v == nil { // `config:` with nothing is no settings
			continue
		}
		inst, err := jsonValue(v)
		if err != nil {
			probs = append(probs, Problem{File: file, Line: cfg.Line, Key: base, Message: err.Error()})
			continue
		}
		res := s.Validate(inst)
		if res.IsValid() {
			continue
		}
		for _, f := range failures(res, "") {
			line, key := locate(cfg, f.pointer)
			probs = append(probs, Problem{File: file, Line: line, Key: base + key, Message: f.message})
		}
	}
	if len(probs) == 0 {
		return nil
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Line < probs[j].Line })
	return probs
}

// jsonValue turns decoded YAML into the JSON data model (map keys are
// strings, numbers are float64 or int as JSON would give them).
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("settings are not JSON-representable: %w", err)
	}
	var out any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

type failure struct {
	pointer string // JSON pointer into the plugin's settings
	message string
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
			for _, name := range unknownKeys(e) {
				out = append(out, failure{pointer: at + "/" + escape(name), message: "unknown key " + strconv.Quote(name)})
			}
			continue
		case "false":
			continue
		}
		out = append(out, failure{pointer: at, message: e.Error()})
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

func unknownKeys(e *jsonschema.EvaluationError) []string {
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

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// locate follows a JSON pointer through the YAML node n and returns the
// line of the key (or element) it ends at and the dotted key path.
func locate(n *yaml.Node, pointer string) (int, string) {
	line, key := n.Line, ""
	if pointer == "" {
		return line, key
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil {
			break
		}
		switch n.Kind {
		case yaml.MappingNode:
			key += "." + tok
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
			n = next
		case yaml.SequenceNode:
			key += "[" + tok + "]"
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return line, key
			}
			n = n.Content[i]
			line = n.Line
		default:
			return line, key
		}
	}
	return line, key
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
			return n.Content[i+1]
		}
	}
	return nil
}

// ErrProblems is matched by errors.Is on a [Problems] value.
var ErrProblems = errors.New("config does not match its schema")

// Is lets callers test for schema problems with errors.Is.
func (ps Problems) Is(target error) bool { return target == ErrProblems }
