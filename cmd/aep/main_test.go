package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// bin is the real aep binary, built once for every test of this package.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aep-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "aep")
	// Stamped as the Dockerfile stamps the image's binary (telemetry_test.go).
	ldflags, err := dockerfileLdflags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building aep:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// host is one `aep serve --stdio` process driven line by line.
type host struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan []byte
	stderr  *lockedBuffer
	dataDir string
	exited  chan struct{} // closed after the process was reaped
	exitErr error
}

// startHost runs `aep serve --stdio --data-dir <tmp> args...` with env added
// to a minimal environment (no AEP_AUTH_TOKEN unless env sets it).
func startHost(t *testing.T, env []string, args ...string) *host {
	t.Helper()
	dataDir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"serve", "--stdio", "--data-dir", dataDir}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	h := &host{t: t, cmd: cmd, lines: make(chan []byte, 1024), stderr: &lockedBuffer{}, dataDir: dataDir, exited: make(chan struct{})}
	cmd.Stderr = h.stderr
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				h.lines <- line
			}
			if err != nil {
				break
			}
		}
		close(h.lines)
		h.exitErr = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		_ = h.stdin.Close()
		select {
		case <-h.exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("host stderr:\n%s", h.stderr.String())
		}
	})
	return h
}

func (h *host) send(line string) {
	h.t.Helper()
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		h.t.Fatalf("write to host: %v", err)
	}
}

// recv returns the next stdout line, which must be exactly one protocol
// message: anything else (a log line, say) fails the test.
func (h *host) recv() *wire.Packet {
	h.t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("host closed stdout")
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			h.t.Fatalf("stdout line without newline: %q", line)
		}
		p, err := client.DecodeHostLine(msg.Registry(), bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			h.t.Fatalf("stdout line is not a protocol message (%v): %.200q", err, line)
		}
		return p
	case <-time.After(10 * time.Second):
		h.t.Fatalf("no reply from host within 10s")
	}
	return nil
}

// wait returns the process's exit error after its stdout ended.
func (h *host) wait() error {
	h.t.Helper()
	for range h.lines {
		h.t.Fatalf("unexpected output after the end")
	}
	select {
	case <-h.exited:
		return h.exitErr
	case <-time.After(10 * time.Second):
		h.t.Fatalf("host did not exit")
	}
	return nil
}

const token = "test-token-7f3a"

func handshakeLine(id, tok string) string {
	return fmt.Sprintf(`{"type":"handshake/req","id":%q,"proto":"1.0","ts":1,"agent_id":"t","agent_caps":["tools","session"],"auth_token":%q}`, id, tok)
}

func pingLine(id string) string {
	return fmt.Sprintf(`{"type":"ping","id":%q,"proto":"1.0","ts":1}`, id)
}

func handshake(t *testing.T, h *host) string {
	t.Helper()
	h.send(handshakeLine("hs", token))
	p := h.recv()
	r, ok := p.Msg.(*msg.HandshakeResp)
	if !ok || p.ReqID != "hs" || !r.Ok || r.SessionID == nil {
		t.Fatalf("handshake: got %s %+v", p.Type, p.Msg)
	}
	return *r.SessionID
}

func expectPong(t *testing.T, h *host, id string) {
	t.Helper()
	p := h.recv()
	if _, ok := p.Msg.(*msg.Pong); !ok || p.ReqID != id {
		t.Fatalf("want pong for %s, got %s req_id=%s %+v", id, p.Type, p.ReqID, p.Msg)
	}
}

func expectError(t *testing.T, h *host, code wire.Code) *msg.Error {
	t.Helper()
	p := h.recv()
	e, ok := p.Msg.(*msg.Error)
	if !ok || e.Code != string(code) {
		t.Fatalf("want error %s, got %s %+v", code, p.Type, p.Msg)
	}
	return e
}

func TestStdioHandshakeAndPing(t *testing.T) {
	tests := []struct {
		name    string
		token   string
		wantOK  bool
		wantErr wire.Code
	}{
		{"right token", token, true, ""},
		{"wrong token", "nope", false, wire.CodeUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHost(t, []string{"AEP_AUTH_TOKEN=" + token})
			h.send(pingLine("early"))
			expectError(t, h, wire.CodeUnauthorized) // before the handshake
			h.send(handshakeLine("hs", tc.token))
			p := h.recv()
			r, ok := p.Msg.(*msg.HandshakeResp)
			if !ok || p.ReqID != "hs" || r.Ok != tc.wantOK {
				t.Fatalf("handshake: got %s %+v", p.Type, p.Msg)
			}
			if !tc.wantOK {
				if r.Error == nil || r.Error.Code != string(tc.wantErr) {
					t.Fatalf("handshake error: %+v", r.Error)
				}
				return
			}
			if len(r.AcceptedCaps) != 2 || r.AcceptedCaps[1].Name != "session" || !r.AcceptedCaps[1].Enabled {
				t.Fatalf("accepted_caps: %+v", r.AcceptedCaps)
			}
			for i := range 3 {
				id := fmt.Sprintf("p%d", i)
				h.send(pingLine(id))
				expectPong(t, h, id)
			}
		})
	}
}

func TestStdioOverlongLine(t *testing.T) {
	const limit = 4096
	cfg := filepath.Join(t.TempDir(), "aep.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  limits:\n    max_message_bytes: %d\n", limit)), 0o600); err != nil {
		t.Fatal(err)
	}
	// pad builds a ping of exactly n bytes; unknown fields are ignored (docs/DECISIONS.md, Wire).
	pad := func(id string, n int) string {
		head := fmt.Sprintf(`{"type":"ping","id":%q,"proto":"1.0","ts":1,"pad":"`, id)
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	tests := []struct {
		name   string
		line   string
		tooBig bool // answered with parse_error too_large, else a pong to "ok"
	}{
		{"at the limit", pad("ok", limit), false},
		{"one byte over", pad("ok", limit+1), true},
		{"far over, not JSON", strings.Repeat("y", 5<<20), true},
		{"far over, valid JSON", pad("ok", 3<<20), true},
	}
	h := startHost(t, []string{"AEP_AUTH_TOKEN=" + token}, "--config", cfg)
	handshake(t, h)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			h.send(tc.line)
			if tc.tooBig {
				e := expectError(t, h, wire.CodeParseError)
				if e.Detail.(map[string]any)["reason"] != "too_large" || !strings.Contains(e.Message, fmt.Sprint(len(tc.line))) {
					t.Fatalf("error does not report the size: %+v", e)
				}
			} else {
				expectPong(t, h, "ok")
			}
			// The session goes on with the next line.
			id := fmt.Sprintf("after%d", i)
			h.send(pingLine(id))
			expectPong(t, h, id)
		})
	}
}

// TestStdioStdoutCarriesOnlyProtocol runs a whole session, with logging at
// debug level and a generated token, and checks that every byte of stdout is
// a protocol message while the logs and the token went to stderr.
func TestStdioStdoutCarriesOnlyProtocol(t *testing.T) {
	h := startHost(t, nil, "--log-level", "debug")
	// The generated token is printed once to stderr; read it from there.
	var tok string
	deadline := time.Now().Add(10 * time.Second)
	for tok == "" && time.Now().Before(deadline) {
		for _, l := range strings.Split(h.stderr.String(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "AEP_AUTH_TOKEN="); ok {
				tok = v
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tok == "" {
		t.Fatalf("no generated token on stderr:\n%s", h.stderr.String())
	}
	if n := strings.Count(h.stderr.String(), tok); n != 1 {
		t.Fatalf("token printed %d times, want once", n)
	}
	h.send(`not json`)
	h.send(handshakeLine("hs", tok))
	h.send(pingLine("p1"))
	h.send(`{"type":"session/info/req","id":"i1","proto":"1.0","ts":1}`)
	h.send(`{"type":"shutdown","id":"bye","proto":"1.0","ts":1,"timeout":1}`)
	// Every stdout line up to the end must decode as a protocol message.
	var types []string
	for line := range h.lines {
		p, err := client.DecodeHostLine(msg.Registry(), bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatalf("stdout line is not a protocol message (%v): %q", err, line)
		}
		types = append(types, p.Type)
	}
	<-h.exited
	if err := h.exitErr; err != nil {
		t.Fatalf("exit after shutdown: %v", err)
	}
	want := []string{"error", "handshake/resp", "pong", "session/info/resp"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("stdout types %v, want %v", types, want)
	}
	logs := h.stderr.String()
	for _, s := range []string{"host started", "stdio session started", "level=INFO"} {
		if !strings.Contains(logs, s) {
			t.Errorf("stderr lacks %q:\n%s", s, logs)
		}
	}
}

// TestStdioEndOfInput: closing stdin answers what is in flight, ends the
// session and exits 0; SIGTERM exits 0 too. Both flush the audit log.
func TestStdioEndOfInput(t *testing.T) {
	tests := []struct {
		name string
		stop func(h *host)
	}{
		{"stdin closed", func(h *host) { h.stdin.Close() }},
		{"SIGTERM", func(h *host) { h.cmd.Process.Signal(syscall.SIGTERM) }},
		{"SIGINT", func(h *host) { h.cmd.Process.Signal(os.Interrupt) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startHost(t, []string{"AEP_AUTH_TOKEN=" + token})
			sid := handshake(t, h)
			h.send(`{"type":"session/info/req","id":"i1","proto":"1.0","ts":1}`)
			p := h.recv()
			info, ok := p.Msg.(*msg.SessionInfoResp)
			if !ok {
				t.Fatalf("got %s %+v", p.Type, p.Msg)
			}
			tc.stop(h)
			if err := h.wait(); err != nil {
				t.Fatalf("exit: %v\n%s", err, h.stderr.String())
			}
			data, err := os.ReadFile(filepath.Join(h.dataDir, "audit.jsonl"))
			if err != nil {
				t.Fatalf("audit log not flushed: %v", err)
			}
			var rec map[string]any
			if err := json.Unmarshal(bytes.TrimSpace(data), &rec); err != nil {
				t.Fatalf("audit line %q: %v", data, err)
			}
			// Audit lines name the session by its public handle, never by
			// the transport id, a bearer secret (server/handle.go).
			if rec["session_id"] != info.Handle || info.Handle == sid || bytes.Contains(data, []byte(sid)) ||
				rec["type"] != "session/info/req" || rec["req_id"] != "i1" || rec["success"] != true {
				t.Fatalf("audit record %v, want session_id %s (the handle), never %s", rec, info.Handle, sid)
			}
		})
	}
}

// TestGoClientOverStdio drives the real binary through client/stdio.go,
// both with a command the caller builds and with the client.Stdio shortcut.
// AEP_AUTH_TOKEN is unset, or this process's names another token: the
// spawned host takes the token the code handshakes with, from its
// environment, never from its command line. (A token the caller puts in
// cmd.Env is the host's: sdk/scenario's TestHandshakeRefused.)
func TestGoClientOverStdio(t *testing.T) {
	tests := []struct {
		name    string
		connect func(t *testing.T, stderr io.Writer) (*client.Client, <-chan struct{}, func() *os.Process)
	}{
		{"SpawnStdio", func(t *testing.T, stderr io.Writer) (*client.Client, <-chan struct{}, func() *os.Process) {
			cmd := exec.Command(bin, "serve", "--stdio", "--data-dir", t.TempDir())
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			cmd.Stderr = stderr
			conn, err := client.SpawnStdio(cmd)
			if err != nil {
				t.Fatal(err)
			}
			return client.New(client.Lines(conn, nil)), conn.Exited(), func() *os.Process { return cmd.Process }
		}},
		{"SpawnStdio, another token in our environment", func(t *testing.T, stderr io.Writer) (*client.Client, <-chan struct{}, func() *os.Process) {
			t.Setenv("AEP_AUTH_TOKEN", "not-the-one")
			cmd := exec.Command(bin, "serve", "--stdio", "--data-dir", t.TempDir())
			cmd.Stderr = stderr
			conn, err := client.SpawnStdio(cmd)
			if err != nil {
				t.Fatal(err)
			}
			return client.New(client.Lines(conn, nil)), conn.Exited(), func() *os.Process { return cmd.Process }
		}},
		{"Stdio", func(t *testing.T, stderr io.Writer) (*client.Client, <-chan struct{}, func() *os.Process) {
			t.Setenv("AEP_AUTH_TOKEN", "")
			os.Unsetenv("AEP_AUTH_TOKEN") // t.Setenv restores it after the test
			c, err := client.Stdio(bin, stderr, nil, "--data-dir", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return c, nil, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stderr := &lockedBuffer{}
			c, exited, proc := tc.connect(t, stderr)
			resp, err := c.Handshake(ctx, "go-client", token, "session")
			if err != nil {
				t.Fatalf("handshake: %v\n%s", err, stderr)
			}
			if !resp.Ok || c.SessionID() == "" {
				t.Fatalf("handshake: %+v", resp)
			}
			if proc != nil {
				// The token is in the host's environment, once, and not in
				// its argv, which ps shows to every local user.
				pid := proc().Pid
				argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if err != nil {
					t.Fatal(err)
				}
				environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(argv, []byte(token)) {
					t.Fatalf("the token is on the host's command line: %q", argv)
				}
				var got []string
				for _, kv := range bytes.Split(environ, []byte{0}) {
					if bytes.HasPrefix(kv, []byte("AEP_AUTH_TOKEN=")) {
						got = append(got, string(kv))
					}
				}
				if len(got) != 1 || got[0] != "AEP_AUTH_TOKEN="+token {
					t.Fatalf("the host's environment has %q, want only AEP_AUTH_TOKEN=%s", got, token)
				}
			}
			pong, err := c.Ping(ctx, &msg.Ping{})
			if err != nil || pong.UptimeSeconds < 0 {
				t.Fatalf("ping: %+v %v", pong, err)
			}
			info, err := c.SessionInfo(ctx, &msg.SessionInfoReq{})
			if err != nil || info.SessionID != c.SessionID() || info.AgentID != "go-client" {
				t.Fatalf("session info: %+v %v", info, err)
			}
			// A refused request comes back as a Go error with its code.
			_, err = c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new("no-such-snapshot")})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code == "" {
				t.Fatalf("restore of an unknown snapshot: want a *wire.Error, got %v", err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("close: %v\n%s", err, stderr)
			}
			if exited != nil {
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					t.Fatal("host still running after Close")
				}
			}
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("client not done after Close")
			}
			if !strings.Contains(stderr.String(), "stdio session started") {
				t.Fatalf("host logs did not reach the stderr writer: %q", stderr)
			}
		})
	}
}

// TestServeHTTP starts `aep serve` on a loopback port of the kernel's
// choosing, checks /healthz, and stops it with SIGTERM.
func TestServeHTTP(t *testing.T) {
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	cmd.Env = []string{"AEP_AUTH_TOKEN=" + token}
	cmd.Stderr = stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr)
		}
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `msg="HTTP transport serving"`) {
				_, a, _ := strings.Cut(l, "addr=")
				addr = strings.Fields(a)[0]
			}
		}
	}
	if addr == "" {
		t.Fatal("the HTTP transport did not report its address")
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok":true`) {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("aep serve did not stop on SIGTERM")
	}
	if stdout.Len() != 0 {
		t.Fatalf("aep serve wrote to stdout: %q", stdout.String())
	}
}

// TestStdioSnapshotInStore: `aep serve` opens the SQLite store under its
// data dir, so an sql snapshot succeeds and lands in <data-dir>/aep.db.
func TestStdioSnapshotInStore(t *testing.T) {
	h := startHost(t, []string{"AEP_AUTH_TOKEN=" + token})
	handshake(t, h)
	for _, target := range []string{"sql", "file"} {
		h.send(fmt.Sprintf(`{"type":"session/snapshot/req","id":"snap-%s","proto":"1.0","ts":1,"target":%q}`, target, target))
		p := h.recv()
		r, ok := p.Msg.(*msg.SessionSnapshotResp)
		if !ok || p.ReqID != "snap-"+target || r.SnapshotID == "" {
			t.Fatalf("%s snapshot: got %s %+v", target, p.Type, p.Msg)
		}
	}
	if st, err := os.Stat(filepath.Join(h.dataDir, "aep.db")); err != nil || st.Size() == 0 {
		t.Fatalf("store file: %v", err)
	}
}
