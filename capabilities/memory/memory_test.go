package memory_test

import (
	"encoding/json"
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// Every operation on every tier through the real kernel and Go client, with
// both codecs, on each backend: store, retrieve by key, upsert, the episodic
// log's order, stats, and forget by keys, tags, tier and age.
func TestOperationsPerTier(t *testing.T) { forEachBackend(t, testOperationsPerTier) }

func testOperationsPerTier(t *testing.T, dsn string) {
	clk := newClock()
	h := newHostDSN(t, &memory.Plugin{Clock: clk.Now}, "", dsn)
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := connect(t, h, cd.codec)
			ctx := aeptest.Context(t)
			id := initMem(t, c, "ops-"+cd.name, nil)
			r := store1(t, c, id,
				ent("working", "w1", "scratch one", 0, "a"),
				ent("semantic", "s1", "fact one", 0, "a", "b"),
				ent("episodic", "e1", "event one", 0, "a"),
			)
			if strings.Join(r.Stored, ",") != "w1,s1,e1" {
				t.Fatalf("stored %v", r.Stored)
			}
			clk.Add(time.Second)
			store1(t, c, id, ent("episodic", "e1", "event two", 0), ent("semantic", "s1", "fact one, revised", 0, "b"))
			for _, tc := range []struct {
				tier, key string
				want      []string
			}{
				{"working", "w1", []string{"scratch one"}},
				{"semantic", "s1", []string{"fact one, revised"}},
				{"episodic", "e1", []string{"event one", "event two"}},
				{"working", "s1", nil},
				{"", "s1", []string{"fact one, revised"}},
			} {
				if got := get(t, c, id, tc.tier, tc.key); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("retrieve %s/%s = %q, want %q", tc.tier, tc.key, got, tc.want)
				}
			}
			rr, err := c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{"e1", "nope"}, Tier: tierp("episodic")})
			if err != nil || len(rr.Missing) != 1 || rr.Missing[0] != "nope" {
				t.Fatalf("missing: %+v %v", rr, err)
			}
			if rr.Entries[0].Seq == nil || rr.Entries[1].Seq == nil || *rr.Entries[0].Seq >= *rr.Entries[1].Seq {
				t.Fatalf("episodic seq not in append order: %+v", rr.Entries)
			}
			if *rr.Entries[1].CreatedAt-*rr.Entries[0].CreatedAt != 1 {
				t.Fatalf("episodic timestamps: %v %v", *rr.Entries[0].CreatedAt, *rr.Entries[1].CreatedAt)
			}
			// The semantic upsert kept created_at and moved updated_at.
			sr, _ := c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{"s1"}, Tier: tierp("semantic")})
			if e := sr.Entries[0]; *e.UpdatedAt-*e.CreatedAt != 1 || strings.Join(e.Tags, ",") != "b" {
				t.Fatalf("upserted entry: %+v", e)
			}
			if st := stats(t, c, id); st["working"] != 1 || st["semantic"] != 1 || st["episodic"] != 2 {
				t.Fatalf("stats %v", st)
			}

			// Episodic log read back by time range and order.
			clk.Add(time.Second)
			store1(t, c, id, ent("episodic", "e2", "event three", 0))
			since := float64(clk.Now().Add(-time.Second).Unix())
			tier := msg.MemoryRecallReqTierEpisodic
			hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Tier: &tier, Since: &since, Order: msg.MemoryRecallReqOrderOldest})
			if got := keysOf(hits); got != "e1,e2" {
				t.Fatalf("episodic since %v oldest first: %s", since, got)
			}
			hits = recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Tier: &tier, Order: msg.MemoryRecallReqOrderNewest})
			if got := []string{text(hits[0].Entry), text(hits[1].Entry), text(hits[2].Entry)}; !reflect.DeepEqual(got, []string{"event three", "event two", "event one"}) {
				t.Fatalf("episodic newest first: %q", got)
			}

			// forget: by keys in one tier, by tags, by age, by tier.
			forget := func(req *msg.MemoryForgetReq) int {
				req.MemoryID = id
				r, err := c.MemoryForget(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return r.Deleted
			}
			store1(t, c, id, ent("semantic", "s2", "tagged", 0, "drop"), ent("working", "w2", "tagged", 0, "drop"))
			ep := msg.MemoryForgetReqTierEpisodic
			if n := forget(&msg.MemoryForgetReq{Keys: []string{"e1"}, Tier: &ep}); n != 2 {
				t.Fatalf("forget episodic e1: %d", n)
			}
			if n := forget(&msg.MemoryForgetReq{Tags: []string{"drop"}}); n != 2 {
				t.Fatalf("forget tag drop: %d", n)
			}
			clk.Add(time.Hour)
			store1(t, c, id, ent("working", "w3", "fresh", 0))
			if n := forget(&msg.MemoryForgetReq{OlderThan: aeptest.Ptr(60.0)}); n != 3 { // w1, s1, e2
				t.Fatalf("forget older than 60s: %d", n)
			}
			wk := msg.MemoryForgetReqTierWorking
			if n := forget(&msg.MemoryForgetReq{Tier: &wk}); n != 1 {
				t.Fatalf("forget working tier: %d", n)
			}
			if st := stats(t, c, id); st["working"]+st["semantic"]+st["episodic"] != 0 {
				t.Fatalf("stats after forgetting all: %v", st)
			}
		})
	}
}

// Bad input gets a clear error and changes nothing, in every tier.
func TestBadInputChangesNothing(t *testing.T) { forEachBackend(t, testBadInputChangesNothing) }

func testBadInputChangesNothing(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{Settings: memory.Settings{MaxContentBytes: 64}}, "", dsn)
	big := strings.Repeat("x", 100)
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := connect(t, h, cd.codec)
			other := connect(t, h, cd.codec)
			ctx := aeptest.Context(t)
			id := initMem(t, c, "bad-"+cd.name, nil)
			otherID := initMem(t, other, "bad-"+cd.name, nil)
			store1(t, c, id, ent("working", "keep", "w", 0), ent("semantic", "keep", "s", 0), ent("episodic", "keep", "e", 0))
			before := stats(t, c, id)
			for _, tier := range []string{"working", "semantic", "episodic"} {
				ok := ent(tier, "new", "fine", 0)
				for _, tc := range []struct {
					name    string
					id      string
					entries []msg.MemoryEntry
					code    wire.Code
					sub     string
				}{
					{"unknown tier", id, []msg.MemoryEntry{ok, ent("cosmic", "k", "v", 0)}, wire.CodeSchemaViolation, "entries[1].tier"},
					{"missing key", id, []msg.MemoryEntry{ok, ent(tier, "", "v", 0)}, wire.CodeSchemaViolation, "entries[1].key"},
					{"content over cap", id, []msg.MemoryEntry{ok, ent(tier, "k", big, 0)}, wire.CodeSchemaViolation, "over the cap of 64 bytes"},
					{"unknown memory_id", "mem-nope", []msg.MemoryEntry{ok}, wire.CodeRuntimeError, "unknown memory_id"},
					{"another session's memory_id", otherID, []msg.MemoryEntry{ok}, wire.CodeRuntimeError, "unknown memory_id"},
				} {
					_, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: tc.id, Entries: tc.entries})
					if err == nil {
						t.Fatalf("%s/%s: stored", tier, tc.name)
					}
					aeptest.WantError(t, err, tc.code, tc.sub)
					if got := get(t, c, id, "", "new"); got != nil {
						t.Fatalf("%s/%s: the batch's good entry was stored: %q", tier, tc.name, got)
					}
				}
			}
			// Reads and forget with a bad memory_id or tier.
			_, err := c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: "mem-nope", Keys: []string{"keep"}})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown memory_id")
			_, err = c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{"keep"}, Tier: tierp("cosmic")})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "tier")
			_, err = c.MemoryRecall(ctx, &msg.MemoryRecallReq{MemoryID: otherID, Query: aeptest.Ptr("keep"), Limit: 5, Order: "relevance"})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown memory_id")
			_, err = c.MemoryForget(ctx, &msg.MemoryForgetReq{MemoryID: id})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "tier or older_than is required")
			// An empty list is no selector (schemas/memory.json's anyOf).
			_, err = c.MemoryForget(ctx, &msg.MemoryForgetReq{MemoryID: id, Keys: []string{}, Tags: []string{}})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "keys (at least 1 item)")
			_, err = c.MemoryForget(ctx, &msg.MemoryForgetReq{MemoryID: "mem-nope", Keys: []string{"keep"}})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown memory_id")
			_, err = c.MemoryStats(ctx, &msg.MemoryStatsReq{MemoryID: "mem-nope"})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown memory_id")
			if after := stats(t, c, id); !reflect.DeepEqual(after, before) {
				t.Fatalf("stats changed: %v → %v", before, after)
			}
			if got := get(t, c, id, "", "keep"); len(got) != 3 {
				t.Fatalf("entries after bad input: %q", got)
			}
		})
	}
}

// One session never reads another's working memory; persistent tiers are
// shared within a namespace (and agent) and separate across them.
func TestIsolation(t *testing.T) { forEachBackend(t, testIsolation) }

func testIsolation(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{}, "", dsn)
	a, b := connect(t, h, codecs[0].codec), connect(t, h, codecs[1].codec)
	ida, idb := initMem(t, a, "iso", nil), initMem(t, b, "iso", nil)
	store1(t, a, ida, ent("working", "k", "a's scratch", 0), ent("semantic", "k", "shared fact", 0))
	if got := get(t, b, idb, "", "k"); !reflect.DeepEqual(got, []string{"shared fact"}) {
		t.Fatalf("session b sees %q", got)
	}
	if hits := recall(t, b, &msg.MemoryRecallReq{MemoryID: idb, Query: aeptest.Ptr("scratch")}); len(hits) != 0 {
		t.Fatalf("session b recalls a's working memory: %v", keysOf(hits))
	}
	other := initMem(t, b, "iso-other", nil)
	agent := initMem(t, b, "iso", map[string]string{"agent": "bob"})
	for _, id := range []string{other, agent} {
		if got := get(t, b, id, "", "k"); got != nil {
			t.Fatalf("another namespace or agent sees %q", got)
		}
	}
}

// Persistent tiers, full-text recall included, survive a host restart on
// the same data dir (SQLite) or the same DSN (PostgreSQL); the working tier
// is gone with its session.
func TestPersistenceAcrossRestart(t *testing.T) { forEachBackend(t, testPersistenceAcrossRestart) }

func testPersistenceAcrossRestart(t *testing.T, dsn string) {
	dir := t.TempDir()
	h := newHostDSN(t, &memory.Plugin{}, dir, dsn)
	c := connect(t, h, codecs[0].codec)
	id := initMem(t, c, "durable", map[string]string{"agent": "a1"})
	store1(t, c, id, ent("semantic", "fact", "the sky is blue", 0, "color"), ent("episodic", "ev", "first", 0),
		ent("episodic", "ev", "second", 0), ent("working", "tmp", "scratch", 0))
	c.Close()
	h.close()

	h2 := newHostDSN(t, &memory.Plugin{}, dir, dsn)
	c2 := connect(t, h2, codecs[1].codec)
	id2 := initMem(t, c2, "durable", map[string]string{"agent": "a1"})
	if got := get(t, c2, id2, "", "fact", "ev", "tmp"); !reflect.DeepEqual(got, []string{"the sky is blue", "first", "second"}) {
		t.Fatalf("after restart: %q", got)
	}
	if hits := recall(t, c2, &msg.MemoryRecallReq{MemoryID: id2, Query: aeptest.Ptr("sky")}); keysOf(hits) != "fact" {
		t.Fatalf("full-text index after restart: %s", keysOf(hits))
	}
	// A third start migrates over the full-text tables and columns without
	// trouble.
	c2.Close()
	h2.close()
	h3 := newHostDSN(t, &memory.Plugin{}, dir, dsn)
	c3 := connect(t, h3, codecs[0].codec)
	id3 := initMem(t, c3, "durable", map[string]string{"agent": "a1"})
	if st := stats(t, c3, id3); st["semantic"] != 1 || st["episodic"] != 2 {
		t.Fatalf("stats after second restart: %v", st)
	}
	if hits := recall(t, c3, &msg.MemoryRecallReq{MemoryID: id3, Query: aeptest.Ptr("blue second")}); keysOf(hits) != "ev,fact" && keysOf(hits) != "fact,ev" {
		t.Fatalf("full-text index after second restart: %s", keysOf(hits))
	}
}

// Ranking on a corpus where relevance is unambiguous: the order is
// asserted, the same on each backend, and min_score filters on the
// normalised score.
func TestRecallRanking(t *testing.T) { forEachBackend(t, testRecallRanking) }

func testRecallRanking(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{}, "", dsn)
	for _, tier := range []string{"semantic", "working", "episodic"} {
		t.Run(tier, func(t *testing.T) {
			c := connect(t, h, codecs[0].codec)
			id := initMem(t, c, "rank-"+tier, nil)
			// all3 has every query word; two has two; one has the most
			// common word only; the fillers have none.
			es := []msg.MemoryEntry{
				ent(tier, "one", "rust is a language with a compiler and tooling", 0),
				ent(tier, "all3", "rust borrow checker rejects the borrow that the checker sees", 0),
				ent(tier, "two", "rust borrow rules keep memory safe in the language", 0),
			}
			for i := range 12 {
				es = append(es, ent(tier, fmt.Sprintf("filler%d", i), fmt.Sprintf("gardening note %d about tomatoes and soil", i), 0))
			}
			store1(t, c, id, es...)
			tr := msg.MemoryRecallReqTier(tier)
			hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("Rust borrow-checker"), Tier: &tr})
			if got := keysOf(hits); got != "all3,two,one" {
				t.Fatalf("order %s, want all3,two,one", got)
			}
			for i, hit := range hits {
				if hit.Score <= 0 || hit.Score > 1 || (i > 0 && hit.Score >= hits[i-1].Score) {
					t.Fatalf("scores not in (0,1] and strictly decreasing: %v", hits)
				}
			}
			// min_score between the 2nd and 3rd scores keeps two hits.
			ms := (hits[1].Score + hits[2].Score) / 2
			got := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("Rust borrow-checker"), Tier: &tr, MinScore: ms})
			if keysOf(got) != "all3,two" {
				t.Fatalf("min_score %v: %s", ms, keysOf(got))
			}
			for i := range got {
				if got[i].Score != hits[i].Score {
					t.Fatalf("score changed with min_score: %v vs %v", got[i].Score, hits[i].Score)
				}
			}
			// Limit and tag filters.
			if got := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("rust"), Tier: &tr, Limit: 1}); len(got) != 1 {
				t.Fatalf("limit 1: %d hits", len(got))
			}
			store1(t, c, id, ent(tier, "tagged", "rust", 0, "keep"))
			if got := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("rust"), Tier: &tr, Tags: []string{"keep"}}); keysOf(got) != "tagged" {
				t.Fatalf("tag filter: %s", keysOf(got))
			}
			if got := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("?!"), Tier: &tr}); len(got) != 0 {
				t.Fatalf("query without words: %s", keysOf(got))
			}
		})
	}
}

// TTL: an expired entry is invisible to every read at once, on every tier;
// the background collector then deletes the rows, and their full-text index
// entries with them.
func TestTTLExpiryAndCollection(t *testing.T) { forEachBackend(t, testTTLExpiryAndCollection) }

func testTTLExpiryAndCollection(t *testing.T, dsn string) {
	clk := newClock()
	p := &memory.Plugin{Settings: memory.Settings{CollectInterval: 0}, Clock: clk.Now}
	p.CollectInterval = 20 * 1e6 // 20ms
	h := newHostDSN(t, p, "", dsn)
	c := connect(t, h, codecs[1].codec)
	id := initMem(t, c, "ttl", nil)
	var es []msg.MemoryEntry
	for _, tier := range []string{"working", "semantic", "episodic"} {
		es = append(es, ent(tier, "short", "ephemeral note", 10), ent(tier, "long", "lasting note", 0))
	}
	store1(t, c, id, es...)
	clk.Add(9 * time.Second)
	if got := get(t, c, id, "", "short"); len(got) != 3 {
		t.Fatalf("before expiry: %q", got)
	}
	clk.Add(time.Second)
	if got := get(t, c, id, "", "short"); got != nil {
		t.Fatalf("retrieve after expiry: %q", got)
	}
	if hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("note")}); len(hits) != 3 || strings.Contains(keysOf(hits), "short") {
		t.Fatalf("recall after expiry: %s", keysOf(hits))
	}
	if hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id}); len(hits) != 3 {
		t.Fatalf("listing after expiry: %s", keysOf(hits))
	}
	if st := stats(t, c, id); st["working"] != 1 || st["semantic"] != 1 || st["episodic"] != 1 {
		t.Fatalf("stats after expiry: %v", st)
	}
	// The rows are still there until the collector runs; it runs on its own.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := h.st.DB().QueryRow(`SELECT (SELECT count(*) FROM memory_semantic) + (SELECT count(*) FROM memory_episodic)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector left %d rows, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var fts int
	ftsCount := `SELECT count(*) FROM memory_semantic_fts WHERE memory_semantic_fts MATCH 'ephemeral'`
	if dsn != "" {
		ftsCount = `SELECT count(*) FROM memory_semantic WHERE fts @@ to_tsquery('simple', 'ephemeral')`
	}
	if err := h.st.DB().QueryRow(ftsCount).Scan(&fts); err != nil || fts != 0 {
		t.Fatalf("full-text index keeps a collected row: %d %v", fts, err)
	}
	// Storing the key again makes a new, live entry.
	store1(t, c, id, ent("semantic", "short", "back again", 5))
	if got := get(t, c, id, "semantic", "short"); !reflect.DeepEqual(got, []string{"back again"}) {
		t.Fatalf("re-stored: %q", got)
	}
}

// Text that is awkward for SQL or a query language is data on every
// backend: quotes and statements in keys, LIKE wildcards in tags, operator
// words in queries. A word is the same thing everywhere (letters and
// digits, case folded), whatever host names, paths, versions or numbers
// the text holds.
func TestAwkwardText(t *testing.T) { forEachBackend(t, testAwkwardText) }

func testAwkwardText(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{}, "", dsn)
	c := connect(t, h, codecs[0].codec)
	ctx := aeptest.Context(t)
	for _, tier := range []string{"semantic", "episodic"} {
		t.Run(tier, func(t *testing.T) {
			id := initMem(t, c, "awkward-"+tier, nil)
			odd := `it's "quoted"; DROP TABLE memory_semantic; --`
			store1(t, c, id,
				ent(tier, odd, "see foo.bar.com/some_path v1.2.3 and 3.14 for Größe", 0, "100%", "a_b", "x'y"),
				ent(tier, "plain", "this or that", 0, "100", "aXb"),
			)
			tr := msg.MemoryRecallReqTier(tier)
			for _, tc := range []struct{ query, want string }{
				{"bar", odd}, {"path", odd}, {"some", odd}, {"2", odd}, {"14", odd}, {"GRÖßE", odd},
				{"quoted", odd}, {"DROP", odd}, {"y", odd}, {"OR", "plain"}, {"NOT NEAR", ""}, {`"*"`, ""},
			} {
				if got := keysOf(recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr(tc.query), Tier: &tr})); got != tc.want {
					t.Errorf("recall %q = %q, want %q", tc.query, got, tc.want)
				}
			}
			for _, tc := range []struct{ tag, want string }{{"100%", odd}, {"100", "plain"}, {"a_b", odd}, {"aXb", "plain"}, {"x'y", odd}, {"%", ""}} {
				if got := keysOf(recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Tier: &tr, Tags: []string{tc.tag}})); got != tc.want {
					t.Errorf("tag %q = %q, want %q", tc.tag, got, tc.want)
				}
			}
			if got := get(t, c, id, tier, odd); len(got) != 1 {
				t.Fatalf("retrieve %q: %q", odd, got)
			}
			// A NUL in string content is kept and does not stop the words
			// after it from being found.
			store1(t, c, id, ent(tier, "nul", "before\x00after", 0))
			if got := get(t, c, id, tier, "nul"); !reflect.DeepEqual(got, []string{"before\x00after"}) {
				t.Fatalf("content with NUL: %q", got)
			}
			if got := keysOf(recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("after"), Tier: &tr})); got != "nul" {
				t.Fatalf("recall past a NUL: %q", got)
			}
			fr, err := c.MemoryForget(ctx, &msg.MemoryForgetReq{MemoryID: id, Keys: []string{odd}})
			if err != nil || fr.Deleted != 1 {
				t.Fatalf("forget %q: %+v %v", odd, fr, err)
			}
			if st := stats(t, c, id); st[tier] != 2 {
				t.Fatalf("stats after forget: %v", st)
			}
		})
	}
	// PostgreSQL text cannot hold a NUL: such a key is refused whole,
	// before anything of the batch is written.
	if dsn != "" {
		id := initMem(t, c, "awkward-nul", nil)
		_, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{
			ent("semantic", "fine", "v", 0), ent("working", "w", "v", 0), ent("episodic", "bad\x00key", "v", 0)}})
		aeptest.WantError(t, err, wire.CodeSchemaViolation, "NUL")
		if st := stats(t, c, id); st["semantic"]+st["episodic"]+st["working"] != 0 {
			t.Fatalf("a refused batch stored entries: %v", st)
		}
		if got := get(t, c, id, "", "bad\x00key"); got != nil {
			t.Fatalf("retrieve of a NUL key: %q", got)
		}
	}
}

// A batch that names a semantic key twice ends with its last value, at one
// entry; the episodic log appends both events in order. Equally relevant
// hits come newest first.
func TestBatchRepeatsAKey(t *testing.T) { forEachBackend(t, testBatchRepeatsAKey) }

func testBatchRepeatsAKey(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{}, "", dsn)
	c := connect(t, h, codecs[1].codec)
	id := initMem(t, c, "repeat", nil)
	store1(t, c, id, ent("semantic", "k", "first fact", 0), ent("episodic", "k", "first event", 0),
		ent("semantic", "other", "unrelated", 0), ent("semantic", "k", "second fact", 0, "t"), ent("episodic", "k", "second event", 0))
	if got := get(t, c, id, "", "k"); !reflect.DeepEqual(got, []string{"second fact", "first event", "second event"}) {
		t.Fatalf("retrieve k: %q", got)
	}
	if st := stats(t, c, id); st["semantic"] != 2 || st["episodic"] != 2 {
		t.Fatalf("stats %v", st)
	}
	store1(t, c, id, ent("semantic", "t1", "same words here", 0), ent("semantic", "t2", "same words here", 0))
	store1(t, c, id, ent("semantic", "t3", "same words here", 0))
	tr := msg.MemoryRecallReqTierSemantic
	if got := keysOf(recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("same words"), Tier: &tr})); got != "t3,t2,t1" {
		t.Fatalf("ties: %s, want newest first", got)
	}
}

// Every field of an entry comes back as stored from each persistent tier:
// content of any JSON type, tags, source, metadata (or none), TTL.
func TestEntryFieldsRoundTrip(t *testing.T) { forEachBackend(t, testEntryFieldsRoundTrip) }

func testEntryFieldsRoundTrip(t *testing.T, dsn string) {
	clk := newClock()
	h := newHostDSN(t, &memory.Plugin{Clock: clk.Now}, "", dsn)
	c := connect(t, h, codecs[0].codec)
	id := initMem(t, c, "fields", map[string]string{"agent": "a"})
	for _, tier := range []string{"semantic", "episodic"} {
		full := msg.MemoryEntry{Key: "full-" + tier, Tier: msg.MemoryEntryTier(tier), Content: json.RawMessage(`{"n":[1,2.5,"x"],"ok":true}`),
			Tags: []string{"t1", "t 2"}, Source: aeptest.Ptr("agent-x"), Metadata: aeptest.Ptr(json.RawMessage(`{"model":"m","score":0.5}`)), TTL: aeptest.Ptr(60)}
		bare := msg.MemoryEntry{Key: "bare-" + tier, Tier: msg.MemoryEntryTier(tier), Content: json.RawMessage(`42`)}
		store1(t, c, id, full, bare)
		r, err := c.MemoryRetrieve(aeptest.Context(t), &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{full.Key, bare.Key}, Tier: tierp(tier)})
		if err != nil || len(r.Entries) != 2 {
			t.Fatalf("%s: %+v %v", tier, r, err)
		}
		f, b := r.Entries[0], r.Entries[1]
		now := float64(clk.Now().Unix())
		if string(f.Content) != string(full.Content) || !reflect.DeepEqual(f.Tags, full.Tags) || f.Source == nil || *f.Source != "agent-x" ||
			f.Metadata == nil || string(*f.Metadata) != string(*full.Metadata) || f.TTL == nil || *f.TTL != 60 ||
			f.ExpiresAt == nil || *f.ExpiresAt != now+60 || *f.CreatedAt != now || *f.UpdatedAt != now {
			t.Errorf("%s full entry came back as %+v", tier, f)
		}
		if string(b.Content) != "42" || len(b.Tags) != 0 || b.Source != nil || b.Metadata != nil || b.TTL != nil || b.ExpiresAt != nil {
			t.Errorf("%s bare entry came back as %+v", tier, b)
		}
		if (tier == "episodic") != (f.Seq != nil) {
			t.Errorf("%s seq: %v", tier, f.Seq)
		}
	}
}
