package learn

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Strategies of learn/rank (docs/learn.md).
const (
	StrategyUCB1     = "ucb1"
	StrategyThompson = "thompson"
	StrategyGreedy   = "greedy"
)

// DefaultExploration is UCB1's c: sqrt(2) gives Auer et al.'s UCB1 bound
// for rewards in [0, 1].
var DefaultExploration = math.Sqrt2

// defaultScore is the score a feedback type stands for when none is given
// (docs/learn.md): a correction says the output was partly wrong.
var defaultScore = map[string]float64{"POSITIVE": 1, "NEGATIVE": -1, "NEUTRAL": 0, "CORRECTIVE": -0.5}

// reward maps a score in [-1, 1] to a bandit reward in [0, 1].
func reward(score float64) float64 { return (score + 1) / 2 }

// arm is one candidate with its statistics in the ranked context.
type arm struct {
	Kind, Name string
	Pulls      float64
	RewardSum  float64
}

func (a arm) mean() float64 {
	if a.Pulls <= 0 {
		return 0
	}
	return a.RewardSum / a.Pulls
}

// ranked is an arm with its index under a strategy.
type ranked struct {
	arm
	Score   float64
	Untried bool
}

// rank orders arms best first.
//
//   - ucb1: untried arms first (their bound is infinite), then by
//     mean + c·sqrt(ln N / n), N the pulls of all candidates.
//   - thompson: by a sample of Beta(1 + rewards, 1 + pulls − rewards),
//     untried arms included (a uniform sample); rng makes it reproducible.
//   - greedy: by mean reward, untried arms last.
//
// Ties keep kind/name order, so a ranking is deterministic for fixed input.
func rank(strategy string, arms []arm, c float64, rng *rand.Rand) []ranked {
	sort.SliceStable(arms, func(i, j int) bool {
		if arms[i].Kind != arms[j].Kind {
			return arms[i].Kind < arms[j].Kind
		}
		return arms[i].Name < arms[j].Name
	})
	var total float64
	for _, a := range arms {
		total += a.Pulls
	}
	out := make([]ranked, len(arms))
	for i, a := range arms {
		r := ranked{arm: a, Untried: a.Pulls <= 0}
		switch strategy {
		case StrategyThompson:
			r.Score = sampleBeta(rng, 1+a.RewardSum, 1+math.Max(0, a.Pulls-a.RewardSum))
		case StrategyGreedy:
			r.Score = a.mean()
		default:
			if !r.Untried {
				bonus := 0.0
				if total > 1 {
					bonus = c * math.Sqrt(math.Log(total)/a.Pulls)
				}
				r.Score = a.mean() + bonus
			}
		}
		out[i] = r
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if strategy != StrategyThompson && a.Untried != b.Untried {
			// ucb1 explores untried arms first; greedy never prefers them.
			return a.Untried == (strategy != StrategyGreedy)
		}
		return a.Score > b.Score
	})
	return out
}

// sampleBeta draws from Beta(a, b), a, b ≥ 1, as X/(X+Y) of two gamma draws.
func sampleBeta(rng *rand.Rand, a, b float64) float64 {
	x, y := sampleGamma(rng, a), sampleGamma(rng, b)
	return x / (x + y)
}

// sampleGamma draws from Gamma(k, 1) for k ≥ 1 (Marsaglia and Tsang, 2000).
func sampleGamma(rng *rand.Rand, k float64) float64 {
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
