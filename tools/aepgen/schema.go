package main

import (
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
	Codes       map[string]codeInfo    `json:"x-aep-codes"`
	Defs        map[string]*schemaNode `json:"$defs"`
	Hash        string
}

type codeInfo struct {
	Retryable   bool   `json:"retryable"`
	Description string `json:"description"`
}

// schemaNode is the part of JSON Schema that aepgen understands; the rest
// is the concern of go-jsonschema and of the conformance validator.
type schemaNode struct {
	Type        any                    `json:"type"`
	Ref         string                 `json:"$ref"`
	Description string                 `json:"description"`
	Required    []string               `json:"required"`
	Properties  map[string]*schemaNode `json:"properties"`
	Items       *schemaNode            `json:"items"`
	Enum        []any                  `json:"enum"`
	Const       any                    `json:"const"`
	Default     any                    `json:"default"`
	MinLength   *int                   `json:"minLength"`
	MaxLength   *int                   `json:"maxLength"`
	Minimum     *float64               `json:"minimum"`
	Maximum     *float64               `json:"maximum"`
	MinItems    *int                   `json:"minItems"`
	MaxItems    *int                   `json:"maxItems"`
	Format      string                 `json:"format"`
	WriteOnly   bool                   `json:"writeOnly"`
	// If and Then are JSON Schema's conditional (2020-12 §10.2.2); aepgen
	// supports the subset that validator() documents.
	If   *schemaNode `json:"if"`
	Then *schemaNode `json:"then"`
	Else *schemaNode `json:"else"`

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
}

func (n *schemaNode) typeName() string {
	if s, ok := n.Type.(string); ok {
		return s
	}
	return ""
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
		if err := json.Unmarshal(raw, f); err != nil {
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
