package subagents_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/capabilities/subagents"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// token is the host's auth token.
const token = aeptest.Token

// newHost starts a host with the real memory and subagents plugins and a
// data directory (for file snapshots).
func newHost(t testing.TB, sp *subagents.Plugin, edit func(*server.Config)) *server.Host {
	t.Helper()
	if sp == nil {
		sp = &subagents.Plugin{}
	}
	return aeptest.NewHost(t, aeptest.Config(edit), []server.PluginSpec{
		aeptest.Plugin("memory", &memory.Plugin{}),
		aeptest.Plugin("subagents", sp),
	}, server.WithDataDir(t.TempDir()))
}

// root opens a top-level session with the host token.
func root(t testing.TB, h *server.Host, caps ...string) *client.Client {
	t.Helper()
	if len(caps) == 0 {
		caps = []string{"memory", "subagents"}
	}
	return aeptest.Connect(t, h, caps...)
}

func spawn(t testing.TB, c *client.Client, req *msg.SubagentSpawnReq) *msg.SubagentSpawnResp {
	t.Helper()
	r, err := c.SubagentSpawn(aeptest.Context(t), req)
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
		conn, err := client.AttachHTTP(aeptest.Context(t), ts.URL, id, nil)
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
	c := tr.dial(t, h, r.SessionID)
	if len(caps) == 0 {
		caps = []string{"memory", "subagents"}
	}
	hs, err := c.Handshake(aeptest.Context(t), r.Subagent.Name, r.AuthToken, caps...)
	if err != nil || !hs.Ok {
		t.Fatalf("child handshake: %+v %v", hs, err)
	}
	if hs.SessionID == nil || *hs.SessionID != r.SessionID {
		t.Fatalf("child handshake reports session %v, want %s", hs.SessionID, r.SessionID)
	}
	return c
}

func initMem(t testing.TB, c *client.Client) string {
	t.Helper()
	r, err := c.MemoryInit(aeptest.Context(t), &msg.MemoryInitReq{Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	return r.MemoryID
}

func put(c *client.Client, t testing.TB, id, key, val string) error {
	b, _ := json.Marshal(val)
	_, err := c.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: id,
		Entries: []msg.MemoryEntry{{Key: key, Content: b, Tier: msg.MemoryEntryTierWorking}}})
	return err
}

// get returns the working-tier value of key, "" when absent.
func get(t testing.TB, c *client.Client, id, key string) string {
	t.Helper()
	tier := msg.MemoryRetrieveReqTier("working")
	r, err := c.MemoryRetrieve(aeptest.Context(t), &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{key}, Tier: &tier})
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

// waitGone waits until the session with id (a transport id or a handle)
// no longer exists on h: until it has ended, which it has once it is
// gone from the host.
func waitGone(t testing.TB, h *server.Host, id string) {
	t.Helper()
	s, ok := h.Session(id)
	if !ok {
		s, ok = h.SessionByHandle(id)
	}
	if !ok {
		return
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("session %s still exists", id)
	}
}

// handle returns the public handle of c's session.
func handle(t testing.TB, c *client.Client) string {
	t.Helper()
	info, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{})
	if err != nil {
		t.Fatal(err)
	}
	return info.Handle
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
	r, err := c.SubagentStatus(aeptest.Context(t), &msg.SubagentStatusReq{SubagentID: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.Subagent
}
