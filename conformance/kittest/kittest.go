// Package kittest runs the conformance kit against a real aep in tests:
// the aep binary of this module (built once per test process by
// internal/aepbin) served with conformance/aep/aep.yaml, reached over each
// transport, with aep's own fixture and baseline files (conformance/aep).
// The kit's tests use it, and so can a mutation suite or a comparison
// across transports built on the kit.
//
// The configuration's MCP server is npm's server-everything, found by
// AEP_TEST_MCP_EVERYTHING (.ci/run installs it): without it the mcp
// capability is left out and the fixture's mcp key dropped, unless CI is
// set, where its absence fails the test.
package kittest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/internal/aepbin"
)

// Token is the auth token of the hosts started here.
const Token = "aep-kittest-token-0123456789abcdef"

// OperatorToken is the operator token of the hosts [Serve] starts.
const OperatorToken = "aep-kittest-operator-token-5f2e"

// operators maps the HTTP base of each host [Serve] started to its
// operator listener, for [Run]'s operator's sessions.
var operators sync.Map // base URL → operator base URL

// OperatorSession returns the way to open a session for aep's default
// tenant through the admin API of the host [Serve] started at base
// (conformance.Options.OperatorSession), or nil for another target.
func OperatorSession(base string) func(context.Context) (string, string, error) {
	v, ok := operators.Load(base)
	if !ok {
		return nil
	}
	ops := v.(string)
	return func(ctx context.Context) (string, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ops+"/admin/sessions", strings.NewReader(`{"tenant":"default"}`))
		if err != nil {
			return "", "", err
		}
		req.Header.Set("Authorization", "Bearer "+OperatorToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		var o struct {
			SessionID string `json:"session_id"`
			Token     string `json:"token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&o); err != nil || resp.StatusCode != http.StatusCreated {
			return "", "", fmt.Errorf("POST /admin/sessions: %d %v", resp.StatusCode, err)
		}
		return o.SessionID, o.Token, nil
	}
}

// Dir returns the absolute path of conformance/aep: aep's configuration,
// fixture and baseline for its own conformance run.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "aep")
}

var mcpFound struct {
	once sync.Once
	ok   bool
}

// MCP says whether the configuration's MCP server is installed, decided
// once per test process so that every host and fixture of it agree. Under
// CI its absence fails the test.
func MCP(tb testing.TB) bool {
	tb.Helper()
	mcpFound.once.Do(func() {
		if p := os.Getenv("AEP_TEST_MCP_EVERYTHING"); p != "" {
			_, err := os.Stat(p)
			mcpFound.ok = err == nil
		}
	})
	if !mcpFound.ok && os.Getenv("CI") != "" {
		tb.Fatal("AEP_TEST_MCP_EVERYTHING does not name npm's server-everything (.ci/run installs it)")
	}
	return mcpFound.ok
}

// Env is the environment of a host started here.
func Env(tb testing.TB) []string {
	env := append(os.Environ(), "AEP_AUTH_TOKEN="+Token, "AEP_CONFORMANCE_DIR="+Dir())
	if !MCP(tb) {
		env = append(env, "AEP_CONFORMANCE_MCP=false")
	}
	return env
}

// Fixture returns aep's fixture file; without the MCP server, its mcp key
// is dropped (the host then offers no mcp, and those checks skip).
func Fixture(tb testing.TB) *conformance.Fixture {
	tb.Helper()
	f, err := conformance.LoadFixture(filepath.Join(Dir(), "fixture.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if !MCP(tb) {
		tb.Log("no MCP server-everything (AEP_TEST_MCP_EVERYTHING): the mcp checks skip")
		f.MCP = nil
	}
	return f
}

// Baseline returns aep's baseline file.
func Baseline(tb testing.TB) *conformance.Baseline {
	tb.Helper()
	b, err := conformance.LoadBaseline(filepath.Join(Dir(), "baseline.json"))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Stdio returns the stdio transport of aep: `aep serve --stdio` with the
// configuration, one process per session, sharing one data directory.
func Stdio(tb testing.TB) conformance.Target {
	tb.Helper()
	return stdio(tb, Env(tb))
}

// StdioWithoutMCP is Stdio with the mcp capability left out
// (AEP_CONFORMANCE_MCP=false): each stdio session starts a host, and each
// host with the mcp capability its MCP server, a node process (about half
// a second); a suite of many runs that do not touch mcp saves that.
func StdioWithoutMCP(tb testing.TB) conformance.Target {
	tb.Helper()
	return stdio(tb, append(Env(tb), "AEP_CONFORMANCE_MCP=false"))
}

func stdio(tb testing.TB, full []string) conformance.Target {
	tb.Helper()
	var env strings.Builder
	for _, kv := range full[len(os.Environ()):] {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&env, "%s=%s ", k, shellQuote(v))
	}
	cmd := fmt.Sprintf("exec env %s%s serve --stdio --config %s --data-dir %s",
		env.String(), shellQuote(aepbin.Build(tb)), shellQuote(filepath.Join(Dir(), "aep.yaml")), shellQuote(tb.TempDir()))
	return conformance.StdioTarget(cmd, io.Discard)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Serve runs `aep serve` with the configuration on a free loopback port
// until the test ends, and returns its HTTP base URL.
func Serve(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	opAddr := ol.Addr().String()
	ol.Close()
	cmd := exec.Command(aepbin.Build(tb), "serve", "--listen", addr, "--config", filepath.Join(Dir(), "aep.yaml"), "--data-dir", tb.TempDir())
	cmd.Env = append(Env(tb), "AEP_KIT_OPERATOR_LISTEN="+opAddr, "AEP_KIT_OPERATOR_TOKEN="+OperatorToken)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				operators.Store(base, "http://"+opAddr)
				return base
			}
		}
		select {
		case <-done:
			tb.Fatalf("aep serve on %s exited: %s", addr, stderr)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("aep serve on %s never became ready: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Targets returns aep over every transport: stdio, HTTP+SSE, single
// exchange and WebSocket (the last three on one `aep serve`).
func Targets(tb testing.TB) []conformance.Target {
	tb.Helper()
	base := Serve(tb)
	return []conformance.Target{Stdio(tb), conformance.HTTPTarget(base, nil), conformance.ExchangeTarget(base, nil),
		conformance.WebSocketTarget("ws"+strings.TrimPrefix(base, "http")+"/ws", nil)}
}

// Run runs the kit against target with aep's token, and with aep's fixture
// and baseline unless opts gives its own.
func Run(tb testing.TB, target conformance.Target, opts conformance.Options) *conformance.Report {
	tb.Helper()
	if opts.Token == "" {
		opts.Token = Token
	}
	if opts.Fixture == nil {
		opts.Fixture = Fixture(tb)
	}
	if opts.Baseline == nil {
		opts.Baseline = Baseline(tb)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 20 * time.Second
	}
	if opts.OperatorSession == nil {
		opts.OperatorSession = OperatorSession(target.HTTP)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := conformance.Run(ctx, target, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}

// Compare runs the kit over each of targets, as Run does, and compares
// their answers (conformance.Compare).
func Compare(tb testing.TB, targets []conformance.Target, opts conformance.Options) *conformance.Comparison {
	tb.Helper()
	if opts.Token == "" {
		opts.Token = Token
	}
	if opts.Fixture == nil {
		opts.Fixture = Fixture(tb)
	}
	if opts.Baseline == nil {
		opts.Baseline = Baseline(tb)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 20 * time.Second
	}
	// The operator's sessions of the host Serve started, where a target
	// reaches one; a transport that cannot reach a session by id skips
	// that check either way.
	for _, t := range targets {
		if opts.OperatorSession == nil {
			opts.OperatorSession = OperatorSession(t.HTTP)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := conformance.Compare(ctx, targets, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// LogComparison writes a comparison's reports and verdict to the test log.
func LogComparison(tb testing.TB, c *conformance.Comparison) {
	tb.Helper()
	var b strings.Builder
	_ = c.WriteText(&b)
	tb.Log("\n" + b.String())
}

// Log writes the report to the test log.
func Log(tb testing.TB, rep *conformance.Report) {
	tb.Helper()
	var b strings.Builder
	_ = rep.WriteText(&b)
	tb.Log("\n" + b.String())
}

// syncBuffer is the host's stderr, written by the process's copier and
// read when it failed.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
