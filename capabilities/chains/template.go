package chains

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/tidwall/gjson"
)

// scope is what templates and expressions of one node see: the chain input,
// the outputs of nodes finished so far, and per kind item, index, acc or
// error. It is held as one JSON document so templates resolve with gjson
// paths ("input.city", "nodes.fetch.output.result.data").
type scope struct {
	doc []byte
}

// newScope builds the document {"input":…, "nodes":{id:{"output":…}}, extras…}.
func newScope(input json.RawMessage, outputs map[string]json.RawMessage, extras map[string]json.RawMessage) (scope, error) {
	nodes := make(map[string]map[string]json.RawMessage, len(outputs))
	for id, o := range outputs {
		nodes[id] = map[string]json.RawMessage{"output": o}
	}
	doc := map[string]any{"input": rawOrNull(input), "nodes": nodes}
	for k, v := range extras {
		doc[k] = rawOrNull(v)
	}
	b, err := json.Marshal(doc)
	return scope{doc: b}, err
}

// with returns the scope with more top-level values (map items).
func (s scope) with(extras map[string]json.RawMessage) (scope, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(s.doc, &doc); err != nil {
		return scope{}, err
	}
	for k, v := range extras {
		doc[k] = rawOrNull(v)
	}
	b, err := json.Marshal(doc)
	return scope{doc: b}, err
}

func rawOrNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("null")
	}
	return r
}

// lookup resolves a gjson path; a path that matches nothing is null (an
// upstream node that was skipped has no output). So is a result that is
// not a JSON value: gjson's `!` literals pass their text through as is
// ("{{!00}}" gave 00), which failed the whole body's encoding with an
// error about json.RawMessage instead of naming nothing (found by
// FuzzRender).
func (s scope) lookup(path string) json.RawMessage {
	r := gjson.GetBytes(s.doc, path)
	if !r.Exists() || !json.Valid([]byte(r.Raw)) {
		return json.RawMessage("null")
	}
	return json.RawMessage(r.Raw)
}

// env decodes the document for expr-lang, where JSON numbers are float64.
func (s scope) env() (map[string]any, error) {
	var m map[string]any
	err := json.Unmarshal(s.doc, &m)
	return m, err
}

var (
	// wholeTemplate is a string that is exactly one template: its value
	// keeps its JSON type.
	wholeTemplate = regexp.MustCompile(`^\{\{\s*([^{}]+?)\s*\}\}$`)
	// innerTemplate is a template inside a longer string: its value is
	// spliced in as text.
	innerTemplate = regexp.MustCompile(`\{\{\s*([^{}]+?)\s*\}\}`)
)

// render replaces the templates in every string of a JSON value.
func (s scope) render(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	if !bytes.Contains(raw, []byte("{{")) {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers exactly as written
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	out, err := json.Marshal(s.walk(v))
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return out, nil
}

func (s scope) walk(v any) any {
	switch t := v.(type) {
	case string:
		if m := wholeTemplate.FindStringSubmatch(t); m != nil {
			return s.lookup(m[1])
		}
		if !strings.Contains(t, "{{") {
			return t
		}
		return innerTemplate.ReplaceAllStringFunc(t, func(tm string) string {
			path := innerTemplate.FindStringSubmatch(tm)[1]
			r := gjson.GetBytes(s.doc, path)
			if !r.Exists() {
				return ""
			}
			return r.String()
		})
	case map[string]any:
		for k, e := range t {
			t[k] = s.walk(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = s.walk(e)
		}
		return t
	}
	return v
}
