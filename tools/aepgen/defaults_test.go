package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDefaults checks the constructor initialisers and the refusal of a
// boolean default of true, which omitempty would make impossible to override.
func TestDefaults(t *testing.T) {
	gs := &goStruct{Name: "Req", Fields: map[string]*goField{
		"mode":  {Name: "Mode", JSON: "mode", Type: "ReqMode"},
		"limit": {Name: "Limit", JSON: "limit", Type: "int"},
		"on":    {Name: "On", JSON: "on", Type: "bool"},
		"opt":   {Name: "Opt", JSON: "opt", Type: "*string", Pointer: true},
	}}
	cases := []struct {
		name, schema, want, err string
	}{
		{"scalars", `{"properties": {"mode": {"type": "string", "default": "plain"}, "limit": {"type": "integer", "default": 50}, "on": {"type": "boolean", "default": false}}}`,
			`Limit: 50, Mode: "plain", On: false`, ""},
		{"pointer fields get no default", `{"properties": {"opt": {"type": "string", "default": "x"}}}`, ``, ""},
		{"true boolean refused", `{"properties": {"on": {"type": "boolean", "default": true}}}`, "", "cannot be overridden with false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n schemaNode
			if err := json.Unmarshal([]byte(tc.schema), &n); err != nil {
				t.Fatal(err)
			}
			g := &generator{models: map[string]*goStruct{"Req": gs}}
			got, err := g.defaults(&message{defRef: defRef{file: &schemaFile{Path: "schemas/x.json"}, name: "Req", node: &n}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
