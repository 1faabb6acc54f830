package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// schemaFile is one file of schemas/, as far as aepgen reads it.
type schemaFile struct {
	Path        string
	Base        string                 // file name without .json
	ID          string                 `json:"$id"`
	Title       string                 `json:"title"`
	Description string                 `json:"description"`
	Namespace   string                 `json:"x-aep-namespace"`
	Capability  string                 `json:"x-aep-capability"`
	Kernel      bool                   `json:"x-aep-kernel"`
	Defs        map[string]*schemaNode `json:"$defs"`
	Hash        string
	// Raw is the file as written, numbers kept as written (json.Number),
	// for the keyword check and the copy go-jsonschema reads.
	Raw map[string]any `json:"-"`
}

// schemaNode is one schema of a file, with every keyword of the table in
// keywords.go. Numbers stay json.Number so that a bound such as
// 9223372036854775807 reaches the generated code exactly.
type schemaNode struct {
	Type        any                    `json:"type"` // a name or a list of names
	Ref         string                 `json:"$ref"`
	Description string                 `json:"description"`
	Required    []string               `json:"required"`
	Properties  map[string]*schemaNode `json:"properties"`
	Items       *schemaNode            `json:"items"`
	PrefixItems []*schemaNode          `json:"prefixItems"`
	// AdditionalProperties is a schema (the values of a map) or true (an
	// object open to fields it does not name).
	AdditionalProperties *additional   `json:"additionalProperties"`
	Enum                 []any         `json:"enum"`
	Const                any           `json:"const"`
	Default              any           `json:"default"`
	MinLength            *int          `json:"minLength"`
	MaxLength            *int          `json:"maxLength"`
	Pattern              *string       `json:"pattern"`
	Minimum              *json.Number  `json:"minimum"`
	Maximum              *json.Number  `json:"maximum"`
	ExclusiveMinimum     *json.Number  `json:"exclusiveMinimum"`
	ExclusiveMaximum     *json.Number  `json:"exclusiveMaximum"`
	MinItems             *int          `json:"minItems"`
	MaxItems             *int          `json:"maxItems"`
	UniqueItems          bool          `json:"uniqueItems"`
	Format               string        `json:"format"`
	WriteOnly            bool          `json:"writeOnly"`
	AnyOf                []*schemaNode `json:"anyOf"`
	OneOf                []*schemaNode `json:"oneOf"`
	AllOf                []*schemaNode `json:"allOf"`
	// If, Then and Else are JSON Schema's conditional (2020-12 §10.2.2).
	If   *schemaNode `json:"if"`
	Then *schemaNode `json:"then"`
	Else *schemaNode `json:"else"`

	GoHint *goHint `json:"goJSONSchema"`

	XType     string         `json:"x-aep-type"`
	XKind     string         `json:"x-aep-kind"`
	XReply    string         `json:"x-aep-reply"`
	XMerge    mergeRule      `json:"x-aep-merge"`
	XFallback map[string]any `json:"x-aep-fallback"`
	XAliases  []string       `json:"x-aep-aliases"`
	// XAuditTarget names the string field that says what a request acts on
	// (tool/call's tool_name); it becomes AuditTarget() for the audit line.
	XAuditTarget string `json:"x-aep-audit-target"`
	// XOwner names the kind of claim whose owner handles a request alone:
	// the plugin that claimed ("tool", <audit target>) answers tool/call,
	// not every tool-serving plugin. It needs x-aep-audit-target.
	XOwner string `json:"x-aep-owner"`
	// XCapability overrides the file's capability for one type.
	XCapability string `json:"x-aep-capability"`
	// XChangesState marks a request whose success changes the session's
	// state that a snapshot holds: its reply takes the session's next
	// point (wire.Entry.ChangesState).
	XChangesState bool `json:"x-aep-changes-state"`
}

// goHint is go-jsonschema's type hint (goJSONSchema).
type goHint struct {
	Type    string   `json:"type"`
	Imports []string `json:"imports"`
}

// additional is the value of additionalProperties: true, or a schema.
type additional struct {
	Open   bool
	Schema *schemaNode
}

func (a *additional) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case "true":
		a.Open = true
		return nil
	case "false":
		return fmt.Errorf("additionalProperties: false closes an object, which agents' messages never are (see envelope.json)")
	}
	a.Schema = new(schemaNode)
	return decodeExact(b, a.Schema)
}

// types returns the type names the node allows: one for "type": "string",
// several for a list.
func (n *schemaNode) types() []string {
	switch t := n.Type.(type) {
	case string:
		return []string{t}
	case []any:
		out := make([]string, 0, len(t))
		for _, v := range t {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// typeName returns the single type name of the node, or "".
func (n *schemaNode) typeName() string {
	if s, ok := n.Type.(string); ok {
		return s
	}
	return ""
}

// decodeExact decodes JSON keeping numbers as json.Number.
func decodeExact(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

func loadSchemas(dir string) ([]*schemaFile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*schemaFile
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f := &schemaFile{Path: filepath.ToSlash(p), Base: strings.TrimSuffix(filepath.Base(p), ".json")}
		if err := decodeExact(raw, &f.Raw); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if _, isSchema := f.Raw["$schema"]; !isSchema {
			// A data file beside the schemas (a table such as
			// retryable.json) is not aepgen's to read. A file that looks
			// like a schema but forgot "$schema" is refused, not skipped.
			for _, k := range []string{"$id", "$defs", "x-aep-namespace"} {
				if _, ok := f.Raw[k]; ok {
					return nil, fmt.Errorf("%s: has %q but no \"$schema\"; a schema file states its dialect, and a file without one is a data file aepgen skips", p, k)
				}
			}
			continue
		}
		if err := checkKeywords(f.Path, f.Raw); err != nil {
			return nil, err
		}
		if err := decodeExact(raw, f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if f.ID == "" {
			return nil, fmt.Errorf("%s: missing $id", p)
		}
		sum := sha256.Sum256(raw)
		f.Hash = hex.EncodeToString(sum[:])[:16]
		out = append(out, f)
	}
	return out, nil
}

// refTarget resolves a $ref of the forms "#/$defs/X" and "file.json#/$defs/X"
// to (file base, def name).
func refTarget(from *schemaFile, ref string) (string, string, error) {
	file, frag, ok := strings.Cut(ref, "#")
	if !ok || !strings.HasPrefix(frag, "/$defs/") {
		return "", "", fmt.Errorf("%s: unsupported $ref %q", from.Path, ref)
	}
	base := from.Base
	if file != "" {
		base = strings.TrimSuffix(filepath.Base(file), ".json")
	}
	return base, strings.TrimPrefix(frag, "/$defs/"), nil
}

// methodName derives a handler method name from a type string:
// "session/snapshot/req" → "SessionSnapshot", "env/data/add" → "EnvDataAdd".
func methodName(t string) string {
	t = strings.TrimSuffix(t, "/req")
	var b strings.Builder
	for _, part := range strings.FieldsFunc(t, func(r rune) bool { return r == '/' || r == '_' || r == '-' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// mergeRule is x-aep-merge: either the name of the reply's list field, or an
// object that also makes the merged list one exact page:
// {"field": "tools", "key": "name", "limit": "limit", "cursor": "next_cursor"}
// sorts the merged list by the items' key, cuts it to the request's limit
// and sets the reply's cursor field when more follow.
type mergeRule struct {
	Field  string `json:"field"`
	Key    string `json:"key"`
	Limit  string `json:"limit"`
	Cursor string `json:"cursor"`
}

func (m *mergeRule) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		m.Field = s
		return nil
	}
	type plain mergeRule
	return json.Unmarshal(b, (*plain)(m))
}
