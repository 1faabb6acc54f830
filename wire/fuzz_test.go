package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/goccy/go-json/jsontext"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// fuzzSeeds are valid and invalid lines; the corpus under
// testdata/fuzz/FuzzDecode adds inputs the fuzzer found interesting.
var fuzzSeeds = []string{
	`{"type":"ping","id":"1","proto":"1.0","ts":1}`,
	`{"type":"handshake/req","id":"h1","proto":"1.0","ts":1.5,"agent_id":"a","agent_caps":["tools"],"auth_token":"t"}`,
	`{"type":"handshake/req","id":"h1","proto":"1.0","ts":1,"agent_id":"a","agent_caps":"x","auth_token":"t","AGENT_ID":1}`,
	`{"type":"handshake/resp","id":"1","proto":"1.0","ts":1,"req_id":"2","ok":true,"accepted_caps":[{"name":"x","enabled":true}],"max_parallel":4}`,
	`{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":"sql"}`,
	`{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":"disk"}`,
	`{"type":"session/restore/req","id":"s","proto":"1.0","ts":1,"snapshot_id":"a\u00e9\ud83d\ude00"}`,
	`{"type":"cancel","id":"c","proto":"1.0","ts":1,"req_id":"r"}`,
	`{"type":"shutdown","id":"x","proto":"1.0","ts":1,"timeout":2e1}`,
	`{"type":"shutdown","id":"x","proto":"1.0","ts":1,"timeout":-1e400}`,
	`{"type":"probe/do/req","id":"1","proto":"1.0","ts":1,"items":[{"name":"a","refs":["x"]},{"refs":[1]}],"opts":{"mode":"m","level":300},"tags":{"0":"x"}}`,
	`{"type":"probe/do","id":"1","proto":"1.0","ts":1,"items":[],"any":{"a":[1,"x",null,true,{"b":{}}]}}`,
	`{"a":{"a":1,"\u0061":2}}`,
	`{"type":"pong","id":"1","proto":"1.0","ts":1}`,
	`{"type":7}`,
	`[1,2]`, `"x"`, `5`, `{}{}`, `{} x`, "{\"type\":\"ping\",\"id\":\"\xff\"}",
	"{\"a\":\"\x01\"}", `{"type":"ping","id":"1","proto":"1.0","ts":1} `, `{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`,
	`{"x":` + strings.Repeat(`[`, 200) + strings.Repeat(`]`, 200) + `}`,
}

// FuzzDecode checks that Decode never panics, that every error it returns is
// a *wire.Error with code parse_error or schema_violation, and that it agrees
// with encoding/json about which lines are well formed. It decodes through
// msg.Registry() and through the hand-made probe registry, whose entry has a
// Shape, so the nested walker is fuzzed too.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	regs := []*wire.Registry{msg.Registry(), probeRegistry()}
	f.Fuzz(func(t *testing.T, line []byte) {
		orig := bytes.Clone(line)
		var sc wire.Scanned
		scanErr := wire.Scan(line, &sc)
		checkScanAgrees(t, line, scanErr)
		for _, reg := range regs {
			e, m, err := reg.Decode(line, &sc)
			if !bytes.Equal(line, orig) {
				t.Fatalf("Decode modified its input")
			}
			if err == nil {
				checkDecoded(t, reg, e, m, &sc)
				continue
			}
			if m != nil {
				t.Fatalf("message %+v returned with error %v", m, err)
			}
			var we *wire.Error
			if !errors.As(err, &we) || err != error(we) {
				t.Fatalf("error %T is not a *wire.Error: %v", err, err)
			}
			switch we.Code {
			case wire.CodeParseError:
				if (scanErr != nil) != errors.Is(err, wire.ErrSyntax) {
					t.Fatalf("parse_error %v disagrees with Scan: %v", err, scanErr)
				}
			case wire.CodeSchemaViolation, wire.CodeVersionMismatch:
				// A wrong proto is version_mismatch (spec §9 rule 2); both
				// are found only once the line scanned.
				if scanErr != nil {
					t.Fatalf("schema_violation %v for a line Scan rejects: %v", err, scanErr)
				}
				if e == nil {
					t.Fatalf("schema_violation without its entry: %v", err)
				}
			default:
				t.Fatalf("code %s: %v", we.Code, err)
			}
		}
	})
}

// checkDecoded checks a successful Decode: the message matches its entry,
// and the encoder loses nothing of it. The re-encoded line is decoded into
// a zero model rather than through the entry: the generated models omit
// zero fields, and a constructor that sets a non-zero default would turn
// an omitted zero into the default (see TestEncodeKeepsExplicitZero).
func checkDecoded(t *testing.T, reg *wire.Registry, e *wire.Entry, m wire.Message, sc *wire.Scanned) {
	t.Helper()
	if e == nil || m == nil {
		t.Fatalf("Decode succeeded with entry %v and message %v", entryType(e), m)
	}
	if !e.Kind.AgentSends() || m.MessageType() != e.Type || sc.ID == "" {
		t.Fatalf("Decode accepted %s (%s) with id %q", e.Type, e.Kind, sc.ID)
	}
	line, err := wire.Encode(&wire.Envelope{Type: e.Type, ID: sc.ID, TS: 1}, m)
	if err != nil {
		t.Fatalf("Encode(%+v): %v", m, err)
	}
	var sc2 wire.Scanned
	if _, _, err := reg.Decode(line, &sc2); err != nil {
		t.Fatalf("re-encoded line %s fails: %v", line, err)
	}
	zero := &wire.Entry{New: func() wire.Message {
		return reflect.New(reflect.TypeOf(m).Elem()).Interface().(wire.Message)
	}}
	m2, err := wire.DecodeBody(zero, line)
	if err != nil {
		t.Fatalf("re-encoded line %s fails: %v", line, err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip changed the model:\n%+v\n%+v", m, m2)
	}
}

// checkScanAgrees compares Scan with two independent references: a line
// Scan accepts is valid JSON for encoding/json, and a JSON object under
// RFC 7493 (valid UTF-8 also after unescaping, unique member names) for
// go-json's jsontext; a line that is such an object, and not deeply nested,
// is accepted.
func checkScanAgrees(t *testing.T, line []byte, scanErr error) {
	t.Helper()
	if scanErr != nil && !errors.Is(scanErr, wire.ErrSyntax) {
		t.Fatalf("Scan error %v does not wrap ErrSyntax", scanErr)
	}
	trimmed := bytes.TrimLeft(line, " \t\r\n")
	object := len(trimmed) > 0 && trimmed[0] == '{'
	wellFormed := object && jsontext.Value(line).IsValid()
	if scanErr == nil {
		if !wellFormed || !json.Valid(line) {
			t.Fatalf("Scan accepts %q, which is not a valid I-JSON object", line)
		}
		return
	}
	if wellFormed && depth(line) < 100 {
		t.Fatalf("Scan rejects well-formed %q: %v", line, scanErr)
	}
}

// depth returns the deepest nesting of objects and arrays of a line.
func depth(line []byte) int {
	d, deepest, inString := 0, 0, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}

// FuzzEncode checks that whatever strings the envelope holds, the encoder
// writes one line that Scan accepts and that gives the strings back, with
// invalid UTF-8 replaced by U+FFFD.
func FuzzEncode(f *testing.F) {
	f.Add("ping", "1", "", "x")
	f.Add("pong", "a\"b\\c", "\n\x00\x1f", "\u2028")
	f.Add("\xff", "\xe2\x82", "\xed\xa0\x80", "é😀")
	f.Fuzz(func(t *testing.T, typ, id, reqID, snapshot string) {
		env := wire.Envelope{Type: typ, ID: id, ReqID: reqID, TS: 7}
		line, err := wire.Encode(&env, &msg.SessionRestoreReq{SnapshotID: new(snapshot)})
		if err != nil {
			t.Fatal(err)
		}
		if bytes.ContainsAny(line, "\n\r") {
			t.Fatalf("line break inside %q", line)
		}
		var sc wire.Scanned
		if err := wire.Scan(line, &sc); err != nil {
			t.Fatalf("Scan(%q): %v", line, err)
		}
		want := wire.Envelope{Type: valid(typ), ID: valid(id), ReqID: valid(reqID), TS: 7, Proto: wire.ProtoVersion}
		if sc.Envelope != want {
			t.Fatalf("envelope %+v, want %+v", sc.Envelope, want)
		}
		if sc.Has("req_id") != (reqID != "" || typ == "error") {
			t.Fatalf("req_id present = %v for %q", sc.Has("req_id"), reqID)
		}
	})
}
