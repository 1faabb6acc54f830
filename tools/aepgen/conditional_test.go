package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestConditional checks the supported if/then form and that every other
// use of the conditional fails generation instead of being ignored.
func TestConditional(t *testing.T) {
	gs := &goStruct{Name: "Feedback", Fields: map[string]*goField{
		"type":       {Name: "Type", JSON: "type", Type: "FeedbackType"},
		"kind":       {Name: "Kind", JSON: "kind", Type: "*string", Pointer: true},
		"correction": {Name: "Correction", JSON: "correction", Type: "*string", Pointer: true},
		"tags":       {Name: "Tags", JSON: "tags", Type: "[]string"},
		"score":      {Name: "Score", JSON: "score", Type: "float64"},
	}}
	cases := []struct {
		name, schema string
		want         []string // substrings of the generated check
		err          string
	}{
		{"none", `{}`, nil, ""},
		{"required if const", `{"if": {"properties": {"type": {"const": "CORRECTIVE"}}, "required": ["type"]}, "then": {"required": ["correction"]}}`,
			[]string{`if string(m.Type) == "CORRECTIVE" {`, `if m.Correction == nil { return &wire.FieldError{Field: "correction", Reason: "required when type is \"CORRECTIVE\""} }`}, ""},
		{"pointer condition and list", `{"if": {"properties": {"kind": {"const": "x"}}}, "then": {"required": ["tags"]}}`,
			[]string{`if m.Kind != nil && string((*m.Kind)) == "x" {`, `if m.Tags == nil {`}, ""},
		{"else", `{"if": {"properties": {"type": {"const": "A"}}}, "then": {"required": ["correction"]}, "else": {"required": ["tags"]}}`, nil, "without else"},
		{"then without if", `{"then": {"required": ["correction"]}}`, nil, "needs if and then"},
		{"non-const condition", `{"if": {"properties": {"type": {"enum": ["A"]}}}, "then": {"required": ["correction"]}}`, nil, "string const"},
		{"then with properties", `{"if": {"properties": {"type": {"const": "A"}}}, "then": {"required": ["correction"], "properties": {"correction": {"minLength": 1}}}}`, nil, "then only required"},
		{"always-present field", `{"if": {"properties": {"type": {"const": "A"}}}, "then": {"required": ["score"]}}`, nil, "optional property"},
		{"unknown field", `{"if": {"properties": {"nope": {"const": "A"}}}, "then": {"required": ["correction"]}}`, nil, "string const"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n schemaNode
			if err := json.Unmarshal([]byte(tc.schema), &n); err != nil {
				t.Fatal(err)
			}
			got, err := conditional(&schemaFile{Path: "schemas/x.json"}, &n, gs)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v (%s)", tc.err, err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("want nothing, got %s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("generated\n%s\nlacks %s", got, w)
				}
			}
		})
	}
}
