package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// TestSessionCapAtHandshake checks server.limits.max_sessions over HTTP
// (docs/SECURITY.md, The edge): POST /session is never refused for
// load, since a pending session does not count; a handshake that would
// pass the cap answers ok false with runtime_error "too_many_sessions";
// the sessions that exist go on, and a slot freed by a session that ended
// can be taken again. Only a closing host answers POST /session with 503.
func TestSessionCapAtHandshake(t *testing.T) {
	h := newHost(t, func(c *server.Config) { c.Server.Limits.MaxSessions = 2 })
	base := newServer(t, h, httpapi.Options{})
	first, _ := handshake(t, base)
	second, s2 := handshake(t, base)

	third := createSession(t, base)
	s3 := openStream(t, base, third, "")
	send(t, base, third, handshakeLine("h3"))
	m := decode(t, s3.next(t, 5*time.Second))
	if m.Type != "handshake/resp" || m.Ok || m.Error.Code != "runtime_error" || m.Error.Detail["reason"] != "too_many_sessions" {
		t.Fatalf("handshake at the cap: %+v", m)
	}
	send(t, base, second, pingLine("still"))
	if m := decode(t, s2.next(t, 5*time.Second)); m.Type != "pong" || m.ReqID != "still" {
		t.Fatalf("session at the cap: %+v", m)
	}
	// shutdown ends the first session; its slot is free again, and the
	// third session, still pending, may now handshake.
	send(t, base, first, `{"type":"shutdown","id":"bye","proto":"1.0","ts":1,"timeout":1}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := h.Session(first); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first session did not end after shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
	send(t, base, third, handshakeLine("h3b"))
	if m := decode(t, s3.next(t, 5*time.Second)); m.Type != "handshake/resp" || !m.Ok {
		t.Fatalf("handshake after a slot was freed: %+v", m)
	}

	h.Close(context.Background())
	st, b := do(t, http.MethodPost, base+"/session", nil)
	var e struct {
		Ok      bool   `json:"ok"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &e); st != http.StatusServiceUnavailable || err != nil || e.Ok || e.Error != "unavailable" || e.Message == "" {
		t.Fatalf("POST /session on a closed host: %d %s", st, b)
	}
}
