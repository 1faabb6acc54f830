package toolrun

import (
	"encoding/json"
	"testing"
)

func TestParameters(t *testing.T) {
	var fromJSON map[string]any
	_ = json.Unmarshal([]byte(`{"type":"object","required":["b"],"properties":{
		"b":{"type":"integer","description":"second"},
		"a":{"type":["string","null"]},
		"c":{}}}`), &fromJSON)
	fromGo := map[string]any{"properties": map[string]any{"x": map[string]any{"type": "array"}}, "required": []string{"x"}}
	cases := []struct {
		name   string
		schema map[string]any
		want   string
	}{
		{"decoded JSON", fromJSON, "a:string:false b:integer:true(second) c:any:false"},
		{"built in Go", fromGo, "x:array:true"},
		{"no properties", map[string]any{}, ""},
	}
	for _, c := range cases {
		got := ""
		for i, p := range Parameters(c.schema) {
			if i > 0 {
				got += " "
			}
			got += p.Name + ":" + p.Type + ":"
			if *p.Required {
				got += "true"
			} else {
				got += "false"
			}
			if p.Description != nil {
				got += "(" + *p.Description + ")"
			}
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
