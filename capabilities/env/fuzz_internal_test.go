package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// actionSeeds are the actions of the episode, snapshot and example tests,
// and the numbers where a hand-written scalar decoder and JSON could part:
// signs, leading zeros, exponents, fractions, overflow, Go-only syntax
// (hex, underscores, Inf, NaN), null and whitespace.
var actionSeeds = []string{
	"1", "2", "0", "5", "5000", "500", "250", "750", "100", "-1", `"five"`,
	"-0", "1.0", "1e2", "1E+2", "0.5", "-0.0", "9223372036854775807", "9223372036854775808",
	"-9223372036854775809", "1e400", "1e-400", "+5", "05", "0x10", "1_000", "Inf", "+Inf", "NaN",
	"0x1p4", ".5", "5.", "null", "true", "false", "True", " 5", "5 ", "\t1\n", "",
	`{"dir":"left","n":2}`, `{"dir":"up"}`, `{"dir":"left","n":-1}`, "[1,2]", `{"dir":"left","dir":"right"}`,
	"\x00", "\xff",
}

// fuzzMove is a struct action with a Validate method, as environments with
// structured action spaces declare them.
type fuzzMove struct {
	Dir string `json:"dir"`
	N   int    `json:"n"`
}

func (m *fuzzMove) Validate() error {
	if m.Dir != "left" && m.Dir != "right" {
		return fmt.Errorf("dir %q: want left or right", m.Dir)
	}
	if m.N < 0 {
		return errors.New("n must not be negative")
	}
	return nil
}

// FuzzDecodeAction checks how actions reach an environment on the hot
// path: as raw bytes (the direct codec hands them over unparsed) and as
// the action of an env/step/req line. The scalar fast paths of decodeAction
// must agree with encoding/json, which decodes every other action type:
// what they accept JSON accepts with the same value, and what JSON accepts
// in the form a decoded line carries (no surrounding space; null aside,
// which the fast paths refuse) they accept. A typed step either runs or
// fails with ErrBadAction, never with a panic.
func FuzzDecodeAction(f *testing.F) {
	for _, s := range actionSeeds {
		f.Add([]byte(s))
	}
	reg := msg.Registry()
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkAction(t, raw)
		line := []byte(`{"type":"env/step/req","id":"f","proto":"1.0","ts":1,"episode_id":"e","action":` + string(raw) + `}`)
		var sc wire.Scanned
		if _, m, err := reg.Decode(line, &sc); err == nil {
			checkAction(t, m.(*msg.EnvStepReq).Action)
		}
	})
}

func checkAction(t *testing.T, raw json.RawMessage) {
	t.Helper()
	agrees[int](t, raw)
	agrees[int64](t, raw)
	agrees[float64](t, raw)
	agrees[bool](t, raw)
	agrees[string](t, raw)

	g := typed[int]{&Guess{}}
	seed := int64(7)
	if _, err := g.reset(context.Background(), &seed, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := g.step(context.Background(), raw); err != nil && !errors.Is(err, ErrBadAction) {
		t.Fatalf("guess step %q: %v does not wrap ErrBadAction", raw, err)
	} else if err == nil && !json.Valid(st.Observation) {
		t.Fatalf("guess step %q: observation %q is not JSON", raw, st.Observation)
	}
	mv := typed[fuzzMove]{moveEnv{}}
	st, err := mv.step(context.Background(), raw)
	if err != nil {
		if !errors.Is(err, ErrBadAction) {
			t.Fatalf("move step %q: %v does not wrap ErrBadAction", raw, err)
		}
		return
	}
	var m fuzzMove
	if json.Unmarshal(st.Observation, &m) != nil || m.Validate() != nil {
		t.Fatalf("move step %q ran with an invalid action %s", raw, st.Observation)
	}
}

// agrees compares decodeAction into an A with encoding/json.
func agrees[A comparable](t *testing.T, raw json.RawMessage) {
	t.Helper()
	var fast, ref A
	errFast := decodeAction(raw, &fast)
	errRef := json.Unmarshal(raw, &ref)
	if errFast == nil && (errRef != nil || fast != ref) {
		t.Fatalf("%T action %q: decoded as %v, encoding/json says %v, %v", fast, raw, fast, ref, errRef)
	}
	wireForm := len(raw) > 0 && len(bytes.TrimSpace(raw)) == len(raw) && string(raw) != "null"
	if errFast != nil && errRef == nil && wireForm {
		t.Fatalf("%T action %q: refused (%v), encoding/json decodes %v", fast, raw, errFast, ref)
	}
}

// moveEnv echoes the action it was given, so the test sees what ran.
type moveEnv struct{}

func (moveEnv) Reset(context.Context, *int64, json.RawMessage) (Obs, error) { return Obs{}, nil }
func (moveEnv) Step(_ context.Context, a fuzzMove) (Step, error) {
	return Step{Observation: JSON(a)}, nil
}
func (moveEnv) Render() (string, error) { return "", nil }
func (moveEnv) Close() error            { return nil }
