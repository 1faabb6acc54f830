package scenario

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// BenchmarkGuessLoop is the Go client's figure for the loop
// sdk/python/tests/test_training.py runs (docs/PERFORMANCE.md): guess
// steps with a random guess inside the interval the hints leave open, a
// reset after each finished episode, one request at a time, against a
// real `aep serve`. Run with -benchtime 10000x for the same 10,000 steps.
func BenchmarkGuessLoop(b *testing.B) {
	for _, tr := range transports(b) {
		b.Run(tr.name, func(b *testing.B) {
			ctx := context.Background()
			c := tr.dial(ctx, b)
			defer c.Close()
			if _, err := c.Handshake(ctx, "bench-go", aepbin.Token, "env"); err != nil {
				b.Fatal(err)
			}
			seed := 0
			r, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed})
			if err != nil {
				b.Fatal(err)
			}
			var obs struct{ Hint, High int }
			if err := json.Unmarshal(r.Observation, &obs); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			lo, hi := 0, obs.High
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				guess := lo
				if hi > lo {
					guess = lo + rng.IntN(hi-lo)
				}
				s, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage(strconv.Itoa(guess))})
				if err != nil {
					b.Fatal(err)
				}
				if err := json.Unmarshal(s.Observation, &obs); err != nil {
					b.Fatal(err)
				}
				switch {
				case obs.Hint < 0:
					hi = guess
				case obs.Hint > 0:
					lo = guess + 1
				}
				if s.Terminated || s.Truncated {
					rr, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", EpisodeID: &r.EpisodeID})
					if err != nil {
						b.Fatal(err)
					}
					if err := json.Unmarshal(rr.Observation, &obs); err != nil {
						b.Fatal(err)
					}
					lo, hi = 0, obs.High
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}
