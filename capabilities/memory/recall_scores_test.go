package memory_test

import (
	"database/sql"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

// TestRecallStemsAndScoresAbsolutely: on every tier and backend, recall
// stems (a query for "dragon" finds "dragons"), and scores are on the
// absolute 0–1 scale of docs/DECISIONS.md (Capability gaps users hit): with
// min_score 0.5 a hit holding every query word is kept and one holding a
// third of them is dropped, and the weak hit's score is the same when it is
// the only entry there is.
func TestRecallStemsAndScoresAbsolutely(t *testing.T) {
	forEachBackend(t, testRecallStemsAndScoresAbsolutely)
}

func testRecallStemsAndScoresAbsolutely(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{}, "", dsn)
	c := connect(t, h, codecs[0].codec)
	for _, tier := range []string{"semantic", "episodic", "working"} {
		t.Run(tier, func(t *testing.T) {
			tr := msg.MemoryRecallReqTier(tier)
			id := initMem(t, c, "scores-"+tier, nil)
			store1(t, c, id,
				ent(tier, "lair", "two dragons guard the lair", 0),
				ent(tier, "strong", "the red dragon breathes fire", 0),
				ent(tier, "weak", "a dragon sleeps", 0),
				ent(tier, "other", "tomatoes need sun", 0),
			)
			var keys []string
			for _, hit := range recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("dragon"), Tier: &tr}) {
				keys = append(keys, hit.Entry.Key)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, []string{"lair", "strong", "weak"}) {
				t.Fatalf(`"dragon" finds %v, want lair (dragons), strong and weak`, keys)
			}
			q := aeptest.Ptr("red dragon fire")
			all := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: q, Tier: &tr, Order: msg.MemoryRecallReqOrderRelevance})
			scores := map[string]float64{}
			for _, hit := range all {
				scores[hit.Entry.Key] = hit.Score
			}
			// Every word once: 2/3; one word of three once: 2/9.
			if math.Abs(scores["strong"]-2.0/3) > 1e-9 || math.Abs(scores["weak"]-2.0/9) > 1e-9 {
				t.Fatalf("scores %v, want strong 2/3, weak 2/9", scores)
			}
			kept := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: q, Tier: &tr, MinScore: 0.5})
			if keysOf(kept) != "strong" || kept[0].Score != scores["strong"] {
				t.Fatalf("min_score 0.5 kept %v", kept)
			}
			alone := initMem(t, c, "scores-alone-"+tier, nil)
			store1(t, c, alone, ent(tier, "weak", "a dragon sleeps", 0))
			got := recall(t, c, &msg.MemoryRecallReq{MemoryID: alone, Query: q, Tier: &tr})
			if keysOf(got) != "weak" || got[0].Score != scores["weak"] {
				t.Fatalf("the weak entry alone: %v, want score %v", got, scores["weak"])
			}
			if got := recall(t, c, &msg.MemoryRecallReq{MemoryID: alone, Query: q, Tier: &tr, MinScore: 0.5}); len(got) != 0 {
				t.Fatalf("min_score 0.5 on the weak entry alone kept %v", got)
			}
		})
	}
}

// storeFile is the SQLite file of a store opened with an empty DSN
// (server/store, Open).
const storeFile = "aep.db"

// TestStemmingMigratesOldIndex: a store indexed before stemming (FTS5
// unicode61 on SQLite, the 'simple' configuration on PostgreSQL) is
// re-indexed at start-up, so its entries are found by stem.
func TestStemmingMigratesOldIndex(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dsn string) {
		dir := t.TempDir()
		h := newHostDSN(t, &memory.Plugin{}, dir, dsn)
		c := connect(t, h, codecs[0].codec)
		id := initMem(t, c, "old", nil)
		store1(t, c, id, ent("semantic", "lair", "two dragons guard the lair", 0), ent("episodic", "ev", "dragons flew", 0))
		c.Close()
		h.close()
		var db *sql.DB
		var err error
		var stmts []string
		if dsn == "" {
			db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, storeFile))
			for _, tb := range []string{"memory_semantic", "memory_episodic"} {
				stmts = append(stmts, `DROP TABLE `+tb+`_fts`,
					`CREATE VIRTUAL TABLE `+tb+`_fts USING fts5("key", body, tag_set, content='`+tb+`', content_rowid='id', tokenize='unicode61')`,
					`INSERT INTO `+tb+`_fts(`+tb+`_fts) VALUES('rebuild')`)
			}
		} else {
			db, err = sql.Open("pgx", dsn)
			for _, tb := range []string{"memory_semantic", "memory_episodic"} {
				stmts = append(stmts, `UPDATE `+tb+` SET fts = to_tsvector('simple', "key" || ' ' || body)`, `COMMENT ON COLUMN `+tb+`.fts IS NULL`)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stmts {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		db.Close()
		h2 := newHostDSN(t, &memory.Plugin{}, dir, dsn)
		c2 := connect(t, h2, codecs[0].codec)
		id2 := initMem(t, c2, "old", nil)
		got := keysOf(recall(t, c2, &msg.MemoryRecallReq{MemoryID: id2, Query: aeptest.Ptr("dragon")}))
		if got != "ev,lair" && got != "lair,ev" {
			t.Fatalf("after migration, dragon finds %q", got)
		}
	})
}
