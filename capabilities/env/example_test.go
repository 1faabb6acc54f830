package env_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

// walk is a corridor of five cells; the agent starts in cell 0 and the
// episode ends with reward 1 when it reaches cell 4.
type walk struct{ pos int }

// move is walk's typed action: -1 or +1, decoded from the wire on the hot path.
type move int

func (w *walk) Reset(ctx context.Context, seed *int64, options json.RawMessage) (env.Obs, error) {
	w.pos = 0
	return env.Obs{Observation: env.JSON(w.pos), Info: env.JSON(map[string]any{})}, nil
}

func (w *walk) Step(ctx context.Context, a move) (env.Step, error) {
	if a != -1 && a != 1 {
		return env.Step{}, fmt.Errorf("move %d: %w", a, env.ErrBadAction)
	}
	w.pos = max(0, w.pos+int(a))
	done := w.pos == 4
	reward := 0.0
	if done {
		reward = 1
	}
	return env.Step{Observation: env.JSON(w.pos), Info: env.JSON(map[string]any{}), Reward: reward, Terminated: done}, nil
}

func (w *walk) Render() (string, error) { return fmt.Sprintf("cell %d of 5", w.pos), nil }
func (w *walk) Close() error            { return nil }

// Example registers an environment in a few lines and runs one episode
// through the protocol with the direct codec, as an RL loop would.
func Example() {
	env.Register(env.Spec{
		Name:             "example/walk",
		Description:      "Walk right to the end of a corridor.",
		ActionSpace:      json.RawMessage(`{"type":"integer","enum":[-1,1]}`),
		ObservationSpace: json.RawMessage(`{"type":"integer","minimum":0,"maximum":4}`),
		Inline:           true,
	}, func() env.Env[move] { return &walk{} })

	ctx := context.Background()
	cfg := server.Defaults()
	cfg.Server.AuthToken = "s3cret"
	h, err := server.New(ctx, cfg, server.WithPlugin(server.PluginSpec{Name: "env", Type: "env", Impl: &env.Plugin{Settings: env.Settings{Envs: []string{"example/walk"}}}}))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)
	c, err := client.InProcess(h, client.Direct, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Handshake(ctx, "trainer", "s3cret", "env"); err != nil {
		log.Fatal(err)
	}
	ep, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "example/walk"})
	if err != nil {
		log.Fatal(err)
	}
	total := 0.0
	for {
		st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage("1")})
		if err != nil {
			log.Fatal(err)
		}
		total += st.Reward
		if st.Terminated || st.Truncated {
			fmt.Printf("reached %s after %d steps, return %.0f\n", st.Observation, st.Step, total)
			break
		}
	}
	_, err = c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage("2")})
	fmt.Println(err != nil)
	// Output:
	// reached 4 after 4 steps, return 1
	// true
}
