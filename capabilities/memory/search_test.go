package memory

import (
	"math/rand/v2"
	"slices"
	"testing"
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
