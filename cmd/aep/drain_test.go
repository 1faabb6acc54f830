package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// logAddr waits for a log line with msg and returns its addr= value.
func logAddr(t *testing.T, stderr *lockedBuffer, msg string) string {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `msg="`+msg+`"`) {
				_, a, _ := strings.Cut(l, "addr=")
				return strings.Fields(a)[0]
			}
		}
	}
	t.Fatalf("no %q line in the log:\n%s", msg, stderr)
	return ""
}

func post(t *testing.T, url, sid, accept, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "text/plain")
	if sid != "" {
		req.Header.Set("X-Session-Id", sid)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSIGTERMDrains runs the real binary: a tool call in flight when
// SIGTERM arrives still gets its result, a new session is refused while
// the host drains, the live session is snapshotted to the store, and the
// process exits 0.
func TestSIGTERMDrains(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "aep.yaml")
	cfg := "operator:\n  listen: 127.0.0.1:0\n  drain_timeout: 30s\n  snapshot_on_drain: true\n" +
		"plugins:\n  - name: tools.builtin\n    type: tools\n    cls: aep.tools.builtin\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = []string{"AEP_AUTH_TOKEN=" + token, "PATH=" + os.Getenv("PATH")}
	cmd.Stderr = stderr
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
	base := "http://" + logAddr(t, stderr, "HTTP transport serving")
	ops := "http://" + logAddr(t, stderr, "operator endpoint serving /metrics")

	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz before the drain: %d %s", code, body)
	}
	code, body := post(t, base+"/session", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("POST /session: %d %s", code, body)
	}
	var sess struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal([]byte(body), &sess); err != nil {
		t.Fatal(err)
	}
	hs := handshakeLine("h1", token)
	if code, body := post(t, base+"/send", sess.SessionID, "application/json", hs); code != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("handshake: %d %s", code, body)
	}

	// The long call: its answer comes in the POST's own response.
	callDone := make(chan string, 1)
	go func() {
		call := `{"type":"tool/call/req","id":"c1","proto":"1.0","ts":1,"tool_name":"run_command","arguments":{"argv":["sleep","2"]}}`
		_, body := post(t, base+"/send", sess.SessionID, "application/json", call)
		callDone <- body
	}()
	// In flight once the queue gauge shows it (read over the operator listener).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, m := get(t, ops+"/metrics")
		if strings.Contains(m, "\naep_queue_depth 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tool call never showed as in flight:\n%s", m)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining: not ready, and no new session.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if code, _ := get(t, base+"/readyz"); code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never reported the drain")
		}
	}
	if code, body := post(t, base+"/session", "", "", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("POST /session while draining: %d %s, want 503 draining", code, body)
	}
	select {
	case body := <-callDone:
		if !strings.Contains(body, `"type":"tool/call/resp"`) || !strings.Contains(body, `"success":true`) {
			t.Errorf("the call in flight did not finish: %s", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call in flight got no answer")
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("aep serve did not exit after draining")
	}
	log := stderr.String()
	if !strings.Contains(log, `msg="session snapshotted on drain"`) {
		t.Errorf("no snapshot of the live session on drain:\n%s", log)
	}
}
