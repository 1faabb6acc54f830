package openenv_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/openenv"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

// sleepy is an environment whose step sleeps for the action's
// milliseconds (not Inline: the plugin watches it), for requests that run
// long on a connection.
type sleepy struct{}

func (sleepy) Reset(ctx context.Context, seed *int64, opts json.RawMessage) (env.Obs, error) {
	return env.Obs{Observation: env.JSON(0)}, nil
}

func (sleepy) Step(ctx context.Context, ms int) (env.Step, error) {
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
	case <-ctx.Done():
		return env.Step{}, ctx.Err()
	}
	return env.Step{Observation: env.JSON(ms), Reward: 0.5}, nil
}

func (sleepy) Render() (string, error) { return "", nil }
func (sleepy) Close() error            { return nil }

func init() {
	env.Register(env.Spec{Name: "openenv-test-sleepy", Description: "sleeps the action's milliseconds",
		ActionSpace:      json.RawMessage(`{"type":"integer","minimum":0,"$defs":{"unused":{"type":"string"}}}`),
		ObservationSpace: json.RawMessage(`{"type":"integer"}`)},
		func() env.Env[int] { return sleepy{} })
}

// frameOf decodes the next frame of w, failing the test on anything but
// a JSON object.
func frameOf(t testing.TB, w *wsClient) map[string]any {
	t.Helper()
	d, err := w.recv()
	if err != nil {
		t.Fatalf("no frame: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(d, &m); err != nil {
		t.Fatalf("frame %s: %v", d, err)
	}
	return m
}

func errData(t testing.TB, m map[string]any) map[string]any {
	t.Helper()
	if m["type"] != "error" {
		t.Fatalf("want an error frame, got %v", m)
	}
	return m["data"].(map[string]any)
}

// closedWith waits for the connection's end and returns its close status.
func closedWith(t testing.TB, w *wsClient) websocket.StatusCode {
	t.Helper()
	d, err := w.recv()
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("want the connection closed, got frame %s, err %v", d, err)
	}
	return ce.Code
}

func resetLine(tok string) string {
	return `{"type":"reset","data":{"seed":1,"aep_token":"` + tok + `"}}`
}

// TestNothingBeforeTheToken: before the token only /health, /schema and
// /metadata answer; every first message without it, or with a wrong one,
// gets OpenEnv's error frame and the connection closes; the token is
// taken from the first reset's data or a bearer header, never from a URL.
func TestNothingBeforeTheToken(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, path := range []string{"/health", "/schema", "/metadata", "/openapi.json"} {
		if st, _, b := httpDo(t, "GET", r.base("guess")+path, "", nil); st != 200 {
			t.Errorf("GET %s without a token: %d %s", path, st, b)
		}
	}
	first := []string{
		`{"type":"reset","data":{"seed":1}}`,
		`{"type":"reset"}`,
		`{"type":"step","data":{"action":1}}`,
		`{"type":"state"}`,
		`{"type":"mcp","data":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}`,
		`not json`,
		`{"type":"nope"}`,
		resetLine("wrong-token-0123456789"),
	}
	for _, line := range first {
		w := dial(t, r.wsURL("guess"), nil)
		w.send(line)
		d := errData(t, frameOf(t, w))
		if d["code"] != "SESSION_ERROR" || d["aep_code"] != "unauthorized" {
			t.Errorf("%s: %v", line, d)
		}
		if code := closedWith(t, w); code != websocket.StatusPolicyViolation {
			t.Errorf("%s: closed with %v", line, code)
		}
	}
	// In the URL the token is nothing: the query is not read.
	w := dial(t, r.wsURL("guess")+"?aep_token="+token, nil)
	w.send(`{"type":"reset","data":{}}`)
	if d := errData(t, frameOf(t, w)); d["aep_code"] != "unauthorized" {
		t.Errorf("token in the URL: %v", d)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/reset", `{}`}, {"POST", "/step", `{"action":{"action":1}}`}, {"GET", "/state", ""},
		{"POST", "/reset?aep_token=" + token, `{}`},
	} {
		st, hdr, b := httpDo(t, c.method, r.base("guess")+c.path, c.body, nil)
		if st != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s without a token: %d %s", c.method, c.path, st, b)
		}
	}
	// A bearer header on the upgrade: the first message needs no token.
	w = dial(t, r.wsURL("guess"), bearerHeader(token))
	if m := w.call(`{"type":"state"}`); m["type"] != "state" {
		t.Fatalf("state with a bearer header: %v", m)
	}
	if m := w.call(`{"type":"reset","data":{"seed":1}}`); m["type"] != "observation" {
		t.Fatalf("reset with a bearer header: %v", m)
	}
	// A later reset may carry the token again (reset(aep_token=…) every
	// episode); it is consumed, never given to the environment.
	if m := w.call(resetLine(token)); m["type"] != "observation" {
		t.Fatalf("second reset with aep_token: %v", m)
	}
	// Unknown environments and routes.
	if st, _, _ := httpDo(t, "GET", r.base("nope")+"/health", "", nil); st != 404 {
		t.Errorf("unknown environment: %d", st)
	}
}

// TestEdgeRules: the HTTP transport's edge applies to the face: foreign
// Origin and Host are refused before the upgrade, an oversized frame is
// answered and the session goes on, an oversized body is 413, and
// connections waiting for their token are sessions of the pending pool,
// the oldest evicted and told.
func TestEdgeRules(t *testing.T) {
	r := newRig(t, rigOpts{edit: func(c *server.Config) {
		c.Server.Limits.MaxMessageBytes = 4096
		c.Server.Limits.MaxPendingSessions = 2
	}})
	ctx := context.Background()
	_, resp, err := websocket.Dial(ctx, r.wsURL("guess"), &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: %v %v", resp, err)
	}
	req, _ := http.NewRequest("GET", r.base("guess")+"/health", nil)
	req.Host = "rebind.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign host: %v %v", resp, err)
	}
	if st, _, b := httpDo(t, "POST", r.base("guess")+"/reset", `{"x":"`+strings.Repeat("a", 5000)+`"}`, bearerHeader(token)); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %s", st, b)
	}

	w := dial(t, r.wsURL("guess"), nil)
	w.call(resetLine(token))
	d := errData(t, w.call(`{"type":"step","data":{"action":"`+strings.Repeat("a", 5000)+`"}}`))
	if d["code"] != "VALIDATION_ERROR" || d["aep_code"] != "parse_error" || d["aep_reason"] != "too_large" {
		t.Fatalf("oversized frame: %v", d)
	}
	if m := w.call(`{"type":"step","data":{"action":50}}`); m["type"] != "observation" {
		t.Fatalf("after an oversized frame: %v", m)
	}

	// Pending pool of 2: a third connection without its token evicts the
	// oldest, which is told before its socket closes; the handshaken
	// session above is not in the pool and goes on.
	p1 := dial(t, r.wsURL("guess"), nil)
	waitFor(t, func() bool { return r.h.PendingSessions() == 1 })
	dial(t, r.wsURL("guess"), nil)
	waitFor(t, func() bool { return r.h.PendingSessions() == 2 })
	dial(t, r.wsURL("guess"), nil)
	if d := errData(t, frameOf(t, p1)); d["code"] != "SESSION_ERROR" {
		t.Fatalf("evicted: %v", d)
	}
	closedWith(t, p1)
	if m := w.call(`{"type":"step","data":{"action":51}}`); m["type"] != "observation" {
		t.Fatalf("the live session after the evictions: %v", m)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10s")
}

// TestCapacity: the host's max_sessions and a tenant's total of sessions
// are OpenEnv's capacity error, with its counts, and the socket closes.
func TestCapacity(t *testing.T) {
	secret := "tenant-cap-secret-0123"
	sum := sha256.Sum256([]byte(secret))
	r := newRig(t, rigOpts{edit: func(c *server.Config) {
		c.Server.Limits.MaxSessions = 2
		c.Server.Tenants = []server.TenantConfig{{Name: "small", SecretSHA256: []string{hex.EncodeToString(sum[:])},
			Capabilities: []string{"env"}, Totals: server.TenantTotals{Sessions: 1}}}
	}})
	a := dial(t, r.wsURL("guess"), nil)
	a.call(resetLine(secret))
	b := dial(t, r.wsURL("guess"), nil)
	b.send(resetLine(secret))
	d := errData(t, frameOf(t, b))
	if d["code"] != "CAPACITY_REACHED" || d["aep_reason"] != "tenant_sessions" || d["max_sessions"] != 1.0 || d["active_sessions"] != 1.0 {
		t.Fatalf("tenant total: %v", d)
	}
	if code := closedWith(t, b); code != websocket.StatusTryAgainLater {
		t.Fatalf("closed with %v", code)
	}
	c := dial(t, r.wsURL("guess"), nil)
	c.call(resetLine(token))
	e := dial(t, r.wsURL("guess"), nil)
	e.send(resetLine(token))
	d = errData(t, frameOf(t, e))
	if d["code"] != "CAPACITY_REACHED" || d["max_sessions"] != 2.0 || d["active_sessions"] != 2.0 ||
		d["message"] != "Server at capacity: 2/2 sessions active. Cannot accept new connections." {
		t.Fatalf("host limit: %v", d)
	}
	// A slot freed by a close is taken again.
	a.send(`{"type":"close"}`)
	closedWith(t, a)
	waitFor(t, func() bool { return r.h.LiveSessions() == 1 })
	f := dial(t, r.wsURL("guess"), nil)
	if m := f.call(resetLine(secret)); m["type"] != "observation" {
		t.Fatalf("after a close: %v", m)
	}
}

// TestTenantsAndIsolation: the token picks the tenant; a tenant without
// env gets OpenEnv's factory error; two connections are two sessions
// whose episodes never meet; audit lines carry the tenant and never its
// secret, nor does the log.
func TestTenantsAndIsolation(t *testing.T) {
	withEnv, without := "tenant-env-secret-4d2a", "tenant-tools-secret-9e1c"
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	r := newRig(t, rigOpts{edit: func(c *server.Config) {
		c.Server.Tenants = []server.TenantConfig{
			{Name: "lab", SecretSHA256: []string{hash(withEnv)}, Capabilities: []string{"env"}},
			{Name: "ops", SecretSHA256: []string{hash(without)}, Capabilities: []string{"tools"}},
		}
	}})
	w := dial(t, r.wsURL("guess"), nil)
	w.send(resetLine(without))
	d := errData(t, frameOf(t, w))
	if d["code"] != "FACTORY_ERROR" || d["factory_name"] != "guess" || d["aep_code"] != "capability_missing" {
		t.Fatalf("tenant without env: %v", d)
	}
	if st, _, b := httpDo(t, "POST", r.base("guess")+"/reset", `{}`, bearerHeader(without)); st != http.StatusForbidden {
		t.Fatalf("HTTP reset of a tenant without env: %d %s", st, b)
	}

	a, b := dial(t, r.wsURL("guess"), nil), dial(t, r.wsURL("guess"), nil)
	a.call(resetLine(withEnv))
	b.call(`{"type":"reset","data":{"seed":1,"aep_token":"` + token + `","high":5}}`)
	a.call(`{"type":"step","data":{"action":1}}`)
	sa, sb := a.call(`{"type":"state"}`)["data"].(map[string]any), b.call(`{"type":"state"}`)["data"].(map[string]any)
	if sa["aep_episode_id"] == sb["aep_episode_id"] || sa["aep_session"] == sb["aep_session"] || sa["step_count"] != 1.0 || sb["step_count"] != 0.0 {
		t.Fatalf("two connections share state: %v %v", sa, sb)
	}
	a.send(`{"type":"close"}`)
	closedWith(t, a)
	b.send(`{"type":"close"}`)
	closedWith(t, b)
	r.h.Close(context.Background()) // writes the audit log out
	lines := readLines(t, r.audit)
	tenants := map[string]bool{}
	for _, l := range lines {
		if strings.Contains(l, withEnv) || strings.Contains(l, without) || strings.Contains(l, token) {
			t.Fatalf("a secret in the audit log: %s", l)
		}
		var rec struct {
			Tenant string `json:"tenant"`
			Type   string `json:"type"`
		}
		_ = json.Unmarshal([]byte(l), &rec)
		if strings.HasPrefix(rec.Type, "env/") {
			tenants[rec.Tenant] = true
		}
	}
	if !tenants["lab"] || !tenants["default"] {
		t.Fatalf("env requests attributed to %v, want lab and default", tenants)
	}
	if log := r.logs.String(); strings.Contains(log, withEnv) || strings.Contains(log, without) || strings.Contains(log, token) {
		t.Fatal("a secret in the host's log")
	}
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// TestTrajectoriesRecordedAndExported: an episode stepped through the face
// is recorded as any session's is, when the first reset asks
// (aep_record_trajectory) or the operator records all, and exports as
// jsonl and chat with its env rewards; the token is in no record, even
// one the client planted it in.
func TestTrajectoriesRecordedAndExported(t *testing.T) {
	tenantSecret := "tenant-traj-secret-7f3b"
	sum := sha256.Sum256([]byte(tenantSecret))
	for _, c := range []struct {
		name   string
		record string
		ask    string
		tok    string
	}{
		{"opt in at the first reset", "opt_in", `,"aep_record_trajectory":true`, token},
		{"operator records all", "all", "", tenantSecret},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, rigOpts{edit: func(cfg *server.Config) {
				cfg.Server.Trajectories.Record = c.record
				cfg.Server.Tenants = []server.TenantConfig{{Name: "lab", SecretSHA256: []string{hex.EncodeToString(sum[:])}, Capabilities: []string{"env"}}}
			}})
			w := dial(t, r.wsURL("guess"), nil)
			w.call(`{"type":"reset","data":{"seed":1,"aep_token":"` + c.tok + `"` + c.ask + `}}`)
			w.call(`{"type":"step","data":{"action":50}}`)
			// The client plants its own token where the host records it.
			w.call(`{"type":"reset","data":{"seed":1,"note":"` + c.tok + `"}}`)
			w.call(`{"type":"step","data":{"action":93}}`)
			handle := w.call(`{"type":"state"}`)["data"].(map[string]any)["aep_session"].(string)
			w.send(`{"type":"close"}`)
			closedWith(t, w)
			r.h.Close(context.Background()) // writes the queued records
			var jsonl, chat bytes.Buffer
			exp, err := persist.ExportTrajectories(context.Background(), r.st, persist.ExportOptions{Handle: handle, Format: "jsonl"}, &jsonl)
			if err != nil || exp.Records == 0 {
				t.Fatalf("export jsonl: %d records, %v", exp.Records, err)
			}
			if _, err := persist.ExportTrajectories(context.Background(), r.st, persist.ExportOptions{Handle: handle, Format: "chat"}, &chat); err != nil {
				t.Fatal(err)
			}
			all := jsonl.String() + chat.String()
			if strings.Contains(all, c.tok) {
				t.Fatalf("the token reached the trajectory:\n%s", all)
			}
			var types []string
			for _, l := range strings.Split(strings.TrimSpace(jsonl.String()), "\n") {
				var rec persist.TrajectoryRecord
				if err := json.Unmarshal([]byte(l), &rec); err != nil {
					t.Fatal(err)
				}
				types = append(types, rec.Type)
			}
			want := []string{"handshake/req", "handshake/resp", "env/reset/req", "env/reset/resp", "env/step/req", "env/step/resp",
				"env/reset/req", "env/reset/resp", "env/step/req", "env/step/resp", "env/observe/req", "env/observe/resp"}
			if strings.Join(types, " ") != strings.Join(want, " ") {
				t.Fatalf("records %v, want %v", types, want)
			}
			var sample struct {
				Rewards     []float64 `json:"rewards"`
				TotalReward float64   `json:"total_reward"`
			}
			if err := json.Unmarshal(chat.Bytes(), &sample); err != nil || sample.TotalReward != 1 || len(sample.Rewards) != 2 {
				t.Fatalf("chat sample %s: %v", chat.String(), err)
			}
		})
	}
}

// TestHostEndsTheSession: a session the host ends (its idle timeout here)
// is told to the client in OpenEnv's session error before the close.
func TestHostEndsTheSession(t *testing.T) {
	r := newRig(t, rigOpts{edit: func(c *server.Config) { c.Server.Limits.IdleTimeout = server.Duration(300 * time.Millisecond) }})
	w := dial(t, r.wsURL("guess"), nil)
	w.call(resetLine(token))
	d := errData(t, frameOf(t, w))
	if d["code"] != "SESSION_ERROR" {
		t.Fatalf("idle session: %v", d)
	}
	closedWith(t, w)
}

// TestLongStepKeepsReading: while a step runs, the connection is still
// read (the client's pings are answered), and a client that goes away
// mid-step ends its session, which cancels the step.
func TestLongStepKeepsReading(t *testing.T) {
	r := newRig(t, rigOpts{plugins: []server.PluginSpec{{Name: "env", Type: "env",
		Impl: &env.Plugin{Settings: env.Settings{Envs: []string{"openenv-test-sleepy"}, DataRoot: t.TempDir()}}}}})
	w := dial(t, r.wsURL("openenv-test-sleepy"), nil)
	w.call(resetLine(token))
	var wg sync.WaitGroup
	wg.Add(1)
	var reply map[string]any
	go func() {
		defer wg.Done()
		w.send(`{"type":"step","data":{"action":1500}}`)
		d, err := w.recv()
		if err == nil {
			_ = json.Unmarshal(d, &reply)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err := w.c.Ping(ctx)
	cancel()
	if err != nil {
		t.Fatalf("ping during a 1.5 s step: %v", err)
	}
	wg.Wait()
	if reply["type"] != "observation" {
		t.Fatalf("the long step's reply: %v", reply)
	}
	if m := w.call(`{"type":"step","data":{"action":1}}`); m["type"] != "observation" {
		t.Fatalf("after a handed-off step: %v", m)
	}

	// Gone mid-step: the session ends within the step's time.
	g := dial(t, r.wsURL("openenv-test-sleepy"), nil)
	g.call(resetLine(token))
	before := r.h.LiveSessions()
	g.send(`{"type":"step","data":{"action":60000}}`)
	time.Sleep(100 * time.Millisecond)
	g.c.CloseNow()
	start := time.Now()
	waitFor(t, func() bool { return r.h.LiveSessions() == before-1 })
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the session outlived its client by %v", time.Since(start))
	}
}

// TestSchemas: /schema gives OpenEnv's three schemas, the environment's
// spaces inside (a space's $defs moved to the root), and /openapi.json
// passes openenv validate's checks.
func TestSchemas(t *testing.T) {
	r := newRig(t, rigOpts{plugins: []server.PluginSpec{{Name: "env", Type: "env",
		Impl: &env.Plugin{Settings: env.Settings{Envs: []string{"openenv-test-sleepy", "guess"}, DataRoot: t.TempDir()}}}}})
	_, _, b := httpDo(t, "GET", r.base("openenv-test-sleepy")+"/schema", "", nil)
	var s struct {
		Action, Observation, State map[string]any
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	act := s.Action["properties"].(map[string]any)["action"].(map[string]any)
	if act["type"] != "integer" || s.Action["$defs"].(map[string]any)["unused"] == nil || act["$defs"] != nil {
		t.Fatalf("action schema %v", s.Action)
	}
	if s.Observation["properties"].(map[string]any)["observation"].(map[string]any)["type"] != "integer" || s.State["additionalProperties"] != true {
		t.Fatalf("observation or state schema: %s", b)
	}
	_, _, b = httpDo(t, "GET", r.base("guess")+"/openapi.json", "", nil)
	var doc struct {
		Info  struct{ Version string }
		Paths map[string]any
	}
	if err := json.Unmarshal(b, &doc); err != nil || !strings.HasPrefix(doc.Info.Version, "1.") {
		t.Fatalf("openapi: %s", b)
	}
	for _, p := range []string{"/reset", "/step", "/state", "/health", "/metadata", "/schema"} {
		if doc.Paths[p] == nil {
			t.Errorf("openapi lacks %s", p)
		}
	}
	if got := r.face.Envs(); strings.Join(got, ",") != "guess,openenv-test-sleepy" {
		t.Errorf("Envs() = %v", got)
	}
}

// TestAepCodesAreTheSpecs: every aep code a frame or an HTTP answer of
// the face carries, and every audit line's, is one of spec §7's or
// cancelled.
func TestAepCodesAreTheSpecs(t *testing.T) {
	r := newRig(t, rigOpts{edit: func(c *server.Config) { c.Server.Limits.MaxMessageBytes = 2048 }})
	known := map[string]bool{}
	for _, c := range wire.Codes {
		known[string(c)] = true
	}
	w := dial(t, r.wsURL("guess"), nil)
	var seen []string
	note := func(m map[string]any) {
		if m["type"] == "error" {
			if c, ok := m["data"].(map[string]any)["aep_code"].(string); ok {
				seen = append(seen, c)
			}
		}
	}
	note(w.call(resetLine(token)))
	for _, l := range []string{`{"type":"step","data":{"action":"x"}}`, `{"type":"reset","data":{"high":-3}}`,
		`{"type":"step","data":{"action":"` + strings.Repeat("x", 3000) + `"}}`, `{"type":"reset","data":{"high":1,"max_steps":1}}`,
		`{"type":"step","data":{"action":7}}`, `{"type":"step","data":{"action":0}}`} {
		note(w.call(l))
	}
	bad := dial(t, r.wsURL("guess"), nil)
	bad.send(resetLine("nope-nope-nope-nope"))
	note(frameOf(t, bad))
	for _, body := range []string{`{"action":{"action":"x"}}`, `{"action":{"action":1},"aep_token":"nope-nope-nope"}`} {
		_, _, b := httpDo(t, "POST", r.base("guess")+"/step", body, bearerHeader(token))
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if c, ok := m["aep_code"].(string); ok {
			seen = append(seen, c)
		}
	}
	r.h.Close(context.Background())
	for _, l := range readLines(t, r.audit) {
		var rec struct {
			ErrorCode string `json:"error_code"`
		}
		_ = json.Unmarshal([]byte(l), &rec)
		if rec.ErrorCode != "" {
			seen = append(seen, rec.ErrorCode)
		}
	}
	if len(seen) < 4 {
		t.Fatalf("too few aep codes seen: %v", seen)
	}
	for _, c := range seen {
		if !known[c] {
			t.Errorf("aep code %q is not spec §7's", c)
		}
	}
}

var _ = filepath.Join
var _ = openenv.Prefix
