package wire_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aephost/aep/wire"
)

// nested returns an object whose "a" member holds n nested arrays.
func nested(n int) string {
	return `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
}

// manyKeys returns an object with keys k0…k(n-1), then extra members.
func manyKeys(n int, extra string) string {
	var b strings.Builder
	b.WriteString(`{"type":"ping"`)
	for i := range n {
		fmt.Fprintf(&b, `,"k%d":%d`, i, i)
	}
	b.WriteString(extra)
	b.WriteString(`}`)
	return b.String()
}

// TestScanRejects lists lines that break the framing rules of docs/DECISIONS.md, Wire;
// each must fail with an error wrapping wire.ErrSyntax whose text contains
// want, so a reader of the error knows which rule was broken.
func TestScanRejects(t *testing.T) {
	tests := []struct {
		name string
		line string
		want string
	}{
		// Not JSON at all.
		{"empty", ``, "JSON object"},
		{"only white space", " \t\r\n", "JSON object"},
		{"unterminated object", `{`, "expected a string key"},
		{"unterminated after member", `{"a":1`, "unterminated object"},
		{"key without value", `{"a"}`, "expected :"},
		{"missing value", `{"a":}`, "invalid character"},
		{"trailing comma", `{"a":1,}`, "expected a string key"},
		{"leading comma", `{,}`, "expected a string key"},
		{"missing comma", `{"a":1 "b":2}`, "expected , or }"},
		{"single quotes", `{'a':1}`, "expected a string key"},
		{"bare key", `{a:1}`, "expected a string key"},
		{"number key", `{1:1}`, "expected a string key"},
		{"bad literal", `{"a":tru}`, "invalid literal"},
		{"capital literal", `{"a":True}`, "invalid character"},
		{"leading zero", `{"a":01}`, "expected , or }"},
		{"bare minus", `{"a":-}`, "invalid number"},
		{"dot without digits", `{"a":1.}`, "invalid number"},
		{"exponent without digits", `{"a":1e+}`, "invalid number"},
		{"plus sign", `{"a":+1}`, "invalid character"},
		{"NaN", `{"a":NaN}`, "invalid character"},
		{"unterminated array", `{"a":[1,2}`, "expected , or ]"},
		{"array without comma", `{"a":[1 2]}`, "expected , or ]"},
		{"array trailing comma", `{"a":[1,]}`, "invalid character"},
		{"unterminated string", `{"a":"abc}`, "unterminated string"},
		{"unterminated escape", `{"a":"abc\`, "unterminated string"},
		{"invalid escape", `{"a":"\x41"}`, "invalid escape"},
		{"short unicode escape", `{"a":"\u12"}`, "invalid unicode escape"},
		{"non-hex unicode escape", `{"a":"\u12G4"}`, "invalid unicode escape"},
		{"unicode escape at end", `{"a":"\u123`, "invalid unicode escape"},

		// A lone surrogate escape unescapes to invalid UTF-8.
		{"lone high surrogate", `{"a":"\ud800"}`, "unpaired surrogate"},
		{"lone low surrogate", `{"a":"\udc00"}`, "unpaired surrogate"},
		{"high surrogate then a letter", `{"a":"\ud83dx"}`, "unpaired surrogate"},
		{"high surrogate then a non-surrogate escape", `{"a":"\ud83d\u0041"}`, "unpaired surrogate"},
		{"high surrogate twice", `{"a":"\ud83d\ud83d"}`, "unpaired surrogate"},
		{"pair reversed", `{"a":"\ude00\ud83d"}`, "unpaired surrogate"},
		{"high surrogate then another escape", `{"a":"\ud83d\n"}`, "unpaired surrogate"},
		{"high surrogate at the end", `{"a":"\ud83d`, "unpaired surrogate"},
		{"truncated low surrogate", `{"a":"\ud83d\ude0"}`, "unpaired surrogate"},
		{"lone surrogate in key", `{"\udfff":1}`, "unpaired surrogate"},
		{"lone surrogate in type", `{"type":"p\ud800ing"}`, "unpaired surrogate"},

		// JSON, but not an object.
		{"array", `[1,2]`, "JSON object"},
		{"string", `"x"`, "JSON object"},
		{"number", `5`, "JSON object"},
		{"null", `null`, "JSON object"},
		{"true", `true`, "JSON object"},

		// Invalid UTF-8, in values and in keys (docs/DECISIONS.md, Wire: lines are UTF-8).
		{"invalid byte in value", "{\"a\":\"x\xffy\"}", "invalid UTF-8"},
		{"invalid byte in key", "{\"\xff\":1}", "invalid UTF-8"},
		{"invalid byte in nested key", "{\"a\":{\"b\xfe\":1}}", "invalid UTF-8"},
		{"truncated sequence", "{\"a\":\"\xe2\x82\"}", "invalid UTF-8"},
		{"overlong encoding", "{\"a\":\"\xc0\xaf\"}", "invalid UTF-8"},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8"},
		{"code point above U+10FFFF", "{\"a\":\"\xf4\x90\x80\x80\"}", "invalid UTF-8"},
		{"continuation byte alone", "{\"a\":\"\x80\"}", "invalid UTF-8"},
		{"invalid byte outside strings", "{\xff}", "expected a string key"},
		{"invalid byte in envelope id", "{\"type\":\"ping\",\"id\":\"\xff\"}", "invalid UTF-8"},

		// Duplicate keys, at any depth and however they are spelled.
		{"duplicate at top level", `{"a":1,"a":2}`, `duplicate key "a"`},
		{"duplicate type", `{"type":"ping","id":"1","type":"pong"}`, `duplicate key "type"`},
		{"duplicate nested", `{"x":{"a":1,"b":2,"a":3}}`, `duplicate key "a"`},
		{"duplicate in array element", `{"x":[{"a":1},{"b":1,"b":2}]}`, `duplicate key "b"`},
		{"duplicate deeply nested", `{"x":{"y":[[{"z":{"k":1,"k":1}}]]}}`, `duplicate key "k"`},
		{"duplicate spelled with escape", `{"a":1,"\u0061":2}`, `duplicate key "a"`},
		{"duplicate both escaped", `{"\u0061b":1,"a\u0062":2}`, `duplicate key "ab"`},
		{"duplicate upper-case hex escape", `{"type":"ping","t\u0079pe":"pong"}`, `duplicate key "type"`},
		{"duplicate with short escape", `{"a\"":1,"a\u0022":2}`, `duplicate key "a\""`},
		{"duplicate nested escaped", `{"x":{"id":1,"\u0069\u0064":2}}`, `duplicate key "id"`},
		// Objects past the size where Scan switches to a set of keys.
		{"duplicate in a large object", manyKeys(100, `,"k3":0`), `duplicate key "k3"`},
		{"duplicate of the first key", manyKeys(100, `,"type":"pong"`), `duplicate key "type"`},
		{"duplicate of the last key", manyKeys(100, `,"k99":0`), `duplicate key "k99"`},
		{"duplicate right past the switch", manyKeys(16, `,"k0":0`), `duplicate key "k0"`},
		{"escaped duplicate in a large object", manyKeys(100, `,"\u006b7":0`), `duplicate key "k7"`},
		{"duplicate escaped both ways", manyKeys(100, `,"\u0078":1,"\u0078":2`), `duplicate key "x"`},
		{"duplicate among many new keys", manyKeys(20, `,"a":1,"b":2,"c":3,"b":4`), `duplicate key "b"`},
		{"duplicate in a large nested object", `{"x":` + manyKeys(50, `,"k49":1`) + `}`, `duplicate key "k49"`},

		// Anything but white space after the object.
		{"second object", `{}{}`, "after the JSON object"},
		{"word after object", `{} x`, "after the JSON object"},
		{"second line", "{}\n{}", "after the JSON object"},
		{"comma after object", `{},`, "after the JSON object"},
		{"NUL after object", "{}\x00", "after the JSON object"},
		{"closing brace", `{}}`, "after the JSON object"},
		{"message then garbage", `{"type":"ping","id":"1"}]`, "after the JSON object"},

		// Control characters must be escaped inside strings.
		{"raw newline in value", "{\"a\":\"x\ny\"}", "control character"},
		{"raw tab in value", "{\"a\":\"x\ty\"}", "control character"},
		{"raw NUL in value", "{\"a\":\"\x00\"}", "control character"},
		{"raw unit separator in key", "{\"a\x1f\":1}", "control character"},

		// Nesting is bounded so a hostile line cannot exhaust the stack.
		{"too deep", nested(1000), "nesting too deep"},
		{"far too deep", nested(100000), "nesting too deep"},
		{"too deep objects", `{"a":` + strings.Repeat(`{"a":`, 1000) + `1` + strings.Repeat(`}`, 1001), "nesting too deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sc wire.Scanned
			err := wire.Scan([]byte(tt.line), &sc)
			if err == nil {
				t.Fatalf("Scan(%q) = nil, want an error containing %q", tt.line, tt.want)
			}
			if !errors.Is(err, wire.ErrSyntax) {
				t.Errorf("Scan(%q) = %v, want it to wrap wire.ErrSyntax", tt.line, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Scan(%q) = %v, want it to contain %q", tt.line, err, tt.want)
			}
		})
	}
}

// TestScanAccepts lists lines that frame correctly and checks what Scan
// captures of the envelope, since the kernel answers with those fields even
// when the rest of the line fails.
func TestScanAccepts(t *testing.T) {
	type want struct {
		env           wire.Envelope
		sessionID     string
		typeNotString bool
		idNotString   bool
		hasID         bool
		keys          []string // top-level keys Has must report
		notKeys       []string // keys Has must not report
	}
	tests := []struct {
		name string
		line string
		want want
	}{
		{"empty object", `{}`, want{notKeys: []string{"type", "id", ""}}},
		{"white space everywhere", " \t{ \"type\" : \"ping\" , \"id\"\n:\r\"1\" } \t\r\n",
			want{env: wire.Envelope{Type: "ping", ID: "1"}, hasID: true, keys: []string{"type", "id"}}},
		{"full envelope", `{"type":"tool/call/req","id":"a1","proto":"1.0","ts":1712345678.25,"req_id":"r9","session_id":"s1","tool_name":"x"}`,
			want{env: wire.Envelope{Type: "tool/call/req", ID: "a1", Proto: "1.0", TS: 1712345678.25, ReqID: "r9"},
				sessionID: "s1", hasID: true, keys: []string{"type", "id", "proto", "ts", "req_id", "session_id", "tool_name"}}},
		{"escaped values", `{"type":"p\u0069ng","id":"\"q\"\\\/\n","req_id":"\ud83d\ude00"}`,
			want{env: wire.Envelope{Type: "ping", ID: "\"q\"\\/\n", ReqID: "😀"}, hasID: true}},
		{"escaped keys", `{"\u0074ype":"ping","\u0069d":"7","s\u0065ssion_id":"s"}`,
			want{env: wire.Envelope{Type: "ping", ID: "7"}, sessionID: "s", hasID: true, keys: []string{"type", "id", "session_id"}}},
		{"type not a string", `{"type":5,"id":"1"}`, want{env: wire.Envelope{ID: "1"}, typeNotString: true, hasID: true}},
		{"type null", `{"type":null}`, want{typeNotString: true}},
		{"type object", `{"type":{"a":1}}`, want{typeNotString: true}},
		{"id not a string", `{"id":7}`, want{hasID: true, idNotString: true}},
		{"id array", `{"id":["x"]}`, want{hasID: true, idNotString: true}},
		{"empty id", `{"id":""}`, want{hasID: true}},
		{"ts not a number", `{"ts":"soon"}`, want{keys: []string{"ts"}}},
		{"ts exponent", `{"ts":1.5e3}`, want{env: wire.Envelope{TS: 1500}}},
		{"ts negative", `{"ts":-2}`, want{env: wire.Envelope{TS: -2}}},
		{"nested envelope fields are not captured", `{"body":{"type":"ping","id":"x","session_id":"s"},"list":[{"id":"y"}]}`,
			want{keys: []string{"body", "list"}, notKeys: []string{"type", "id", "session_id"}}},
		{"same key in different objects", `{"a":{"a":1},"b":{"a":2},"c":[{"a":1},{"a":1}]}`,
			want{keys: []string{"a", "b", "c"}}},
		{"keys differing in case are distinct", `{"a":1,"A":2,"type":"ping","TYPE":"pong"}`,
			want{env: wire.Envelope{Type: "ping"}, keys: []string{"a", "A", "type", "TYPE"}, notKeys: []string{"Type"}}},
		{"escaped slash and unicode in keys", `{"a\/b":1,"\u00e9":2}`, want{keys: []string{"a/b", "é"}, notKeys: []string{`a\/b`}}},
		{"surrogate pair escape", `{"a":"\ud83d\ude00","\uD83D\uDE00":1}`, want{keys: []string{"a", "😀"}}},
		{"escapes around a pair", `{"a":"\u0041\ud83d\ude00\u0042\n"}`, want{keys: []string{"a"}}},
		{"DEL and non-ASCII need no escape", "{\"a\":\"\x7f é 😀 \u2028\"}", want{keys: []string{"a"}}},
		{"escaped control characters", `{"a":"\u0000\u001f\b\f\n\r\t"}`, want{keys: []string{"a"}}},
		{"every value kind", `{"s":"x","n":-0.5e-3,"z":0,"t":true,"f":false,"u":null,"o":{},"a":[]}`,
			want{keys: []string{"s", "n", "z", "t", "f", "u", "o", "a"}}},
		{"deep but within the limit", nested(100), want{keys: []string{"a"}}},
		{"large object", manyKeys(5000, `,"\u0078":1,"id":"i"`), want{env: wire.Envelope{Type: "ping", ID: "i"}, hasID: true,
			keys: []string{"type", "k0", "k16", "k17", "k4999", "x"}, notKeys: []string{"k5000"}}},
		{"large objects side by side", `{"a":` + manyKeys(40, ``) + `,"b":` + manyKeys(40, ``) + `,"c":[` + manyKeys(40, ``) + `,` + manyKeys(40, ``) + `]}`,
			want{keys: []string{"a", "b", "c"}}},
		{"large object around a nested one", manyKeys(30, `,"n":`+manyKeys(30, ``)+`,"z":1`), want{env: wire.Envelope{Type: "ping"}, keys: []string{"n", "z", "k29"}}},
		{"large number", `{"ts":1e400}`, want{keys: []string{"ts"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sc wire.Scanned
			if err := wire.Scan([]byte(tt.line), &sc); err != nil {
				t.Fatalf("Scan(%q) = %v, want nil", tt.line, err)
			}
			w := tt.want
			if sc.Envelope != w.env {
				t.Errorf("Envelope = %+v, want %+v", sc.Envelope, w.env)
			}
			if sc.SessionID != w.sessionID {
				t.Errorf("SessionID = %q, want %q", sc.SessionID, w.sessionID)
			}
			if sc.TypeNotString != w.typeNotString || sc.IDNotString != w.idNotString || sc.HasID != w.hasID {
				t.Errorf("TypeNotString, IDNotString, HasID = %v, %v, %v; want %v, %v, %v",
					sc.TypeNotString, sc.IDNotString, sc.HasID, w.typeNotString, w.idNotString, w.hasID)
			}
			for _, k := range w.keys {
				if !sc.Has(k) {
					t.Errorf("Has(%q) = false, want true", k)
				}
			}
			for _, k := range w.notKeys {
				if sc.Has(k) {
					t.Errorf("Has(%q) = true, want false", k)
				}
			}
		})
	}
}

// TestScanResets checks that a Scanned reused for another line keeps nothing
// of the previous one: the kernel reuses one per connection.
func TestScanResets(t *testing.T) {
	var sc wire.Scanned
	first := `{"type":5,"id":7,"proto":"1.0","ts":3,"req_id":"r","session_id":"s","extra":1}`
	if err := wire.Scan([]byte(first), &sc); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		line string
		ok   bool
	}{
		{"valid line", `{}`, true},
		{"invalid line", `[]`, false},
		{"line failing midway", `{"x":1,"y":}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := wire.Scan([]byte(first), &sc); err != nil {
				t.Fatal(err)
			}
			err := wire.Scan([]byte(tt.line), &sc)
			if (err == nil) != tt.ok {
				t.Fatalf("Scan(%q) = %v, want ok=%v", tt.line, err, tt.ok)
			}
			if sc.Envelope != (wire.Envelope{}) || sc.SessionID != "" || sc.TypeNotString || sc.IDNotString || sc.HasID {
				t.Errorf("fields of the previous line survived: %+v", sc)
			}
			for _, k := range []string{"type", "id", "extra"} {
				if sc.Has(k) {
					t.Errorf("Has(%q) = true after scanning %q", k, tt.line)
				}
			}
		})
	}
}

// TestScanManyKeys checks a line with more top-level keys than Scanned keeps
// inline, so the key list must grow.
func TestScanManyKeys(t *testing.T) {
	for _, n := range []int{1, 23, 24, 25, 200} {
		var b strings.Builder
		b.WriteString(`{"type":"ping"`)
		for i := range n {
			b.WriteString(`,"k`)
			b.WriteString(strings.Repeat("x", i))
			b.WriteString(`":1`)
		}
		b.WriteString(`}`)
		var sc wire.Scanned
		if err := wire.Scan([]byte(b.String()), &sc); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		for _, k := range []string{"type", "k", "k" + strings.Repeat("x", n-1)} {
			if !sc.Has(k) {
				t.Errorf("n=%d: Has(%q) = false", n, k)
			}
		}
		if sc.Type != "ping" {
			t.Errorf("n=%d: Type = %q", n, sc.Type)
		}
	}
}

// BenchmarkScanManyKeys measures a line made of many small members, the
// shape a hostile agent would send to make duplicate detection expensive.
func BenchmarkScanManyKeys(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		line := []byte(manyKeys(n, ``))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			var sc wire.Scanned
			for b.Loop() {
				if err := wire.Scan(line, &sc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Duplicate keys are found at every depth, and the same keys at different
// depths are none, however many keys the objects being scanned hold
// together (beyond what the scanner keeps without allocating).
func TestScanNestedKeys(t *testing.T) {
	object := func(depth int, dupAt int) string {
		var b strings.Builder
		var open func(d int)
		open = func(d int) {
			b.WriteString(`{`)
			for i := range 16 {
				if i > 0 {
					b.WriteString(`,`)
				}
				fmt.Fprintf(&b, `"k%d":1`, i)
			}
			if d == dupAt {
				b.WriteString(`,"k3":2`)
			}
			if d < depth {
				b.WriteString(`,"in":`)
				open(d + 1)
			}
			b.WriteString(`}`)
		}
		b.WriteString(`{"type":"ping","x":`)
		open(1)
		b.WriteString(`}`)
		return b.String()
	}
	// Depth 8 holds 136 keys on the stack at once: past the inline array
	// and past the spill's first capacity.
	for _, depth := range []int{1, 2, 3, 5, 8} {
		var sc wire.Scanned
		if err := wire.Scan([]byte(object(depth, 0)), &sc); err != nil {
			t.Fatalf("depth %d, no duplicate: %v", depth, err)
		}
		for dupAt := 1; dupAt <= depth; dupAt++ {
			err := wire.Scan([]byte(object(depth, dupAt)), &sc)
			if err == nil || !strings.Contains(err.Error(), "duplicate key") {
				t.Fatalf("depth %d, duplicate at %d: %v", depth, dupAt, err)
			}
		}
	}
}

// A Scanned the caller keeps on its stack stays there: Scan allocates
// only the envelope's strings (type, id, proto), never the scan itself,
// which every message of every transport pays for.
func TestScanKeepsTheScanOnTheStack(t *testing.T) {
	line := []byte(`{"type":"echo/say/req","id":"r1","proto":"1.0","ts":1,"text":"hello","n":{"a":[1,2,{"b":null}]}}`)
	allocs := testing.AllocsPerRun(200, func() {
		var sc wire.Scanned
		if err := wire.Scan(line, &sc); err != nil || sc.ID != "r1" {
			t.Fatalf("%v %q", err, sc.ID)
		}
	})
	if allocs > 3 {
		t.Errorf("Scan made %v allocations, want at most 3 (the envelope's strings)", allocs)
	}
}

// TestScanInternsTypeAndProto: a registered type and the protocol version
// are read without an allocation of their own; an unknown type is read as
// it is.
func TestScanInternsTypeAndProto(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not exact under the race detector")
	}
	reg := wire.NewRegistry()
	reg.Add(&wire.Entry{Type: "intern/probe/req", Kind: wire.KindRequest, New: func() wire.Message { return nil }})
	known := []byte(`{"type":"intern/probe/req","proto":"1.0","ts":1}`)
	var sc wire.Scanned
	if allocs := testing.AllocsPerRun(100, func() {
		if err := wire.Scan(known, &sc); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("scan of a known type and proto: %v allocations, want 0", allocs)
	}
	if sc.Type != "intern/probe/req" || sc.Proto != wire.ProtoVersion {
		t.Errorf("scanned %q %q", sc.Type, sc.Proto)
	}
	unknown := []byte(`{"type":"intern/other/req","proto":"9.9","ts":1}`)
	if err := wire.Scan(unknown, &sc); err != nil || sc.Type != "intern/other/req" || sc.Proto != "9.9" {
		t.Errorf("unknown type: %v %q %q", err, sc.Type, sc.Proto)
	}
	unknown[10] = 'X' // the scan's strings are its own, not views of the line
	if sc.Type != "intern/other/req" {
		t.Errorf("type changed with the line: %q", sc.Type)
	}
}

// TestPlainRunStopsAtEveryByteThatIsNotPlain: the eight-byte stride finds
// the first quote, backslash, control character or non-ASCII byte at every
// position of a run, as the byte-by-byte walk does.
func TestPlainRunStopsAtEveryByteThatIsNotPlain(t *testing.T) {
	stops := []byte{0, 0x1f, '"', '\\', 0x80, 0xc3, 0xff}
	for n := 0; n <= 40; n++ {
		for at := 0; at <= n; at++ {
			for _, stop := range stops {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(0x20 + (i*7)%0x5f) // every plain byte, no quote or backslash
					if b[i] == '"' || b[i] == '\\' {
						b[i] = 'x'
					}
				}
				want := n
				if at < n {
					b[at], want = stop, at
				}
				for from := 0; from <= want; from++ {
					if got := wire.PlainRun(b, from); got != want {
						t.Fatalf("PlainRun(%q, %d) = %d, want %d", b, from, got, want)
					}
				}
			}
		}
	}
}

// TestScanTraceparent: the envelope's optional traceparent is captured
// when it is a string of a traceparent's size, and ignored otherwise (not
// a string, too long), never an error (schemas/envelope.json).
func TestScanTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	long := strings.Repeat("a", wire.MaxTraceparent+1)
	cases := []struct {
		name, line, want string
	}{
		{"string", `{"type":"ping","traceparent":"` + tp + `"}`, tp},
		{"escaped key", `{"type":"ping","trace\u0070arent":"` + tp + `"}`, tp},
		{"absent", `{"type":"ping"}`, ""},
		{"number", `{"type":"ping","traceparent":7}`, ""},
		{"object", `{"type":"ping","traceparent":{"a":1}}`, ""},
		{"too long", `{"type":"ping","traceparent":"` + long + `"}`, ""},
		{"nested is not the envelope's", `{"type":"ping","body":{"traceparent":"` + tp + `"}}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sc wire.Scanned
			if err := wire.Scan([]byte(c.line), &sc); err != nil {
				t.Fatal(err)
			}
			if sc.Traceparent != c.want {
				t.Errorf("traceparent %q, want %q", sc.Traceparent, c.want)
			}
		})
	}
	line, err := wire.Encode(&wire.Envelope{Type: "ping", ID: "p", Traceparent: tp}, emptyBody{})
	if err != nil {
		t.Fatal(err)
	}
	var sc wire.Scanned
	if err := wire.Scan(line, &sc); err != nil || sc.Traceparent != tp {
		t.Errorf("encoded %s: scanned traceparent %q (%v), want %q", line, sc.Traceparent, err, tp)
	}
}

type emptyBody struct{}

func (emptyBody) MessageType() string { return "ping" }
func (emptyBody) Validate() error     { return nil }

// TestScanPoint: a reply's point is read when it is an integer within
// wire.MaxPoint (schemas/envelope.json), and anything else reads as a host
// that keeps no points, never as a wrong point.
func TestScanPoint(t *testing.T) {
	cases := []struct {
		name, line string
		want       uint64
		has        bool
	}{
		{"integer", `{"type":"pong","point":12}`, 12, true},
		{"zero", `{"type":"pong","point":0}`, 0, true},
		{"integral float", `{"type":"pong","point":7.0}`, 7, true},
		{"largest", `{"type":"pong","point":9007199254740991}`, wire.MaxPoint, true},
		{"escaped key", `{"type":"pong","p\u006fint":3}`, 3, true},
		{"absent", `{"type":"pong"}`, 0, false},
		{"beyond the largest", `{"type":"pong","point":9007199254740993}`, 0, false},
		{"negative", `{"type":"pong","point":-1}`, 0, false},
		{"fraction", `{"type":"pong","point":1.5}`, 0, false},
		{"string", `{"type":"pong","point":"5"}`, 0, false},
		{"nested is not the envelope's", `{"type":"pong","body":{"point":5}}`, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sc wire.Scanned
			if err := wire.Scan([]byte(c.line), &sc); err != nil {
				t.Fatal(err)
			}
			if sc.Point != c.want || sc.HasPoint != c.has {
				t.Errorf("point %d (has %v), want %d (has %v)", sc.Point, sc.HasPoint, c.want, c.has)
			}
		})
	}
}
