package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxTraceparent bounds the traceparent the host keeps: W3C Trace
// Context's version 00 has 55 characters, and later versions may only
// append fields; a longer value is ignored like a malformed one.
const MaxTraceparent = 256

// maxDepth bounds nesting so a hostile line cannot exhaust the stack.
const maxDepth = 128

// Scanned is what one pass over a line found: the envelope fields and the
// top-level keys, kept as spans of the line.
type Scanned struct {
	Envelope
	// SessionID is a top-level `session_id` field of the body, if any.
	SessionID string
	// TypeNotString is set when `type` is present but not a string.
	TypeNotString bool
	// IDNotString is set when `id` is present but not a string.
	IDNotString bool
	HasID       bool
	// HasProto and HasTS are set when the line has those keys; TSValid
	// when ts is a JSON number that is a finite float64.
	HasProto, HasTS, TSValid bool
	line                     []byte
	keys                     spanStack // the top-level keys
}

// spanStack holds spans in an inline array while they fit (a message of
// ordinary size, its top-level keys or the keys of the objects being
// scanned, then needs no allocation), and in spill past it. No slice
// of the array is kept in the struct: such a self-reference is an
// assignment cycle to escape analysis, which then moves the struct that
// holds it (a Scanned, the scanner) to the heap.
type spanStack struct {
	fixed [24]span
	n     int
	spill []span
}

// from returns the spans from base on.
func (s *spanStack) from(base int) []span {
	if s.spill != nil {
		return s.spill[base:s.n]
	}
	return s.fixed[base:s.n]
}

func (s *spanStack) push(k span) {
	switch {
	case s.spill != nil:
		// Not append(s.spill[:s.n], k): a slice of the struct's own
		// slice stored back in it is a flow from its content to the heap,
		// which moves whatever holds the stack (the scanner, its Scanned)
		// there. A reslice stored back in place is not such a flow.
		if s.n == cap(s.spill) {
			grown := make([]span, s.n, 2*s.n)
			copy(grown, s.spill)
			s.spill = grown
		}
		s.spill = s.spill[:s.n+1]
		s.spill[s.n] = k
	case s.n < len(s.fixed):
		s.fixed[s.n] = k
	default:
		s.spill = append(append(make([]span, 0, 4*len(s.fixed)), s.fixed[:]...), k)
	}
	s.n++
}

type span struct {
	start, end int32
	escaped    bool
	// null is set on a top-level key whose value is the literal null.
	null bool
}

// Has reports whether the line has the top-level key.
func (s *Scanned) Has(key string) bool {
	_, ok := s.lookup(key)
	return ok
}

// IsNull reports whether the line has the top-level key with the value null.
func (s *Scanned) IsNull(key string) bool {
	k, ok := s.lookup(key)
	return ok && k.null
}

func (s *Scanned) lookup(key string) (span, bool) {
	for _, k := range s.keys.from(0) {
		if !k.escaped {
			if string(s.line[k.start:k.end]) == key {
				return k, true
			}
			continue
		}
		if unquote(s.line[k.start:k.end]) == key {
			return k, true
		}
	}
	return span{}, false
}

// ErrSyntax is the cause of every framing failure found by Scan.
var ErrSyntax = errors.New("malformed message")

// Scan checks the framing rules of docs/DECISIONS.md, Wire in one pass over line: exactly
// one JSON object, valid UTF-8, no duplicate keys at any depth, nothing but
// white space after the object. It fills out with the envelope fields.
func Scan(line []byte, out *Scanned) error {
	*out = Scanned{line: line}
	sc := scanner{b: line, out: out}
	sc.ws()
	if sc.i >= len(sc.b) || sc.b[sc.i] != '{' {
		return sc.fail("a message must be a JSON object")
	}
	if err := sc.object(0, true); err != nil {
		return err
	}
	sc.ws()
	if sc.i != len(sc.b) {
		return sc.fail("unexpected data after the JSON object")
	}
	return nil
}

type scanner struct {
	b     []byte
	i     int
	out   *Scanned
	stack spanStack // keys of the objects being scanned, for duplicate checks
}

func (s *scanner) fail(msg string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrSyntax, msg, s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) error {
	if depth > maxDepth {
		return s.fail("nesting too deep")
	}
	if s.i >= len(s.b) {
		return s.fail("unexpected end of input")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth, false)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, err := s.str()
		return err
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		return s.fail("invalid character")
	}
}

func (s *scanner) lit(word string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return s.fail("invalid literal")
	}
	s.i += len(word)
	return nil
}

func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.fail("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.fail("invalid number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.fail("invalid number")
		}
	}
	_ = start
	return nil
}

// plainRun returns the index of the first byte at or after i that is not
// plain ASCII inside a string (a quote, a backslash, a control character
// or a byte of a multi-byte character), or len(b). Eight bytes at a time:
// most strings an agent sends (texts, code, paths) are long runs of plain
// ASCII, which a byte-by-byte switch walks at a fraction of the speed.
func plainRun(b []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * ones)
		bs := x ^ ('\\' * ones)
		// A byte's high bit is set in each term when the byte is below
		// 0x20, a quote, a backslash, or at or above 0x80.
		if ((x-0x20*ones)|(q-ones)|(bs-ones)|x)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}

// str scans a string starting at the opening quote and returns the span of
// its contents.
func (s *scanner) str() (span, error) {
	s.i++ // opening quote
	sp := span{start: int32(s.i)}
	for s.i < len(s.b) {
		s.i = plainRun(s.b, s.i)
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			sp.end = int32(s.i)
			s.i++
			return sp, nil
		case c == '\\':
			sp.escaped = true
			s.i++
			if s.i >= len(s.b) {
				return sp, s.fail("unterminated string")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				r, ok := s.hex4(s.i + 1)
				if !ok {
					return sp, s.fail("invalid unicode escape")
				}
				s.i += 5
				// A surrogate escape must be a high one followed by a low
				// one: a lone surrogate is no character, so it is invalid
				// UTF-8 once unescaped. The decoder rejects it too, so it
				// must fail here, as the parse_error of docs/DECISIONS.md, Wire.
				if utf16.IsSurrogate(r) {
					lo, ok := rune(0), false
					if r < 0xdc00 && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
						lo, ok = s.hex4(s.i + 2)
					}
					if !ok || lo < 0xdc00 || lo > 0xdfff {
						return sp, s.fail("unpaired surrogate in unicode escape")
					}
					s.i += 6
				}
			default:
				return sp, s.fail("invalid escape")
			}
		case c < 0x20:
			return sp, s.fail("control character in string")
		default: // a multi-byte character: plainRun took every plain byte
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size == 1 {
				return sp, s.fail("invalid UTF-8")
			}
			s.i += size
		}
	}
	return sp, s.fail("unterminated string")
}

// hex4 decodes the four hex digits at i.
func (s *scanner) hex4(i int) (rune, bool) {
	if i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, h := range s.b[i : i+4] {
		var d byte
		switch {
		case h >= '0' && h <= '9':
			d = h - '0'
		case h >= 'a' && h <= 'f':
			d = h - 'a' + 10
		case h >= 'A' && h <= 'F':
			d = h - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

func (s *scanner) array(depth int) error {
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unterminated array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.fail("expected , or ]")
		}
	}
}

// keyString returns a key as it reads once unescaped.
func (s *scanner) keyString(k span) string {
	if !k.escaped {
		return string(s.b[k.start:k.end])
	}
	return unquote(s.b[k.start:k.end])
}

func (s *scanner) sameKey(a, b span) bool {
	x, y := s.b[a.start:a.end], s.b[b.start:b.end]
	if !a.escaped && !b.escaped {
		return bytes.Equal(x, y)
	}
	return unquote(x) == unquote(y)
}

// smallObject is the number of keys up to which an object's duplicates are
// found by comparing each key with the ones before it, which allocates
// nothing. Past it the keys go into a set: comparing every pair made a
// hostile line of 50,000 keys (half the message limit) cost 40 seconds.
const smallObject = 16

func (s *scanner) object(depth int, top bool) error {
	s.i++
	base := s.stack.n
	defer func() { s.stack.n = base }()
	var set map[string]struct{} // nil while the object is small
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.fail("expected a string key")
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		if set == nil {
			for _, k := range s.stack.from(base) {
				if s.sameKey(k, key) {
					return s.fail("duplicate key " + Clip(unquote(s.b[key.start:key.end])))
				}
			}
			s.stack.push(key)
			if s.stack.n-base > smallObject {
				set = make(map[string]struct{}, 4*smallObject)
				for _, k := range s.stack.from(base) {
					set[s.keyString(k)] = struct{}{}
				}
			}
		} else {
			k := s.keyString(key)
			if _, dup := set[k]; dup {
				return s.fail("duplicate key " + Clip(k))
			}
			set[k] = struct{}{}
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.fail("expected :")
		}
		s.i++
		s.ws()
		if top {
			key.null = s.i < len(s.b) && s.b[s.i] == 'n'
			s.out.keys.push(key)
			if err := s.envelopeValue(key); err != nil {
				return err
			}
		} else if err := s.value(depth + 1); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unterminated object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.fail("expected , or }")
		}
	}
}

// envelopeValue scans a top-level value and captures it when key is an
// envelope field.
func (s *scanner) envelopeValue(key span) error {
	var name string
	if !key.escaped {
		// Each name a constant: string(k) kept would allocate.
		switch string(s.b[key.start:key.end]) {
		case "type":
			name = "type"
		case "id":
			name = "id"
		case "proto":
			name = "proto"
		case "req_id":
			name = "req_id"
		case "session_id":
			name = "session_id"
		case "ts":
			name = "ts"
		case "traceparent":
			name = "traceparent"
		case "point":
			name = "point"
		}
	} else {
		name = unquote(s.b[key.start:key.end])
	}
	isString := s.i < len(s.b) && s.b[s.i] == '"'
	start := s.i
	switch name {
	case "proto":
		s.out.HasProto = true
	case "ts":
		s.out.HasTS = true
	}
	switch name {
	case "traceparent":
		if !isString {
			return s.value(1) // not a traceparent: ignored, as W3C Trace Context asks
		}
		sp, err := s.str()
		if err != nil {
			return err
		}
		if sp.end-sp.start > MaxTraceparent {
			return nil // no traceparent is this long: ignored
		}
		if sp.escaped {
			s.out.Traceparent = unquote(s.b[sp.start:sp.end])
		} else {
			s.out.Traceparent = string(s.b[sp.start:sp.end])
		}
		return nil
	case "type", "id", "proto", "req_id", "session_id":
		if !isString {
			switch name {
			case "type":
				s.out.TypeNotString = true
			case "id":
				s.out.HasID, s.out.IDNotString = true, true
			}
			return s.value(1)
		}
		sp, err := s.str()
		if err != nil {
			return err
		}
		var v string
		switch {
		case sp.escaped:
			v = unquote(s.b[sp.start:sp.end])
		case name == "type" || name == "proto":
			v = interned(s.b[sp.start:sp.end])
		default:
			v = string(s.b[sp.start:sp.end])
		}
		switch name {
		case "type":
			s.out.Type = v
		case "id":
			s.out.ID, s.out.HasID = v, true
		case "proto":
			s.out.Proto = v
		case "req_id":
			s.out.ReqID = v
		case "session_id":
			s.out.SessionID = v
		}
		return nil
	case "ts":
		if err := s.value(1); err != nil {
			return err
		}
		if f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err == nil {
			s.out.TS, s.out.TSValid = f, true
		}
		return nil
	case "point":
		// A host's reply: kept when it is an integer in range (7.0 is
		// the integer 7), else ignored as a host that keeps no points.
		if err := s.value(1); err != nil {
			return err
		}
		if f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err == nil && f >= 0 && f <= MaxPoint && f == math.Trunc(f) {
			s.out.Point, s.out.HasPoint = uint64(f), true
		}
		return nil
	}
	return s.value(1)
}

// unquote decodes the contents of a JSON string already checked by the scanner.
func unquote(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	q := make([]byte, 0, len(b)+2)
	q = append(q, '"')
	q = append(q, b...)
	q = append(q, '"')
	var out string
	if err := stdUnmarshal(q, &out); err != nil {
		return string(b)
	}
	return out
}
