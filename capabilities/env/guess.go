package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// GuessName is the id of the built-in number-guessing environment.
const GuessName = "guess"

func init() {
	Register(Spec{
		Name: GuessName,
		Description: "Guess a secret integer in [0, high) drawn from the seed. Each guess is answered with a hint: " +
			"-1 the secret is lower, 1 higher, 0 correct (reward 1, terminated). Truncated after max_steps guesses. " +
			"Reset options: {\"high\": 100, \"max_steps\": 20}; a reset without them keeps the previous ones. Deterministic; for tests and benchmarks.",
		ActionSpace:      json.RawMessage(`{"type":"integer","description":"the guess"}`),
		ObservationSpace: json.RawMessage(`{"type":"object","properties":{"hint":{"enum":[-1,0,1]},"guesses":{"type":"integer"},"high":{"type":"integer"}},"required":["hint","guesses","high"]}`),
		Inline:           true,
	}, func() Env[int] { return &Guess{} })
}

// Guess is the number-guessing environment. Its random state is a PCG
// source, saved with its state so restored episodes continue identically.
type Guess struct {
	pcg      rand.PCG
	seeded   bool
	secret   int
	high     int
	maxSteps int
	guesses  int
	hint     int
	done     bool
}

type guessOptions struct {
	High     *int `json:"high"`
	MaxSteps *int `json:"max_steps"`
}

// Reset draws a new secret.
func (g *Guess) Reset(ctx context.Context, seed *int64, options json.RawMessage) (Obs, error) {
	opts := guessOptions{}
	if len(options) > 0 && string(options) != "null" {
		if err := json.Unmarshal(options, &opts); err != nil {
			return Obs{}, fmt.Errorf("options: %w: %v", ErrBadAction, err)
		}
	}
	if g.high == 0 {
		g.high, g.maxSteps = 100, 20
	}
	if opts.High != nil {
		if *opts.High < 1 {
			return Obs{}, fmt.Errorf("options.high must be at least 1: %w", ErrBadAction)
		}
		g.high = *opts.High
	}
	if opts.MaxSteps != nil {
		if *opts.MaxSteps < 1 {
			return Obs{}, fmt.Errorf("options.max_steps must be at least 1: %w", ErrBadAction)
		}
		g.maxSteps = *opts.MaxSteps
	}
	switch {
	case seed != nil:
		g.pcg.Seed(uint64(*seed), 0x9e3779b97f4a7c15)
	case !g.seeded:
		g.pcg.Seed(rand.Uint64(), rand.Uint64())
	}
	g.seeded = true
	g.secret = int(rand.New(&g.pcg).IntN(g.high))
	g.guesses, g.hint, g.done = 0, 1, false
	return Obs{Observation: g.obs()}, nil
}

// Step answers one guess.
func (g *Guess) Step(ctx context.Context, guess int) (Step, error) {
	if g.done {
		return Step{}, errors.New("guess: episode is over")
	}
	g.guesses++
	st := Step{}
	switch {
	case guess == g.secret:
		g.hint, st.Reward, st.Terminated = 0, 1, true
	case guess > g.secret:
		g.hint = -1
	default:
		g.hint = 1
	}
	if !st.Terminated && g.guesses >= g.maxSteps {
		st.Truncated = true
	}
	g.done = st.Terminated || st.Truncated
	st.Observation = g.obs()
	return st, nil
}

// obs encodes the observation by hand: this is the benchmark's hot path.
func (g *Guess) obs() json.RawMessage {
	b := make([]byte, 0, 48)
	b = append(b, `{"hint":`...)
	b = strconv.AppendInt(b, int64(g.hint), 10)
	b = append(b, `,"guesses":`...)
	b = strconv.AppendInt(b, int64(g.guesses), 10)
	b = append(b, `,"high":`...)
	b = strconv.AppendInt(b, int64(g.high), 10)
	return append(b, '}')
}

// Render shows the game's state without the secret.
func (g *Guess) Render() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "guess a number in [0, %d): %d of %d guesses used", g.high, g.guesses, g.maxSteps)
	switch {
	case g.done && g.hint == 0:
		b.WriteString("; solved")
	case g.guesses > 0 && g.hint < 0:
		b.WriteString("; last guess too high")
	case g.guesses > 0:
		b.WriteString("; last guess too low")
	}
	return b.String(), nil
}

// Close does nothing: the game holds no resources.
func (g *Guess) Close() error { return nil }

type guessState struct {
	PCG      []byte `json:"pcg"`
	Seeded   bool   `json:"seeded"`
	Secret   int    `json:"secret"`
	High     int    `json:"high"`
	MaxSteps int    `json:"max_steps"`
	Guesses  int    `json:"guesses"`
	Hint     int    `json:"hint"`
	Done     bool   `json:"done"`
}

// SaveState saves the game and its random state.
func (g *Guess) SaveState() ([]byte, error) {
	pcg, err := g.pcg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(guessState{PCG: pcg, Seeded: g.seeded, Secret: g.secret, High: g.high,
		MaxSteps: g.maxSteps, Guesses: g.guesses, Hint: g.hint, Done: g.done})
}

// LoadState restores what SaveState saved.
func (g *Guess) LoadState(b []byte) error {
	var s guessState
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if err := g.pcg.UnmarshalBinary(s.PCG); err != nil {
		return err
	}
	g.seeded, g.secret, g.high, g.maxSteps, g.guesses, g.hint, g.done = s.Seeded, s.Secret, s.High, s.MaxSteps, s.Guesses, s.Hint, s.Done
	return nil
}

var (
	_ Env[int] = (*Guess)(nil)
	_ Stateful = (*Guess)(nil)
)
