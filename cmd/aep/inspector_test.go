package main_test

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeOpensInspector: `aep serve` with no configuration opens an
// operator listener on an ephemeral loopback port and prints the
// inspector's address with a token made for the run (on stderr, never in
// the log); the page and its feeds need that token, and the printed link
// logs a browser in.
func TestServeOpensInspector(t *testing.T) {
	dir := t.TempDir()
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = []string{"AEP_AUTH_TOKEN=" + token, "PATH=" + os.Getenv("PATH")}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr)
		}
	}()
	link := regexp.MustCompile(`open (http://127\.0\.0\.1:[0-9]+/inspector/)\?token=([A-Za-z0-9]+)`)
	var m []string
	for deadline := time.Now().Add(20 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m = link.FindStringSubmatch(stderr.String())
	}
	if m == nil {
		t.Fatal("serve printed no inspector link")
	}
	page, tok := m[1], m[2]
	if !strings.Contains(stderr.String(), "AEP_OPERATOR_TOKEN="+tok) {
		t.Fatal("the operator token is not printed beside the link")
	}
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "time=") && strings.Contains(l, tok) {
			t.Fatalf("the log holds the operator token: %s", l)
		}
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url, bearer string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := get(page, ""); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the page without the token: %d", res.StatusCode)
	}
	if res := get(page+"api/host", token); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the feed with the agents' token: %d", res.StatusCode)
	}
	if res := get(page+"?token="+tok, ""); res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
		t.Fatalf("the printed link: %d %v", res.StatusCode, res.Cookies())
	}
	res := get(page+"api/host", tok)
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if res.StatusCode != http.StatusOK || err != nil || line != "event: host\n" {
		t.Fatalf("the host feed: %d %q %v", res.StatusCode, line, err)
	}
}
