package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/aephost/aep/server/store"
)

// TestBestKeepsTheBest: best keeps the same candidates, in the same order,
// as sorting all of them and cutting to the limit, in each ranking.
func TestBestKeepsTheBest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n, limit := rng.IntN(60), 1+rng.IntN(12)
		byTime, newest := round%3 != 0, round%2 == 0
		all := make([]candidate, n)
		for i := range all {
			// Few distinct scores and times, so ties are common.
			all[i] = candidate{id: int64(i + 1), created: int64(rng.IntN(5)), score: float64(rng.IntN(4)) / 3}
		}
		rng.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
		top := best{byTime: byTime, newest: newest, limit: limit}
		for _, c := range all {
			top.offer(c)
		}
		want := slices.Clone(all)
		slices.SortFunc(want, func(a, b candidate) int {
			switch {
			case top.before(a, b):
				return -1
			case top.before(b, a):
				return 1
			}
			return 0
		})
		want = want[:min(limit, n)]
		if got := top.ranked(); !slices.Equal(got, want) {
			t.Fatalf("round %d (byTime %v, newest %v, limit %d): kept %v, want %v", round, byTime, newest, limit, got, want)
		}
	}
}

// TestSQLiteStatementsBounded: recalls whose statements take more shapes
// than maxStmts (one per number of tags filtered on) all answer, and no
// more than maxStmts statements stay prepared.
func TestSQLiteStatementsBounded(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := newSQLiteBackend(ctx, st.DB())
	if err != nil {
		t.Fatal(err)
	}
	sc := scopeKey{ns: "n"}
	var tags []string
	for i := range maxStmts + 8 {
		tags = append(tags, fmt.Sprintf("t%d", i))
	}
	content, _ := json.Marshal("comet sighting")
	if err := b.Put(ctx, sc, []record{{Tier: TierSemantic, Key: "k", Content: content, Tags: tags, Created: 1, Updated: 1}}); err != nil {
		t.Fatal(err)
	}
	words := []string{"comet"}
	for n := 1; n <= len(tags); n++ {
		q := &query{words: words, m: newMatcher(words)}
		got, err := b.Search(ctx, TierSemantic, sc, q, filter{tags: tags[:n]}, true, 10, 2)
		if err != nil || len(got) != 1 || got[0].rec.Key != "k" {
			t.Fatalf("%d tags: %v %v", n, got, err)
		}
	}
	if len(b.stmts) > maxStmts {
		t.Fatalf("%d statements prepared, over %d", len(b.stmts), maxStmts)
	}
}
