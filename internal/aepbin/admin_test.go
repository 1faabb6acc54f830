package aepbin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/wire"
)

// The admin API (docs/operating.md, Admin API) against the real binary,
// through `aep admin` wherever the CLI has the command: one host serving
// HTTP and WebSocket with its operator listener on loopback, tenants, and
// its default SQLite store, so that snapshots go to sql.

const (
	opToken   = "aepbin-operator-token-5e0c1d"
	secretOld = "team-a-secret-first-31f0"
	secretNew = "team-a-secret-second-a7d4"
)

func adminConfig(opAddr string, teamA ...string) string {
	return fmt.Sprintf(`server:
  tenants:
    - name: team-a
      secret_sha256: ["%s"]
      capabilities: [tools, session]
operator:
  listen: %s
  token: %s
`, strings.Join(teamA, `", "`), opAddr, opToken)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// aepAdmin runs `aep admin args…` with the operator token in its
// environment and returns its stdout; a failure ends the test unless
// fail is set, when its error and stderr are returned instead.
func aepAdmin(t *testing.T, opAddr, token string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(aepbin.Build(t), append([]string{"admin"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "AEP_OPERATOR_ADDR=" + opAddr, "AEP_OPERATOR_TOKEN=" + token}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("aep admin %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func mustAdmin(t *testing.T, opAddr string, args ...string) string {
	t.Helper()
	out, err := aepAdmin(t, opAddr, opToken, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// adminJSON runs `aep admin … --json` and decodes its answer.
func adminJSON(t *testing.T, opAddr string, v any, args ...string) {
	t.Helper()
	out := mustAdmin(t, opAddr, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("aep admin %v --json: %v\n%s", args, err, out)
	}
}

type listed struct {
	Draining bool `json:"draining"`
	Sessions []struct {
		Handle         string `json:"handle"`
		Tenant         string `json:"tenant"`
		AgentID        string `json:"agent_id"`
		State          string `json:"state"`
		Transport      string `json:"transport"`
		AgeSeconds     float64
		OperatorOpened bool `json:"operator_opened"`
		Budgets        *struct {
			DiskBytes struct{ Limit, Used int64 } `json:"disk_bytes"`
			LeafWork  struct{ Limit, Used int64 } `json:"leaf_work"`
			Files     struct{ Limit, Used int64 } `json:"files"`
		} `json:"budgets"`
		NewestSnapshot *struct {
			SnapshotID string `json:"snapshot_id"`
		} `json:"newest_snapshot"`
	} `json:"sessions"`
}

func handleOf(t *testing.T, c *client.Client) string {
	t.Helper()
	info, err := c.SessionInfo(ctx(t), &msg.SessionInfoReq{})
	if err != nil {
		t.Fatal(err)
	}
	return info.Handle
}

func status(t *testing.T, method, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminAPIWithTheBinary(t *testing.T) {
	opAddr := freeAddr(t)
	h := aepbin.Start(t, aepbin.Options{HTTP: true, Caps: []string{"tools", "proc", "session"}, Config: adminConfig(opAddr, sha(secretOld))})
	ops := "http://" + opAddr

	t.Run("every endpoint refuses without the operator token, on loopback too", func(t *testing.T) {
		for _, r := range [][2]string{{"GET", "/admin/sessions"}, {"POST", "/admin/sessions"}, {"GET", "/admin/sessions/h-x"},
			{"POST", "/admin/sessions/h-x/terminate"}, {"POST", "/admin/sessions/h-x/snapshot"}, {"POST", "/admin/drain"},
			{"POST", "/admin/undrain"}, {"POST", "/admin/reload"}} {
			for _, tok := range []string{"", "aepbin-operator-token-wrong!"} {
				if got := status(t, r[0], ops+r[1], tok); got != http.StatusUnauthorized {
					t.Errorf("%s %s with token %q: %d, want 401", r[0], r[1], tok, got)
				}
			}
		}
		if _, err := aepAdmin(t, opAddr, "aepbin-operator-token-wrong!", "list"); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("aep admin list with a wrong token: %v", err)
		}
		if got := status(t, "GET", h.URL+"/readyz", ""); got != http.StatusOK {
			t.Fatalf("a refused drain drained: /readyz %d", got)
		}
	})

	t.Run("list shows a live session's handle, tenant, agent, transport and budgets", func(t *testing.T) {
		res, err := h.Client.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "a.txt", "content": strings.Repeat("x", 5000)}})
		if err != nil || !res.Success {
			t.Fatalf("write_file: %+v %v", res, err)
		}
		wsHandle := handleOf(t, h.Client)
		a, err := client.SingleExchange(ctx(t), h.URL, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		if _, err := a.Handshake(ctx(t), "team-a-agent", secretOld, "tools", "session"); err != nil {
			t.Fatal(err)
		}
		aHandle := handleOf(t, a)
		var l listed
		adminJSON(t, opAddr, &l, "list")
		found := 0
		for _, s := range l.Sessions {
			switch s.Handle {
			case wsHandle:
				found++
				if s.Tenant != "default" || s.AgentID != "aepbin-agent" || s.Transport != "websocket" || s.State != "live" || s.Budgets == nil ||
					s.Budgets.DiskBytes.Used < 5000 || s.Budgets.DiskBytes.Limit <= 0 || s.Budgets.LeafWork.Limit <= 0 || s.Budgets.Files.Used < 1 {
					t.Errorf("the WebSocket session as listed: %+v budgets %+v", s, s.Budgets)
				}
			case aHandle:
				found++
				if s.Tenant != "team-a" || s.AgentID != "team-a-agent" || s.Transport != "http" || s.Budgets == nil {
					t.Errorf("team-a's session as listed: %+v", s)
				}
			}
		}
		if found != 2 || l.Draining {
			t.Fatalf("list: %+v", l)
		}
		table := mustAdmin(t, opAddr, "list")
		for _, want := range []string{wsHandle, aHandle, "team-a-agent", "websocket", "HANDLE", "LEAF WORK"} {
			if !strings.Contains(table, want) {
				t.Errorf("the table lacks %q:\n%s", want, table)
			}
		}
		var detail struct {
			Session struct {
				Handle string `json:"handle"`
			} `json:"session"`
		}
		adminJSON(t, opAddr, &detail, "inspect", aHandle)
		if detail.Session.Handle != aHandle {
			t.Fatalf("inspect: %+v", detail)
		}
	})

	t.Run("terminate answers the next request terminated and ends the session's processes", func(t *testing.T) {
		caps := []string{"tools", "proc", "session"}
		c := h.Connect(t, "", aepbin.Token, caps...)
		handle := handleOf(t, c)
		procTag, toolTag := aepbin.SleepTag(), aepbin.SleepTag()
		spawn(t, c, "sh", "-c", "setsid sleep "+procTag+" </dev/null >/dev/null 2>&1 & exec sleep "+procTag)
		inFlight := make(chan error, 1)
		go func() {
			_, err := c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []any{"sleep", toolTag}}})
			inFlight <- err
		}()
		waitRunning(t, procTag)
		waitRunning(t, toolTag)
		// A session over HTTP too: its id is unknown after (404).
		x, err := client.SingleExchange(ctx(t), h.URL, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		if _, err := x.Handshake(ctx(t), "x", aepbin.Token, caps...); err != nil {
			t.Fatal(err)
		}
		xHandle, xID := handleOf(t, x), x.SessionID()

		out := mustAdmin(t, opAddr, "terminate", handle)
		if !strings.Contains(out, "terminated "+handle) {
			t.Fatalf("aep admin terminate: %s", out)
		}
		for _, tag := range []string{procTag, toolTag} {
			if !aepbin.GoneWithin(tag, 2*time.Second) {
				t.Errorf("a process %q of the terminated session still runs after 2 s", tag)
			}
		}
		select {
		case err := <-inFlight:
			if we, ok := err.(*wire.Error); !ok || we.Code != wire.CodeRuntimeError || wire.ReasonOf(we.Detail) != "terminated" {
				t.Errorf("the request in flight: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the request in flight was not answered")
		}
		_, err = c.Ping(ctx(t), &msg.Ping{})
		if we, ok := err.(*wire.Error); !ok || we.Code != wire.CodeRuntimeError || wire.ReasonOf(we.Detail) != "terminated" || we.Retryable() {
			t.Fatalf("the next request after terminate: %v", err)
		}

		mustAdmin(t, opAddr, "terminate", xHandle)
		req, _ := http.NewRequest("POST", h.URL+"/send", strings.NewReader(`{"type":"ping","id":"p","proto":"1.0","ts":1}`))
		req.Header.Set("X-Session-Id", xID)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("POST /send to the terminated session's id: %d, want 404", resp.StatusCode)
		}
		if _, err := aepAdmin(t, opAddr, opToken, "inspect", handle); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("inspect after terminate: %v", err)
		}
	})

	t.Run("snapshot returns an id session/restore accepts", func(t *testing.T) {
		handle := handleOf(t, h.Client)
		var snap struct {
			SnapshotID string `json:"snapshot_id"`
			Target     string `json:"target"`
			Files      string `json:"files"`
		}
		adminJSON(t, opAddr, &snap, "snapshot", handle)
		if snap.SnapshotID == "" || snap.Target != "sql" || snap.Files != "stored" {
			t.Fatalf("snapshot: %+v", snap)
		}
		c := h.Connect(t, "", aepbin.Token, "tools", "session")
		res, err := c.SessionRestore(ctx(t), &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID})
		if err != nil || res.SnapshotID != snap.SnapshotID {
			t.Fatalf("session/restore of the operator's snapshot: %+v %v", res, err)
		}
		read, err := c.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "a.txt"}})
		if err != nil || !read.Success || !strings.Contains(fmt.Sprint(read.Data), "xxxxx") {
			t.Fatalf("the restored session's files: %+v %v", read, err)
		}
		var l listed
		adminJSON(t, opAddr, &l, "list")
		for _, s := range l.Sessions {
			if s.Handle == handle && (s.NewestSnapshot == nil || s.NewestSnapshot.SnapshotID != snap.SnapshotID) {
				t.Fatalf("list's newest snapshot of %s: %+v", handle, s.NewestSnapshot)
			}
		}
	})

	t.Run("operator-opened session: no tenant secret, marked in session/info", func(t *testing.T) {
		var o struct {
			SessionID string `json:"session_id"`
			Token     string `json:"token"`
			Handle    string `json:"handle"`
			Tenant    string `json:"tenant"`
		}
		adminJSON(t, opAddr, &o, "open", "--tenant", "team-a")
		if o.Tenant != "team-a" || o.Token == "" || o.Token == secretOld {
			t.Fatalf("open: %+v", o)
		}
		c := h.Connect(t, o.SessionID, o.Token, "tools", "proc", "session")
		info, err := c.SessionInfo(ctx(t), &msg.SessionInfoReq{})
		if err != nil || info.OperatorOpened == nil || !*info.OperatorOpened || info.Handle != o.Handle {
			t.Fatalf("session/info: %+v %v", info, err)
		}
		for _, e := range info.AcceptedCaps {
			if e.Name == "proc" && e.Enabled {
				t.Fatal("team-a's session has proc, which team-a may not have")
			}
		}
		if info2, _ := h.Client.SessionInfo(ctx(t), &msg.SessionInfoReq{}); info2.OperatorOpened != nil {
			t.Fatal("an agent's own session is marked operator_opened")
		}
		var l listed
		adminJSON(t, opAddr, &l, "list")
		ok := false
		for _, s := range l.Sessions {
			ok = ok || (s.Handle == o.Handle && s.OperatorOpened && s.Tenant == "team-a" && s.Transport == "websocket")
		}
		if !ok {
			t.Fatalf("list: %+v", l)
		}
	})

	t.Run("drain turns /readyz to 503 and undrain back", func(t *testing.T) {
		out := mustAdmin(t, opAddr, "drain")
		if !strings.Contains(out, "draining") {
			t.Fatalf("aep admin drain: %s", out)
		}
		if got := status(t, "GET", h.URL+"/readyz", ""); got != http.StatusServiceUnavailable {
			t.Fatalf("/readyz after drain: %d", got)
		}
		if got := status(t, "POST", h.URL+"/session", ""); got != http.StatusServiceUnavailable {
			t.Fatalf("POST /session while drained: %d", got)
		}
		if _, err := h.Client.Ping(ctx(t), &msg.Ping{}); err != nil {
			t.Fatalf("a drain without snapshots cut a session: %v", err)
		}
		mustAdmin(t, opAddr, "undrain")
		if got := status(t, "GET", h.URL+"/readyz", ""); got != http.StatusOK {
			t.Fatalf("/readyz after undrain: %d", got)
		}
	})

	t.Run("reload accepts a new tenant secret and refuses a removed one", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(h.DataDir, "config.yaml"), []byte(adminConfig(opAddr, sha(secretNew))), 0o644); err != nil {
			t.Fatal(err)
		}
		out := mustAdmin(t, opAddr, "reload")
		if !strings.Contains(out, "team-a") {
			t.Fatalf("aep admin reload: %s", out)
		}
		_, hs := exchange(t, h, secretNew, "tools")
		if hs == nil || !hs.Ok {
			t.Fatalf("the new secret after reload: %+v", hs)
		}
		_, hs = exchange(t, h, secretOld, "tools")
		if hs == nil || hs.Ok || hs.Error == nil || hs.Error.Code != string(wire.CodeUnauthorized) {
			t.Fatalf("the removed secret after reload: %+v", hs)
		}
		if !strings.Contains(h.Stderr(), "tenants reloaded") {
			t.Fatal("no reload in the host's log")
		}
	})

	t.Run("every action is audited with the operator as actor", func(t *testing.T) {
		want := []string{"admin/sessions.list", "admin/session.inspect", "admin/session.terminate", "admin/session.snapshot",
			"admin/session.open", "admin/drain", "admin/undrain", "admin/reload"}
		var missing []string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			missing = missing[:0]
			seen, opened := auditTypes(t, filepath.Join(h.DataDir, "audit.jsonl"))
			for _, w := range want {
				if !seen[w] {
					missing = append(missing, w)
				}
			}
			if !opened {
				missing = append(missing, "a request of the operator's session with actor operator")
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(missing) > 0 {
			t.Fatalf("audit lacks %v", missing)
		}
		b, _ := os.ReadFile(filepath.Join(h.DataDir, "audit.jsonl"))
		for _, s := range []string{opToken, secretOld, secretNew} {
			if bytes.Contains(b, []byte(s)) {
				t.Fatalf("the audit log holds a secret %q", s)
			}
		}
	})
}

// auditTypes reads an audit log: the types of the lines with actor
// operator, and whether a protocol request (not admin/…) has that actor.
func auditTypes(t *testing.T, path string) (map[string]bool, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	seen, opened := map[string]bool{}, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			Type  string `json:"type"`
			Actor string `json:"actor"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Actor != "operator" {
			continue
		}
		seen[r.Type] = true
		opened = opened || !strings.HasPrefix(r.Type, "admin/")
	}
	return seen, opened
}
