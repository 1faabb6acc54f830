package conformance_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// agreeSeeds are agent lines with a complete envelope, so that the two
// checkers can only disagree about the body.
var agreeSeeds = []string{
	`{"type":"handshake/req","id":"1","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["tools"],"auth_token":"t"}`,
	`{"type":"handshake/req","id":"1","proto":"1.0","ts":1,"agent_id":"a","agent_caps":[1],"auth_token":"t"}`,
	`{"type":"handshake/req","id":"1","proto":"1.0","ts":1,"agent_id":"a","auth_token":"t","AGENT_CAPS":[]}`,
	`{"type":"ping","id":"1","proto":"1.0","ts":1}`,
	`{"type":"cancel","id":"1","proto":"1.0","ts":1,"req_id":"r"}`,
	`{"type":"shutdown","id":"1","proto":"1.0","ts":1,"timeout":0.5}`,
	`{"type":"shutdown","id":"1","proto":"1.0","ts":1,"timeout":-0.5}`,
	`{"type":"session/snapshot/req","id":"1","proto":"1.0","ts":1,"target":"sql"}`,
	`{"type":"session/snapshot/req","id":"1","proto":"1.0","ts":1,"target":"disk"}`,
	`{"type":"session/restore/req","id":"1","proto":"1.0","ts":1,"snapshot_id":"s"}`,
	`{"type":"session/restore/req","id":"1","proto":"1.0","ts":1,"snapshot_id":""}`,
	`{"type":"session/info/req","id":"1","proto":"1.0","ts":1,"x":{"y":[]}}`,
	`{"type":"session/restore/req","id":"1","proto":"1.0","ts":1,"snapshot_id":"\ud800"}`,
	`{"type":"shutdown","id":"1","proto":"1.0","ts":1,"timeout":null}`,
	`{"type":"shutdown","id":"1","proto":"1.0","ts":1,"timeout":1e400}`,
	`{"type":"memory/store/req","id":"1","proto":"1.0","ts":1,"memory_id":"m","entries":[{"key":"k","content":"c","tier":"working","tags":null}]}`,
	`{"type":"memory/store/req","id":"1","proto":"1.0","ts":1,"memory_id":"m","entries":[null]}`,
	`{"type":"tool/list/req","id":"1","proto":"1.0","ts":1,"tags":[null]}`,
}

// TestAgreesWithDecode checks the seeds once in every test run: the fuzz
// target below explores from them.
func TestAgreesWithDecode(t *testing.T) {
	c := loadModule(t)
	for _, line := range agreeSeeds {
		checkAgreement(t, c, []byte(line))
	}
}

// FuzzAgreesWithDecode compares the host's decoder (wire.Decode with the
// generated models and validators) with the JSON Schema files on agent
// lines: where the envelope conforms, both must accept or both reject.
// A disagreement means the generated code and the schemas have drifted.
func FuzzAgreesWithDecode(f *testing.F) {
	for _, s := range agreeSeeds {
		f.Add([]byte(s))
	}
	c := loadModule(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		checkAgreement(t, c, line)
	})
}

func checkAgreement(t *testing.T, c *conformance.Checker, line []byte) {
	t.Helper()
	checkErr := c.CheckAgentLine(line)
	var v *conformance.Violation
	if errors.As(checkErr, &v) && strings.HasPrefix(v.Reason, "envelope") {
		return // Decode leaves proto and ts to the handshake and the kernel
	}
	var sc wire.Scanned
	_, _, decodeErr := msg.Registry().Decode(line, &sc)
	if (checkErr == nil) != (decodeErr == nil) && !knownGap(checkErr, decodeErr) {
		t.Fatalf("the schemas and the decoder disagree on %s\nschemas: %v\ndecoder: %v", line, checkErr, decodeErr)
	}
}

// knownGap reports the disagreement the decoder has with the schemas by
// design of its Go models, so the fuzz target looks for new ones: a number
// that no Go float64 or integer of the model can hold (1e400) is valid JSON
// Schema, but the host cannot represent it and rejects it. (null where the
// schema excludes it is refused at every depth: wire.Entry.NotNull and
// wire.Shape.)
func knownGap(checkErr, decodeErr error) bool {
	if checkErr == nil {
		var we *wire.Error
		return errors.As(decodeErr, &we) && strings.Contains(we.Message, "out of range")
	}
	return false
}
