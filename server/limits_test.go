package server_test

// Tests of the kernel's limits: the direct codec still validates, and the
// session cap holds.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// TestDirectCodecStillValidated checks the in-process transport: the
// direct codec passes typed values, and they are still validated. Each
// invalid value gets the same error through the direct codec as its JSON
// line gets through the decoder, and a valid request afterwards is served.
func TestDirectCodecStillValidated(t *testing.T) {
	other := "s-0000000000000000"
	neg := -1
	tests := []struct {
		name  string
		m     wire.Message
		code  wire.Code
		field string // detail.field of a schema_violation
	}{
		{"enum", &testproto.EchoSayReq{Text: "hi", Mode: "shout"}, wire.CodeSchemaViolation, "mode"},
		{"minimum", &testproto.EchoWaitReq{Ms: &neg}, wire.CodeSchemaViolation, "ms"},
		{"host-only type", &msg.Pong{UptimeSeconds: 1}, wire.CodeParseError, ""},
		{"body session_id of another session", &testproto.EchoSayReq{Text: "hi", Mode: "plain", SessionID: &other}, wire.CodeUnauthorized, ""},
	}
	for name, codec := range map[string]client.Codec{"json": client.JSON, "direct": client.Direct} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, server.Config{}, echoSpec("e1", 0, false, &echoplug.Plugin{}))
			c, err := client.InProcess(h, codec, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := tctx(t)
			// Before the handshake every request is unauthorized, typed or not.
			_, err = c.Request(ctx, &testproto.EchoSayReq{Text: "early", Mode: "plain"})
			wantWireError(t, err, wire.CodeUnauthorized, "")
			if _, err := c.Handshake(ctx, "agent", "secret", "echo"); err != nil {
				t.Fatal(err)
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					_, err := c.Request(ctx, tc.m)
					wantWireError(t, err, tc.code, tc.field)
				})
			}
			r, err := testproto.Client{Requester: c}.EchoSay(ctx, &testproto.EchoSayReq{Text: "after", Mode: "upper"})
			if err != nil || r.Text != "AFTER" {
				t.Fatalf("valid request after refused ones: %+v %v", r, err)
			}
		})
	}
}

func wantWireError(t *testing.T, err error, code wire.Code, field string) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("want a %s error, got %v", code, err)
	}
	if we.Code != code {
		t.Fatalf("code %s (%s), want %s", we.Code, we.Message, code)
	}
	if we.Retryable() != code.Retryable() {
		t.Fatalf("retryable %v for %s", we.Retryable(), code)
	}
	if field != "" {
		if d, _ := we.Detail.(map[string]any); d["field"] != field {
			t.Fatalf("detail %v, want field %q", we.Detail, field)
		}
	}
}

// TestMaxSessions checks the session cap (server.limits.max_sessions):
// sessions waiting for their handshake do not count (they have a pool of
// their own, pending.go), so opening one never fails for load; past the
// cap a handshake answers ok false with runtime_error "too_many_sessions",
// and a slot freed by a closed session can be taken again.
func TestMaxSessions(t *testing.T) {
	cfg := server.Config{Server: server.ServerConfig{AuthToken: "secret", Limits: server.Limits{MaxSessions: 2}}}
	h := newHost(t, cfg, echoSpec("e1", 0, false, &echoplug.Plugin{}))
	first, _ := connect(t, h)
	_, ec := connect(t, h)
	ctx := tctx(t)
	third, err := h.ConnectLines(8)
	if err != nil {
		t.Fatalf("a pending session past the cap: %v", err)
	}
	hs := []byte(`{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["echo"],"auth_token":"secret"}`)
	third.WriteLine(ctx, hs)
	if l, err := third.ReadLine(ctx); err != nil || !strings.Contains(string(l), `"ok":false`) || !strings.Contains(string(l), `"reason":"too_many_sessions"`) || !strings.Contains(string(l), `"code":"runtime_error"`) {
		t.Fatalf("handshake past the cap: %s %v", l, err)
	}
	// The sessions that exist keep working.
	if r, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "ok", Mode: "plain"}); err != nil || r.Text != "ok" {
		t.Fatalf("session at the cap: %+v %v", r, err)
	}
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for h.LiveSessions() > 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	third.WriteLine(ctx, hs)
	if l, err := third.ReadLine(ctx); err != nil || !strings.Contains(string(l), `"ok":true`) {
		t.Fatalf("handshake after a slot was freed: %s %v", l, err)
	}
}
