package toolrun

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// wireScope encodes every event as the kernel would and keeps the largest.
type wireScope struct {
	scope
	mu      sync.Mutex
	largest int
	n       int
}

func (s *wireScope) Emit(kind wire.EventKind, data map[string]any) error {
	line, err := wire.Encode(&wire.Envelope{Type: "tool/event", ID: wire.NewID(), ReqID: "r1"},
		&msg.Event{Kind: msg.EventKind(kind), Data: msg.EventData(data), Seq: 123456})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.largest = max(s.largest, len(line))
	s.n++
	return nil
}

// TestOutputCapBoundsTheResult runs tools whose output, events or error
// are far over the cap: the encoded tool/call/resp line, events included,
// and every event line on the wire stay within max_output_bytes, and the
// result says it was cut (docs/SECURITY.md, The edge).
func TestOutputCapBoundsTheResult(t *testing.T) {
	line := strings.Repeat("<é\"\x01\n", 20) // escapes make the encoding ~3× the text
	tests := []struct {
		name   string
		cap    int
		fn     Func
		events bool // some events must be kept
		data   func(t *testing.T, d any)
	}{
		{name: "string data", cap: 4096, fn: func(ctx context.Context) (Output, error) {
			return Output{Data: strings.Repeat(line, 1000)}, nil
		}, data: func(t *testing.T, d any) {
			s, _ := d.(string)
			if s == "" || !strings.HasPrefix(strings.Repeat(line, 1000), s) || !utf8.ValidString(s) {
				t.Fatalf("data %.40q… is not a valid prefix of the output", s)
			}
		}},
		{name: "structured data", cap: 4096, fn: func(ctx context.Context) (Output, error) {
			return Output{Data: map[string]any{"text": strings.Repeat(line, 1000)}}, nil
		}, data: func(t *testing.T, d any) {
			if s, _ := d.(string); !strings.HasPrefix(s, `{"text":"`) {
				t.Fatalf("data %.40q…, want the start of its JSON text", s)
			}
		}},
		{name: "many small events", cap: 64 << 10, events: true, fn: func(ctx context.Context) (Output, error) {
			for i := range 20000 {
				_ = Log(ctx, "info", line[:i%len(line)])
			}
			return Output{Data: "done"}, nil
		}, data: func(t *testing.T, d any) {
			if d != "done" {
				t.Fatalf("data %v", d)
			}
		}},
		{name: "one huge event", cap: 64 << 10, fn: func(ctx context.Context) (Output, error) {
			_ = Artifact(ctx, "out", "text/plain", strings.Repeat(line, 20000), true)
			return Output{Data: "done"}, nil
		}},
		// Data has the first claim on the cap; the events are dropped.
		{name: "data and events", cap: 1 << 20, fn: func(ctx context.Context) (Output, error) {
			var b strings.Builder
			for range 30000 {
				_ = Log(ctx, "info", line)
				b.WriteString(line)
			}
			return Output{Data: b.String()}, nil
		}},
		{name: "huge error", cap: 64 << 10, fn: func(ctx context.Context) (Output, error) {
			return Output{}, errors.New(strings.Repeat("bad ", 1<<18))
		}},
		{name: "huge summary", cap: 64 << 10, fn: func(ctx context.Context) (Output, error) {
			return Output{Data: "d", Summary: strings.Repeat("s", 1<<20)}, nil
		}},
		{name: "cap too small for anything", cap: 64, fn: func(ctx context.Context) (Output, error) {
			return Output{Data: strings.Repeat("x", 1000)}, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := &wireScope{}
			res := Run(context.Background(), sc, &msg.ToolCallReq{ToolName: "t", Streaming: true}, Subject{Name: "t"}, Options{MaxOutputBytes: tc.cap}, tc.fn)
			if !res.Truncated {
				t.Fatal("a cut result must say truncated")
			}
			reply, err := wire.Encode(&wire.Envelope{Type: "tool/call/resp", ID: wire.NewID(), ReqID: "r1"}, &msg.ToolCallResp{Result: *res})
			if err != nil {
				t.Fatal(err)
			}
			// The smallest cap cannot hold a result's fixed fields at all.
			if limit := max(tc.cap, 200); len(reply) > limit {
				t.Fatalf("reply of %d bytes over the cap of %d", len(reply), tc.cap)
			}
			if sc.largest > tc.cap {
				t.Fatalf("an event of %d bytes on the wire, over the cap of %d", sc.largest, tc.cap)
			}
			if tc.events && len(res.Events) == 0 {
				t.Fatal("no event kept although there was room")
			}
			if tc.data != nil {
				tc.data(t, res.Data)
			}
		})
	}
}

// TestEncodedLen checks EncodedLen and CutEncoded against the wire encoder
// on random bytes: escapes, HTML characters, invalid UTF-8, U+2028.
func TestEncodedLen(t *testing.T) {
	alphabet := []string{"a", "é", "€", "𝄞", "\"", "\\", "\n", "\t", "\x01", "\x1f", "<", ">", "&", "\u2028", "\u2029", "\xff", "\xc3", " "}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		enc, err := wire.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := EncodedLen([]byte(s)); got != len(enc)-2 {
			t.Fatalf("EncodedLen(%q) = %d, the encoder wrote %d: %s", s, got, len(enc)-2, enc)
		}
		limit := r.IntN(len(enc) + 1)
		cut, did := CutEncoded([]byte(s), limit)
		if n := EncodedLen(cut); n > limit || did != (len(cut) < len(s)) || !strings.HasPrefix(s, string(cut)) {
			t.Fatalf("CutEncoded(%q, %d) = %q (%d encoded, cut %v)", s, limit, cut, n, did)
		}
		if did {
			// One more character would not have fitted.
			w, _ := encodedWidth([]byte(s[len(cut):]))
			if EncodedLen(cut)+w <= limit {
				t.Fatalf("CutEncoded(%q, %d) = %q cut too much", s, limit, cut)
			}
		}
	}
}
