package memory_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

// TestRecallRanksEveryMatch: recall ranks every entry that matches, by
// score or by time, however many match and whatever the engine's own rank
// thinks of them. 300 short entries hold "comet" once (score 2/3); after
// them come long entries that a length-normalised rank (bm25) puts below
// every short one: "best" holds the word three times (6/7), "late1" and
// "late2" once. The best-scoring entry comes first, ties newest first; the
// newest matches come first by time; min_score keeps only "best".
func TestRecallRanksEveryMatch(t *testing.T) { forEachBackend(t, testRecallRanksEveryMatch) }

func testRecallRanksEveryMatch(t *testing.T, dsn string) {
	clk := newClock()
	h := newHostDSN(t, &memory.Plugin{Clock: clk.Now}, "", dsn)
	c := connect(t, h, codecs[1].codec)
	long := strings.Repeat("dust and ice ", 150)
	for _, tier := range []string{"semantic", "episodic", "working"} {
		t.Run(tier, func(t *testing.T) {
			id := initMem(t, c, "every-"+tier, nil)
			var es []msg.MemoryEntry
			for i := range 300 {
				es = append(es, ent(tier, fmt.Sprintf("short%03d", i), "comet", 0))
			}
			store1(t, c, id, es...)
			clk.Add(time.Second)
			store1(t, c, id, ent(tier, "best", "comet comet comet "+long, 0))
			clk.Add(time.Second)
			store1(t, c, id, ent(tier, "late1", "comet "+long, 0))
			clk.Add(time.Second)
			store1(t, c, id, ent(tier, "late2", "comet "+long, 0))
			tr := msg.MemoryRecallReqTier(tier)
			q := aeptest.Ptr("comet")

			hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: q, Tier: &tr, Limit: 4})
			if len(hits) != 4 || hits[0].Entry.Key != "best" || math.Abs(hits[0].Score-6.0/7) > 1e-9 {
				t.Fatalf("by score: %s, want best (6/7) first", keysOf(hits))
			}
			if tier != "working" { // the working tier has no insertion order among equal times
				if got := keysOf(hits[1:]); got != "late2,late1,short299" {
					t.Fatalf("ties: %s, want newest first", got)
				}
			}
			for _, hit := range hits[1:] {
				if math.Abs(hit.Score-2.0/3) > 1e-9 {
					t.Fatalf("%s scores %v, want 2/3", hit.Entry.Key, hit.Score)
				}
			}
			newest := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: q, Tier: &tr, Limit: 3, Order: msg.MemoryRecallReqOrderNewest})
			if got := keysOf(newest); got != "late2,late1,best" {
				t.Fatalf("newest first: %s", got)
			}
			if got := keysOf(recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: q, Tier: &tr, MinScore: 0.7})); got != "best" {
				t.Fatalf("min_score 0.7: %s, want best", got)
			}
		})
	}
}

// TestRecallScoreMatchesItsText: a hit's score is that of the text it
// comes back with, while another session rewrites the entry between two
// texts of different scores.
func TestRecallScoreMatchesItsText(t *testing.T) { forEachBackend(t, testRecallScoreMatchesItsText) }

func testRecallScoreMatchesItsText(t *testing.T, dsn string) {
	h := newHostDSN(t, &memory.Plugin{}, "", dsn)
	reader, writer := connect(t, h, codecs[1].codec), connect(t, h, codecs[1].codec)
	for _, tier := range []string{"semantic", "episodic"} {
		t.Run(tier, func(t *testing.T) {
			rid, wid := initMem(t, reader, "flip-"+tier, nil), initMem(t, writer, "flip-"+tier, nil)
			texts := map[string]float64{"comet": 2.0 / 3, "comet comet": 0.8}
			store1(t, writer, wid, ent(tier, "flip", "comet", 0))
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range 200 {
					text := "comet"
					if i%2 == 0 {
						text = "comet comet"
					}
					if tier == "episodic" {
						// The log only appends: forget the old event first.
						if _, err := writer.MemoryForget(aeptest.Context(t), &msg.MemoryForgetReq{MemoryID: wid, Keys: []string{"flip"}, Tier: aeptest.Ptr(msg.MemoryForgetReqTierEpisodic)}); err != nil {
							t.Error(err)
							return
						}
					}
					if _, err := writer.MemoryStore(aeptest.Context(t), &msg.MemoryStoreReq{MemoryID: wid, Entries: []msg.MemoryEntry{ent(tier, "flip", text, 0)}}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			defer func() { <-done }() // the writer ends before the test, even a failed one
			tr := msg.MemoryRecallReqTier(tier)
			for n := 0; ; n++ {
				select {
				case <-done:
					if n == 0 {
						t.Fatal("no recall ran while the entry was rewritten")
					}
					return
				default:
				}
				for _, hit := range recall(t, reader, &msg.MemoryRecallReq{MemoryID: rid, Query: aeptest.Ptr("comet"), Tier: &tr}) {
					if want, ok := texts[text(hit.Entry)]; !ok || hit.Score != want {
						t.Fatalf("hit %q scores %v", text(hit.Entry), hit.Score)
					}
				}
			}
		})
	}
}
