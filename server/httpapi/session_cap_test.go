package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// TestSessionCapAnswers503 checks the one status code beyond the transport's
// 400/403/404/413 (docs/DECISIONS.md, HTTP transport): POST /session on a
// host at server.limits.max_sessions is 503 with the JSON error body, the
// sessions that exist go on, and a slot freed by a session that ended can be
// taken again.
func TestSessionCapAnswers503(t *testing.T) {
	h := newHost(t, func(c *server.Config) { c.Server.Limits.MaxSessions = 2 })
	base := newServer(t, h, httpapi.Options{})
	first, _ := handshake(t, base)
	second, s2 := handshake(t, base)

	st, b := do(t, http.MethodPost, base+"/session", nil)
	if st != http.StatusServiceUnavailable {
		t.Fatalf("POST /session at the cap: %d %s", st, b)
	}
	var e struct {
		Ok      bool   `json:"ok"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Ok || e.Error != "unavailable" || e.Message == "" {
		t.Fatalf("error body %s: %v", b, err)
	}
	send(t, base, second, pingLine("still"))
	if m := decode(t, s2.next(t, 5*time.Second)); m.Type != "pong" || m.ReqID != "still" {
		t.Fatalf("session at the cap: %+v", m)
	}
	// shutdown ends the first session; its slot is free again.
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
	createSession(t, base)
}
