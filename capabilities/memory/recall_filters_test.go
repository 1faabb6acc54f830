package memory_test

import (
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/gen/msg"
)

// TestRecallFilters checks every recall filter of memory/recall on every
// tier and backend, alone and combined with a query: the time range
// (since and until, inclusive, on created_at), tags (all of them) and tier,
// with and without a query.
func TestRecallFilters(t *testing.T) { forEachBackend(t, testRecallFilters) }

func testRecallFilters(t *testing.T, dsn string) {
	clk := newClock()
	h := newHostDSN(t, &memory.Plugin{Clock: clk.Now}, "", dsn)
	c := connect(t, h, codecs[1].codec)
	id := initMem(t, c, "filters", nil)
	t0 := float64(clk.Now().Unix())
	// Four entries per tier, 10 s apart; key <tier>-<n>. Tags: n0 a, n1 a b,
	// n2 b, n3 a b. Every content has the word "comet".
	tags := [][]string{{"a"}, {"a", "b"}, {"b"}, {"a", "b"}}
	tiers := []string{"working", "episodic", "semantic"}
	for n := range 4 {
		var es []msg.MemoryEntry
		for _, tier := range tiers {
			es = append(es, ent(tier, fmt.Sprintf("%s-%d", tier, n), fmt.Sprintf("comet sighting %d", n), 0, tags[n]...))
		}
		store1(t, c, id, es...)
		clk.Add(10 * time.Second)
	}
	at := func(n int) *float64 { v := t0 + float64(10*n); return &v }
	for _, tier := range tiers {
		tr := msg.MemoryRecallReqTier(tier)
		for _, q := range []*string{nil, aeptest.Ptr("comet")} {
			name := tier + "/listing"
			if q != nil {
				name = tier + "/query"
			}
			t.Run(name, func(t *testing.T) {
				cases := []struct {
					name string
					req  msg.MemoryRecallReq
					want string // keys, oldest first
				}{
					{"tier only", msg.MemoryRecallReq{}, "0,1,2,3"},
					{"since inclusive", msg.MemoryRecallReq{Since: at(2)}, "2,3"},
					{"until inclusive", msg.MemoryRecallReq{Until: at(1)}, "0,1"},
					{"window", msg.MemoryRecallReq{Since: at(1), Until: at(2)}, "1,2"},
					{"window between entries", msg.MemoryRecallReq{Since: aeptest.Ptr(*at(1) + 1), Until: aeptest.Ptr(*at(2) - 1)}, ""},
					{"one tag", msg.MemoryRecallReq{Tags: []string{"b"}}, "1,2,3"},
					{"all tags", msg.MemoryRecallReq{Tags: []string{"a", "b"}}, "1,3"},
					{"unknown tag", msg.MemoryRecallReq{Tags: []string{"a", "zzz"}}, ""},
					{"tags and window", msg.MemoryRecallReq{Tags: []string{"a", "b"}, Until: at(2)}, "1"},
				}
				for _, tc := range cases {
					req := tc.req
					req.MemoryID, req.Tier, req.Query, req.Order = id, &tr, q, msg.MemoryRecallReqOrderOldest
					got := ""
					for i, hit := range recall(t, c, &req) {
						if string(hit.Entry.Tier) != tier {
							t.Errorf("%s: hit %s of tier %s", tc.name, hit.Entry.Key, hit.Entry.Tier)
						}
						if i > 0 {
							got += ","
						}
						got += hit.Entry.Key[len(tier)+1:]
					}
					if got != tc.want {
						t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
					}
				}
			})
		}
	}
	// Without a tier, recall spans every tier; with one, only it.
	hits := recall(t, c, &msg.MemoryRecallReq{MemoryID: id, Query: aeptest.Ptr("comet"), Since: at(3), Until: at(3)})
	if got := keysOf(hits); len(hits) != 3 {
		t.Fatalf("every tier at t3: %s", got)
	}
	seen := map[string]bool{}
	for _, hit := range hits {
		seen[hit.Entry.Key] = true
	}
	for _, tier := range tiers {
		if !seen[tier+"-3"] {
			t.Errorf("no %s-3 among %s", tier, keysOf(hits))
		}
	}
}
