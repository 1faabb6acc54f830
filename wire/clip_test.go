package wire_test

import (
	"strings"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// TestErrorsClipEchoedInput sends lines whose offending part is 1 MiB: the
// error must name it, cut, so a bad line never buys a reply as large as
// itself (docs/SECURITY.md, The edge).
func TestErrorsClipEchoedInput(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	tests := []struct {
		name string
		reg  *wire.Registry
		line string
		want string
	}{
		{"unknown type", msg.Registry(), `{"type":"` + big + `","id":"1"}`, "unknown type"},
		{"duplicate small-object key", msg.Registry(), `{"type":"ping","id":"1","` + big + `":1,"` + big + `":2}`, "duplicate key"},
		{"duplicate large-object key", msg.Registry(), `{"type":"ping","id":"1","a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"` + big + `":1,"` + big + `":2}`, "duplicate key"},
		{"field of a wrong type", probeRegistry(), `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"tags":{"` + big + `":"not a number"}}`, "field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sc wire.Scanned
			_, _, err := tc.reg.Decode([]byte(tc.line), &sc)
			e := wire.AsError(err)
			if e == nil || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if len(e.Message) > 1024 {
				t.Fatalf("message of %d bytes echoes the input", len(e.Message))
			}
			if !strings.Contains(e.Message, "xxxx") {
				t.Fatalf("message %q does not show the start of the offending input", e.Message)
			}
			if d, ok := e.Detail.(map[string]any); ok {
				if f, _ := d["field"].(string); len(f) > wire.MaxEcho {
					t.Fatalf("detail.field of %d bytes", len(f))
				}
			}
		})
	}
}

func TestClip(t *testing.T) {
	tests := []struct{ in, want string }{
		{"short", `"short"`},
		{strings.Repeat("é", 100), `"` + strings.Repeat("é", 64) + `"… (200 bytes)`},
		{strings.Repeat("a", 127) + "é", `"` + strings.Repeat("a", 127) + `"… (129 bytes)`},
	}
	for _, tc := range tests {
		if got := wire.Clip(tc.in); got != tc.want {
			t.Errorf("Clip(%.20q…) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := wire.ClipID(strings.Repeat("i", 1000)); len(got) != wire.MaxReqIDEcho {
		t.Errorf("ClipID kept %d bytes", len(got))
	}
}
