package server_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server/inspect"
)

// TestInspectTapAndWatch: a tap sees each request of its session with the
// reply to it, in order, and nothing after Stop; the watch sees every
// answer with its outcome; the secrets list holds the host token and the
// session's transport id; an unknown handle is refused.
func TestInspectTapAndWatch(t *testing.T) {
	h := aeptest.NewHost(t, aeptest.Config(nil), nil)
	c := aeptest.Connect(t, h)
	ctx := aeptest.Context(t)
	handle := aeptest.Handle(t, c)
	in := h.Operator().Inspect()

	var mu sync.Mutex
	var got []inspect.Message
	var events []inspect.Event
	tapped, err := in.Tap(handle, func(m inspect.Message) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	stopWatch := in.Watch(func(e inspect.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	if tapped.Tenant == "" || tapped.AgentID != "aeptest-agent" {
		t.Fatalf("tapped names %q/%q", tapped.Tenant, tapped.AgentID)
	}
	if _, err := c.SessionInfo(ctx, &msg.SessionInfoReq{}); err != nil {
		t.Fatal(err)
	}
	tapped.Stop()
	stopWatch()
	tapped.Stop() // twice is harmless
	if _, err := c.SessionInfo(ctx, &msg.SessionInfoReq{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("tap saw %d messages, want the request and its reply: %+v", len(got), got)
	}
	req, resp := got[0], got[1]
	if req.Dir != "agent" || req.Kind != "request" || req.Type != "session/info/req" || resp.Dir != "host" || resp.Kind != "reply" || resp.ReqID != req.ID {
		t.Fatalf("tap saw %+v then %+v", req, resp)
	}
	if !strings.Contains(string(resp.Line), handle) {
		t.Fatalf("reply line %s lacks the handle", resp.Line)
	}
	if len(events) != 1 || events[0].Kind != "answer" || events[0].Session != handle || events[0].Code != "" {
		t.Fatalf("watch saw %+v", events)
	}
	sec := in.Secrets()
	has := func(v string) bool {
		for _, s := range sec.Values {
			if s == v {
				return true
			}
		}
		return false
	}
	if !has(aeptest.Token) || !has(c.SessionID()) {
		t.Fatalf("secrets lack the host token or the transport id: %d values", len(sec.Values))
	}
	if _, err := in.Tap("no-such-handle", func(inspect.Message) {}); !errors.Is(err, inspect.ErrNoSession) {
		t.Fatalf("tap of an unknown handle: %v", err)
	}
}
