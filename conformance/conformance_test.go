package conformance_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/wire"
)

func loadModule(t testing.TB) *conformance.Checker {
	t.Helper()
	c, err := conformance.Module()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The embedded schemas and the schemas/ directory of the source tree are
// the same files, so Module and Load(SchemaDir()) check alike.
func TestModuleIsTheSchemaDir(t *testing.T) {
	dir, err := conformance.SchemaDir()
	if err != nil {
		t.Fatal(err)
	}
	fromDir, err := conformance.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loadModule(t).Types(), fromDir.Types(); !slices.Equal(got, want) {
		t.Fatalf("Module types %v, directory types %v", got, want)
	}
	if _, err := conformance.Module(os.DirFS(dir)); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Fatalf("the same files twice: %v", err)
	}
}

func TestLoadModuleSchemas(t *testing.T) {
	c := loadModule(t)
	types := c.Types()
	for _, want := range []string{"handshake/req", "handshake/resp", "ping", "pong", "error", "cancel", "shutdown",
		"session/info/req", "session/info/resp", "session/snapshot/req", "session/snapshot/resp"} {
		if !slices.Contains(types, want) {
			t.Errorf("Types() = %v, missing %s", types, want)
		}
	}
}

// TestLoadErrors checks that broken schema directories fail to load with a
// message that names the problem, and that nothing is fetched over the
// network.
func TestLoadErrors(t *testing.T) {
	envelope := `{"$id":"https://aephost.dev/schemas/envelope.json","$defs":{"Envelope":{"type":"object"}}}`
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no files", map[string]string{}, "no schema files"},
		{"not JSON", map[string]string{"envelope.json": `{`}, "envelope.json"},
		{"no $id", map[string]string{"envelope.json": `{"$defs":{}}`}, "no $id"},
		{"same $id twice", map[string]string{"envelope.json": envelope, "other.json": envelope}, "same $id"},
		{"no envelope", map[string]string{"core.json": `{"$id":"https://aephost.dev/schemas/core.json"}`}, "no envelope.json"},
		{"network $ref", map[string]string{"envelope.json": envelope,
			"a.json": `{"$id":"https://aephost.dev/schemas/a.json","$defs":{"A":{"x-aep-type":"a/b/req","x-aep-kind":"request","$ref":"https://example.com/remote.json"}}}`},
			"no loading over the network"},
		{"unresolved $ref", map[string]string{"envelope.json": envelope,
			"a.json": `{"$id":"https://aephost.dev/schemas/a.json","$defs":{"A":{"x-aep-type":"a/b/req","x-aep-kind":"request","$ref":"missing.json#/$defs/X"}}}`},
			"missing.json"},
		{"type defined twice", map[string]string{"envelope.json": envelope,
			"a.json": `{"$id":"https://aephost.dev/schemas/a.json","$defs":{"A":{"x-aep-type":"a/b/req","x-aep-kind":"request"},"B":{"x-aep-type":"a/b/req","x-aep-kind":"request"}}}`},
			`type "a/b/req" defined`},
		{"alias shadows a type", map[string]string{"envelope.json": envelope,
			"a.json": `{"$id":"https://aephost.dev/schemas/a.json","$defs":{"A":{"x-aep-type":"a/b/req","x-aep-kind":"request"},"B":{"x-aep-type":"a/c/req","x-aep-kind":"request","x-aep-aliases":["a/b/req"]}}}`},
			`type "a/b/req" defined`},
		{"bad kind", map[string]string{"envelope.json": envelope,
			"a.json": `{"$id":"https://aephost.dev/schemas/a.json","$defs":{"A":{"x-aep-type":"a/b/req","x-aep-kind":"query"}}}`},
			`x-aep-kind "query"`},
		{"invalid schema", map[string]string{"envelope.json": envelope,
			"a.json": `{"$id":"https://aephost.dev/schemas/a.json","$defs":{"A":{"x-aep-type":"a/b/req","x-aep-kind":"request","type":"strin"}}}`},
			"a.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := conformance.Load(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestAliasesAndCustomEvents loads a small schema directory of its own:
// aliases (x-aep-aliases) are accepted as types, and a def with
// x-aep-kind "event" and no type becomes the body of every "<ns>/event".
func TestAliasesAndCustomEvents(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"envelope.json": `{"$id":"https://x.test/envelope.json","$defs":{"Envelope":{"type":"object","required":["type","id"],"properties":{"type":{"type":"string"},"id":{"type":"string"}}}}}`,
		"data.json": `{"$id":"https://x.test/data.json","x-aep-namespace":"data","$defs":{
			"AddReq":{"x-aep-type":"data/add/req","x-aep-kind":"request","x-aep-aliases":["data/add"],"type":"object","required":["n"],"properties":{"n":{"$ref":"common.json#/$defs/N"}}},
			"AddResp":{"x-aep-type":"data/add/resp","x-aep-kind":"reply","type":"object"},
			"Ev":{"x-aep-kind":"event","type":"object","required":["step"]}}}`,
		"common.json": `{"$id":"https://x.test/common.json","$defs":{"N":{"type":"integer","minimum":1}}}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := conformance.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host bool
		line string
		want string // "" for conforming
	}{
		{false, `{"type":"data/add/req","id":"1","n":2}`, ""},
		{false, `{"type":"data/add","id":"1","n":2}`, ""},
		{false, `{"type":"data/add","id":"1","n":0}`, "/n"},
		{true, `{"type":"data/add/resp","id":"2","req_id":"1"}`, ""},
		{true, `{"type":"data/event","id":"2","req_id":"1","step":3}`, ""},
		{true, `{"type":"data/event","id":"2","req_id":"1"}`, "step"},
		{true, `{"type":"other/event","id":"2","req_id":"1","step":3}`, "unknown type"},
	}
	for _, tt := range tests {
		check := c.CheckAgentLine
		if tt.host {
			check = c.CheckHostLine
		}
		err := check([]byte(tt.line))
		if tt.want == "" && err != nil {
			t.Errorf("%s: %v", tt.line, err)
		}
		if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: err = %v, want one containing %q", tt.line, err, tt.want)
		}
	}
}

// env returns the envelope fields of a line, to be followed by body fields.
func env(typ, reqID string) string {
	s := `{"type":"` + typ + `","id":"m1","proto":"1.0","ts":1712345678.5`
	if reqID != "" {
		s += `,"req_id":"` + reqID + `"`
	}
	return s
}

func TestCheckHostLine(t *testing.T) {
	c := loadModule(t)
	tests := []struct {
		name string
		line string
		want string // a substring of the violation; "" for a conforming line
	}{
		// Conforming lines.
		{"handshake/resp", env("handshake/resp", "h") + `,"ok":true,"accepted_caps":[{"name":"tools","enabled":true}],"session_id":"s","max_parallel":4}`, ""},
		{"failed handshake", env("handshake/resp", "h") + `,"ok":false,"accepted_caps":[],"max_parallel":4,"reason":"bad token","error":{"code":"unauthorized","message":"m","retryable":false}}`, ""},
		{"pong", env("pong", "p") + `,"uptime_seconds":12.5}`, ""},
		{"error", env("error", "x") + `,"code":"schema_violation","message":"field \"target\"","detail":{"field":"target"},"retryable":false}`, ""},
		{"error for an unreadable id", env("error", "") + `,"req_id":"","code":"parse_error","message":"m","retryable":false}`, ""},
		{"snapshot", env("session/snapshot/resp", "s") + `,"snapshot_id":"snap1","bytes":10,"target":"sql"}`, ""},
		{"session event", env("session/event", "s") + `,"kind":"progress","data":{"pct":50,"message":"half"},"seq":0}`, ""},
		{"unknown fields are ignored", env("pong", "p") + `,"uptime_seconds":1,"future":[1,{"x":null}]}`, ""},
		{"trailing newline", env("pong", "p") + `,"uptime_seconds":1}` + "\n", ""},

		// Framing.
		{"not an object", `[1,2]`, "not one JSON object"},
		{"trailing data", env("pong", "p") + `,"uptime_seconds":1}{}`, "not one JSON object"},
		{"duplicate keys", env("pong", "p") + `,"uptime_seconds":1,"uptime_seconds":2}`, "duplicate"},
		{"invalid UTF-8", env("error", "x") + ",\"code\":\"c\",\"message\":\"\xff\",\"retryable\":false}", "UTF-8"},
		{"line break inside", `{"type":"pong",` + "\n" + `"id":"1"}`, "line break"},
		{"two lines", env("pong", "p") + `,"uptime_seconds":1}` + "\n" + env("pong", "p") + `,"uptime_seconds":1}` + "\n", "line break"},

		// Envelope.
		{"no proto", `{"type":"pong","id":"1","ts":1,"req_id":"p","uptime_seconds":1}`, "proto"},
		{"wrong proto", `{"type":"pong","id":"1","proto":"2.0","ts":1,"req_id":"p","uptime_seconds":1}`, "/proto"},
		{"ts a string", `{"type":"pong","id":"1","proto":"1.0","ts":"now","req_id":"p","uptime_seconds":1}`, "/ts"},
		{"empty id", `{"type":"pong","id":"","proto":"1.0","ts":1,"req_id":"p","uptime_seconds":1}`, "/id"},
		{"no type", `{"id":"1","proto":"1.0","ts":1,"req_id":"p"}`, "type"},
		{"req_id a number", env("pong", "") + `,"req_id":5,"uptime_seconds":1}`, "/req_id"},

		// Replies, errors and events answer a request.
		{"no req_id", env("pong", "") + `,"uptime_seconds":1}`, "no req_id"},
		{"empty req_id", env("pong", "") + `,"req_id":"","uptime_seconds":1}`, "empty req_id"},
		{"event without req_id", env("session/event", "") + `,"kind":"log","data":{},"seq":1}`, "no req_id"},

		// Types.
		{"unknown type", env("nope/x/resp", "r") + `}`, "unknown type"},
		{"agent-only type", env("ping", "r") + `}`, "never sends request messages"},
		{"notification", env("cancel", "r") + `}`, "never sends notification messages"},
		{"event of no namespace", env("nothing/event", "r") + `,"kind":"log","data":{},"seq":0}`, "unknown type"},

		// Bodies.
		{"missing field", env("pong", "p") + `}`, "uptime_seconds"},
		{"wrong field type", env("handshake/resp", "h") + `,"ok":true,"accepted_caps":[],"max_parallel":"4"}`, "/max_parallel"},
		{"fraction for integer", env("handshake/resp", "h") + `,"ok":true,"accepted_caps":[],"max_parallel":4.5}`, "/max_parallel"},
		{"nested missing field", env("handshake/resp", "h") + `,"ok":true,"accepted_caps":[{"name":"tools"}],"max_parallel":4}`, "/accepted_caps/0"},
		{"nested error body", env("handshake/resp", "h") + `,"ok":false,"accepted_caps":[],"max_parallel":4,"error":{"code":"x"}}`, "/error"},
		{"enum", env("session/snapshot/resp", "s") + `,"snapshot_id":"a","bytes":1,"target":"disk"}`, "/target"},
		{"null for a string", env("error", "x") + `,"code":null,"message":"m","retryable":false}`, "/code"},
		{"event kind", env("session/event", "s") + `,"kind":"shout","data":{},"seq":0}`, "/kind"},
		{"event seq", env("session/event", "s") + `,"kind":"log","data":{},"seq":-1}`, "/seq"},
		{"event data", env("session/event", "s") + `,"kind":"log","seq":0}`, "data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CheckHostLine([]byte(tt.line))
			checkResult(t, tt.line, err, tt.want)
		})
	}
}

func TestCheckAgentLine(t *testing.T) {
	c := loadModule(t)
	tests := []struct {
		name string
		line string
		want string
	}{
		{"handshake", env("handshake/req", "") + `,"agent_id":"a","agent_caps":["tools"],"auth_token":"t"}`, ""},
		{"ping", env("ping", "") + `}`, ""},
		{"cancel", env("cancel", "") + `,"req_id":"r"}`, ""},
		{"shutdown", env("shutdown", "") + `,"timeout":0}`, ""},
		{"snapshot with default target", env("session/snapshot/req", "") + `}`, ""},
		{"req_id is allowed", env("ping", "x") + `}`, ""},

		{"missing proto", `{"type":"ping","id":"1","ts":1}`, "proto"},
		{"missing ts", `{"type":"ping","id":"1","proto":"1.0"}`, "ts"},
		{"missing id", `{"type":"ping","proto":"1.0","ts":1}`, "id"},
		{"host-only type", env("pong", "") + `,"uptime_seconds":1}`, "never sends reply messages"},
		{"error", env("error", "") + `,"code":"x","message":"m","retryable":false}`, "never sends reply messages"},
		{"event", env("session/event", "") + `,"kind":"log","data":{},"seq":0}`, "never sends event messages"},
		{"unknown type", env("tool/nope/req", "") + `}`, "unknown type"},
		{"missing agent_caps", env("handshake/req", "") + `,"agent_id":"a","auth_token":"t"}`, "agent_caps"},
		{"agent_caps element", env("handshake/req", "") + `,"agent_id":"a","agent_caps":[1],"auth_token":"t"}`, "/agent_caps/0"},
		{"enum", env("session/snapshot/req", "") + `,"target":"disk"}`, "/target"},
		{"minimum", env("shutdown", "") + `,"timeout":-1}`, "/timeout"},
		{"minLength", env("session/restore/req", "") + `,"snapshot_id":""}`, "/snapshot_id"},
		{"duplicate", env("ping", "") + `,"id":"2"}`, "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CheckAgentLine([]byte(tt.line))
			checkResult(t, tt.line, err, tt.want)
		})
	}
}

func checkResult(t *testing.T, line string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("%s\n%v", line, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s conforms, want a violation containing %q", line, want)
	}
	var v *conformance.Violation
	if !errors.As(err, &v) {
		t.Fatalf("error %T is not a *conformance.Violation", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("violation %q does not contain %q", err, want)
	}
}

// TestViolationCause checks that a framing violation keeps the scanner's
// error as its cause.
func TestViolationCause(t *testing.T) {
	c := loadModule(t)
	err := c.CheckHostLine([]byte(`{}{}`))
	if !errors.Is(err, wire.ErrSyntax) {
		t.Errorf("err = %v, want it to wrap wire.ErrSyntax", err)
	}
}

// fakeTB records what a Recorder reports, so a failing line can be tested
// without failing this test. Methods a Recorder does not call panic through
// the nil embedded TB.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

func (f *fakeTB) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestRecorder(t *testing.T) {
	good := []byte(env("pong", "p") + `,"uptime_seconds":1}`)
	goodAgent := []byte(env("ping", "") + `}`)
	tests := []struct {
		name       string
		host       [][]byte
		agent      [][]byte
		violations int
		want       string
	}{
		{"conforming", [][]byte{good, good}, [][]byte{goodAgent}, 0, ""},
		{"host sends a request", [][]byte{goodAgent}, nil, 1, "host line"},
		{"agent sends a reply", nil, [][]byte{good}, 1, "agent line"},
		{"several", [][]byte{good, []byte(`x`), []byte(`{}`)}, [][]byte{[]byte(`[]`)}, 3, "not one JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ftb := &fakeTB{}
			rec := conformance.NewRecorder(ftb)
			for _, l := range tt.host {
				rec.Host(l)
			}
			for _, l := range tt.agent {
				rec.Agent(l)
			}
			if h, a := rec.Counts(); h != len(tt.host) || a != len(tt.agent) {
				t.Errorf("Counts() = %d, %d; want %d, %d", h, a, len(tt.host), len(tt.agent))
			}
			if got := len(rec.Violations()); got != tt.violations || len(ftb.errs) != tt.violations {
				t.Errorf("%d violations and %d reports, want %d: %v", got, len(ftb.errs), tt.violations, ftb.errs)
			}
			if tt.want != "" && !strings.Contains(strings.Join(ftb.errs, "\n"), tt.want) {
				t.Errorf("reports %v do not contain %q", ftb.errs, tt.want)
			}
			// After the test, lines are no longer checked or reported.
			ftb.finish()
			rec.Host([]byte(`x`))
			if len(ftb.errs) != tt.violations {
				t.Errorf("a line after the test was reported: %v", ftb.errs)
			}
		})
	}
}

// TestRecorderConcurrent hands lines over from many goroutines, as a
// transport's reader and writer loops do; run with -race.
func TestRecorderConcurrent(t *testing.T) {
	ftb := &fakeTB{}
	rec := conformance.NewRecorder(ftb)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				rec.Host([]byte(env("pong", fmt.Sprint(i, j)) + `,"uptime_seconds":1}`))
				rec.Agent([]byte(env("ping", "") + `}`))
			}
			rec.Host([]byte(`{}`))
		}()
	}
	wg.Wait()
	if h, a := rec.Counts(); h != 8*51 || a != 8*50 {
		t.Errorf("Counts() = %d, %d", h, a)
	}
	if len(rec.Violations()) != 8 || len(ftb.errs) != 8 {
		t.Errorf("%d violations, %d reports; want 8", len(rec.Violations()), len(ftb.errs))
	}
	ftb.finish()
}

// TestRecorderReal uses a Recorder on this test itself with conforming
// lines only: what a transport test does.
func TestRecorderReal(t *testing.T) {
	rec := conformance.NewRecorder(t)
	rec.Agent([]byte(env("handshake/req", "") + `,"agent_id":"a","agent_caps":[],"auth_token":"t"}`))
	rec.Host([]byte(env("handshake/resp", "m1") + `,"ok":true,"accepted_caps":[],"session_id":"s","max_parallel":4}`))
	if h, a := rec.Counts(); h != 1 || a != 1 {
		t.Errorf("Counts() = %d, %d", h, a)
	}
}
