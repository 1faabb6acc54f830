// Package aepbin runs the real `aep` binary in tests: built once per test
// process without the race detector (go build into a temporary directory),
// started as `aep serve --stdio` (or, for tests of several sessions,
// serving HTTP and WebSocket on a loopback port) with the default
// configuration unless a config file is given, optionally as uid 65534
// (SysProcAttr.Credential: CI runs as root, and an unprivileged host is
// what tier (b) of docs/SECURITY.md, Isolation, is for), with a client
// handshaken over its stdin and stdout (or a WebSocket).
package aepbin

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
)

// Token is the auth token the hosts started here get in their environment.
const Token = "aepbin-token-0123456789abcdef"

// NobodyUID is the uid an unprivileged host runs as.
const NobodyUID = 65534

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Build returns the path of the aep binary, built on first use. The
// directory it is in is world-readable so an unprivileged host can run it;
// [Cleanup] removes it.
func Build(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		buildDir, buildErr = os.MkdirTemp("", "aepbin-")
		if buildErr != nil {
			return
		}
		_ = os.Chmod(buildDir, 0o755)
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "aep"), "./cmd/aep")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/aep: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "aep")
}

// Cleanup removes the built binary; TestMain calls it.
func Cleanup() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Options say how to start a host.
type Options struct {
	// Config is the content of a config file; empty runs `aep serve` with
	// no config file (the default configuration).
	Config string
	// Nobody runs the host as uid 65534 (the test must run as root).
	Nobody bool
	// Caps are the agent's capabilities in the handshake.
	Caps []string
	// HTTP serves on a loopback port instead of stdio: Client is then a
	// WebSocket session, and Connect opens more sessions.
	HTTP bool
	// Inherit are descriptors the host inherits from its parent without
	// close-on-exec (fds 3, 4, …), as a careless parent would leave them.
	Inherit []*os.File
	// Binary is the aep binary to run; empty builds one ([Build]). The
	// SDKs' benchmarks pass the one CI built for the SDK's step (AEP_BIN).
	Binary string
}

// Host is a running `aep serve`.
type Host struct {
	Cmd     *exec.Cmd
	Client  *client.Client
	DataDir string
	// URL is the HTTP base (http://127.0.0.1:port) of a host started with
	// Options.HTTP.
	URL    string
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// Start starts a host with a fresh data directory and handshakes a client.
// The host's environment holds [Token] as AEP_AUTH_TOKEN: no contained
// command may see it.
func Start(tb testing.TB, o Options) *Host {
	tb.Helper()
	bin := o.Binary
	if bin == "" {
		bin = Build(tb)
	}
	data, err := os.MkdirTemp("", "aepbin-data-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(data) })
	args := []string{"serve", "--stdio", "--data-dir", data}
	var addr string
	if o.HTTP {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
		args = []string{"serve", "--listen", addr, "--data-dir", data}
	}
	if o.Config != "" {
		cfg := filepath.Join(data, "config.yaml")
		if err := os.WriteFile(cfg, []byte(o.Config), 0o644); err != nil {
			tb.Fatal(err)
		}
		args = append(args, "--config", cfg)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + data, "AEP_AUTH_TOKEN=" + Token}
	if o.Nobody {
		if os.Geteuid() != 0 {
			tb.Skip("running the host as uid 65534 needs root")
		}
		if err := filepath.Walk(data, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(p, NobodyUID, NobodyUID)
		}); err != nil {
			tb.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: NobodyUID, Gid: NobodyUID, Groups: []uint32{}}}
	}
	cmd.ExtraFiles = o.Inherit
	h := &Host{Cmd: cmd, DataDir: data, stderr: &syncBuffer{}}
	cmd.Stderr = h.stderr
	caps := o.Caps
	if caps == nil {
		caps = []string{"tools", "proc", "env", "skills", "session"}
	}
	if o.HTTP {
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if tb.Failed() {
				tb.Logf("host stderr:\n%s", h.Stderr())
			}
		})
		h.URL = "http://" + addr
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if resp, err := http.Get(h.URL + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				tb.Fatalf("the host never served /healthz\n%s", h.Stderr())
			}
		}
		h.Client = h.Connect(tb, "", Token, caps...)
	} else {
		conn, err := client.SpawnStdio(cmd)
		if err != nil {
			tb.Fatal(err)
		}
		h.Client = client.New(client.Lines(conn, nil))
		tb.Cleanup(func() {
			h.Client.Close()
			if cmd.Process != nil { // started by the handshake
				_ = cmd.Process.Kill()
			}
			if tb.Failed() {
				tb.Logf("host stderr:\n%s", h.Stderr())
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := h.Client.Handshake(ctx, "aepbin-agent", Token, caps...); err != nil {
			tb.Fatalf("handshake: %v\n%s", err, h.Stderr())
		}
	}
	tb.Logf("host uid %d, isolation tier %q", map[bool]int{true: NobodyUID, false: os.Geteuid()}[o.Nobody], h.Tier())
	return h
}

// Connect opens a WebSocket session on a host started with Options.HTTP
// and handshakes it with token: a new session when sessionID is "", else
// the session the host created with that id (a subagent's).
func (h *Host) Connect(tb testing.TB, sessionID, token string, caps ...string) *client.Client {
	tb.Helper()
	if h.URL == "" {
		tb.Fatal("aepbin: Connect needs a host started with Options.HTTP")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.WebSocket(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", &client.WSOptions{SessionID: sessionID})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if _, err := c.Handshake(ctx, "aepbin-agent", token, caps...); err != nil {
		tb.Fatalf("handshake: %v\n%s", err, h.Stderr())
	}
	return c
}

// Stderr is the host's log so far.
func (h *Host) Stderr() string { return h.stderr.String() }

var tierRe = regexp.MustCompile(`msg=isolation tier=(\S+)`)

// Tier is the isolation tier the host logged at start-up.
func (h *Host) Tier() string {
	// The host logs its tier before it serves, but its stderr is copied
	// asynchronously: the line may reach us after the handshake.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := tierRe.FindStringSubmatch(h.Stderr()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Running reports whether a live (not zombie) process has tag in its
// command line.
func Running(tag string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), tag) && !strings.Contains(string(st), ") Z ") {
			return true
		}
	}
	return false
}

// GoneWithin waits up to d for no process with tag to run.
func GoneWithin(tag string, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if !Running(tag) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

var tagN int64
var tagMu sync.Mutex

// SleepTag returns a unique argument for sleep (a number of seconds that
// no other process uses), so the test finds its processes by command line.
func SleepTag() string {
	tagMu.Lock()
	defer tagMu.Unlock()
	tagN++
	return fmt.Sprintf("%d.%d%03d", 7000+os.Getpid()%1000, time.Now().UnixNano()%100000, tagN)
}
