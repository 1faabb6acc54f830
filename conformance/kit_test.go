package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
)

// The broken host of these tests is this test binary run as a proxy in front
// of a real aep: it passes every line through and breaks one rule on the
// host's side (brokenHost). TestMain starts it when the environment says so.
func TestMain(m *testing.M) {
	if mode := os.Getenv("AEP_BROKEN_HOST"); mode != "" {
		os.Exit(brokenHost(mode, os.Getenv("AEP_BROKEN_TARGET")))
	}
	code := m.Run()
	if aepBin != "" {
		os.RemoveAll(filepath.Dir(aepBin))
	}
	os.Exit(code)
}

const token = "conformance-test-token"

// eventsRequest makes aep send three log events: run_command streams each
// output line.
var eventsRequest = []byte(`{"type":"tool/call/req","tool_name":"run_command","streaming":true,"arguments":{"argv":["sh","-c","echo a; echo b; echo c"]}}`)

var (
	buildOnce sync.Once
	aepBin    string
	buildErr  error
)

// aepBinary builds cmd/aep once, without -race, as a user would run it.
func aepBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := conformance.SchemaDir()
		if err != nil {
			buildErr = err
			return
		}
		out, err := os.MkdirTemp("", "aep-conformance-bin")
		if err != nil {
			buildErr = err
			return
		}
		aepBin = filepath.Join(out, "aep")
		cmd := exec.Command("go", "build", "-o", aepBin, "./cmd/aep")
		cmd.Dir = filepath.Dir(dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/aep: %v\n%s", err, b)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return aepBin
}

func stdioCommand(t *testing.T) string {
	return fmt.Sprintf("AEP_AUTH_TOKEN=%s exec %s serve --stdio --data-dir %s", token, aepBinary(t), t.TempDir())
}

func run(t *testing.T, dial conformance.Dialer) *conformance.Report {
	return runWith(t, dial, nil)
}

// runWith is run with the operator's way to open a session
// (conformance.Options.OperatorSession).
func runWith(t *testing.T, dial conformance.Dialer, operator func(context.Context) (conformance.Conn, string, error)) *conformance.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := conformance.Run(ctx, dial, conformance.Options{Token: token, EventsRequest: eventsRequest, Timeout: 20 * time.Second, OperatorSession: operator})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func logReport(t *testing.T, rep *conformance.Report) {
	var b strings.Builder
	_ = rep.WriteText(&b)
	t.Log("\n" + b.String())
}

// TestSchemaExamples: aep refuses every invalid example of schemas/examples
// as the kit expects (a handshake/req by handshake/resp, a wrong proto by
// version_mismatch, a duplicate id key under its first id), with ids
// reused across files; and the examples UNSTATABLE.md lists are marked
// beyond a static schema.
func TestSchemaExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	ex, err := conformance.LoadExamples(os.DirFS("../schemas/examples"))
	if err != nil {
		t.Fatal(err)
	}
	opts := conformance.Options{Token: token, Timeout: 20 * time.Second}
	for _, e := range ex {
		if e.Name == "tool/list/req/invalid--duplicate-key.json" && !e.Beyond {
			t.Errorf("%s: not marked beyond a static schema", e.Name)
		}
		if !e.Valid {
			opts.Examples = append(opts.Examples, e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Over stdio: an oversized example is answered parse_error there; over
	// HTTP the transport refuses its body with 413 before any session sees it.
	rep, err := conformance.Run(ctx, conformance.StdioDialer(stdioCommand(t), io.Discard), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Rule == conformance.RuleInvalidExamples && (r.Status != conformance.Pass || r.Checked < 100) {
			logReport(t, rep)
			t.Fatalf("rule %s: %s (%d checked)", r.Rule, r.Status, r.Checked)
		}
		if r.Rule == conformance.RuleReplyOnce && r.Status != conformance.Pass {
			logReport(t, rep)
			t.Fatalf("rule %s: %s", r.Rule, r.Status)
		}
	}
}

// TestAEPConforms: aep passes every rule, none skipped, over stdio, over
// HTTP+SSE, single exchanges and WebSocket.
func TestAEPConforms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	check := func(t *testing.T, rep *conformance.Report) {
		for _, r := range rep.Results {
			if r.Status != conformance.Pass && !(r.Rule == conformance.RuleOperatorSession && r.Status == conformance.Skip && t.Name() == "TestAEPConforms/stdio") {
				logReport(t, rep)
				t.Fatalf("rule %s: %s", r.Rule, r.Status)
			}
		}
		if !rep.OK {
			t.Fatal("report not OK")
		}
	}
	t.Run("stdio", func(t *testing.T) {
		check(t, run(t, conformance.StdioDialer(stdioCommand(t), io.Discard)))
	})
	base, ops := serveHTTP(t)
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	t.Run("http", func(t *testing.T) {
		check(t, runWith(t, conformance.HTTPDialer(base, nil), operatorSession(ops, func(ctx context.Context, sid string) (conformance.Conn, error) {
			return conformance.HTTPAttach(ctx, base, nil, sid)
		})))
	})
	t.Run("single exchange", func(t *testing.T) {
		check(t, runWith(t, conformance.ExchangeDialer(base, nil), operatorSession(ops, func(_ context.Context, sid string) (conformance.Conn, error) {
			return conformance.ExchangeAttach(base, nil, sid), nil
		})))
	})
	t.Run("websocket", func(t *testing.T) {
		check(t, runWith(t, conformance.WebSocketDialer(wsURL, nil), operatorSession(ops, func(ctx context.Context, sid string) (conformance.Conn, error) {
			return conformance.WebSocketDialer(wsURL, http.Header{"X-Session-Id": {sid}})(ctx)
		})))
	})
	// A host whose "operator's session" is an agent's own, opened with the
	// tenant's secret, breaks the rule.
	t.Run("not the operator's", func(t *testing.T) {
		rep := runWith(t, conformance.HTTPDialer(base, nil), func(ctx context.Context) (conformance.Conn, string, error) {
			c, err := conformance.HTTPDialer(base, nil)(ctx)
			return c, token, err
		})
		if got := rep.Failed(); !slices.Equal(got, []string{conformance.RuleOperatorSession}) {
			logReport(t, rep)
			t.Fatalf("failed rules %v, want only %s", got, conformance.RuleOperatorSession)
		}
	})
}

const operatorToken = "conformance-operator-token-a1b2"

// operatorSession opens a session through the admin API at ops and
// attaches to it with attach.
func operatorSession(ops string, attach func(context.Context, string) (conformance.Conn, error)) func(context.Context) (conformance.Conn, string, error) {
	return func(ctx context.Context) (conformance.Conn, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ops+"/admin/sessions", strings.NewReader(`{"tenant":"default"}`))
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		var o struct {
			SessionID string `json:"session_id"`
			Token     string `json:"token"`
		}
		if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&o) != nil {
			return nil, "", fmt.Errorf("POST /admin/sessions: %d", resp.StatusCode)
		}
		c, err := attach(ctx, o.SessionID)
		return c, o.Token, err
	}
}

// serveHTTP runs `aep serve` on a free loopback port until the test ends,
// with its operator listener on another; it returns both base URLs.
func serveHTTP(t *testing.T) (string, string) {
	t.Helper()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	addr, opAddr := free(), free()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "aep.yaml")
	if err := os.WriteFile(cfg, []byte("operator:\n  listen: "+opAddr+"\n  token: "+operatorToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(aepBinary(t), "serve", "--listen", addr, "--data-dir", dir, "--config", cfg)
	cmd.Env = append(os.Environ(), "AEP_AUTH_TOKEN="+token)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, "http://" + opAddr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("aep serve on %s never became healthy: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrokenHost: a host that breaks one rule is reported as breaking
// exactly the rules its fault touches, and no other.
func TestBrokenHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the aep binary")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mode string
		want []string
	}{
		// A field the contract does not name.
		{"extra-field", []string{conformance.RuleHostStrict}},
		// Every pong twice.
		{"duplicate-pong", []string{conformance.RuleReplyOnce}},
		// retryable true on parse_error: the table and the bundle's rule.
		{"retryable", []string{conformance.RuleRetryable, conformance.RuleHostStrict}},
		// no-gating again, but with detail.reason denied, which the table
		// says is never retryable (runtime_error without a reason is).
		{"reason-retryable", []string{conformance.RuleCapability, conformance.RuleRetryable, conformance.RuleHostStrict}},
		// Events numbered from 1.
		{"event-seq", []string{conformance.RuleEvents}},
		// capability_missing turned into runtime_error.
		{"no-gating", []string{conformance.RuleCapability}},
		// A wrong token accepted.
		{"accept-wrong-token", []string{conformance.RuleHandshakeFailures}},
		// A request sent by the host.
		{"host-sends-request", []string{conformance.RuleDirection}},
		// schema_violation turned into runtime_error.
		{"invalid-accepted", []string{conformance.RuleInvalidExamples}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			cmd := fmt.Sprintf("AEP_BROKEN_HOST=%s AEP_BROKEN_TARGET='%s' exec %s", tc.mode, stdioCommand(t), self)
			rep := run(t, conformance.StdioDialer(cmd, io.Discard))
			if got := rep.Failed(); !slices.Equal(got, tc.want) || rep.OK {
				logReport(t, rep)
				t.Fatalf("failed rules %v, want %v", got, tc.want)
			}
		})
	}
}

// brokenHost runs target (a stdio host) and breaks one rule in what it
// sends: the mode.
func brokenHost(mode, target string) int {
	cmd := exec.Command("sh", "-c", target)
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	emit := func(m map[string]any) {
		b, _ := json.Marshal(m)
		w.Write(b)
		w.WriteByte('\n')
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	injected := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			w.Write(append(bytes.Clone(sc.Bytes()), '\n'))
			w.Flush()
			continue
		}
		typ, _ := m["type"].(string)
		switch mode {
		case "extra-field":
			m["x_extra"] = 1
		case "duplicate-pong":
			if typ == "pong" {
				emit(m)
			}
		case "retryable":
			if typ == "error" && m["code"] == "parse_error" {
				m["retryable"] = true
			}
		case "reason-retryable":
			if typ == "error" && m["code"] == "capability_missing" {
				m["code"], m["retryable"], m["detail"] = "runtime_error", true, map[string]any{"reason": "denied"}
			}
		case "event-seq":
			if seq, ok := m["seq"].(float64); ok && strings.HasSuffix(typ, "/event") {
				m["seq"] = seq + 1
			}
		case "no-gating":
			if typ == "error" && m["code"] == "capability_missing" {
				m["code"], m["retryable"] = "runtime_error", true
			}
		case "accept-wrong-token":
			if e, ok := m["error"].(map[string]any); ok && typ == "handshake/resp" && e["code"] == "unauthorized" {
				m["ok"], m["session_id"] = true, "s"
				delete(m, "error")
				delete(m, "reason")
			}
		case "host-sends-request":
			if typ == "pong" {
				injected++
				emit(map[string]any{"type": "tool/call/req", "id": fmt.Sprintf("inj-%d", injected), "proto": "1.0", "ts": 1, "tool_name": "x", "arguments": map[string]any{}})
			}
		case "invalid-accepted":
			if typ == "error" && m["code"] == "schema_violation" {
				m["code"], m["retryable"] = "runtime_error", true
			}
		}
		emit(m)
		w.Flush()
	}
	if err := cmd.Wait(); err != nil {
		return 1
	}
	return 0
}
