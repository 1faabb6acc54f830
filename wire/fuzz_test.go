package wire_test

import (
	"errors"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping","id":"1"}`,
		`{"type":"handshake/req","id":"h1","proto":"1.0","ts":1.5,"agent_id":"a","agent_caps":["tools"],"auth_token":"t"}`,
		`{"type":"handshake/resp","id":"1","req_id":"2","ok":true,"accepted_caps":[{"name":"x","enabled":true}],"max_parallel":4}`,
		`{"type":"session/snapshot/req","id":"s","target":"sql"}`,
		`{"type":"session/restore/req","id":"s","snapshot_id":"a\u00e9"}`,
		`{"type":"cancel","id":"c","req_id":"r"}`,
		`{"type":"shutdown","id":"x","timeout":2e1}`,
		`{"a":{"a":1,"\u0061":2}}`,
		`[1,2]`, `{}{}`, "{\"type\":\"ping\",\"id\":\"\xff\"}", `{"type":"ping","id":"1"} `,
	} {
		f.Add([]byte(s))
	}
	reg := msg.Registry()
	f.Fuzz(func(t *testing.T, line []byte) {
		var sc wire.Scanned
		_, m, err := reg.Decode(line, &sc)
		if err == nil {
			if m == nil {
				t.Fatal("nil message without error")
			}
			return
		}
		var we *wire.Error
		if !errors.As(err, &we) {
			t.Fatalf("error %T is not *wire.Error: %v", err, err)
		}
		if we.Code != wire.CodeParseError && we.Code != wire.CodeSchemaViolation {
			t.Fatalf("code %s: %v", we.Code, err)
		}
	})
}
