package memory_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"github.com/aephost/aep/internal/aeptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

const token = "secret"

var codecs = []struct {
	name  string
	codec client.Codec
}{{"json", client.JSON}, {"direct", client.Direct}}

// clock is an injectable clock the tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testHost is a host serving p on a real store: SQLite in its data dir, or
// PostgreSQL.
type testHost struct {
	*server.Host
	st *store.Store
}

// backend is a kind of store the persistent tiers run on. dsn gives a new
// test its own empty store: "" (SQLite in the test's data dir), or a fresh
// PostgreSQL schema dropped when the test ends (skipped without PostgreSQL
// unless CI is set; internal/pgtest).
type backend struct {
	name string
	dsn  func(t testing.TB) string
}

var backends = []backend{
	{"sqlite", func(testing.TB) string { return "" }},
	{"postgres", pgSchema},
}

// pgSchema returns the DSN of a new PostgreSQL schema of its own.
func pgSchema(t testing.TB) string {
	t.Helper()
	schema := "aep_memory_test_" + wire.RandomHex(6)
	dsn := pgtest.DSN(t, schema)
	t.Cleanup(func() {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		if _, err := db.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
		}
	})
	return dsn
}

// forEachBackend runs f as a subtest per backend, with that backend's DSN.
func forEachBackend(t *testing.T, f func(t *testing.T, dsn string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.dsn(t)) })
	}
}

// newHost starts a host serving p on the SQLite store of dir (a temp dir
// when empty); closing it closes the store too, so a second host can open
// the same data dir (a restart).
func newHost(t testing.TB, p *memory.Plugin, dir string) *testHost {
	t.Helper()
	return newHostDSN(t, p, dir, "")
}

// newHostDSN is newHost on the store dsn names ("" is SQLite in dir).
func newHostDSN(t testing.TB, p *memory.Plugin, dir, dsn string) *testHost {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := store.Open(aeptest.Context(t), dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	h, err := server.New(context.Background(), cfg, server.WithDataDir(dir), server.WithStore(st),
		server.WithPlugin(server.PluginSpec{Name: "memory", Type: "memory", Impl: p}))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	th := &testHost{Host: h, st: st}
	t.Cleanup(func() { th.close() })
	return th
}

func (th *testHost) close() {
	if th.Host != nil {
		th.Host.Close(context.Background())
		th.st.Close()
		th.Host = nil
	}
}

func connect(t testing.TB, h *testHost, codec client.Codec) *client.Client {
	t.Helper()
	c, err := client.InProcess(h.Host, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := c.Handshake(context.Background(), "agent", token, "memory")
	if err != nil || !hs.Ok {
		t.Fatalf("handshake: %+v %v", hs, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func initMem(t testing.TB, c *client.Client, ns string, scope map[string]string) string {
	t.Helper()
	req := &msg.MemoryInitReq{Namespace: ns}
	if scope != nil {
		req.Scope = &scope
	}
	r, err := c.MemoryInit(aeptest.Context(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return r.MemoryID
}

// ent builds an entry; ttl 0 means none.
func ent(tier, key, content string, ttl int, tags ...string) msg.MemoryEntry {
	b, _ := json.Marshal(content)
	e := msg.MemoryEntry{Key: key, Content: b, Tier: msg.MemoryEntryTier(tier), Tags: tags}
	if ttl > 0 {
		e.TTL = &ttl
	}
	return e
}

func store1(t testing.TB, c *client.Client, id string, es ...msg.MemoryEntry) *msg.MemoryStoreResp {
	t.Helper()
	r, err := c.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: id, Entries: es})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tierp(t string) *msg.MemoryRetrieveReqTier { v := msg.MemoryRetrieveReqTier(t); return &v }

// get returns the contents (decoded strings) of keys in tier ("" = all).
func get(t testing.TB, c *client.Client, id, tier string, keys ...string) []string {
	t.Helper()
	req := &msg.MemoryRetrieveReq{MemoryID: id, Keys: keys}
	if tier != "" {
		req.Tier = tierp(tier)
	}
	r, err := c.MemoryRetrieve(aeptest.Context(t), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range r.Entries {
		out = append(out, text(e))
	}
	return out
}

func text(e msg.MemoryEntry) string {
	var s string
	if json.Unmarshal(e.Content, &s) != nil {
		return string(e.Content)
	}
	return s
}

func recall(t testing.TB, c *client.Client, req *msg.MemoryRecallReq) []msg.MemoryHit {
	t.Helper()
	if req.Limit == 0 {
		req.Limit = 10
	}
	if req.Order == "" {
		req.Order = msg.MemoryRecallReqOrderRelevance
	}
	r, err := c.MemoryRecall(aeptest.Context(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return r.Hits
}

func keysOf(hits []msg.MemoryHit) string {
	var ks []string
	for _, h := range hits {
		ks = append(ks, h.Entry.Key)
	}
	return strings.Join(ks, ",")
}

func stats(t testing.TB, c *client.Client, id string) map[string]int {
	t.Helper()
	r, err := c.MemoryStats(aeptest.Context(t), &msg.MemoryStatsReq{MemoryID: id})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ts := range r.Tiers {
		out[string(ts.Tier)] = ts.Entries
	}
	return out
}
