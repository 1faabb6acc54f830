package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// probeReq is a hand-made message whose entry has a Shape, aliases and a
// Validate of its own: no schema of schemas/ has an agent-sent type with
// nested required fields yet, and the nested checks must be tested anyway.
type probeReq struct {
	Opts  *probeOpts     `json:"opts,omitempty"`
	Items []probeItem    `json:"items"`
	Count int            `json:"count,omitempty"`
	Tags  map[string]int `json:"tags,omitempty"`
	Any   any            `json:"any,omitempty"`
}

type probeOpts struct {
	Mode  string `json:"mode"`
	Level uint8  `json:"level,omitempty"`
}

type probeItem struct {
	Name string   `json:"name"`
	Refs []string `json:"refs,omitempty"`
}

func (*probeReq) MessageType() string { return "probe/do/req" }

func (m *probeReq) Validate() error {
	if m.Count < 0 {
		return &wire.FieldError{Field: "count", Reason: "must be at least 0"}
	}
	if m.Count == 13 {
		return fmt.Errorf("unlucky count: %w", wire.ErrInvalid)
	}
	return nil
}

// probeResp is the host-only reply of probeReq.
type probeResp struct{}

func (*probeResp) MessageType() string { return "probe/do/resp" }
func (*probeResp) Validate() error     { return nil }

func probeRegistry() *wire.Registry {
	reg := wire.NewRegistry()
	reg.AddNamespace(&wire.Namespace{Name: "probe", Capability: "tools", Event: "probe/event"})
	reg.Add(
		&wire.Entry{
			Type: "probe/do/req", Kind: wire.KindRequest, Namespace: "probe", Capability: "tools",
			Reply:    "probe/do/resp",
			Required: []string{"items"},
			Shape: &wire.Shape{Props: map[string]*wire.Shape{
				"opts":  {Required: []string{"mode"}},
				"items": {Items: &wire.Shape{Required: []string{"name"}}},
			}},
			New: func() wire.Message { return &probeReq{Count: 1} },
		},
		&wire.Entry{
			Type: "probe/do/resp", Kind: wire.KindReply, Namespace: "probe", Capability: "tools",
			New: func() wire.Message { return &probeResp{} },
		},
	)
	reg.Alias("probe/do", "probe/do/req")
	return reg
}

// TestDecode covers the error mapping of docs/DECISIONS.md, Wire: framing failures,
// unknown types and host-only types are parse_error; a known type that fails
// its schema is schema_violation, and Detail names the field.
func TestDecode(t *testing.T) {
	core, probe := msg.Registry(), probeRegistry()
	hs := func(extra string) string {
		return `{"type":"handshake/req","id":"h1","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["tools"],"auth_token":"t"` + extra + `}`
	}
	tests := []struct {
		name  string
		reg   *wire.Registry // nil: msg.Registry()
		line  string
		code  wire.Code // "" for success
		field string    // the Detail field a schema_violation must name
		want  string    // a substring of the error message
		entry string    // the entry Decode must return, "" for none
		id    string    // the id Scan must have captured
		check func(t *testing.T, m wire.Message)
	}{
		// Framing (Scan) failures.
		{name: "not JSON", line: `hello`, code: wire.CodeParseError, want: "JSON object"},
		{name: "invalid JSON", line: `{"type":"ping","id":"1","proto":"1.0","ts":1`, code: wire.CodeParseError, want: "unterminated", entry: "", id: "1"},
		{name: "array", line: `[1,2]`, code: wire.CodeParseError},
		{name: "string", line: `"x"`, code: wire.CodeParseError},
		{name: "number", line: `5`, code: wire.CodeParseError},
		{name: "empty line", line: ``, code: wire.CodeParseError},
		{name: "invalid UTF-8 in value", line: "{\"type\":\"handshake/req\",\"id\":\"1\",\"proto\":\"1.0\",\"ts\":1,\"agent_id\":\"\xc3\x28\"}", code: wire.CodeParseError, want: "UTF-8", id: "1"},
		{name: "invalid UTF-8 in key", line: "{\"type\":\"ping\",\"id\":\"1\",\"proto\":\"1.0\",\"ts\":1,\"\xe2\x28\xa1\":1}", code: wire.CodeParseError, want: "UTF-8"},
		{name: "duplicate top-level key", line: `{"type":"ping","id":"1","proto":"1.0","ts":1,"id":"2"}`, code: wire.CodeParseError, want: "duplicate"},
		{name: "duplicate type smuggled with escapes", line: `{"type":"ping","id":"1","proto":"1.0","ts":1,"\u0074\u0079\u0070\u0065":"pong"}`, code: wire.CodeParseError, want: "duplicate"},
		{name: "duplicate nested key", line: hs(`,"x":{"k":1,"k":2}`), code: wire.CodeParseError, want: "duplicate"},
		{name: "duplicate nested key with escape", line: hs(`,"x":[{"k":1,"\u006b":2}]`), code: wire.CodeParseError, want: "duplicate"},
		{name: "two objects", line: `{"type":"ping","id":"1","proto":"1.0","ts":1}{"type":"ping","id":"2","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: "after the JSON object"},
		{name: "data after object", line: `{"type":"ping","id":"1","proto":"1.0","ts":1} x`, code: wire.CodeParseError, want: "after the JSON object"},
		{name: "lone surrogate escape", line: `{"type":"session/restore/req","id":"r","proto":"1.0","ts":1,"snapshot_id":"\ud800"}`, code: wire.CodeParseError, want: "unpaired surrogate", id: "r"},
		{name: "control character in string", line: "{\"type\":\"ping\",\"id\":\"a\tb\"}", code: wire.CodeParseError, want: "control character"},
		{name: "deep nesting", line: `{"type":"ping","id":"1","proto":"1.0","ts":1,"x":` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `}`, code: wire.CodeParseError, want: "too deep"},

		// Type lookup failures.
		{name: "missing type", line: `{"id":"1"}`, code: wire.CodeParseError, want: `missing field "type"`, id: "1"},
		{name: "empty type", line: `{"type":"","id":"1","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: `missing field "type"`},
		{name: "type not a string", line: `{"type":7,"id":"1"}`, code: wire.CodeParseError, want: "must be a string", id: "1"},
		{name: "type null", line: `{"type":null,"id":"1"}`, code: wire.CodeParseError, want: "must be a string"},
		{name: "type array", line: `{"type":["ping"],"id":"1"}`, code: wire.CodeParseError, want: "must be a string"},
		{name: "unknown type", line: `{"type":"nope/x/req","id":"1","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: `unknown type "nope/x/req"`, id: "1"},
		{name: "type differs in case", line: `{"type":"PING","id":"1","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: "unknown type"},
		{name: "type with trailing space", line: `{"type":"ping ","id":"1","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: "unknown type"},
		{name: "nested type does not count", line: `{"body":{"type":"ping"},"id":"1"}`, code: wire.CodeParseError, want: "missing"},

		// Types only the host sends.
		{name: "pong", line: `{"type":"pong","id":"1","proto":"1.0","ts":1,"uptime_seconds":1}`, code: wire.CodeParseError, want: "only by the host", entry: "pong", id: "1"},
		{name: "error", line: `{"type":"error","id":"1","proto":"1.0","ts":1,"code":"timeout","message":"m","retryable":true}`, code: wire.CodeParseError, want: "only by the host", entry: "error"},
		{name: "handshake/resp", line: `{"type":"handshake/resp","id":"1","proto":"1.0","ts":1,"ok":true,"accepted_caps":[],"max_parallel":4}`, code: wire.CodeParseError, want: "only by the host", entry: "handshake/resp"},
		{name: "session/info/resp", line: `{"type":"session/info/resp","id":"1","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: "only by the host", entry: "session/info/resp"},
		{name: "host-only type checked before id", line: `{"type":"pong"}`, code: wire.CodeParseError, entry: "pong"},
		{name: "probe reply", reg: probe, line: `{"type":"probe/do/resp","id":"1","proto":"1.0","ts":1}`, code: wire.CodeParseError, want: "only by the host", entry: "probe/do/resp"},

		// The envelope id.
		{name: "missing id", line: `{"type":"ping"}`, code: wire.CodeSchemaViolation, field: "id", entry: "ping"},
		{name: "empty id", line: `{"type":"ping","id":"","proto":"1.0","ts":1}`, code: wire.CodeSchemaViolation, field: "id", entry: "ping"},
		{name: "id not a string", line: `{"type":"ping","id":42}`, code: wire.CodeSchemaViolation, field: "id", entry: "ping"},
		{name: "id null", line: `{"type":"ping","id":null}`, code: wire.CodeSchemaViolation, field: "id", entry: "ping"},
		// proto and ts are required on every agent line (spec §2.1).
		{name: "missing proto", line: `{"type":"ping","id":"1","ts":1}`, code: wire.CodeSchemaViolation, field: "proto", entry: "ping", id: "1"},
		{name: "missing ts", line: `{"type":"ping","id":"1","proto":"1.0"}`, code: wire.CodeSchemaViolation, field: "ts", entry: "ping", id: "1"},
		{name: "missing both", line: `{"type":"tool/list/req","id":"1"}`, code: wire.CodeSchemaViolation, field: "proto", id: "1"},
		{name: "proto null", line: `{"type":"ping","id":"1","proto":null,"ts":1}`, code: wire.CodeVersionMismatch, entry: "ping", id: "1"},
		{name: "ts null", line: `{"type":"ping","id":"1","proto":"1.0","ts":null}`, code: wire.CodeSchemaViolation, field: "ts", entry: "ping", id: "1"},

		// Required fields.
		{name: "handshake without agent_caps", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","auth_token":"t"}`,
			code: wire.CodeSchemaViolation, field: "agent_caps", want: `"agent_caps"`, entry: "handshake/req", id: "h"},
		{name: "handshake without auth_token", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":[]}`,
			code: wire.CodeSchemaViolation, field: "auth_token", entry: "handshake/req"},
		{name: "required field in other case", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","AGENT_CAPS":[],"auth_token":"t"}`,
			code: wire.CodeSchemaViolation, field: "agent_caps"},
		{name: "required field spelled with escape", line: `{"type":"cancel","id":"c","proto":"1.0","ts":1,"req\u005fid":"r"}`,
			check: func(t *testing.T, m wire.Message) {
				if got := m.(*msg.Cancel).ReqID; got != "r" {
					t.Errorf("ReqID = %q, want r", got)
				}
			}},
		{name: "cancel without req_id", line: `{"type":"cancel","id":"c","proto":"1.0","ts":1}`, code: wire.CodeSchemaViolation, field: "req_id", entry: "cancel"},
		{name: "restore without snapshot_id", line: `{"type":"session/restore/req","id":"r","proto":"1.0","ts":1}`, code: wire.CodeSchemaViolation, field: "snapshot_id"},

		// Wrong field types.
		{name: "agent_id a number", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":5,"agent_caps":[],"auth_token":"t"}`,
			code: wire.CodeSchemaViolation, field: "agent_id", want: "expected string, got number", id: "h"},
		{name: "agent_caps a string", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":"tools","auth_token":"t"}`,
			code: wire.CodeSchemaViolation, field: "agent_caps", want: "expected array, got string"},
		{name: "agent_caps element a number", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["tools",3],"auth_token":"t"}`,
			code: wire.CodeSchemaViolation, field: "agent_caps[1]", want: "expected string, got number"},
		{name: "auth_token an object", line: `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":[],"auth_token":{}}`,
			code: wire.CodeSchemaViolation, field: "auth_token", want: "got object"},
		{name: "timeout a string", line: `{"type":"shutdown","id":"s","proto":"1.0","ts":1,"timeout":"10"}`, code: wire.CodeSchemaViolation, field: "timeout", want: "expected number, got string"},
		{name: "timeout a boolean", line: `{"type":"shutdown","id":"s","proto":"1.0","ts":1,"timeout":true}`, code: wire.CodeSchemaViolation, field: "timeout", want: "got boolean"},
		{name: "timeout out of range", line: `{"type":"shutdown","id":"s","proto":"1.0","ts":1,"timeout":1e400}`, code: wire.CodeSchemaViolation, field: "timeout", want: "out of range"},
		{name: "target a number", line: `{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":1}`, code: wire.CodeSchemaViolation, field: "target", want: "expected string"},

		// Value constraints (the generated Validate).
		{name: "target outside its enum", line: `{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":"disk"}`,
			code: wire.CodeSchemaViolation, field: "target", want: `"file", "sql"`, entry: "session/snapshot/req", id: "s"},
		{name: "target in other case", line: `{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":"FILE"}`, code: wire.CodeSchemaViolation, field: "target"},
		{name: "negative timeout", line: `{"type":"shutdown","id":"s","proto":"1.0","ts":1,"timeout":-1}`, code: wire.CodeSchemaViolation, field: "timeout"},
		{name: "empty snapshot_id", line: `{"type":"session/restore/req","id":"r","proto":"1.0","ts":1,"snapshot_id":""}`, code: wire.CodeSchemaViolation, field: "snapshot_id"},

		// Lines that decode.
		{name: "ping", line: `{"type":"ping","id":"p1","proto":"1.0","ts":1}`, entry: "ping", id: "p1"},
		{name: "ping with envelope", line: `{"type":"ping","id":"p1","proto":"1.0","ts":1712345678.5}`, entry: "ping", id: "p1"},
		{name: "handshake", line: hs(``), entry: "handshake/req", id: "h1",
			check: func(t *testing.T, m wire.Message) {
				want := &msg.HandshakeReq{AgentID: "a", AgentCaps: []string{"tools"}, AuthToken: "t"}
				if !reflect.DeepEqual(m, want) {
					t.Errorf("got %+v, want %+v", m, want)
				}
			}},
		{name: "unknown fields are ignored", line: hs(`,"future":{"x":[1,2,{"y":null}]},"z":1e400`), entry: "handshake/req"},
		{name: "unknown field differing only in case is ignored", line: hs(`,"AGENT_ID":7,"Auth_Token":"other"`),
			check: func(t *testing.T, m wire.Message) {
				h := m.(*msg.HandshakeReq)
				if h.AgentID != "a" || h.AuthToken != "t" {
					t.Errorf("a member in another case leaked into the model: %+v", h)
				}
			}},
		{name: "unknown field in other case does not override", line: `{"type":"session/restore/req","id":"r","proto":"1.0","ts":1,"snapshot_id":"s1","SNAPSHOT_ID":""}`,
			check: func(t *testing.T, m wire.Message) {
				if got := m.(*msg.SessionRestoreReq).SnapshotID; got == nil || *got != "s1" {
					t.Errorf("SnapshotID = %v, want s1", got)
				}
			}},
		{name: "default applied", line: `{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1}`,
			check: func(t *testing.T, m wire.Message) {
				if got := m.(*msg.SessionSnapshotReq).Target; got != msg.SessionSnapshotReqTargetFile {
					t.Errorf("Target = %q, want the schema default file", got)
				}
			}},
		{name: "enum value", line: `{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":"sql"}`,
			check: func(t *testing.T, m wire.Message) {
				if got := m.(*msg.SessionSnapshotReq).Target; got != msg.SessionSnapshotReqTargetSQL {
					t.Errorf("Target = %q, want sql", got)
				}
			}},
		{name: "escaped values decode", line: `{"type":"session/restore/req","id":"r","proto":"1.0","ts":1,"snapshot_id":"caf\u00e9 \ud83d\ude00"}`,
			check: func(t *testing.T, m wire.Message) {
				if got := m.(*msg.SessionRestoreReq).SnapshotID; got == nil || *got != "café 😀" {
					t.Errorf("SnapshotID = %v", got)
				}
			}},
		{name: "notification", line: `{"type":"shutdown","id":"s","proto":"1.0","ts":1,"timeout":0.5}`, entry: "shutdown",
			check: func(t *testing.T, m wire.Message) {
				if got := m.(*msg.Shutdown).Timeout; got == nil || *got != 0.5 {
					t.Errorf("Timeout = %v", got)
				}
			}},
		{name: "trailing white space", line: "{\"type\":\"ping\",\"id\":\"1\",\"proto\":\"1.0\",\"ts\":1} \t\r\n", entry: "ping"},

		// Nested required fields (Shape), aliases and Validate errors of a
		// hand-made entry.
		{name: "probe", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"name":"a","refs":["x"]}],"opts":{"mode":"m","level":3},"tags":{"0":1}}`,
			entry: "probe/do/req",
			check: func(t *testing.T, m wire.Message) {
				want := &probeReq{Items: []probeItem{{Name: "a", Refs: []string{"x"}}}, Opts: &probeOpts{Mode: "m", Level: 3}, Count: 1, Tags: map[string]int{"0": 1}}
				if !reflect.DeepEqual(m, want) {
					t.Errorf("got %+v, want %+v", m, want)
				}
			}},
		{name: "probe alias", reg: probe, line: `{"type":"probe/do","id":"1","proto":"1.0","ts":1,"items":[]}`, entry: "probe/do/req"},
		{name: "probe missing top-level", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1}`, code: wire.CodeSchemaViolation, field: "items"},
		{name: "probe missing nested in object", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"opts":{"level":1}}`,
			code: wire.CodeSchemaViolation, field: "opts.mode", want: "required"},
		{name: "probe missing nested in array", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"name":"a"}, {"refs":[]} ]}`,
			code: wire.CodeSchemaViolation, field: "items[1].name"},
		{name: "probe nested key spelled with escape", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"n\u0061me":"a"}],"opts":{"mod\u0065":"x"}}`, entry: "probe/do/req"},
		{name: "probe nested key in other case", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"NAME":"a"}]}`, code: wire.CodeSchemaViolation, field: "items[0].name"},
		{name: "probe shape of wrong type left to the decoder", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":{"name":"a"}}`,
			code: wire.CodeSchemaViolation, field: "items", want: "expected array, got object"},
		{name: "probe nested wrong type", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"name":"a"},{"name":"b","refs":[true]}]}`,
			code: wire.CodeSchemaViolation, field: "items[1].refs[0]", want: "expected string, got boolean"},
		{name: "probe map value wrong type", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"tags":{"0":"x"}}`,
			code: wire.CodeSchemaViolation, field: "tags.0", want: "expected integer, got string"},
		{name: "probe fraction for integer", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"count":1.5}`,
			code: wire.CodeSchemaViolation, field: "count", want: "expected integer, got number 1.5"},
		{name: "probe integer overflow", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"opts":{"mode":"m","level":300}}`,
			code: wire.CodeSchemaViolation, field: "opts.level"},
		{name: "probe untyped values accept anything", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"any":{"a":[1,"x",null,true]}}`, entry: "probe/do/req"},
		{name: "probe Validate field error", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"count":-3}`, code: wire.CodeSchemaViolation, field: "count"},
		{name: "probe Validate ErrInvalid", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[],"count":13}`, code: wire.CodeSchemaViolation, want: "unlucky"},
		{name: "probe framing checked before shape", reg: probe, line: `{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"name":"a","name":"b"}]}`, code: wire.CodeParseError, want: "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := tt.reg
			if reg == nil {
				reg = core
			}
			var sc wire.Scanned
			e, m, err := reg.Decode([]byte(tt.line), &sc)
			if tt.entry != "" && (e == nil || e.Type != tt.entry) {
				t.Errorf("entry = %v, want %s", entryType(e), tt.entry)
			}
			if tt.id != "" && sc.ID != tt.id {
				t.Errorf("scanned id = %q, want %q", sc.ID, tt.id)
			}
			if tt.code == "" {
				if err != nil {
					t.Fatalf("Decode(%s) = %v, want success", tt.line, err)
				}
				if m == nil || e == nil {
					t.Fatalf("Decode returned entry %v and message %v without error", entryType(e), m)
				}
				if m.MessageType() != e.Type {
					t.Errorf("message type %q does not match entry %q", m.MessageType(), e.Type)
				}
				if tt.check != nil {
					tt.check(t, m)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode(%s) succeeded with %+v, want %s", tt.line, m, tt.code)
			}
			if m != nil {
				t.Errorf("Decode returned a message with an error: %+v", m)
			}
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("error %T is not a *wire.Error: %v", err, err)
			}
			if we.Code != tt.code {
				t.Errorf("code = %s, want %s (%v)", we.Code, tt.code, err)
			}
			if we.Retryable() {
				t.Errorf("%s must not be retryable", we.Code)
			}
			if tt.want != "" && !strings.Contains(we.Message, tt.want) {
				t.Errorf("message %q does not contain %q", we.Message, tt.want)
			}
			if tt.code == wire.CodeParseError && tt.entry == "" && e != nil {
				t.Errorf("entry = %s, want none", e.Type)
			}
			if tt.code == wire.CodeSchemaViolation {
				if e == nil {
					t.Errorf("schema_violation without the entry")
				}
				if tt.field != "" {
					d, _ := we.Detail.(map[string]any)
					if d["field"] != tt.field {
						t.Errorf("Detail = %v, want field %q", we.Detail, tt.field)
					}
					if !strings.Contains(we.Message, tt.field) {
						t.Errorf("message %q does not name the field %q", we.Message, tt.field)
					}
				}
			}
		})
	}
}

func entryType(e *wire.Entry) string {
	if e == nil {
		return "<nil>"
	}
	return e.Type
}

// TestDecodeSyntaxCause checks that framing failures keep wire.ErrSyntax as
// their cause, so the kernel can tell them apart with errors.Is.
func TestDecodeSyntaxCause(t *testing.T) {
	for _, line := range []string{`[]`, `{}{}`, `{"a":1,"a":1}`, "{\"a\":\"\xff\"}"} {
		var sc wire.Scanned
		_, _, err := msg.Registry().Decode([]byte(line), &sc)
		if !errors.Is(err, wire.ErrSyntax) {
			t.Errorf("Decode(%q) = %v, want it to wrap wire.ErrSyntax", line, err)
		}
	}
}

// TestDecodeBody checks the client-side decoder of host messages: no framing
// rules, but the same exact-name field matching and field-naming errors.
func TestDecodeBody(t *testing.T) {
	reg := msg.Registry()
	tests := []struct {
		name  string
		typ   string
		line  string
		want  wire.Message
		field string
	}{
		{"pong", "pong", `{"type":"pong","id":"1","proto":"1.0","ts":1,"req_id":"0","uptime_seconds":2.5}`, &msg.Pong{UptimeSeconds: 2.5}, ""},
		{"handshake/resp", "handshake/resp", `{"ok":true,"accepted_caps":[{"name":"tools","enabled":true}],"max_parallel":4,"session_id":"s"}`,
			&msg.HandshakeResp{Ok: true, AcceptedCaps: []msg.CapabilityEntry{{Name: "tools", Enabled: true}}, MaxParallel: 4, SessionID: ptr("s")}, ""},
		{"other case ignored", "pong", `{"UPTIME_SECONDS":9,"uptime_seconds":1}`, &msg.Pong{UptimeSeconds: 1}, ""},
		{"nested wrong type", "handshake/resp", `{"ok":true,"accepted_caps":[{"name":"tools","enabled":"yes"}],"max_parallel":4}`, nil, "accepted_caps[0].enabled"},
		{"fraction for integer", "handshake/resp", `{"ok":true,"accepted_caps":[],"max_parallel":4.5}`, nil, "max_parallel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := wire.DecodeBody(reg.Lookup(tt.typ), []byte(tt.line))
			if tt.field != "" {
				var we *wire.Error
				if !errors.As(err, &we) || we.Code != wire.CodeSchemaViolation {
					t.Fatalf("err = %v, want a schema_violation", err)
				}
				if d, _ := we.Detail.(map[string]any); d["field"] != tt.field {
					t.Errorf("Detail = %v, want field %q", we.Detail, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tt.want) {
				t.Errorf("got %+v, want %+v", m, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestCheck covers the direct codec's validation of typed values.
func TestCheck(t *testing.T) {
	reg := msg.Registry()
	tests := []struct {
		name  string
		env   wire.Envelope
		m     wire.Message
		code  wire.Code
		field string
	}{
		{"valid", wire.Envelope{ID: "1"}, &msg.Ping{}, "", ""},
		{"nil message", wire.Envelope{ID: "1"}, nil, wire.CodeParseError, ""},
		{"host-only", wire.Envelope{ID: "1"}, &msg.Pong{}, wire.CodeParseError, ""},
		{"unknown type", wire.Envelope{ID: "1"}, &probeReq{}, wire.CodeParseError, ""},
		{"missing id", wire.Envelope{}, &msg.Ping{}, wire.CodeSchemaViolation, "id"},
		{"enum", wire.Envelope{ID: "1"}, &msg.SessionSnapshotReq{Target: "disk"}, wire.CodeSchemaViolation, "target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			_, err := reg.Check(&env, tt.m)
			if tt.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != tt.code {
				t.Fatalf("err = %v, want %s", err, tt.code)
			}
			if tt.field != "" {
				if d, _ := we.Detail.(map[string]any); d["field"] != tt.field {
					t.Errorf("Detail = %v, want field %q", we.Detail, tt.field)
				}
			}
		})
	}
}

// notObject is a message whose JSON is not an object: AppendEncode must
// refuse it rather than write a line no peer can read.
type notObject string

func (notObject) MessageType() string { return "x" }
func (notObject) Validate() error     { return nil }

// unencodable fails to marshal.
type unencodable struct {
	C chan int `json:"c"`
}

func (*unencodable) MessageType() string { return "x" }
func (*unencodable) Validate() error     { return nil }

// TestAppendEncode checks the exact bytes of the encoder: envelope fields
// first, then the body's fields, one compact object.
func TestAppendEncode(t *testing.T) {
	tests := []struct {
		name string
		env  wire.Envelope
		m    wire.Message
		want string
	}{
		{"empty body", wire.Envelope{Type: "ping", ID: "1", TS: 12.5}, &msg.Ping{},
			`{"type":"ping","id":"1","proto":"1.0","ts":12.5}`},
		{"reply with req_id", wire.Envelope{Type: "pong", ID: "2", ReqID: "1", TS: 1}, &msg.Pong{UptimeSeconds: 3},
			`{"type":"pong","id":"2","proto":"1.0","ts":1,"req_id":"1","uptime_seconds":3}`},
		{"request without req_id", wire.Envelope{Type: "session/restore/req", ID: "r", TS: 1712345678.123456}, &msg.SessionRestoreReq{SnapshotID: new("s")},
			`{"type":"session/restore/req","id":"r","proto":"1.0","ts":1712345678.123456,"snapshot_id":"s"}`},
		{"body with nested values", wire.Envelope{Type: "handshake/resp", ID: "3", ReqID: "h", TS: 2}, &msg.HandshakeResp{Ok: true, AcceptedCaps: []msg.CapabilityEntry{{Name: "tools", Enabled: false}}, MaxParallel: 4},
			`{"type":"handshake/resp","id":"3","proto":"1.0","ts":2,"req_id":"h","accepted_caps":[{"enabled":false,"name":"tools"}],"max_parallel":4,"ok":true}`},
		{"quotes and backslashes", wire.Envelope{Type: "ping", ID: `a"b\c/`, ReqID: `"`, TS: 1}, &msg.Ping{},
			`{"type":"ping","id":"a\"b\\c/","proto":"1.0","ts":1,"req_id":"\""}`},
		{"control characters", wire.Envelope{Type: "ping", ID: "\n\r\t\x00\x1f\x7f", TS: 1}, &msg.Ping{},
			`{"type":"ping","id":"\n\r\t\u0000\u001f` + "\x7f" + `","proto":"1.0","ts":1}`},
		{"invalid UTF-8 becomes U+FFFD", wire.Envelope{Type: "ping", ID: "a\xffb\xe2\x82", ReqID: "\xc0\xaf", TS: 1}, &msg.Ping{},
			`{"type":"ping","id":"a\ufffdb\ufffd\ufffd","proto":"1.0","ts":1,"req_id":"\ufffd\ufffd"}`},
		{"valid non-ASCII kept", wire.Envelope{Type: "ping", ID: "é😀\u2028", TS: 1}, &msg.Ping{},
			`{"type":"ping","id":"é😀` + "\u2028" + `","proto":"1.0","ts":1}`},
		{"error answering an unreadable id", wire.Envelope{Type: "error", ID: "e", TS: 1}, &msg.Error{Code: "parse_error", Message: "m"},
			`{"type":"error","id":"e","proto":"1.0","ts":1,"req_id":"","code":"parse_error","message":"m","retryable":false}`},
		{"empty id", wire.Envelope{Type: "pong", TS: 1}, &msg.Pong{},
			`{"type":"pong","id":"","proto":"1.0","ts":1,"uptime_seconds":0}`},
		{"reply with a point", wire.Envelope{Type: "pong", ID: "2", ReqID: "1", TS: 1, Point: 42, HasPoint: true}, &msg.Pong{},
			`{"type":"pong","id":"2","proto":"1.0","ts":1,"req_id":"1","point":42,"uptime_seconds":0}`},
		{"point 0 is carried", wire.Envelope{Type: "pong", ID: "2", ReqID: "1", TS: 1, HasPoint: true}, &msg.Pong{},
			`{"type":"pong","id":"2","proto":"1.0","ts":1,"req_id":"1","point":0,"uptime_seconds":0}`},
		{"the largest point", wire.Envelope{Type: "pong", ID: "2", ReqID: "1", TS: 1, Point: wire.MaxPoint, HasPoint: true}, &msg.Pong{},
			`{"type":"pong","id":"2","proto":"1.0","ts":1,"req_id":"1","point":9007199254740991,"uptime_seconds":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			got, err := wire.AppendEncode([]byte("prefix:"), &env, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			line, ok := bytes.CutPrefix(got, []byte("prefix:"))
			if !ok {
				t.Fatalf("AppendEncode lost dst: %q", got)
			}
			if string(line) != tt.want {
				t.Errorf("got  %s\nwant %s", line, tt.want)
			}
			if !json.Valid(line) {
				t.Errorf("output is not valid JSON: %s", line)
			}
			var sc wire.Scanned
			if err := wire.Scan(line, &sc); err != nil {
				t.Fatalf("Scan rejects the encoder's output %s: %v", line, err)
			}
			wantEnv := wire.Envelope{Type: valid(env.Type), ID: valid(env.ID), ReqID: valid(env.ReqID), TS: env.TS, Proto: wire.ProtoVersion, Point: env.Point, HasPoint: env.HasPoint}
			if sc.Envelope != wantEnv {
				t.Errorf("scanned envelope %+v, want %+v", sc.Envelope, wantEnv)
			}
			// An error always carries req_id (core.json Error); other
			// messages only when they answer a request.
			if want := env.ReqID != "" || env.Type == "error"; sc.Has("req_id") != want {
				t.Errorf("req_id present = %v, want %v", sc.Has("req_id"), want)
			}
			enc, err := wire.Encode(&env, tt.m)
			if err != nil || string(enc) != tt.want {
				t.Errorf("Encode = %s, %v; want AppendEncode's output", enc, err)
			}
		})
	}
}

// valid replaces every invalid byte of s with U+FFFD, as the encoder does.
func valid(s string) string { return string([]rune(s)) }

func TestAppendEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		m    wire.Message
		want string
	}{
		{"body not an object", notObject("x"), "not a JSON object"},
		{"body fails to marshal", &unencodable{C: make(chan int)}, "encode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := wire.Envelope{Type: "x", ID: "1"}
			dst := []byte("keep")
			got, err := wire.AppendEncode(dst, &env, tt.m)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			if string(got) != "keep" {
				t.Errorf("dst changed on error: %q", got)
			}
		})
	}
}

// TestAppendEncodeNow checks that a zero ts is filled with the current time.
func TestAppendEncodeNow(t *testing.T) {
	before := wire.Now()
	line, err := wire.Encode(&wire.Envelope{Type: "ping", ID: "1"}, &msg.Ping{})
	if err != nil {
		t.Fatal(err)
	}
	var sc wire.Scanned
	if err := wire.Scan(line, &sc); err != nil {
		t.Fatal(err)
	}
	if sc.TS < before || sc.TS > wire.Now() {
		t.Errorf("ts = %v, want the current time (about %v)", sc.TS, before)
	}
}

// TestRoundTrip encodes agent messages and decodes them again: every model
// the encoder writes must come back equal through the kernel's decoder.
func TestRoundTrip(t *testing.T) {
	reg := msg.Registry()
	tests := []struct {
		name string
		m    wire.Message
	}{
		{"ping", &msg.Ping{}},
		{"handshake", &msg.HandshakeReq{AgentID: "agent \"7\"\n", AgentCaps: []string{"tools", "mémoire", ""}, AuthToken: "<secret>&"}},
		{"handshake with empty caps", &msg.HandshakeReq{AgentID: "a", AgentCaps: []string{}, AuthToken: "t"}},
		{"cancel", &msg.Cancel{ReqID: "r1"}},
		{"shutdown", &msg.Shutdown{Timeout: ptr(2.5)}},
		{"snapshot", &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetSQL}},
		{"restore", &msg.SessionRestoreReq{SnapshotID: new("\u2028\u2029😀")}},
		{"info", &msg.SessionInfoReq{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, id := range []string{"1", `id with "quotes" and \backslash\`, "tab\there", "\xffbad"} {
				env := wire.Envelope{Type: tt.m.MessageType(), ID: id, TS: 5}
				line, err := wire.Encode(&env, tt.m)
				if err != nil {
					t.Fatal(err)
				}
				var sc wire.Scanned
				e, got, err := reg.Decode(line, &sc)
				if err != nil {
					t.Fatalf("Decode(%s) = %v", line, err)
				}
				if e.Type != tt.m.MessageType() || sc.ID != valid(id) || sc.Proto != wire.ProtoVersion || sc.TS != 5 {
					t.Errorf("envelope came back as %+v", sc.Envelope)
				}
				if !reflect.DeepEqual(got, tt.m) {
					t.Errorf("got %+v, want %+v", got, tt.m)
				}
			}
		})
	}
}

// TestEncodeKeepsExplicitZero guards a bug found by FuzzDecode (the input is
// in testdata/fuzz/FuzzDecode): a field whose zero value means something
// (shutdown timeout 0: "do not wait") must not have a schema default, or an
// omitted zero would come back as the default. Such a field is a pointer.
func TestEncodeKeepsExplicitZero(t *testing.T) {
	line, err := wire.Encode(&wire.Envelope{Type: "shutdown", ID: "1", TS: 1}, &msg.Shutdown{Timeout: ptr(0.0)})
	if err != nil {
		t.Fatal(err)
	}
	var sc wire.Scanned
	_, m, err := msg.Registry().Decode(line, &sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*msg.Shutdown).Timeout; got == nil || *got != 0 {
		t.Fatalf("shutdown timeout 0 arrives as %v (line %s)", got, line)
	}
}

func TestRequiredNullRefused(t *testing.T) {
	line := []byte(`{"type":"handshake/req","id":"1","proto":"1.0","ts":1,"agent_id":null,"agent_caps":[],"auth_token":"x"}`)
	var sc wire.Scanned
	_, _, err := msg.Registry().Decode(line, &sc)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeSchemaViolation || !strings.Contains(we.Message, `"agent_id"`) {
		t.Fatalf("got %v, want schema_violation naming agent_id", err)
	}
	// An optional field is null only where its schema's type lists null
	// (JSON Schema); elsewhere null is refused, not read as absent.
	line = []byte(`{"type":"shutdown","id":"1","proto":"1.0","ts":1,"timeout":null}`)
	if _, _, err := msg.Registry().Decode(line, &sc); !errors.As(err, &we) || we.Code != wire.CodeSchemaViolation || !strings.Contains(we.Message, `"timeout"`) {
		t.Fatalf("optional null: got %v, want schema_violation naming timeout", err)
	}
}

// TestEncodeAllocatesItsLineOnce: a message whose strings need no escaping
// is encoded in a line allocated at its size, its only allocation (the
// body is enveloped from the encoder's own buffer), whatever its length;
// every message sent is encoded.
func TestEncodeAllocatesItsLineOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not exact under the race detector")
	}
	for _, n := range []int{0, 10, 300, 5000} {
		for _, env := range []*wire.Envelope{
			{Type: "pong", ID: "h1-1", ReqID: "r1"},
			{Type: "error", ID: "h1-2"},
			{Type: "pong", ID: "h1-3", TS: 1795503057.758135},
		} {
			m := &msg.Error{Code: "runtime_error", Message: strings.Repeat("m", n)}
			var line []byte
			allocs := testing.AllocsPerRun(50, func() {
				var err error
				if line, err = wire.Encode(env, m); err != nil {
					t.Fatal(err)
				}
			})
			if allocs > 1 {
				t.Errorf("%d-byte body, %s: %v allocations, want the line's only", n, env.Type, allocs)
			}
			var back map[string]any
			if err := json.Unmarshal(line, &back); err != nil || back["message"] != m.Message || back["id"] != env.ID {
				t.Errorf("%d-byte body: %v %.80s", n, err, line)
			}
		}
	}
}
