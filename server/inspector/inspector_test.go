package inspector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/inspector"
)

// TestAccess: the inspector is behind the operator token whatever asks —
// a page without the login cookie gets a form with no data, the feeds a
// 401 — and behind the listener's Host and Origin rules; a login sets a
// cookie that is not the token; every answer carries the strict CSP.
func TestAccess(t *testing.T) {
	r := newRig(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var cookie *http.Cookie
	for _, tc := range []struct {
		name       string
		method     string
		path       string
		header     map[string]string
		form       url.Values
		withCookie bool
		want       int
		body       string
	}{
		{name: "page without login", method: "GET", path: "/inspector/", want: 401, body: "operator token"},
		{name: "feed without login", method: "GET", path: "/inspector/api/host", want: 401},
		{name: "script without login", method: "GET", path: "/inspector/app.js", want: 401},
		{name: "wrong bearer", method: "GET", path: "/inspector/api/host", header: map[string]string{"Authorization": "Bearer nope-nope-nope-nope"}, want: 401},
		{name: "wrong token link", method: "GET", path: "/inspector/?token=nope", want: 401, body: "not the operator token"},
		{name: "login link", method: "GET", path: "/inspector/?token=" + operatorToken, want: 303},
		{name: "page with login", method: "GET", path: "/inspector/", withCookie: true, want: 200, body: "app.js"},
		{name: "script with login", method: "GET", path: "/inspector/app.js", withCookie: true, want: 200, body: "textContent"},
		{name: "foreign host", method: "GET", path: "/inspector/", withCookie: true, header: map[string]string{"Host": "evil.example"}, want: 403},
		{name: "foreign origin", method: "GET", path: "/inspector/api/host", withCookie: true, header: map[string]string{"Origin": "https://evil.example"}, want: 403},
		{name: "a page of another loopback port", method: "GET", path: "/inspector/api/host", withCookie: true,
			header: map[string]string{"Origin": "http://127.0.0.1:1"}, want: 403},
		{name: "its own page", method: "GET", path: "/inspector/app.css", withCookie: true, header: map[string]string{"Origin": r.srv.URL}, want: 200},
		{name: "form login without origin", method: "POST", path: "/inspector/login", form: url.Values{"token": {operatorToken}}, want: 403},
		{name: "form login from a foreign page", method: "POST", path: "/inspector/login", form: url.Values{"token": {operatorToken}},
			header: map[string]string{"Origin": "https://evil.example"}, want: 403},
		{name: "form login", method: "POST", path: "/inspector/login", form: url.Values{"token": {operatorToken}},
			header: map[string]string{"Origin": r.srv.URL}, want: 303},
		{name: "no slash", method: "GET", path: "/inspector", want: 301},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.form != nil {
				body = strings.NewReader(tc.form.Encode())
			}
			req, _ := http.NewRequest(tc.method, r.srv.URL+tc.path, body)
			if tc.form != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			for k, v := range tc.header {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			if tc.withCookie {
				if cookie == nil {
					t.Fatal("no login cookie yet")
				}
				req.AddCookie(cookie)
			}
			res, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
			if res.StatusCode != tc.want || !strings.Contains(string(b), tc.body) {
				t.Fatalf("%s %s: %d %q, want %d with %q", tc.method, tc.path, res.StatusCode, b, tc.want, tc.body)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
				t.Fatalf("CSP %q", csp)
			}
			if strings.Contains(string(b), operatorToken) {
				t.Fatal("an answer holds the operator token")
			}
			for _, c := range res.Cookies() {
				if c.Name == "aep_inspector" {
					if c.Value == operatorToken || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
						t.Fatalf("login cookie %+v", c)
					}
					cookie = c
				}
			}
			if tc.want == 303 && res.Header.Get("Location") != "/inspector/" {
				t.Fatalf("login goes to %q", res.Header.Get("Location"))
			}
		})
	}
}

// TestTimelineShowsNoSecret: a session that ran before the page opened
// shows what the store recorded, then everything live from the moment of
// subscribing: requests with their replies and latency, events in place,
// in order, until its end. The secrets planted in its tool arguments,
// files, memory, process output and ids — the host token, a tenant's
// secret, a toolkit password, the transport id — are in no byte the feeds
// send, and each view is audited.
func TestTimelineShowsNoSecret(t *testing.T) {
	r := newRig(t)
	ctx := aeptest.Context(t)
	c, pipe := r.agent(t, "scripted-agent", tenantSecret)
	handle := aeptest.Handle(t, c)
	secrets := r.script(t, c, pipe) // recorded before the page opens

	hostRes := r.get(t, ctx, "/inspector/api/host")
	hostEvents := readEvents(hostRes.Body, func(event) bool { return true })
	hostRes.Body.Close()
	if len(hostEvents) != 1 || !strings.Contains(hostEvents[0].data, handle) || !strings.Contains(hostEvents[0].data, `"tenant":"acme"`) {
		t.Fatalf("host view %+v", hostEvents)
	}

	res := r.get(t, ctx, "/inspector/api/session?handle="+handle)
	if res.StatusCode != 200 {
		t.Fatalf("session feed: %d", res.StatusCode)
	}
	done := make(chan []event, 1)
	go func() {
		done <- readEvents(res.Body, func(e event) bool { return e.name == "end" })
	}()
	// Live: the whole script again, then the session ends.
	time.Sleep(100 * time.Millisecond) // the feed subscribed before it answered; this only orders the recorded part first
	secrets = append(secrets, r.script(t, c, pipe)...)
	c.Close()
	var events []event
	select {
	case events = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the feed did not end with the session")
	}
	res.Body.Close()

	var all strings.Builder
	var entries []map[string]any
	for _, e := range append(hostEvents, events...) {
		all.WriteString(e.data)
		if e.name == "msgs" {
			var es []map[string]any
			if err := json.Unmarshal([]byte(e.data), &es); err != nil {
				t.Fatal(err)
			}
			entries = append(entries, es...)
		}
	}
	if events[0].name != "meta" || !strings.Contains(events[0].data, `"live":true`) || events[len(events)-1].name != "end" {
		t.Fatalf("feed framing: first %+v, last %+v", events[0], events[len(events)-1])
	}
	var recorded, live int
	types := map[string]bool{}
	for i, e := range entries {
		switch e["src"] {
		case "recorded":
			recorded++
			if live > 0 {
				t.Fatalf("a recorded entry after a live one at %d", i)
			}
		case "live":
			live++
		}
		types[e["type"].(string)] = true
		if e["kind"] == "request" && e["src"] == "live" {
			// Its reply follows, with its latency, events between.
			var found bool
			for _, f := range entries[i+1:] {
				if f["req_id"] == e["id"] && f["kind"] != "event" {
					_, found = f["duration_ms"]
					break
				}
			}
			if !found && e["type"] != "handshake/req" {
				t.Fatalf("live request %v has no reply with a latency after it", e)
			}
		}
	}
	if recorded == 0 || live == 0 {
		t.Fatalf("%d recorded, %d live entries", recorded, live)
	}
	cancelled := false
	for _, e := range entries {
		if e["src"] == "live" && e["kind"] == "error" && e["code"] == "cancelled" {
			cancelled = true
		}
	}
	if !cancelled || !types["cancel"] {
		t.Error("no cancel and cancelled answer on the timeline")
	}
	for _, want := range []string{"tool/call/req", "tool/call/resp", "proc/event", "memory/store/req", "env/step/resp", "toolkit/configure/req", "pong"} {
		if !types[want] {
			t.Errorf("no %s on the timeline (%v)", want, types)
		}
	}
	text := all.String()
	if !strings.Contains(text, "the key is [redacted]") || !strings.Contains(text, "[redacted]") {
		t.Fatal("the planted secrets were not on the timeline at all: the check proves nothing")
	}
	for _, s := range append(secrets, operatorToken) {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("a feed sent %q: …%s…", s, text[max(0, i-200):min(len(text), i+100)])
		}
	}
	_ = r.h.Close(context.Background())
	audit, err := os.ReadFile(r.audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"type":"inspector/host"`, `"type":"inspector/session"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit lacks %s", want)
		}
	}
}

// TestPagesLeaveNoTap: each session page installs a tap and removes it
// when it leaves: more pages than a session may have at once open and
// close one after another, and each is served. A handle of no session is
// a 404, one of the wrong form a 400.
func TestPagesLeaveNoTap(t *testing.T) {
	r := newRig(t)
	c, _ := r.agent(t, "agent", hostToken)
	handle := aeptest.Handle(t, c)
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		res := r.get(t, ctx, "/inspector/api/session?handle="+handle)
		if res.StatusCode != 200 {
			t.Fatalf("page %d: %d", i, res.StatusCode)
		}
		readEvents(res.Body, func(e event) bool { return e.name == "meta" })
		cancel()
		res.Body.Close()
		// The server sees the page leave once it next waits on it.
		time.Sleep(20 * time.Millisecond)
		if _, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{}); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range map[string]int{"h-00000000000000000000000000000000": 404, "x": 400, "h-../../etc": 400} {
		res := r.get(t, context.Background(), "/inspector/api/session?handle="+url.QueryEscape(path))
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("handle %q: %d, want %d", path, res.StatusCode, want)
		}
	}
}

// TestOffWithoutToken: an operator listener configured without a token
// serves /metrics on loopback but no inspector, as it serves no admin API.
func TestOffWithoutToken(t *testing.T) {
	h := aeptest.NewHost(t, aeptest.Config(nil), nil)
	srv := httptest.NewServer(httpapi.OperatorHandler(h, httpapi.OperatorOptions{}))
	defer srv.Close()
	for path, want := range map[string]int{"/inspector/": 403, "/inspector/api/host": 403, "/inspector/?token=x": 403, "/metrics": 200} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, res.StatusCode, want)
		}
	}
}

// TestHostFeedShowsDrain: the host view says when the host drains.
func TestHostFeedShowsDrain(t *testing.T) {
	r := newRig(t)
	ctx := aeptest.Context(t)
	first := func() string {
		res := r.get(t, ctx, "/inspector/api/host")
		defer res.Body.Close()
		ev := readEvents(res.Body, func(event) bool { return true })
		if len(ev) != 1 || ev[0].name != "host" {
			t.Fatalf("host feed %+v", ev)
		}
		return ev[0].data
	}
	if v := first(); !strings.Contains(v, `"draining":false`) {
		t.Fatalf("before the drain: %s", v)
	}
	if _, err := r.h.Drain(ctx, false); err != nil {
		t.Fatal(err)
	}
	if v := first(); !strings.Contains(v, `"draining":true`) {
		t.Fatalf("during the drain: %s", v)
	}
}

// TestSlowPageIsToldWhatItMissed: a page that reads slower than its
// session talks never slows the session: messages beyond its queue are
// dropped, the page is told how many, and it still learns of the end.
func TestSlowPageIsToldWhatItMissed(t *testing.T) {
	defer inspector.SetQueueBounds(8, 1<<20)()
	r := newRig(t)
	ctx := aeptest.Context(t)
	c, _ := r.agent(t, "agent", hostToken)
	handle := aeptest.Handle(t, c)
	res := r.get(t, ctx, "/inspector/api/session?handle="+handle)
	defer res.Body.Close()
	// The page reads nothing while the session writes some 10 MB.
	big := strings.Repeat("x", 128<<10)
	for i := range 80 {
		if r, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": fmt.Sprintf("f%d", i), "content": big}}); err != nil || !r.Success {
			t.Fatalf("write_file %d: %+v %v", i, r, err)
		}
	}
	c.Close()
	events := readEvents(res.Body, func(e event) bool { return e.name == "end" })
	var dropped int
	for _, e := range events {
		if e.name == "dropped" {
			var d struct{ Count int }
			if err := json.Unmarshal([]byte(e.data), &d); err != nil {
				t.Fatal(err)
			}
			dropped += d.Count
		}
	}
	if dropped == 0 || events[len(events)-1].name != "end" {
		t.Fatalf("%d dropped, last event %q of %d", dropped, events[len(events)-1].name, len(events))
	}
}
