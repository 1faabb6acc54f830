package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
)

// TestAEPFiles: aep's fixture and baseline files validate against their
// schemas, and the fixture decodes and encodes again to the same JSON, so
// the Go types hold every key it sets; aep's baseline is empty.
func TestAEPFiles(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(kittest.Dir(), "fixture.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := conformance.ParseFixture(raw)
	if err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(raw, &a)
	_ = json.Unmarshal(again, &b)
	if ja, _ := json.Marshal(a); !bytes.Equal(ja, asJSON(t, b)) {
		t.Fatalf("the fixture does not survive a round trip:\n%s\n%s", ja, asJSON(t, b))
	}
	bl, err := conformance.LoadBaseline(filepath.Join(kittest.Dir(), "baseline.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(bl.ExpectedFailures) != 0 {
		t.Fatalf("aep's baseline lists %v: aep ships an empty one", bl.ExpectedFailures)
	}
}

func asJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFixtureRefused: a fixture that does not follow its schema is
// refused with the reason, so a typo cannot quietly turn checks into
// skips.
func TestFixtureRefused(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"a misspelt key", `{"tool": {}}`, "tool"},
		{"a misspelt nested key", `{"tools": {"streamin": {"tool_name": "x"}}}`, "streamin"},
		{"no tool_name", `{"tools": {"call": {"arguments": {}}}}`, "tool_name"},
		{"argv not a list", `{"proc": {"echo": "cat"}}`, "echo"},
		{"a bad checksum", `{"env": {"data_part": {"path": "a", "source": "a", "sha256": "x", "size": 1}}}`, "sha256"},
		{"not JSON", `{`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conformance.ParseFixture([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestBaselineRefused: a baseline naming no check of the kit, or one
// twice, is refused.
func TestBaselineRefused(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown check", `{"expected_failures": [{"check": "tools.lst", "reason": "r"}]}`, "no such check: tools.lst"},
		{"twice", `{"expected_failures": [{"check": "ping", "reason": "r"}, {"check": "ping", "reason": "s"}]}`, "twice"},
		{"no reason", `{"expected_failures": [{"check": "ping"}]}`, "reason"},
		{"no list", `{}`, "expected_failures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conformance.ParseBaseline([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func FuzzParseFixture(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join(kittest.Dir(), "fixture.json")); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"tools": {"call": {"tool_name": "x", "data": [1, {"a": null}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fx, err := conformance.ParseFixture(b)
		if err == nil && fx == nil {
			t.Fatal("no fixture and no error")
		}
	})
}

func FuzzParseBaseline(f *testing.F) {
	f.Add([]byte(`{"expected_failures": [{"check": "ping", "reason": "r"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		bl, err := conformance.ParseBaseline(b)
		if err == nil && bl == nil {
			t.Fatal("no baseline and no error")
		}
	})
}

// fakeConn is a host that answers each line with what answer says.
type fakeConn struct {
	answer func(line []byte) [][]byte
	out    chan []byte
	closed chan struct{}
}

func fakeTarget(answer func(line []byte) [][]byte) conformance.Target {
	return conformance.Target{Name: "fake", Dial: func(context.Context) (conformance.Conn, error) {
		return &fakeConn{answer: answer, out: make(chan []byte, 64), closed: make(chan struct{})}, nil
	}}
}

func (c *fakeConn) Send(_ context.Context, line []byte) error {
	for _, l := range c.answer(line) {
		c.out <- l
	}
	return nil
}

func (c *fakeConn) Recv(ctx context.Context) ([]byte, error) {
	select {
	case l := <-c.out:
		return l, nil
	case <-c.closed:
		return nil, errors.New("closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *fakeConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

// TestSilentHost: a host that accepts connections and never answers is
// judged in bounded time: the handshake fails, and every other check
// skips saying so, rather than each waiting for its replies.
func TestSilentHost(t *testing.T) {
	start := time.Now()
	rep, err := conformance.Run(context.Background(), fakeTarget(func([]byte) [][]byte { return nil }), conformance.Options{Token: "t", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || !strings.Contains(strings.Join(rep.Failed(), " "), conformance.CheckHandshake) {
		t.Fatalf("failed %v, want handshake", rep.Failed())
	}
	for _, r := range rep.Results {
		// transports.agree is the comparison's: a single run always
		// skips it, saying so.
		if r.Status == conformance.Skip && r.ID != conformance.CheckHandshake && r.ID != conformance.CheckTransportsAgree && !strings.Contains(r.Note, "handshake") {
			t.Errorf("%s skipped: %q", r.ID, r.Note)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestGarbageHost: a host that answers every line with something that is
// not a message fails host.strict, and the kit neither panics nor hangs.
func TestGarbageHost(t *testing.T) {
	answers := [][]byte{[]byte("not json"), []byte(`{"type":"pong"}`), []byte(`[1,2]`), []byte(`{"type":"handshake/resp","req_id":7,"ok":"yes"}`)}
	i := 0
	rep, err := conformance.Run(context.Background(), fakeTarget(func([]byte) [][]byte {
		i++
		return [][]byte{answers[i%len(answers)]}
	}), conformance.Options{Token: "t", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rep.Result(conformance.CheckHostStrict); r.Status != conformance.Fail {
		t.Fatalf("host.strict %s", r.Status)
	}
}

// TestContractDocListsChecks: docs/contract.md's table names every check
// of the kit with its level, so the page another host's author reads
// stays the kit's.
func TestContractDocListsChecks(t *testing.T) {
	doc, err := os.ReadFile("../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conformance.Checks() {
		if row := "| `" + c.ID + "` | " + string(c.Level) + " | "; !bytes.Contains(doc, []byte(row)) {
			t.Errorf("docs/contract.md lacks the row %q", row)
		}
	}
}
