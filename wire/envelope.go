package wire

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"math"
	"math/big"
)

// checkEnvelope enforces the envelope of schemas/envelope.json on every
// message an agent sends (spec §2.1, §9): proto is required and must be the
// host's version, and ts is required and must be a finite number within
// [MinTS, MaxTS]. A missing proto or ts is schema_violation, as the schema
// says; a wrong proto is version_mismatch (spec §9 rule 2), except on
// handshake/req, which the handshake answers with handshake/resp ok false.
func checkEnvelope(sc *Scanned) *Error {
	if !sc.HasProto {
		return missing("proto")
	}
	if !sc.HasTS {
		return missing("ts")
	}
	if sc.Proto != ProtoVersion && sc.Type != "handshake/req" {
		return &Error{Code: CodeVersionMismatch, Message: fmt.Sprintf("field \"proto\" must be %q", ProtoVersion), Detail: map[string]any{"field": "proto"}}
	}
	if !sc.TSValid || math.IsNaN(sc.TS) || sc.TS < MinTS || sc.TS > MaxTS {
		return &Error{Code: CodeSchemaViolation, Message: fmt.Sprintf("field \"ts\": a number of Unix epoch seconds from %v to %v is required", float64(MinTS), float64(MaxTS)), Detail: map[string]any{"field": "ts"}}
	}
	return nil
}

// maxIntegralRewrites bounds the decode retries of one line, each of which
// rewrites one integral number (7.0) for an integer field.
const maxIntegralRewrites = 64

// integralAt returns line with the number val at offset off written as an
// integer, when val is integral and within int64; a JSON integer is any
// number with a zero fractional part (JSON Schema 2020-12 §6.1.1 of the
// validation vocabulary).
func integralAt(line []byte, off int64, val []byte) ([]byte, bool) {
	if off < 0 || off > int64(len(line)) || len(val) == 0 || !bytes.HasPrefix(line[off:], val) {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(val))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return nil, false
	}
	repl := r.Num().String()
	if repl == string(val) {
		return nil, false
	}
	out := make([]byte, 0, len(line)+len(repl)-len(val))
	out = append(out, line[:off]...)
	out = append(out, repl...)
	return append(out, line[off+int64(len(val)):]...), true
}

// KindIs reports whether a decoded JSON value (nil, bool, float64, string,
// []any, map[string]any) has one of the JSON Schema types named; it backs
// the generated checks of fields typed with a list of types.
func KindIs(v any, kinds ...string) bool {
	return kindIn(kindOf(v), v, kinds)
}

// RawKindIs is [KindIs] for a raw JSON value; an empty value is absent and
// passes.
func RawKindIs(raw stdjson.RawMessage, kinds ...string) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return true
	}
	var k string
	switch raw[0] {
	case '{':
		k = "object"
	case '[':
		k = "array"
	case '"':
		k = "string"
	case 't', 'f':
		k = "boolean"
	case 'n':
		k = "null"
	default:
		k = "number"
	}
	var v any
	if k == "number" {
		if r, ok := new(big.Rat).SetString(string(raw)); ok && r.IsInt() {
			v = int64(0) // integral: also an "integer"
		}
	}
	return kindIn(k, v, kinds)
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "number"
}

func kindIn(k string, v any, kinds []string) bool {
	for _, want := range kinds {
		if want == k {
			return true
		}
		if want == "integer" && k == "number" {
			switch n := v.(type) {
			case int64:
				return true
			case float64:
				return n == math.Trunc(n) && !math.IsInf(n, 0)
			}
		}
	}
	return false
}
