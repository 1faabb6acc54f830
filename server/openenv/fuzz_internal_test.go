package openenv

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzMembers: the splitter of frames agrees with encoding/json on every
// input: the same objects, the same keys (the last of duplicates), the
// same values; parseFrame and parseReset never panic.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{"type":"step","data":{"action":7}}`, `{"type":"reset","data":{"seed":1,"aep_token":"t","x":[1,{"y":"}"}]}}`,
		`{"a\"b":1,"a\u0022b":2}`, ` { } `, `[]`, `null`, `{"type":"state","data":{}}`, `{"k":"v\\"}`, `{"x":1e5,"y":-0.5,"z":true}`,
		`{"type":"step","data":{"action":"` + "\u00e9\u2028" + `"}}`, `{`, `{"a":}`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, ok := members(b)
		var want map[string]json.RawMessage
		isObj := utf8.Valid(b) && json.Unmarshal(b, &want) == nil && want != nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("{"))
		if ok != isObj {
			t.Fatalf("members(%q) ok=%v, encoding/json says object=%v", b, ok, isObj)
		}
		if ok {
			got := map[string]json.RawMessage{}
			for _, m := range ms {
				if !json.Valid(m.val) {
					t.Fatalf("member %q of %q: value %q is not JSON", m.key, b, m.val)
				}
				got[m.key] = m.val
			}
			if len(got) != len(want) {
				t.Fatalf("%q: keys %v, want %v", b, got, want)
			}
			for k, v := range want {
				if !bytes.Equal(bytes.TrimSpace(got[k]), bytes.TrimSpace(v)) {
					t.Fatalf("%q: %q = %q, want %q", b, k, got[k], v)
				}
			}
		}
		if fr, fe := parseFrame(b); fr == nil && fe == nil {
			t.Fatalf("parseFrame(%q) gave neither a frame nor an error", b)
		}
		if m, ok := object(b); ok {
			parseReset(m, true, nil)
			actionOf(b, nil)
		}
	})
}
