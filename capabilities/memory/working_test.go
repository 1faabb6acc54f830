package memory_test

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
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
			h := newHost(t, &memory.Plugin{WorkingMaxEntries: tc.entries, WorkingMaxBytes: tc.maxBytes}, "")
			c := connect(t, h, codecs[0].codec)
			id := initMem(t, c, "full", nil)
			store1(t, c, id, ent("working", "k1", "v1", 0), ent("working", "k2", "v2", 0), ent("working", "k3", "v3", 0))
			_, err := c.MemoryStore(ctxT(t), &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{ent("semantic", "s", "v", 0), ent("working", "k4", "v4", 0)}})
			wantErr(t, err, wire.CodeSchemaViolation, "working memory is full")
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
			h := newHost(t, &memory.Plugin{WorkingMaxEntries: tc.entries, WorkingMaxBytes: tc.maxBytes, WorkingFullPolicy: memory.PolicyEvictLRU}, "")
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
			_, err := c.MemoryStore(ctxT(t), &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{
				ent("working", "a1", "v1", 0), ent("working", "a2", "v2", 0), ent("working", "a3", "v3", 0), ent("working", "a4", "v4", 0)}})
			wantErr(t, err, wire.CodeSchemaViolation, "exceeds the")
		})
	}
	p := &memory.Plugin{WorkingFullPolicy: "drop_random"}
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
				ctx := ctxT(t)
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
				rr, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: snap.SnapshotID})
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(strings.Join(rr.Restored, ","), "memory") {
					t.Fatalf("memory not restored: %v", rr.Restored)
				}
				if got := get(t, c, id, "working", "a", "b", "c"); !reflect.DeepEqual(got, []string{"alpha", "beta"}) {
					t.Fatalf("restored working memory: %q", got)
				}
				if hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: ptr("alpha"), Tags: []string{"t"}}); keysOf(hits) != "a" {
					t.Fatalf("recall after restore: %s", keysOf(hits))
				}
			})
		}
	}
	p := &memory.Plugin{}
	if err := p.Provision(ctxT(t), serverEnvNoStore()); err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	for _, bad := range []string{"", "{", `{"version":9}`} {
		if err := p.Restore(ctxT(t), "s-1", []byte(bad)); err == nil {
			t.Fatalf("restore of %q succeeded", bad)
		}
	}
}

// fakeLink is the test double of the kernel's parent link, until the
// subagents capability spawns real child sessions.
type fakeLink struct {
	mu      sync.Mutex
	parents map[string]string
}

func (l *fakeLink) Parent(id string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.parents[id]
	return p, ok
}

func (l *fakeLink) set(child, parent string) {
	l.mu.Lock()
	l.parents[child] = parent
	l.mu.Unlock()
}

// The four scope views of a child session's working memory, through the
// kernel, with the parent link's test double.
func TestScopeViews(t *testing.T) {
	link := &fakeLink{parents: map[string]string{}}
	p := &memory.Plugin{Link: link}
	h := newHost(t, p, "")
	parent := connect(t, h, codecs[0].codec)
	pid := initMem(t, parent, "team", nil)
	store1(t, parent, pid, ent("working", "plan", "step one", 0))

	type childMem struct {
		c  *client.Client
		id string
	}
	spawn := func(scope string) childMem {
		cl := connect(t, h, codecs[1].codec)
		link.set(cl.SessionID(), parent.SessionID())
		if err := p.SetScope(cl.SessionID(), parent.SessionID(), scope); err != nil {
			t.Fatal(err)
		}
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
	_, err := restricted.c.MemoryStore(ctxT(t), &msg.MemoryStoreReq{MemoryID: restricted.id, Entries: []msg.MemoryEntry{ent("working", "plan", "hijack", 0)}})
	wantErr(t, err, wire.CodeSchemaViolation, "read-only in a restricted scope")
	_, err = restricted.c.MemoryForget(ctxT(t), &msg.MemoryForgetReq{MemoryID: restricted.id, Keys: []string{"plan"}})
	wantErr(t, err, wire.CodeSchemaViolation, "read-only in a restricted scope")
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
	gc := connect(t, h, codecs[0].codec)
	link.set(gc.SessionID(), restricted.c.SessionID())
	if err := p.SetScope(gc.SessionID(), restricted.c.SessionID(), "shared"); err != nil {
		t.Fatal(err)
	}
	gid := initMem(t, gc, "team", nil)
	if got := get(t, gc, gid, "working", "plan"); !reflect.DeepEqual(got, []string{"step two"}) {
		t.Fatalf("grandchild reads %q", got)
	}
	_, err = gc.MemoryStore(ctxT(t), &msg.MemoryStoreReq{MemoryID: gid, Entries: []msg.MemoryEntry{ent("working", "x", "y", 0)}})
	wantErr(t, err, wire.CodeSchemaViolation, "read-only")

	// SetScope refuses an unknown scope and a parent the link does not report.
	stranger := connect(t, h, codecs[0].codec)
	if err := p.SetScope(stranger.SessionID(), parent.SessionID(), "shared"); !errors.Is(err, memory.ErrScopeOwner) {
		t.Fatalf("scope for a session that is no child: %v", err)
	}
	link.set(stranger.SessionID(), parent.SessionID())
	if err := p.SetScope(stranger.SessionID(), parent.SessionID(), "borrowed"); !errors.Is(err, memory.ErrBadScope) {
		t.Fatalf("unknown scope: %v", err)
	}
	// When the link loses the parent, a shared child gets a clear error.
	link.set(shared.c.SessionID(), "")
	link.mu.Lock()
	delete(link.parents, shared.c.SessionID())
	link.mu.Unlock()
	_, err = shared.c.MemoryRetrieve(ctxT(t), &msg.MemoryRetrieveReq{MemoryID: shared.id, Keys: []string{"plan"}})
	wantErr(t, err, wire.CodeSchemaViolation, "parent session is gone")
}

func serverEnvNoStore() server.PluginEnv { return server.PluginEnv{Name: "memory", Type: "memory"} }
