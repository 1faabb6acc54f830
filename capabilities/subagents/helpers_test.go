package subagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/capabilities/subagents"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/wire"
)

const token = "host-secret"

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newHost starts a host with the real memory and subagents plugins and a
// data directory (for file snapshots).
func newHost(t testing.TB, sp *subagents.Plugin, edit func(*server.Config)) *server.Host {
	t.Helper()
	if sp == nil {
		sp = &subagents.Plugin{}
	}
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	if edit != nil {
		edit(&cfg)
	}
	h, err := server.New(context.Background(), cfg, server.WithDataDir(t.TempDir()),
		server.WithPlugin(server.PluginSpec{Name: "memory", Type: "memory", Impl: &memory.Plugin{}}),
		server.WithPlugin(server.PluginSpec{Name: "subagents", Type: "subagents", Impl: sp}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// root opens a top-level session with the host token.
func root(t testing.TB, h *server.Host, caps ...string) *client.Client {
	t.Helper()
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(caps) == 0 {
		caps = []string{"memory", "subagents"}
	}
	if hs, err := c.Handshake(ctxT(t), "root", token, caps...); err != nil || !hs.Ok {
		t.Fatalf("handshake: %+v %v", hs, err)
	}
	return c
}

func spawn(t testing.TB, c *client.Client, req *msg.SubagentSpawnReq) *msg.SubagentSpawnResp {
	t.Helper()
	r, err := c.SubagentSpawn(ctxT(t), req)
	if err != nil {
		t.Fatalf("spawn %s: %v", req.Name, err)
	}
	return r
}

// transport is a way for a subagent's agent to reach its child session.
type transport struct {
	name string
	dial func(t testing.TB, h *server.Host, id string) *client.Client
}

var inprocJSON = transport{"inprocess-json", func(t testing.TB, h *server.Host, id string) *client.Client {
	p, err := h.ConnectLinesTo(id, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(p, nil))
	t.Cleanup(func() { c.Close() })
	return c
}}

var inprocDirect = transport{"inprocess-direct", func(t testing.TB, h *server.Host, id string) *client.Client {
	p, err := h.ConnectDirectTo(id, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(p)
	t.Cleanup(func() { c.Close() })
	return c
}}

// overHTTP serves h on a real loopback listener and reaches the child by
// X-Session-Id.
func overHTTP(t testing.TB, h *server.Host) transport {
	ts := httptest.NewServer(httpapi.Handler(h, httpapi.Options{}))
	t.Cleanup(ts.Close)
	return transport{"http", func(t testing.TB, h *server.Host, id string) *client.Client {
		conn, err := client.AttachHTTP(ctxT(t), ts.URL, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(client.Lines(conn, nil))
		t.Cleanup(func() { c.Close() })
		return c
	}}
}

// child connects to a spawned subagent and handshakes with its token.
func child(t testing.TB, h *server.Host, tr transport, r *msg.SubagentSpawnResp, caps ...string) *client.Client {
	t.Helper()
	c := tr.dial(t, h, r.SubagentID)
	if len(caps) == 0 {
		caps = []string{"memory", "subagents"}
	}
	hs, err := c.Handshake(ctxT(t), r.Subagent.Name, r.AuthToken, caps...)
	if err != nil || !hs.Ok {
		t.Fatalf("child handshake: %+v %v", hs, err)
	}
	if hs.SessionID == nil || *hs.SessionID != r.SubagentID {
		t.Fatalf("child handshake reports session %v, want %s", hs.SessionID, r.SubagentID)
	}
	return c
}

// wantErr checks a wire error's code and, when reason is set, its detail.reason.
func wantErr(t testing.TB, err error, code wire.Code, reason string) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("got %v, want a %s error", err, code)
	}
	if we.Code != code {
		t.Fatalf("got code %s (%s), want %s", we.Code, we.Message, code)
	}
	if reason != "" {
		d, _ := we.Detail.(map[string]any)
		if d["reason"] != reason {
			t.Fatalf("detail %v, want reason %q (%s)", we.Detail, reason, we.Message)
		}
	}
	return we
}

func ptr[T any](v T) *T { return &v }

func initMem(t testing.TB, c *client.Client) string {
	t.Helper()
	r, err := c.MemoryInit(ctxT(t), &msg.MemoryInitReq{Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	return r.MemoryID
}

func put(c *client.Client, t testing.TB, id, key, val string) error {
	b, _ := json.Marshal(val)
	_, err := c.MemoryStore(ctxT(t), &msg.MemoryStoreReq{MemoryID: id,
		Entries: []msg.MemoryEntry{{Key: key, Content: b, Tier: msg.MemoryEntryTierWorking}}})
	return err
}

// get returns the working-tier value of key, "" when absent.
func get(t testing.TB, c *client.Client, id, key string) string {
	t.Helper()
	tier := msg.MemoryRetrieveReqTier("working")
	r, err := c.MemoryRetrieve(ctxT(t), &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{key}, Tier: &tier})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) == 0 {
		return ""
	}
	var s string
	if err := json.Unmarshal(r.Entries[0].Content, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitGone waits until the session with id no longer exists on h.
func waitGone(t testing.TB, h *server.Host, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := h.Session(id); !ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("session %s still exists", id)
}

func waitDone(t testing.TB, c *client.Client, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: connection did not end", what)
	}
}

func status(t testing.TB, c *client.Client, id string) msg.SubagentRecord {
	t.Helper()
	r, err := c.SubagentStatus(ctxT(t), &msg.SubagentStatusReq{SubagentID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Subagent
}
