package client_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	_ "github.com/aephost/aep/capabilities/all"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/store"
)

var forkCaps = []string{"tools", "memory", "env"}

func forkHost(t *testing.T) *server.Host {
	t.Helper()
	cfg := aeptest.Config(func(c *server.Config) {
		for _, p := range forkCaps {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
	})
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := server.New(context.Background(), cfg, server.WithDataDir(dir), server.WithStore(st),
		server.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// forkState is what a session holds that a fork carries.
type forkState struct {
	goal string // a working-memory entry
	step int    // the episode's step
	obs  string // its observation
	file string // a file of the session directory
}

func stateOf(t *testing.T, ctx context.Context, c *client.Client, mem, ep string) forkState {
	t.Helper()
	r, err := c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: mem, Keys: []string{"goal"}})
	if err != nil {
		t.Fatal(err)
	}
	var st forkState
	if len(r.Entries) == 1 {
		json.Unmarshal(r.Entries[0].Content, &st.goal)
	}
	o, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep})
	if err != nil {
		t.Fatal(err)
	}
	st.step, st.obs = o.Step, string(o.Observation)
	res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": "plan.txt"}})
	if err != nil || !res.Success {
		t.Fatalf("read_file: %+v %v", res, err)
	}
	var data struct {
		Content string `json:"content"`
	}
	raw, _ := json.Marshal(res.Data)
	json.Unmarshal(raw, &data)
	st.file = data.Content
	return st
}

func remember(t *testing.T, ctx context.Context, c *client.Client, mem, goal string) {
	t.Helper()
	raw, _ := json.Marshal(goal)
	if _, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mem, Entries: []msg.MemoryEntry{{Key: "goal", Tier: "working", Content: raw}}}); err != nil {
		t.Fatal(err)
	}
}

// forkScenario gives the parent working memory, an episode one step in
// and a file, forks it twice through Client.Fork, and checks that each
// fork starts with the parent's state, that what one fork does stays its
// own, and that the parent is unchanged.
func forkScenario(t *testing.T, parent *client.Client, opts ...client.ForkOption) {
	ctx := aeptest.Context(t)
	mem, err := parent.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	remember(t, ctx, parent, mem.MemoryID, "parent goal")
	reset, err := parent.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(7)})
	if err != nil {
		t.Fatal(err)
	}
	ep := reset.EpisodeID
	if _, err := parent.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: json.RawMessage("50")}); err != nil {
		t.Fatal(err)
	}
	if res, err := parent.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "plan.txt", "content": "parent plan"}}); err != nil || !res.Success {
		t.Fatalf("write_file: %+v %v", res, err)
	}
	before := stateOf(t, ctx, parent, mem.MemoryID, ep)
	if before.goal != "parent goal" || before.step != 1 || before.obs == "" || before.file != "parent plan" {
		t.Fatalf("the parent's state before the fork: %+v", before)
	}

	forks, err := parent.Fork(ctx, 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer forks.Close()
	if len(forks.Clients) != 2 || len(forks.Reply.Forks) != 2 {
		t.Fatalf("forks %d, reply %+v", len(forks.Clients), forks.Reply)
	}
	for i, c := range forks.Clients {
		if c.SessionID() != forks.Reply.Forks[i].SessionID || c.SessionID() == parent.SessionID() {
			t.Fatalf("fork %d is session %q, the reply says %q", i, c.SessionID(), forks.Reply.Forks[i].SessionID)
		}
		if got := stateOf(t, ctx, c, mem.MemoryID, ep); got != before {
			t.Fatalf("fork %d starts at %+v, the parent stood at %+v", i, got, before)
		}
	}

	// Fork 0 goes its own way.
	a, b := forks.Clients[0], forks.Clients[1]
	remember(t, ctx, a, mem.MemoryID, "fork goal")
	if _, err := a.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: json.RawMessage("25")}); err != nil {
		t.Fatal(err)
	}
	if res, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "plan.txt", "content": "fork plan"}}); err != nil || !res.Success {
		t.Fatalf("write_file: %+v %v", res, err)
	}
	after := stateOf(t, ctx, a, mem.MemoryID, ep)
	if after.goal != "fork goal" || after.step != before.step+1 || after.file != "fork plan" {
		t.Fatalf("fork 0 after its own moves: %+v", after)
	}
	if got := stateOf(t, ctx, b, mem.MemoryID, ep); got != before {
		t.Fatalf("fork 1 saw fork 0's moves: %+v, want %+v", got, before)
	}
	if got := stateOf(t, ctx, parent, mem.MemoryID, ep); got != before {
		t.Fatalf("the parent changed: %+v, want %+v", got, before)
	}
}

func TestForkInProcess(t *testing.T) {
	for _, codec := range []client.Codec{client.JSON, client.Direct} {
		t.Run(map[client.Codec]string{client.JSON: "json", client.Direct: "direct"}[codec], func(t *testing.T) {
			h := forkHost(t)
			parent := aeptest.ConnectWith(t, h, codec, nil, forkCaps...)
			forkScenario(t, parent, client.ForkAttach(client.InProcessAttach(h, codec, nil)))
		})
	}
}

func TestForkOverHTTPAndWebSocket(t *testing.T) {
	h := forkHost(t)
	ts := httptest.NewServer(httpapi.Handler(h, httpapi.Options{}))
	t.Cleanup(ts.Close)
	ctx := aeptest.Context(t)
	dial := map[string]func() (*client.Client, error){
		"http": func() (*client.Client, error) {
			conn, err := client.DialHTTP(ctx, ts.URL, nil)
			if err != nil {
				return nil, err
			}
			return client.New(client.Lines(conn, nil)), nil
		},
		"websocket": func() (*client.Client, error) {
			return client.WebSocket(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/ws", nil)
		},
	}
	for name, d := range dial {
		t.Run(name, func(t *testing.T) {
			parent, err := d()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { parent.Close() })
			if _, err := parent.Handshake(ctx, "fork-agent", aeptest.Token, forkCaps...); err != nil {
				t.Fatal(err)
			}
			forkScenario(t, parent) // the forks are reached over the parent's transport
		})
	}
}

func TestForkNeedsAWayToTheForks(t *testing.T) {
	h := forkHost(t)
	ctx := aeptest.Context(t)
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Fork(ctx, 1); err == nil || !strings.Contains(err.Error(), "handshake first") {
		t.Fatalf("fork before the handshake: %v", err)
	}
	if _, err := c.Handshake(ctx, "fork-agent", aeptest.Token, forkCaps...); err != nil {
		t.Fatal(err)
	}
	// In process, the client cannot reach another session by itself.
	if _, err := c.Fork(ctx, 1); err == nil || !strings.Contains(err.Error(), "ForkAttach") {
		t.Fatalf("fork without a way to the forks: %v", err)
	}
	// A fork whose handshake is refused closes the forks and says so.
	_, err = c.Fork(ctx, 1, client.ForkAttach(client.InProcessAttach(h, client.JSON, nil)), client.ForkHandshake("fork-agent", "wrong-token", forkCaps...))
	if err == nil || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("fork with a wrong token: %v", err)
	}
}
