package e2e

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bin is the aep binary under test, built once per run by TestMain.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if b := os.Getenv("AEP_E2E_BIN"); b != "" {
		bin = b
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "aep-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "aep")
	// Built without -race whatever the tests run with: the race detector
	// multiplies memory, and these tests measure it.
	cmd := exec.Command("go", "build", "-o", bin, "github.com/aephost/aep/cmd/aep")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building aep:", err)
		return 1
	}
	return m.Run()
}

// touchSources opens every source file of the module, so that go test's
// cache, which records the files a test opens (from m.Run on, so tests call
// it), reruns these tests when the host's code changes: the package imports
// none of it.
var touchSources = sync.OnceFunc(func() {
	root, err := filepath.Abs("..")
	if err != nil {
		return
	}
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".json", ".yaml", ".mod", ".sum":
			if f, err := os.Open(p); err == nil {
				f.Close()
			}
		}
		return nil
	})
})

const token = "e2e-token"

// host is one `aep serve` subprocess.
type host struct {
	base   string // http://127.0.0.1:port
	addr   string // 127.0.0.1:port
	id     string // server.host_id, where a test sets it
	cmd    *exec.Cmd
	stderr *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startHost runs `aep serve` in a fresh directory, with the default data
// dir (./aep-data, relative) and no config file when config is empty.
func startHost(t testing.TB, config string) *host {
	t.Helper()
	return startHostAt(t, config, "")
}

// startHostAt is startHost listening on addr ("" a free port): a host
// restarted where a proxy expects it.
func startHostAt(t testing.TB, config, addr string) *host {
	t.Helper()
	return startHostOn(t, bin, config, addr)
}

// startHostOn runs the aep binary at path as startHostAt does.
func startHostOn(t testing.TB, path, config, addr string) *host {
	t.Helper()
	touchSources()
	dir := t.TempDir()
	if addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	args := []string{"serve", "--listen", addr}
	if config != "" {
		p := filepath.Join(dir, "aep.yaml")
		if err := os.WriteFile(p, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AEP_AUTH_TOKEN="+token)
	h := &host{base: "http://" + addr, addr: addr, cmd: cmd, stderr: &syncBuf{}}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("host stderr (tail):\n%s", tail(h.stderr.String(), 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(h.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("host did not come up: %v\n%s", err, h.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return h
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// status returns a field of /proc/<pid>/status in bytes (VmRSS, VmHWM).
func (h *host) status(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc status", field)
	return 0
}

func (h *host) rss(t *testing.T) int64  { return h.status(t, "VmRSS") }
func (h *host) peak(t *testing.T) int64 { return h.status(t, "VmHWM") }

// settle waits until the host's RSS stops falling, then returns it, so a
// baseline is not taken while start-up garbage is still being returned.
func (h *host) settle(t *testing.T) int64 {
	t.Helper()
	prev := h.rss(t)
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		cur := h.rss(t)
		if cur >= prev {
			return cur
		}
		prev = cur
	}
	return prev
}

const mib = 1 << 20

// client has its own connection pool, so the tests' connections are not
// shared between hosts.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 2 * time.Minute}
}

func (h *host) newSession(t *testing.T, c *http.Client) string {
	t.Helper()
	resp, err := c.Post(h.base+"/session", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		SessionID string `json:"session_id"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil || r.SessionID == "" {
		t.Fatalf("POST /session: %d %s", resp.StatusCode, b)
	}
	return r.SessionID
}

func (h *host) send(t *testing.T, c *http.Client, sid, line string) {
	t.Helper()
	if err := h.trySend(c, sid, line); err != nil {
		t.Fatal(err)
	}
}

func (h *host) trySend(c *http.Client, sid, line string) error {
	req, err := http.NewRequest(http.MethodPost, h.base+"/send", strings.NewReader(line))
	if err != nil {
		return err
	}
	req.Header.Set("X-Session-Id", sid)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST /send: %d %s", resp.StatusCode, b)
	}
	return nil
}

// stream is a GET /stream read line by line.
type stream struct {
	resp   *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc
}

func (h *host) openStream(t *testing.T, c *http.Client, sid string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/stream", nil)
	req.Header.Set("X-Session-Id", sid)
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /stream: %d", resp.StatusCode)
	}
	s := &stream{resp: resp, br: bufio.NewReaderSize(resp.Body, 64<<10), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.cancel(); s.resp.Body.Close() }

// frame is one SSE event or comment as read.
type frame struct {
	data    []byte // the message, for an event
	comment string
}

// next reads the next event or comment; a long data line is read whole,
// however long, so its size can be checked.
func (s *stream) next(t *testing.T, d time.Duration) frame {
	t.Helper()
	type res struct {
		f   frame
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var f frame
		for {
			line, err := s.br.ReadBytes('\n')
			if err != nil {
				ch <- res{err: err}
				return
			}
			line = bytes.TrimSuffix(line, []byte("\n"))
			switch {
			case len(line) == 0:
				if f.data != nil || f.comment != "" {
					ch <- res{f: f}
					return
				}
			case line[0] == ':':
				f.comment = string(line[1:])
			case bytes.HasPrefix(line, []byte("data: ")):
				f.data = line[len("data: "):]
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading the stream: %v", r.err)
		}
		return r.f
	case <-time.After(d):
		s.close()
		t.Fatalf("no event within %v", d)
	}
	return frame{}
}

// message waits for the next message (skipping comments) whose req_id is
// reqID, or any message when reqID is empty.
func (s *stream) message(t *testing.T, reqID string, d time.Duration) (map[string]any, int) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		f := s.next(t, time.Until(end))
		if f.data == nil {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(f.data, &m); err != nil {
			t.Fatalf("event %.200s: %v", f.data, err)
		}
		if reqID == "" || m["req_id"] == reqID {
			return m, len(f.data)
		}
	}
}

func handshakeLine(id, tok string) string {
	return fmt.Sprintf(`{"type":"handshake/req","id":%q,"proto":"1.0","ts":1,"agent_id":"e2e","agent_caps":["tools"],"auth_token":%q}`, id, tok)
}

// agent opens a session, reads its stream and handshakes.
func (h *host) agent(t *testing.T, c *http.Client) (string, *stream) {
	t.Helper()
	sid := h.newSession(t, c)
	st := h.openStream(t, c, sid)
	h.send(t, c, sid, handshakeLine("hs", token))
	m, _ := st.message(t, "hs", 30*time.Second)
	if m["ok"] != true {
		t.Fatalf("handshake: %v", m)
	}
	return sid, st
}

func toolCall(id string, streaming bool, tool string, args any) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"type":"tool/call/req","id":%q,"proto":"1.0","ts":1,"tool_name":%q,"arguments":%s,"streaming":%v}`, id, tool, a, streaming)
}

// outputCommand prints n bytes of 1000-byte lines: one log event a line.
func outputCommand(n int) map[string]any {
	return map[string]any{"argv": []string{"sh", "-c", `yes "$1" | head -c "$2"`, "sh", strings.Repeat("a", 999), strconv.Itoa(n)}, "timeout": 120}
}

// waitAudited waits until the host's audit log (./aep-data/audit.jsonl,
// written in batches) has n lines of the given message type: the requests
// were handled, whether or not anyone read their replies.
func (h *host) waitAudited(t *testing.T, typ string, n int) {
	t.Helper()
	path := filepath.Join(h.cmd.Dir, "aep-data", "audit.jsonl")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, _ := os.ReadFile(path)
		if got := bytes.Count(b, []byte(`"type":"`+typ+`"`)); got >= n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d of %d %s audited", got, n, typ)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
