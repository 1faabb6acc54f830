package wire

import (
	"crypto/rand"
	"encoding/hex"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/goccy/go-json/jsontext"
	jsonv2 "github.com/goccy/go-json/v2"
)

// The JSON codec of the project lives behind these two functions so that it
// can be swapped in one place; goccy/go-json was chosen by benchmark
// (docs/PERFORMANCE.md).

// Marshal encodes v as compact JSON.
func Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON into v.
func Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func stdUnmarshal(b []byte, v any) error { return stdjson.Unmarshal(b, v) }

var idCounter atomic.Uint64

var idPrefix = "h" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"

// NewID returns a message id unique within this process run.
func NewID() string {
	return idPrefix + strconv.FormatUint(idCounter.Add(1), 36)
}

// Now returns the current time as envelope `ts`: Unix epoch seconds.
func Now() float64 { return Epoch(time.Now()) }

// Epoch is the one clock format of the wire: t as Unix epoch seconds with
// microsecond precision, which a float64 holds exactly for centuries.
func Epoch(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

// FromEpoch is the inverse of [Epoch].
func FromEpoch(s float64) time.Time { return time.UnixMicro(int64(math.Round(s * 1e6))) }

// AppendEncode appends the one-line JSON encoding of m with its envelope to
// dst: the envelope fields first, then the body's fields (docs/DECISIONS.md, Wire).
func AppendEncode(dst []byte, env *Envelope, m Message) ([]byte, error) {
	return encode(dst, false, env, m)
}

// Encode returns the one-line JSON encoding of m with its envelope, without
// the trailing newline, in a slice of the size it needs (when no string
// needs escaping): every message sent is one, and one grown past a guess
// is a second allocation and a copy.
func Encode(env *Envelope, m Message) ([]byte, error) {
	return encode(nil, true, env, m)
}

// bodyEncoder marshals a message's body with goccy's Encoder, whose Write
// lends the encoder's own pooled buffer: the body is enveloped straight
// from it. json.Marshal would copy every body into a slice of its own
// first, only for the envelope to copy it again.
type bodyEncoder struct {
	enc *json.Encoder
	// env is a copy: a pointer kept in the pool would move every
	// caller's envelope to the heap.
	env   Envelope
	dst   []byte
	exact bool // make dst at the size the line needs (Encode)
	err   error
}

var bodyEncoders = sync.Pool{New: func() any {
	b := &bodyEncoder{}
	b.enc = json.NewEncoder(b)
	return b
}}

func encode(dst []byte, exact bool, env *Envelope, m Message) ([]byte, error) {
	b := bodyEncoders.Get().(*bodyEncoder)
	b.env, b.dst, b.exact, b.err = *env, dst, exact, nil
	err := b.enc.Encode(m)
	line, berr := b.dst, b.err
	b.env, b.dst = Envelope{}, nil
	bodyEncoders.Put(b)
	if err != nil {
		return dst, fmt.Errorf("encode %s: %w", env.Type, err)
	}
	if berr != nil {
		return dst, berr
	}
	return line, nil
}

// Write takes the body the encoder made, valid only during the call.
func (b *bodyEncoder) Write(p []byte) (int, error) {
	body := p[:len(p)-1] // the Encoder's newline
	if len(body) < 2 || body[0] != '{' {
		b.err = fmt.Errorf("encode %s: body is not a JSON object", b.env.Type)
		return len(p), nil
	}
	if b.exact {
		// The envelope's fixed text, its strings with their quotes, and
		// the longest ts strconv writes for a time of this era.
		size := len(`{"type":,"id":,"proto":"`+ProtoVersion+`","ts":,"req_id":}`) + 6 +
			len(b.env.Type) + len(b.env.ID) + len(b.env.ReqID) + 24 + len(body)
		if b.env.Traceparent != "" {
			size += len(`,"traceparent":""`) + len(b.env.Traceparent)
		}
		if b.env.HasPoint {
			size += len(`,"point":`) + 16
		}
		b.dst = make([]byte, 0, size)
	}
	b.dst = appendEnveloped(b.dst, &b.env, body)
	return len(p), nil
}

// appendEnveloped appends the envelope fields, then the fields of body.
func appendEnveloped(dst []byte, env *Envelope, body []byte) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, env.Type)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, env.ID)
	dst = append(dst, `,"proto":"`+ProtoVersion+`","ts":`...)
	ts := env.TS
	if ts == 0 {
		ts = Now()
	}
	dst = strconv.AppendFloat(dst, ts, 'f', -1, 64)
	// An error always carries req_id, empty when the line it answers had no
	// readable id (schemas/core.json Error), so an agent can tell it apart
	// from an error about a request it sent.
	if env.ReqID != "" || env.Type == "error" {
		dst = append(dst, `,"req_id":`...)
		dst = appendString(dst, env.ReqID)
	}
	if env.Traceparent != "" {
		dst = append(dst, `,"traceparent":`...)
		dst = appendString(dst, env.Traceparent)
	}
	if env.HasPoint {
		dst = append(dst, `,"point":`...)
		dst = strconv.AppendUint(dst, env.Point, 10)
	}
	if len(body) > 2 {
		dst = append(dst, ',')
	}
	return append(dst, body[1:]...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD so
// the output is always valid.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Decode scans line, looks its type up in reg and decodes the body into a
// fresh model. Every failure is an *Error with code parse_error or
// schema_violation (docs/DECISIONS.md, Wire); sc is filled as far as the scan got, so
// the caller can answer with the line's id.
func (reg *Registry) Decode(line []byte, sc *Scanned) (*Entry, Message, error) {
	if err := Scan(line, sc); err != nil {
		return nil, nil, &Error{Code: CodeParseError, Message: err.Error(), Err: err}
	}
	return reg.DecodeScanned(line, sc)
}

// DecodeScanned is [Registry.Decode] of a line that [Scan] already
// scanned into sc without error, for a transport that scanned it to read
// its id first.
func (reg *Registry) DecodeScanned(line []byte, sc *Scanned) (*Entry, Message, error) {
	if sc.TypeNotString {
		return nil, nil, &Error{Code: CodeParseError, Message: `field "type" must be a string`}
	}
	if sc.Type == "" {
		return nil, nil, &Error{Code: CodeParseError, Message: `missing field "type"`}
	}
	e := reg.Lookup(sc.Type)
	if e == nil {
		return nil, nil, &Error{Code: CodeParseError, Message: "unknown type " + Clip(sc.Type)}
	}
	if !e.Kind.AgentSends() {
		return e, nil, &Error{Code: CodeParseError, Message: fmt.Sprintf("type %q is sent only by the host", sc.Type)}
	}
	if !sc.HasID || sc.IDNotString || sc.ID == "" {
		return e, nil, &Error{Code: CodeSchemaViolation, Message: `field "id": a non-empty string is required`, Detail: map[string]any{"field": "id"}}
	}
	if err := checkEnvelope(sc); err != nil {
		return e, nil, err
	}
	for _, f := range e.Required {
		k, ok := sc.lookup(f)
		if !ok {
			return e, nil, missing(f)
		}
		if k.null {
			// The schemas give no required field a null type; decoding null
			// would silently leave the zero value.
			return e, nil, &Error{Code: CodeSchemaViolation, Message: fmt.Sprintf("required field %q must not be null", f), Detail: map[string]any{"field": f}}
		}
	}
	for _, f := range e.NotNull {
		if sc.IsNull(f) {
			// JSON Schema refuses null where the type does not list it;
			// decoding it would silently read as absent.
			return e, nil, &Error{Code: CodeSchemaViolation, Message: fmt.Sprintf("field %q must not be null", f), Detail: map[string]any{"field": f}}
		}
	}
	if e.Shape != nil {
		if err := checkShape(line, e.Shape); err != nil {
			return e, nil, AsError(err)
		}
	}
	m := e.New()
	if err := decodeModel(line, m); err != nil {
		return e, nil, err
	}
	if err := m.Validate(); err != nil {
		return e, nil, AsError(err)
	}
	return e, m, nil
}

func missing(field string) *Error {
	return &Error{Code: CodeSchemaViolation, Message: fmt.Sprintf("missing required field %q", field), Detail: map[string]any{"field": field}}
}

// decodeModel decodes a scanned line into the model m. It uses the v2
// semantics of go-json, where object members match struct fields by their
// exact name: the v1 semantics of Unmarshal match case-insensitively, so an
// unknown member such as "AGENT_ID" (which docs/DECISIONS.md, Wire says is ignored) would
// overwrite or fail on agent_id, and the host would disagree with the schema
// about a line that is valid under it. The other v2 checks (duplicate names,
// invalid UTF-8) repeat what Scan already enforces.
//
// An integer field takes a number with a zero fraction or an exponent, such
// as 7.0 or 1e2, as JSON Schema's integers do: the decoder rewrites that one
// number into integer form and decodes again, so only integer fields see
// the rewrite and raw payloads keep their bytes.
func decodeModel(line []byte, m Message) *Error {
	for tries := 0; ; tries++ {
		err := jsonv2.Unmarshal(line, m)
		if err == nil {
			return nil
		}
		var se *jsonv2.SemanticError
		if tries < maxIntegralRewrites && errors.As(err, &se) && se.JSONKind == jsontext.KindNumber && jsonTypeName(se.GoType) == "integer" {
			if fixed, ok := integralAt(line, se.ByteOffset, se.JSONValue); ok {
				line = fixed
				continue
			}
		}
		return decodeError(err, m)
	}
}

// decodeError turns a JSON decoder failure into a schema_violation that names
// the field, as a path in the style of [Nest] ("caps[0].name"), when the
// decoder says which one.
func decodeError(err error, m Message) *Error {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) && se.JSONPointer != "" {
		field := fieldPath(reflect.TypeOf(m), se.JSONPointer)
		reason := fmt.Sprintf("expected %s, got %s", jsonTypeName(se.GoType), kindName(se.JSONKind))
		if se.JSONKind == jsontext.KindNumber && se.Err != nil {
			// A number that does not fit the Go type (1.5 or 1e400 for an
			// integer, 1e400 for a float): say which number.
			if want := jsonTypeName(se.GoType); want == "integer" {
				reason = fmt.Sprintf("expected integer, got number %s", truncate(string(se.JSONValue), 32))
			} else {
				reason = fmt.Sprintf("number %s is out of range", truncate(string(se.JSONValue), 32))
			}
		}
		return &Error{Code: CodeSchemaViolation,
			Message: "field " + Clip(field) + ": " + reason,
			Detail:  map[string]any{"field": cut(field, MaxEcho)}, Err: err}
	}
	msg := err.Error()
	if i := strings.Index(msg, "json: "); i >= 0 {
		msg = msg[i+6:]
	}
	msg = cut(msg, 4*MaxEcho) // the decoder may quote the offending input
	return &Error{Code: CodeSchemaViolation, Message: msg, Err: err}
}

// fieldPath renders a JSON pointer into the model as a field path. It walks
// the model's Go type alongside the pointer because the pointer alone cannot
// tell an array index from an object member named "0".
func fieldPath(t reflect.Type, ptr jsontext.Pointer) string {
	var b strings.Builder
	for tok := range ptr.Tokens() {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			b.WriteString("[" + tok + "]")
			t = t.Elem()
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			t = fieldType(t, tok)
		default:
			t = nil // an interface: the rest of the path is untyped
		}
	}
	return b.String()
}

// fieldType returns the type of the struct field whose JSON name is name, or
// nil. The generated models name every field with a json tag.
func fieldType(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name || (tag == "" && f.Name == name) {
			return f.Type
		}
		if f.Anonymous && tag == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if inner := fieldType(ft, name); inner != nil {
					return inner
				}
			}
		}
	}
	return nil
}

// jsonTypeName names the JSON type a Go type is decoded from, so that an
// agent reads "expected string" rather than a Go type name.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return t.String()
}

func kindName(k jsontext.Kind) string {
	switch k {
	case jsontext.KindNull:
		return "null"
	case jsontext.KindTrue, jsontext.KindFalse:
		return "boolean"
	case jsontext.KindString:
		return "string"
	case jsontext.KindNumber:
		return "number"
	case jsontext.KindBeginObject:
		return "object"
	case jsontext.KindBeginArray:
		return "array"
	}
	return "another type"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// DecodeBody decodes a line already known to be of entry e (the client side,
// for host messages, where the framing rules are not enforced).
func DecodeBody(e *Entry, line []byte) (Message, error) {
	m := e.New()
	if err := decodeModel(line, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Check validates a typed value handed over by the direct codec the same way
// Decode validates a line, as far as a Go value allows (docs/DECISIONS.md, Transports).
func (reg *Registry) Check(env *Envelope, m Message) (*Entry, error) {
	if m == nil {
		return nil, &Error{Code: CodeParseError, Message: "nil message"}
	}
	t := m.MessageType()
	e := reg.Lookup(t)
	if e == nil {
		return nil, &Error{Code: CodeParseError, Message: "unknown type " + Clip(t)}
	}
	if !e.Kind.AgentSends() {
		return e, &Error{Code: CodeParseError, Message: fmt.Sprintf("type %q is sent only by the host", t)}
	}
	if env.ID == "" {
		return e, &Error{Code: CodeSchemaViolation, Message: `field "id": a non-empty string is required`, Detail: map[string]any{"field": "id"}}
	}
	// A Go value never went through the model's constructor; zero fields
	// that have a schema default take it, as an absent JSON field would.
	if d, ok := m.(interface{ ApplyDefaults() }); ok {
		d.ApplyDefaults()
	}
	if err := m.Validate(); err != nil {
		return e, AsError(err)
	}
	return e, nil
}

// AppendString appends s as a JSON string (for hand-written encoders of
// hot-path records, such as audit lines).
func AppendString(dst []byte, s string) []byte { return appendString(dst, s) }

// RandomHex returns n random bytes in hex, for ids that must not be
// guessable (sessions, snapshots, episodes, processes).
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
