package inspector

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// FuzzRedactLine: whatever line a session exchanges — JSON or not, the
// secret escaped, in keys, nested, base64 — what the page is sent is JSON
// and holds no secret the host knows.
func FuzzRedactLine(f *testing.F) {
	const secret = "fuzz-host-token-0a9b8c7d"
	h := aeptest.NewHost(f, aeptest.Config(func(c *server.Config) { c.Server.AuthToken = secret }), nil)
	red := newRedactor(h.Operator().Inspect())
	red.refresh()
	for _, seed := range []string{
		`{"type":"tool/call/req","id":"1","arguments":{"v":"fuzz-host-token-0a9b8c7d"}}`,
		`{"type":"x","fuzz-host-token-0a9b8c7d":1}`,
		`{"type":"x","s":"fuzz-host-token-0a9b8c7\u0064"}`,
		`{"type":"x","b":"ZnV6ei1ob3N0LXRva2VuLTBhOWI4YzdkCg=="}`,
		`{"type":"x","a":[{"b":["id-fuzz-host-token-0a9b8c7d"]}]}`,
		`not json fuzz-host-token-0a9b8c7d`,
		`{"auth_token":{"nested":"anything"}}`,
		`{"type":"x"} {"second":"fuzz-host-token-0a9b8c7d"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		out := red.line(line, nil)
		if !json.Valid(out) {
			t.Fatalf("not JSON: %s", out)
		}
		var back any
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		// The secret neither as sent nor as the page reads it.
		if strings.Contains(string(out), secret) || strings.Contains(flatten(back), secret) {
			t.Fatalf("%q became %s", line, out)
		}
	})
}

// flatten is every key and string of v, concatenated with separators.
func flatten(v any) string {
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				b.WriteString(k + "\x00")
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			b.WriteString(x + "\x00")
		}
	}
	walk(v)
	return b.String()
}
