package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admin "github.com/aephost/aep/gen/adminapi"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

const opToken = "operator-token-0123456789"

// adminRoutes are every path of the admin API with a body it accepts.
var adminRoutes = []struct{ method, path, body string }{
	{"GET", "/admin/sessions", ""},
	{"POST", "/admin/sessions", `{"tenant":"default"}`},
	{"GET", "/admin/sessions/h-x", ""},
	{"POST", "/admin/sessions/h-x/terminate", ""},
	{"POST", "/admin/sessions/h-x/snapshot", `{}`},
	{"POST", "/admin/drain", `{"snapshot":false}`},
	{"POST", "/admin/undrain", ""},
	{"POST", "/admin/reload", ""},
}

func operatorServer(tb testing.TB, h *server.Host, o httpapi.OperatorOptions) string {
	tb.Helper()
	ts := httptest.NewServer(httpapi.OperatorHandler(h, o))
	tb.Cleanup(ts.Close)
	return ts.URL
}

func bearer(tok string) reqOpt { return header("Authorization", "Bearer "+tok) }

// TestAdminRefusedWithoutToken: every admin path refuses a request without
// the operator token or with a wrong one (401, on loopback: httptest
// listens on 127.0.0.1), and the whole API is off (403) when the host has
// no operator token, though /metrics is then open on loopback as before.
// Nothing was done: the host is not draining and has no session.
func TestAdminRefusedWithoutToken(t *testing.T) {
	h := newHost(t, nil)
	on := operatorServer(t, h, httpapi.OperatorOptions{Token: opToken})
	off := operatorServer(t, h, httpapi.OperatorOptions{})
	for _, r := range adminRoutes {
		for _, c := range []struct {
			name string
			base string
			opts []reqOpt
			want int
		}{
			{"no token", on, nil, http.StatusUnauthorized},
			{"wrong token", on, []reqOpt{bearer(opToken + "x")}, http.StatusUnauthorized},
			{"basic scheme", on, []reqOpt{header("Authorization", "Basic "+opToken)}, http.StatusUnauthorized},
			{"api off", off, []reqOpt{bearer(opToken)}, http.StatusForbidden},
			{"api off, no token", off, nil, http.StatusForbidden},
		} {
			status, body := do(t, r.method, c.base+r.path, strings.NewReader(r.body), c.opts...)
			var e admin.Error
			if status != c.want || json.Unmarshal(body, &e) != nil || e.Ok || e.Message == "" {
				t.Errorf("%s %s, %s: %d %s, want %d", r.method, r.path, c.name, status, body, c.want)
			}
		}
	}
	if status, _ := do(t, "GET", off+"/metrics", nil); status != http.StatusOK {
		t.Errorf("/metrics without a token configured: %d", status)
	}
	if status, _ := do(t, "GET", on+"/metrics", nil); status != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d", status)
	}
	if h.Draining() || h.LiveSessions() != 0 {
		t.Fatal("a refused request acted")
	}
	if _, total, _ := h.Operator().Sessions(0); total != 0 {
		t.Fatalf("a refused open made a session: %d", total)
	}
}

// TestAdminBadRequests: malformed parameters and bodies, a foreign Origin
// and an oversized body are refused with the API's JSON error, and a
// handle no session has is 404 on every path that takes one.
func TestAdminBadRequests(t *testing.T) {
	h := newHost(t, nil)
	base := operatorServer(t, h, httpapi.OperatorOptions{Token: opToken})
	auth := bearer(opToken)
	for _, c := range []struct {
		name, method, path, body string
		opts                     []reqOpt
		want                     int
	}{
		{"limit not a number", "GET", "/admin/sessions?limit=x", "", nil, 400},
		{"limit zero", "GET", "/admin/sessions?limit=0", "", nil, 400},
		{"open without a tenant", "POST", "/admin/sessions", `{}`, nil, 400},
		{"open, not JSON", "POST", "/admin/sessions", `tenant=default`, nil, 400},
		{"open, unknown tenant", "POST", "/admin/sessions", `{"tenant":"nobody"}`, nil, 404},
		{"open, 65 capabilities", "POST", "/admin/sessions", `{"tenant":"default","capabilities":[` + strings.Repeat(`"x",`, 64) + `"x"]}`, nil, 400},
		{"open, huge body", "POST", "/admin/sessions", `{"tenant":"` + strings.Repeat("a", 70<<10) + `"}`, nil, 413},
		{"snapshot, unknown target", "POST", "/admin/sessions/h-x/snapshot", `{"target":"tape"}`, nil, 400},
		{"drain, bad timeout", "POST", "/admin/drain", `{"timeout":"forever"}`, nil, 400},
		{"drain, timeout past an hour", "POST", "/admin/drain", `{"timeout":"2h"}`, nil, 400},
		{"inspect unknown", "GET", "/admin/sessions/h-nobody", "", nil, 404},
		{"terminate unknown", "POST", "/admin/sessions/h-nobody/terminate", "", nil, 404},
		{"snapshot unknown", "POST", "/admin/sessions/h-nobody/snapshot", "", nil, 404},
		{"foreign origin", "GET", "/admin/sessions", "", []reqOpt{header("Origin", "https://evil.example")}, 403},
		{"reload without a file", "POST", "/admin/reload", "", nil, 409},
	} {
		status, body := do(t, c.method, base+c.path, strings.NewReader(c.body), append([]reqOpt{auth}, c.opts...)...)
		var e admin.Error
		if status != c.want || json.Unmarshal(body, &e) != nil || e.Message == "" {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.want)
		}
	}
	if h.Draining() {
		t.Fatal("a refused drain drained")
	}
}

// TestAdminDrainStopping: once the host stops (SIGTERM closes Stopping),
// the API neither drains nor undrains: the host drains on its own, and an
// undrain then would let requests be answered past the snapshots. A
// reload error is the file's, and the running tenants stay.
func TestAdminDrainStopping(t *testing.T) {
	h := newHost(t, nil)
	stop := make(chan struct{})
	base := operatorServer(t, h, httpapi.OperatorOptions{Token: opToken, Stopping: stop,
		Reload: func(context.Context) error { return errors.New("aep.yaml:3: server.tenants[0].name: missing") }})
	if status, body := do(t, "POST", base+"/admin/drain", strings.NewReader(`{"snapshot":false,"timeout":"1s"}`), bearer(opToken)); status != 200 || !h.Draining() {
		t.Fatalf("drain: %d %s", status, body)
	}
	close(stop)
	for _, p := range []string{"/admin/drain", "/admin/undrain"} {
		if status, body := do(t, "POST", base+p, nil, bearer(opToken)); status != http.StatusConflict {
			t.Errorf("%s while stopping: %d %s", p, status, body)
		}
	}
	if !h.Draining() {
		t.Fatal("undrained while stopping")
	}
	status, body := do(t, "POST", base+"/admin/reload", nil, bearer(opToken))
	if status != http.StatusUnprocessableEntity || !strings.Contains(string(body), "server.tenants[0].name") {
		t.Fatalf("reload of a bad file: %d %s", status, body)
	}
}

// TestTerminatedWebSocket: a terminated session's WebSocket answers the
// client's next request runtime_error reason terminated (the connection
// lingers for that), while over HTTP its id is unknown at once (404).
func TestTerminatedWebSocket(t *testing.T) {
	h := newHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	ops := operatorServer(t, h, httpapi.OperatorOptions{Token: opToken})
	ws := mustDialWS(t, base, nil)
	ws.handshake()
	ws.send(`{"type":"session/info/req","id":"i1","proto":"1.0","ts":1}`)
	var info struct {
		Handle string `json:"handle"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := ws.c.Read(ctx)
	if err != nil || json.Unmarshal(b, &info) != nil || info.Handle == "" {
		t.Fatalf("session/info: %s %v", b, err)
	}
	// An HTTP session too, for its 404.
	status, body := do(t, "POST", base+"/session", nil)
	var created struct {
		SessionID string `json:"session_id"`
	}
	if status != 200 || json.Unmarshal(body, &created) != nil {
		t.Fatalf("POST /session: %d %s", status, body)
	}
	exchange := func(line string) (int, []byte) {
		return do(t, "POST", base+"/send", strings.NewReader(line), header("X-Session-Id", created.SessionID), header("Accept", "application/json"))
	}
	if status, body := exchange(handshakeLine("hs")); status != 200 || !strings.Contains(string(body), `"ok":true`) {
		t.Fatalf("HTTP handshake: %d %s", status, body)
	}
	status, body = exchange(`{"type":"session/info/req","id":"i2","proto":"1.0","ts":1}`)
	var httpInfo struct {
		Handle string `json:"handle"`
	}
	if status != 200 || json.Unmarshal(body, &httpInfo) != nil {
		t.Fatalf("HTTP session/info: %d %s", status, body)
	}

	for _, hd := range []string{info.Handle, httpInfo.Handle} {
		if status, body := do(t, "POST", ops+"/admin/sessions/"+hd+"/terminate", nil, bearer(opToken)); status != 200 {
			t.Fatalf("terminate %s: %d %s", hd, status, body)
		}
	}
	ws.send(pingLine("p1"))
	m := ws.next()
	if m.Type != "error" || m.ReqID != "p1" || m.Code != "runtime_error" || m.Detail["reason"] != "terminated" {
		t.Fatalf("the terminated session's next request over WebSocket: %+v", m)
	}
	if status, body := exchange(pingLine("p2")); status != http.StatusNotFound || !strings.Contains(string(body), `"error":"terminated"`) {
		t.Fatalf("the terminated session's next request over HTTP: %d %s", status, body)
	}
	// A session id that never was is not_found, as before.
	if status, body := do(t, "POST", base+"/send", strings.NewReader(pingLine("p3")), header("X-Session-Id", "s-vm-00000000000000000000000000000000")); status != http.StatusNotFound || !strings.Contains(string(body), `"error":"not_found"`) {
		t.Fatalf("an unknown id: %d %s", status, body)
	}
	// The same handle is no session any more.
	if status, _ := do(t, "GET", ops+"/admin/sessions/"+info.Handle, nil, bearer(opToken)); status != http.StatusNotFound {
		t.Fatalf("inspect after terminate: %d", status)
	}
}

// TestAdminOpenUnavailable: an open the host refuses for now — past
// server.limits.max_sessions, past the tenant's total, while draining, or
// closed — is 503 unavailable with the kernel's own reason
// (operator.ErrUnavailable).
func TestAdminOpenUnavailable(t *testing.T) {
	sum := sha256.Sum256([]byte("team-b-secret-123"))
	for _, c := range []struct {
		name   string
		edit   func(*server.Config)
		tenant string
		// block makes the next open fail, after one open succeeded.
		block func(*server.Host)
		want  string
	}{
		{"max_sessions", func(c *server.Config) { c.Server.Limits.MaxSessions = 1 }, "default", nil, "too many sessions"},
		{"tenant total", func(c *server.Config) {
			c.Server.Tenants = []server.TenantConfig{{Name: "team-b", SecretSHA256: []string{hex.EncodeToString(sum[:])},
				Totals: server.TenantTotals{Sessions: 1}}}
		}, "team-b", nil, "tenant is at its total"},
		{"draining", nil, "default", func(h *server.Host) {
			if _, err := h.Drain(context.Background(), false); err != nil {
				t.Fatal(err)
			}
		}, "draining"},
		{"closed", nil, "default", func(h *server.Host) { h.Close(context.Background()) }, "closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t, c.edit)
			base := operatorServer(t, h, httpapi.OperatorOptions{Token: opToken})
			open := `{"tenant":"` + c.tenant + `"}`
			if status, body := do(t, "POST", base+"/admin/sessions", strings.NewReader(open), bearer(opToken)); status != http.StatusCreated {
				t.Fatalf("first open: %d %s", status, body)
			}
			if c.block != nil {
				c.block(h)
			}
			status, body := do(t, "POST", base+"/admin/sessions", strings.NewReader(open), bearer(opToken))
			var e admin.Error
			if status != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Error != "unavailable" ||
				!strings.Contains(strings.ToLower(e.Message), c.want) {
				t.Fatalf("open refused for now: %d %s, want 503 unavailable saying %q", status, body, c.want)
			}
		})
	}
}
