package toolrun

import (
	"fmt"
	"unicode/utf8"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// EnvelopeReserve is the part of the output cap kept for the reply's and
// each event's envelope (type, ids, ts, seq): the encoded result, and the
// encoded data of every event, fit in the cap minus this, so the whole
// line fits the cap for any request id a client reasonably uses. A cap
// under 2 KiB keeps a quarter of itself instead ([reserve]).
const EnvelopeReserve = 512

// reserve returns the envelope's part of the cap max.
func reserve(max int) int { return min(EnvelopeReserve, max/4) }

// maxSide bounds the error text and the summary of a result: they are
// meant to be one line, and a tool that puts its whole output there must
// not take the room of data and events.
const maxSide = 8 << 10

// EncodedLen returns the length of b encoded as a JSON string's contents,
// as the wire encoder writes it: control characters, quotes and backslashes
// take escapes, <, > and & are written \u00XX, invalid UTF-8 becomes \ufffd.
// Tools that cut their own output count with it, so that what they keep
// still fits the cap once encoded.
func EncodedLen(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		w, size := encodedWidth(b[i:])
		n += w
		i += size
	}
	return n
}

// encodedWidth returns the encoded width of the character b starts with and
// its length in b.
func encodedWidth(b []byte) (w, size int) {
	c := b[0]
	if c < utf8.RuneSelf {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			return 2, 1
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			return 6, 1
		}
		return 1, 1
	}
	r, size := utf8.DecodeRune(b)
	if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
		return 6, size
	}
	return size, size
}

// encodedSize returns the length of v's wire encoding, or -1 when v cannot
// be encoded.
func encodedSize(v any) int {
	b, err := wire.Marshal(v)
	if err != nil {
		return -1
	}
	return len(b)
}

// fitString cuts s at a character boundary so that its JSON encoding,
// quotes included, is at most max bytes.
func fitString(s string, max int) string {
	for range 8 {
		enc := EncodedLen([]byte(s)) + 2
		if enc <= max {
			return s
		}
		// Cut in proportion to the overshoot; escapes make the encoding
		// longer than the text, so a few rounds may be needed.
		n := len(s) * (max - 2) / enc
		if n >= len(s) {
			n = len(s) - 1
		}
		s = cutString(s, n)
	}
	return ""
}

// fitValue returns v, or when its encoding is over max, a string of its
// encoding cut to fit (docs/DECISIONS.md, Tools and toolkits: the cap replaces an
// oversized structured value by its JSON text, cut). The second result
// reports a cut.
func fitValue(v any, max int) (any, bool, error) {
	if max <= 2 {
		// Not even an empty string fits: the other fields took the cap.
		return nil, v != nil, nil
	}
	switch d := v.(type) {
	case nil, bool, int, int64, float64:
		return v, false, nil
	case string:
		if len(d)+2 <= max && EncodedLen([]byte(d))+2 <= max {
			return v, false, nil
		}
		return fitString(d, max), true, nil
	}
	b, err := wire.Marshal(v)
	if err != nil {
		return nil, false, err
	}
	if len(b) <= max {
		return v, false, nil
	}
	// Cutting the text first keeps the escaping work proportional to max.
	return fitString(cutString(string(b), max), max), true, nil
}

// fitEventData returns data, or a copy whose strings are cut so that its
// encoding is at most max bytes, marked "truncated": true. Data that cannot
// be made to fit that way (large nested values) is replaced by a note.
func fitEventData(data map[string]any, max int) map[string]any {
	size := encodedSize(data)
	if size >= 0 && size <= max {
		return data
	}
	out := make(map[string]any, len(data)+1)
	for k, v := range data {
		out[k] = v
	}
	out["truncated"] = true
	for range 8 {
		size = encodedSize(out)
		if size >= 0 && size <= max {
			return out
		}
		// Cut the longest string by the overshoot.
		var key string
		long := -1
		for k, v := range out {
			if s, ok := v.(string); ok && len(s) > long {
				key, long = k, len(s)
			}
		}
		if long <= 0 || size < 0 {
			break
		}
		s := out[key].(string)
		keep := EncodedLen([]byte(s)) + 2 - (size - max) - 16
		out[key] = fitString(s, keep)
	}
	return map[string]any{"truncated": true, "message": fmt.Sprintf("event data of %d bytes dropped: over the %d bytes the output cap leaves it", size, max)}
}

// fitResult makes the encoding of res at most max bytes. The error text and
// the summary are cut to a line's worth first, then data gets the room the
// other fields leave, then the collected events get what data leaves, in
// order; events that do not fit are dropped. Any cut sets truncated.
func fitResult(res *msg.ToolResult, events []keptEvent, max int) {
	if res.Error != nil && len(*res.Error) > maxSide {
		e := cutString(*res.Error, maxSide)
		res.Error, res.Truncated = &e, true
	}
	if res.Summary != nil {
		if v, cut, err := fitValue(res.Summary, maxSide); err != nil || cut {
			res.Summary, res.Truncated = v, true
		}
	}
	data := res.Data
	res.Data, res.Events = nil, []msg.ToolEvent{}
	base := encodedSize(res) + len(`,"data":`)
	if data != nil {
		v, cut, err := fitValue(data, max-base)
		if err != nil {
			text := fmt.Sprintf("tool output cannot be encoded: %v", err)
			code := msg.ToolResultErrorCodeTOOLERROR
			res.Success, res.Error, res.ErrorCode = false, &text, &code
			v = nil
		}
		res.Data = v
		res.Truncated = res.Truncated || cut
		if v != nil {
			base += encodedSize(v)
		}
	}
	room := max - base
	kept := make([]msg.ToolEvent, 0, len(events))
	for _, e := range events {
		if e.size+1 > room {
			res.Truncated = true
			break
		}
		room -= e.size + 1
		kept = append(kept, e.ev)
	}
	res.Events = kept
}

// CutEncoded returns the longest prefix of b, cut at a character boundary,
// whose JSON string encoding ([EncodedLen]) is at most max bytes, and
// whether it cut anything.
func CutEncoded(b []byte, max int) ([]byte, bool) {
	n := 0
	for i := 0; i < len(b); {
		w, size := encodedWidth(b[i:])
		if n+w > max {
			return b[:i], true
		}
		n += w
		i += size
	}
	return b, false
}
