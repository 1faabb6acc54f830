package memory_test

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Both full-memory policies: reject refuses the whole batch with a clear
// error and changes nothing; evict_lru evicts the least recently used
// entries (a read counts as a use).
func TestWorkingFullPolicies(t *testing.T) {
	for _, tc := range []struct {
		name              string
		entries, maxBytes int
	}{
		{"entries", 3, 0},
		{"bytes", 0, 3 * len(`k1"v1"`)},
	} {
		t.Run(tc.name+"/reject", func(t *testing.T) {
			h := newHost(t, &memory.Plugin{Settings: memory.Settings{WorkingMaxEntries: tc.entries, WorkingMaxBytes: tc.maxBytes}}, "")
			c := connect(t, h, codecs[0].codec)
			id := initMem(t, c, "full", nil)
			store1(t, c, id, ent("working", "k1", "v1", 0), ent("working", "k2", "v2", 0), ent("working", "k3", "v3", 0))
			_, err := c.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{ent("semantic", "s", "v", 0), ent("working", "k4", "v4", 0)}})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "working memory is full")
			if got := get(t, c, id, "", "k1", "k2", "k3", "k4", "s"); !reflect.DeepEqual(got, []string{"v1", "v2", "v3"}) {
				t.Fatalf("after a refused batch: %q", got)
			}
			// Replacing an existing key fits.
			store1(t, c, id, ent("working", "k2", "v9", 0))
			if got := get(t, c, id, "working", "k2"); !reflect.DeepEqual(got, []string{"v9"}) {
				t.Fatalf("upsert in a full store: %q", got)
			}
		})
		t.Run(tc.name+"/evict_lru", func(t *testing.T) {
			h := newHost(t, &memory.Plugin{Settings: memory.Settings{WorkingMaxEntries: tc.entries, WorkingMaxBytes: tc.maxBytes, WorkingFullPolicy: memory.PolicyEvictLRU}}, "")
			c := connect(t, h, codecs[1].codec)
			id := initMem(t, c, "full", nil)
			store1(t, c, id, ent("working", "k1", "v1", 0), ent("working", "k2", "v2", 0), ent("working", "k3", "v3", 0))
			get(t, c, id, "working", "k1") // k1 is now the most recently used; k2 the least
			r := store1(t, c, id, ent("working", "k4", "v4", 0))
			if r.Evicted == nil || *r.Evicted != 1 {
				t.Fatalf("evicted %v", r.Evicted)
			}
			if got := get(t, c, id, "working", "k1", "k2", "k3", "k4"); !reflect.DeepEqual(got, []string{"v1", "v3", "v4"}) {
				t.Fatalf("after eviction: %q", got)
			}
			// A batch bigger than the whole limit is refused under both policies.
			_, err := c.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{
				ent("working", "a1", "v1", 0), ent("working", "a2", "v2", 0), ent("working", "a3", "v3", 0), ent("working", "a4", "v4", 0)}})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "exceeds the")
		})
	}
	p := &memory.Plugin{Settings: memory.Settings{WorkingFullPolicy: "drop_random"}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "working_full_policy") {
		t.Fatalf("bad policy accepted: %v", err)
	}
}

// Working memory is captured by session/snapshot and restored by
// session/restore, memory_ids included, through both snapshot targets.
func TestSnapshotRestoresWorkingMemory(t *testing.T) {
	h := newHost(t, &memory.Plugin{}, "")
	for _, cd := range codecs {
		for _, target := range []string{"file", "sql"} {
			t.Run(cd.name+"/"+target, func(t *testing.T) {
				c := connect(t, h, cd.codec)
				ctx := aeptest.Context(t)
				id := initMem(t, c, "snap", nil)
				store1(t, c, id, ent("working", "a", "alpha", 0, "t"), ent("working", "b", "beta", 0))
				snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
				if err != nil {
					t.Fatal(err)
				}
				store1(t, c, id, ent("working", "a", "changed", 0), ent("working", "c", "gamma", 0))
				if _, err := c.MemoryForget(ctx, &msg.MemoryForgetReq{MemoryID: id, Keys: []string{"b"}}); err != nil {
					t.Fatal(err)
				}
				rr, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)})
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(strings.Join(rr.Restored, ","), "memory") {
					t.Fatalf("memory not restored: %v", rr.Restored)
				}
				if got := get(t, c, id, "working", "a", "b", "c"); !reflect.DeepEqual(got, []string{"alpha", "beta"}) {
					t.Fatalf("restored working memory: %q", got)
				}
				if hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("alpha"), Tags: []string{"t"}}); keysOf(hits) != "a" {
					t.Fatalf("recall after restore: %s", keysOf(hits))
				}
			})
		}
	}
	p := &memory.Plugin{}
	if err := p.Provision(aeptest.Context(t), serverEnvNoStore()); err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	for _, bad := range []string{"", "{", `{"version":9}`} {
		if err := p.Restore(aeptest.Context(t), "s-1", []byte(bad)); err == nil {
			t.Fatalf("restore of %q succeeded", bad)
		}
	}
}

// spawnChild makes a child session of parent with the memory scope
// through the kernel (server.Host.SpawnChild, which calls the plugin's
// ChildSpawned), and connects an agent to it with the child's own token.
func spawnChild(t *testing.T, h *testHost, parent *client.Client, scope string) *client.Client {
	t.Helper()
	ps, ok := h.Session(parent.SessionID())
	if !ok {
		t.Fatalf("no session %s", parent.SessionID())
	}
	child, tok, err := h.SpawnChild(aeptest.Context(t), ps, server.ChildOptions{Name: scope, Capabilities: []string{"memory"}, MemoryScope: scope})
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := h.ConnectLinesTo(child.ID(), 64)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(pipe, nil))
	t.Cleanup(func() { c.Close() })
	if hs, err := c.Handshake(aeptest.Context(t), scope, tok, "memory"); err != nil || !hs.Ok {
		t.Fatalf("child handshake: %+v %v", hs, err)
	}
	return c
}

// The four scope views of a child session's working memory, with child
// sessions the kernel spawns.
func TestScopeViews(t *testing.T) {
	p := &memory.Plugin{}
	h := newHost(t, p, "")
	parent := connect(t, h, codecs[0].codec)
	pid := initMem(t, parent, "team", nil)
	store1(t, parent, pid, ent("working", "plan", "step one", 0))

	type childMem struct {
		c  *client.Client
		id string
	}
	spawn := func(scope string) childMem {
		cl := spawnChild(t, h, parent, scope)
		return childMem{cl, initMem(t, cl, "team", nil)}
	}
	shared, restricted, isolated, snapshot := spawn("shared"), spawn("restricted"), spawn("isolated"), spawn("snapshot")

	// After spawn the parent changes its plan: shared and restricted see it,
	// the snapshot keeps the plan at spawn, isolated sees nothing.
	store1(t, parent, pid, ent("working", "plan", "step two", 0))
	for _, tc := range []struct {
		name string
		cm   childMem
		want []string
	}{
		{"shared", shared, []string{"step two"}},
		{"restricted", restricted, []string{"step two"}},
		{"isolated", isolated, nil},
		{"snapshot", snapshot, []string{"step one"}},
	} {
		if got := get(t, tc.cm.c, tc.cm.id, "working", "plan"); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s child reads %q, want %q", tc.name, got, tc.want)
		}
	}
	// A shared child's write reaches the parent.
	store1(t, shared.c, shared.id, ent("working", "note", "from the child", 0))
	if got := get(t, parent, pid, "working", "note"); !reflect.DeepEqual(got, []string{"from the child"}) {
		t.Fatalf("parent reads %q", got)
	}
	// A restricted child's write fails with the named error, changing nothing.
	_, err := restricted.c.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: restricted.id, Entries: []msg.MemoryEntry{ent("working", "plan", "hijack", 0)}})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "read-only in a restricted scope")
	_, err = restricted.c.MemoryForget(aeptest.Context(t), &msg.MemoryForgetReq{MemoryID: restricted.id, Keys: []string{"plan"}})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "read-only in a restricted scope")
	if got := get(t, parent, pid, "working", "plan"); !reflect.DeepEqual(got, []string{"step two"}) {
		t.Fatalf("parent's plan after a restricted write: %q", got)
	}
	// Isolated and snapshot children write to their own stores only.
	store1(t, isolated.c, isolated.id, ent("working", "plan", "isolated plan", 0))
	store1(t, snapshot.c, snapshot.id, ent("working", "plan", "snapshot plan", 0))
	if got := get(t, parent, pid, "working", "plan"); !reflect.DeepEqual(got, []string{"step two"}) {
		t.Fatalf("parent's plan after isolated/snapshot writes: %q", got)
	}
	// A grandchild sharing with a restricted child is read-only too.
	gc := spawnChild(t, h, restricted.c, "shared")
	gid := initMem(t, gc, "team", nil)
	if got := get(t, gc, gid, "working", "plan"); !reflect.DeepEqual(got, []string{"step two"}) {
		t.Fatalf("grandchild reads %q", got)
	}
	_, err = gc.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: gid, Entries: []msg.MemoryEntry{ent("working", "x", "y", 0)}})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "read-only")

	// The plugin refuses a scope it does not know, whoever calls it.
	if err := p.ChildSpawned(aeptest.Context(t), aeptest.Handle(t, isolated.c), aeptest.Handle(t, parent), "borrowed"); !errors.Is(err, memory.ErrBadScope) {
		t.Fatalf("unknown scope: %v", err)
	}
}

// A restore replaces the session's memory (the kernel drops it first), yet
// the scope is the kernel's and outlives it: a shared child gets its
// memory_ids back and still reads and writes its parent's store, which its
// restore leaves alone; an isolated child gets its own store back.
func TestRestoreKeepsChildScope(t *testing.T) {
	h := newHost(t, &memory.Plugin{}, "")
	ctx := aeptest.Context(t)
	for _, tc := range []struct {
		scope     string
		childSees string // the child's plan after the restore
	}{{"shared", "child plan"}, {"isolated", ""}} {
		t.Run(tc.scope, func(t *testing.T) {
			parent := connect(t, h, codecs[0].codec)
			pid := initMem(t, parent, "team", nil)
			c := spawnChild(t, h, parent, tc.scope)
			id := initMem(t, c, "team", nil)
			snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget("file")})
			if err != nil {
				t.Fatal(err)
			}
			store1(t, c, id, ent("working", "plan", "child plan", 0))
			if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
				t.Fatal(err)
			}
			var want []string
			if tc.childSees != "" {
				want = []string{tc.childSees}
			}
			if got := get(t, c, id, "working", "plan"); !reflect.DeepEqual(got, want) {
				t.Fatalf("after the restore the child reads %q, want %q", got, want)
			}
			// The parent's store is the one the shared child wrote to, and
			// the child's restore did not undo that write.
			if got := get(t, parent, pid, "working", "plan"); !reflect.DeepEqual(got, want) {
				t.Fatalf("parent reads %q, want %q", got, want)
			}
			store1(t, c, id, ent("working", "after", "restore", 0))
			inParent := get(t, parent, pid, "working", "after") != nil
			if inParent != (tc.scope == "shared") {
				t.Fatalf("a write after the restore reaches the parent: %v", inParent)
			}
		})
	}
}

// serverEnvNoStore is the env of a plugin provisioned without a host or a
// store; the host always gives a logger, so the test does too.
func serverEnvNoStore() server.PluginEnv {
	return server.PluginEnv{Name: "memory", Type: "memory", Logger: slog.New(slog.DiscardHandler)}
}
