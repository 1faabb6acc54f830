package configcheck

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/kaptinlin/jsonschema"

	configschemas "github.com/aephost/aep/schemas/config"
)

// schema is one settings schema: compiled for validation, and parsed into
// [node] for what messages and the checks beyond JSON Schema need.
type schema struct {
	compiled *jsonschema.Schema
	root     *node
}

// node is the part of a JSON Schema the messages and the x-aep checks
// read (tools/configgen/README.md lists the keywords).
type node struct {
	Type                 string           `json:"type"`
	Properties           map[string]*node `json:"properties"`
	AdditionalProperties json.RawMessage  `json:"additionalProperties"`
	Items                *node            `json:"items"`
	Ref                  string           `json:"$ref"`
	Defs                 map[string]*node `json:"$defs"`
	Enum                 []any            `json:"enum"`
	WriteOnly            bool             `json:"writeOnly"`

	Module      string `json:"x-aep-module"`
	Kernel      bool   `json:"x-aep-kernel"`
	GoType      string `json:"x-go-type"`
	Format      string `json:"x-aep-format"`
	MinDuration string `json:"x-aep-min-duration"`
	PatternHint string `json:"x-aep-pattern-hint"`
}

var (
	loadOnce sync.Once
	kernel   *schema
	byModule map[string]*schema // module ID → its settings schema
	loadErr  error
)

func load() (*schema, map[string]*schema, error) {
	loadOnce.Do(func() { kernel, byModule, loadErr = compile(configschemas.FS) })
	return kernel, byModule, loadErr
}

// Modules lists the module IDs (cls) that have a settings schema.
func Modules() ([]string, error) {
	_, mods, err := load()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(mods))
	for id := range mods {
		out = append(out, id)
	}
	return out, nil
}

func compile(fsys fs.FS) (*schema, map[string]*schema, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, nil, err
	}
	var k *schema
	mods := map[string]*schema{}
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, err
		}
		var root node
		if err := json.Unmarshal(data, &root); err != nil {
			return nil, nil, fmt.Errorf("schemas/config/%s: %w", n, err)
		}
		if root.Module == "" && !root.Kernel {
			return nil, nil, fmt.Errorf("schemas/config/%s: neither x-aep-module nor x-aep-kernel", n)
		}
		// A fresh compiler per file: the schemas are self-contained and
		// nothing is ever loaded over the network.
		c, err := jsonschema.NewCompiler().Compile(data)
		if err != nil {
			return nil, nil, fmt.Errorf("schemas/config/%s: %w", n, err)
		}
		s := &schema{compiled: c, root: &root}
		if root.Kernel {
			k = s
		} else {
			mods[root.Module] = s
		}
	}
	if k == nil {
		return nil, nil, fmt.Errorf("schemas/config: no kernel schema (x-aep-kernel)")
	}
	return k, mods, nil
}

// resolve follows a local $ref of s.
func (s *schema) resolve(n *node) *node {
	for n != nil && n.Ref != "" {
		n = s.root.Defs[strings.TrimPrefix(n.Ref, "#/$defs/")]
	}
	return n
}

// at returns the schema of the instance at a JSON pointer, or nil.
func (s *schema) at(pointer string) *node {
	n := s.resolve(s.root)
	if pointer == "" {
		return n
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		if n == nil {
			return nil
		}
		tok = unescape(tok)
		switch {
		case n.Items != nil && isIndex(tok):
			n = s.resolve(n.Items)
		case n.Properties[tok] != nil:
			n = s.resolve(n.Properties[tok])
		default:
			var add node
			if len(n.AdditionalProperties) > 0 && json.Unmarshal(n.AdditionalProperties, &add) == nil {
				n = s.resolve(&add)
			} else {
				return nil
			}
		}
	}
	return n
}

// keys lists the property names of the object schema at pointer.
func (s *schema) keys(pointer string) []string {
	n := s.at(pointer)
	if n == nil {
		return nil
	}
	out := make([]string, 0, len(n.Properties))
	for k := range n.Properties {
		out = append(out, k)
	}
	return out
}

// secret reports whether the value at pointer, or anything it is inside,
// is a secret (writeOnly): its value is never repeated in a message.
func (s *schema) secret(pointer string) bool {
	n := s.resolve(s.root)
	if n != nil && n.WriteOnly {
		return true
	}
	if pointer == "" {
		return false
	}
	p := ""
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		p += "/" + tok
		if n := s.at(p); n != nil && n.WriteOnly {
			return true
		}
	}
	return false
}

func isIndex(tok string) bool {
	if tok == "" {
		return false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}
