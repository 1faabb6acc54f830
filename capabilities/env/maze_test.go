package env_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

// compileSpace compiles a space (JSON Schema) of env/spaces.
func compileSpace(t *testing.T, name string, raw json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("urn:space:"+name, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("urn:space:" + name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, what string, raw json.RawMessage) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err == nil {
		err = s.Validate(v)
	}
	if err != nil {
		t.Fatalf("%s %s is not in its space: %v", what, raw, err)
	}
}

// checkEnv is a check_env in the manner of Gymnasium's, through the wire:
// for each seed, an episode run twice with the same seed and the same
// actions gives the same trajectory; every observation is in the
// observation space and every action taken in the action space; a step
// after terminated or truncated is refused until a reset; and different
// seeds do not all give the same episode.
func checkEnv(t *testing.T, c *client.Client, name, options string, actions []int, maxSteps int) {
	t.Helper()
	ctx := aeptest.Context(t)
	sp, err := c.EnvSpaces(ctx, &msg.EnvSpacesReq{EnvName: &name})
	if err != nil {
		t.Fatal(err)
	}
	obsSpace, actSpace := compileSpace(t, name+"/observation", sp.ObservationSpace), compileSpace(t, name+"/action", sp.ActionSpace)
	episode := func(seed int) []string {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		r := reset(t, c, name, seed, options)
		validate(t, obsSpace, "reset observation", r.Observation)
		out := []string{string(r.Observation)}
		for i := 0; i < maxSteps; i++ {
			a := json.RawMessage(fmt.Sprint(actions[rng.IntN(len(actions))]))
			validate(t, actSpace, "action", a)
			st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: a})
			if err != nil {
				t.Fatal(err)
			}
			validate(t, obsSpace, "observation", st.Observation)
			if st.Terminated && st.Truncated {
				t.Fatal("terminated and truncated at once")
			}
			out = append(out, fmt.Sprintf("%s %s %v %v %v", a, st.Observation, st.Reward, st.Terminated, st.Truncated))
			if st.Terminated || st.Truncated {
				if _, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: a}); wire.ReasonOf(wire.AsError(err).Detail) != "episode_closed" {
					t.Fatalf("a step after the end: %v", err)
				}
				break
			}
		}
		if _, err := c.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: r.EpisodeID}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	distinct := map[string]bool{}
	for _, seed := range []int{0, 1, 2, 42} {
		a, b := episode(seed), episode(seed)
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Fatalf("seed %d: two runs differ:\n%s\n--\n%s", seed, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
		distinct[strings.Join(a, "\n")] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("four seeds, one trajectory: the seed is ignored")
	}
}

func TestCheckEnvBuiltins(t *testing.T) {
	h := newHost(t, &env.Plugin{})
	c := aeptest.Connect(t, h, "env")
	t.Run("maze", func(t *testing.T) { checkEnv(t, c, env.MazeName, "", []int{0, 1, 2, 3}, 400) })
	t.Run("maze small, truncated", func(t *testing.T) {
		checkEnv(t, c, env.MazeName, `{"width":5,"height":7,"max_steps":6}`, []int{0, 1, 2, 3}, 10)
	})
	t.Run("maze large", func(t *testing.T) { checkEnv(t, c, env.MazeName, `{"width":61,"height":31}`, []int{0, 1, 2, 3}, 50) })
	t.Run("guess", func(t *testing.T) { checkEnv(t, c, env.GuessName, `{"high":8}`, []int{0, 1, 2, 3, 4, 5, 6, 7}, 30) })
}

type mazeObs struct {
	Grid     []string `json:"grid"`
	Position [2]int   `json:"position"`
	Goal     [2]int   `json:"goal"`
	Steps    int      `json:"steps"`
}

// solve finds the shortest path's moves by breadth-first search on the grid.
func solve(o mazeObs) []int {
	moves := [4][2]int{{0, -1}, {1, 0}, {0, 1}, {-1, 0}}
	type cell struct{ x, y int }
	start, goal := cell{o.Position[0], o.Position[1]}, cell{o.Goal[0], o.Goal[1]}
	prev := map[cell]cell{start: start}
	how := map[cell]int{}
	queue := []cell{start}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if c == goal {
			break
		}
		for a, d := range moves {
			n := cell{c.x + d[0], c.y + d[1]}
			if _, seen := prev[n]; !seen && o.Grid[n.y][n.x] != '#' {
				prev[n], how[n] = c, a
				queue = append(queue, n)
			}
		}
	}
	var path []int
	for c := goal; c != start; c = prev[c] {
		if _, ok := prev[c]; !ok {
			return nil
		}
		path = append([]int{how[c]}, path...)
	}
	return path
}

// TestMazeSolvable: every generated maze has a path from the start to the
// goal; walking it terminates with reward 1, and walls stop the agent.
func TestMazeSolvable(t *testing.T) {
	ctx := context.Background()
	for _, size := range []string{`{"width":5,"height":5}`, `{"width":9,"height":15}`, `{"width":61,"height":61}`} {
		for seed := int64(0); seed < 5; seed++ {
			m := &env.Maze{}
			o, err := m.Reset(ctx, &seed, json.RawMessage(size))
			if err != nil {
				t.Fatal(err)
			}
			var obs mazeObs
			must(t, json.Unmarshal(o.Observation, &obs))
			// The border is all wall.
			if strings.Trim(obs.Grid[0], "#") != "" || strings.Trim(obs.Grid[len(obs.Grid)-1], "#") != "" {
				t.Fatalf("border: %q", obs.Grid)
			}
			path := solve(obs)
			if len(path) == 0 {
				t.Fatalf("%s seed %d: no path:\n%s", size, seed, strings.Join(obs.Grid, "\n"))
			}
			var last env.Step
			for i, a := range path {
				if last, err = m.Step(ctx, a); err != nil {
					t.Fatal(err)
				}
				if (i < len(path)-1) == last.Terminated {
					t.Fatalf("terminated at step %d of %d", i+1, len(path))
				}
			}
			if last.Reward != 1 || last.Truncated {
				t.Fatalf("at the goal: %+v", last)
			}
		}
	}
	m := &env.Maze{}
	seed := int64(3)
	if _, err := m.Reset(ctx, &seed, nil); err != nil {
		t.Fatal(err)
	}
	// From the top-left corner, up and left are walls.
	for _, a := range []int{0, 3} {
		st, err := m.Step(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		var o mazeObs
		must(t, json.Unmarshal(st.Observation, &o))
		if o.Position != [2]int{1, 1} || st.Reward != -0.01 {
			t.Fatalf("into a wall: %+v %v", o.Position, st.Reward)
		}
	}
	for _, bad := range []string{`{"width":4}`, `{"height":63}`, `{"max_steps":0}`, `[1]`} {
		if _, err := m.Reset(ctx, &seed, json.RawMessage(bad)); !strings.Contains(fmt.Sprint(err), "bad action") && !strings.Contains(fmt.Sprint(err), "options") {
			t.Fatalf("options %s: %v", bad, err)
		}
	}
	if _, err := m.Step(ctx, 4); err == nil {
		t.Fatal("action 4 accepted")
	}
}

// TestMazeState: a saved maze, loaded into a fresh one, continues the same
// trajectory, its random state included (the next unseeded reset).
func TestMazeState(t *testing.T) {
	ctx := context.Background()
	seed := int64(11)
	a := &env.Maze{}
	if _, err := a.Reset(ctx, &seed, nil); err != nil {
		t.Fatal(err)
	}
	a.Step(ctx, 1)
	saved, err := a.SaveState()
	if err != nil {
		t.Fatal(err)
	}
	b := &env.Maze{}
	must(t, b.LoadState(saved))
	for _, act := range []int{2, 1, 2, 3} {
		sa, _ := a.Step(ctx, act)
		sb, _ := b.Step(ctx, act)
		if string(sa.Observation) != string(sb.Observation) {
			t.Fatalf("diverged: %s vs %s", sa.Observation, sb.Observation)
		}
	}
	oa, _ := a.Reset(ctx, nil, nil)
	ob, _ := b.Reset(ctx, nil, nil)
	if string(oa.Observation) != string(ob.Observation) {
		t.Fatal("the random state was not saved")
	}
}
