package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// MazeName is the id of the built-in maze environment.
const MazeName = "maze"

// Maze sizes: cells are the odd coordinates of a grid of walls, so a
// width or height is odd, between these bounds.
const (
	mazeMinSize     = 5
	mazeMaxSize     = 61
	mazeDefaultSize = 9
)

// Rewards of the maze: a small cost per step (so shorter paths are
// better), 1 for reaching the goal.
const (
	mazeStepReward = -0.01
	mazeGoalReward = 1.0
)

// Actions of the maze, as integers: up, right, down, left.
var mazeMoves = [4][2]int{{0, -1}, {1, 0}, {0, 1}, {-1, 0}}

// MazeActionSpace and MazeObservationSpace are the maze's spaces (JSON
// Schema); the check_env-style tests hold every observation against the
// latter.
var (
	MazeActionSpace      = json.RawMessage(`{"type":"integer","minimum":0,"maximum":3,"description":"0 up, 1 right, 2 down, 3 left"}`)
	MazeObservationSpace = json.RawMessage(`{"type":"object","required":["grid","position","goal","steps"],"additionalProperties":false,"properties":{` +
		`"grid":{"type":"array","items":{"type":"string","pattern":"^[#.AG]+$"},"minItems":5,"maxItems":61,"description":"rows, top first: # wall, . free, A the agent, G the goal"},` +
		`"position":{"type":"array","items":{"type":"integer","minimum":0},"minItems":2,"maxItems":2,"description":"[x, y] of the agent"},` +
		`"goal":{"type":"array","items":{"type":"integer","minimum":0},"minItems":2,"maxItems":2},` +
		`"steps":{"type":"integer","minimum":0}}}`)
)

func init() {
	Register(Spec{
		Name: MazeName,
		Description: "Find the way out of a maze generated from the seed (a perfect maze: one path between any two cells). " +
			"The agent starts at the top left, the goal is at the bottom right. Actions 0 up, 1 right, 2 down, 3 left; " +
			"a move into a wall stays put. Reward -0.01 per step, 1 on reaching the goal (terminated); truncated after max_steps. " +
			"Reset options: {\"width\": 9, \"height\": 9, \"max_steps\": 4*width*height} (odd sizes from 5 to 61); " +
			"a reset without them keeps the previous ones. Fully observed: the observation holds the whole grid.",
		ActionSpace:      MazeActionSpace,
		ObservationSpace: MazeObservationSpace,
		Inline:           true,
	}, func() Env[int] { return &Maze{} })
}

// Maze is the maze environment. Its random state is a PCG source, saved
// with its state, so the same seed gives the same maze and a restored
// episode continues identically.
type Maze struct {
	pcg      rand.PCG
	seeded   bool
	width    int
	height   int
	maxSteps int
	walls    []bool // width*height, row-major
	x, y     int
	steps    int
	done     bool
}

type mazeOptions struct {
	Width    *int `json:"width"`
	Height   *int `json:"height"`
	MaxSteps *int `json:"max_steps"`
}

func (o mazeOptions) check() error {
	for _, s := range []struct {
		name string
		v    *int
	}{{"width", o.Width}, {"height", o.Height}} {
		if s.v != nil && (*s.v < mazeMinSize || *s.v > mazeMaxSize || *s.v%2 == 0) {
			return fmt.Errorf("options.%s must be odd, from %d to %d: %w", s.name, mazeMinSize, mazeMaxSize, ErrBadAction)
		}
	}
	if o.MaxSteps != nil && *o.MaxSteps < 1 {
		return fmt.Errorf("options.max_steps must be at least 1: %w", ErrBadAction)
	}
	return nil
}

// Reset generates a maze: from the seed when one is given, else from the
// episode's random state.
func (m *Maze) Reset(ctx context.Context, seed *int64, options json.RawMessage) (Obs, error) {
	var opts mazeOptions
	if len(options) > 0 && string(options) != "null" {
		if err := json.Unmarshal(options, &opts); err != nil {
			return Obs{}, fmt.Errorf("options: %w: %v", ErrBadAction, err)
		}
	}
	if err := opts.check(); err != nil {
		return Obs{}, err
	}
	if m.width == 0 {
		m.width, m.height = mazeDefaultSize, mazeDefaultSize
	}
	sized := opts.Width != nil || opts.Height != nil
	if opts.Width != nil {
		m.width = *opts.Width
	}
	if opts.Height != nil {
		m.height = *opts.Height
	}
	switch {
	case opts.MaxSteps != nil:
		m.maxSteps = *opts.MaxSteps
	case m.maxSteps == 0 || sized:
		m.maxSteps = 4 * m.width * m.height
	}
	switch {
	case seed != nil:
		m.pcg.Seed(uint64(*seed), 0x6a09e667f3bcc909)
	case !m.seeded:
		m.pcg.Seed(rand.Uint64(), rand.Uint64())
	}
	m.seeded = true
	m.generate(rand.New(&m.pcg))
	m.x, m.y, m.steps, m.done = 1, 1, 0, false
	return Obs{Observation: m.obs()}, nil
}

// generate carves a perfect maze by a depth-first search from the start
// cell, with an explicit stack (a 61×61 maze would recurse 900 deep).
func (m *Maze) generate(r *rand.Rand) {
	w, h := m.width, m.height
	m.walls = make([]bool, w*h)
	for i := range m.walls {
		m.walls[i] = true
	}
	m.walls[1*w+1] = false
	stack := [][2]int{{1, 1}}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		var next [][2]int
		for _, d := range mazeMoves {
			nx, ny := c[0]+2*d[0], c[1]+2*d[1]
			if nx > 0 && nx < w-1 && ny > 0 && ny < h-1 && m.walls[ny*w+nx] {
				next = append(next, [2]int{nx, ny})
			}
		}
		if len(next) == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		n := next[r.IntN(len(next))]
		m.walls[(c[1]+n[1])/2*w+(c[0]+n[0])/2] = false
		m.walls[n[1]*w+n[0]] = false
		stack = append(stack, n)
	}
}

func (m *Maze) goal() (int, int) { return m.width - 2, m.height - 2 }

// Step moves the agent.
func (m *Maze) Step(ctx context.Context, action int) (Step, error) {
	if action < 0 || action > 3 {
		return Step{}, fmt.Errorf("action %d: want 0 up, 1 right, 2 down or 3 left: %w", action, ErrBadAction)
	}
	if m.walls == nil || m.done {
		return Step{}, errors.New("maze: episode is over; reset it")
	}
	d := mazeMoves[action]
	if nx, ny := m.x+d[0], m.y+d[1]; !m.walls[ny*m.width+nx] {
		m.x, m.y = nx, ny
	}
	m.steps++
	st := Step{Reward: mazeStepReward}
	if gx, gy := m.goal(); m.x == gx && m.y == gy {
		st.Reward, st.Terminated = mazeGoalReward, true
	} else if m.steps >= m.maxSteps {
		st.Truncated = true
	}
	m.done = st.Terminated || st.Truncated
	st.Observation = m.obs()
	return st, nil
}

func (m *Maze) rows() []string {
	gx, gy := m.goal()
	rows := make([]string, m.height)
	var b strings.Builder
	for y := 0; y < m.height; y++ {
		b.Reset()
		for x := 0; x < m.width; x++ {
			switch {
			case x == m.x && y == m.y:
				b.WriteByte('A')
			case x == gx && y == gy:
				b.WriteByte('G')
			case m.walls[y*m.width+x]:
				b.WriteByte('#')
			default:
				b.WriteByte('.')
			}
		}
		rows[y] = b.String()
	}
	return rows
}

type mazeObs struct {
	Grid     []string `json:"grid"`
	Position [2]int   `json:"position"`
	Goal     [2]int   `json:"goal"`
	Steps    int      `json:"steps"`
}

func (m *Maze) obs() json.RawMessage {
	gx, gy := m.goal()
	return JSON(mazeObs{Grid: m.rows(), Position: [2]int{m.x, m.y}, Goal: [2]int{gx, gy}, Steps: m.steps})
}

// Render draws the maze.
func (m *Maze) Render() (string, error) {
	if m.walls == nil {
		return "maze: not reset yet", nil
	}
	return fmt.Sprintf("%s\nstep %d of %d", strings.Join(m.rows(), "\n"), m.steps, m.maxSteps), nil
}

// Close does nothing: the maze holds no resources.
func (m *Maze) Close() error { return nil }

type mazeState struct {
	PCG      []byte `json:"pcg"`
	Seeded   bool   `json:"seeded"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	MaxSteps int    `json:"max_steps"`
	Walls    []bool `json:"walls"`
	X        int    `json:"x"`
	Y        int    `json:"y"`
	Steps    int    `json:"steps"`
	Done     bool   `json:"done"`
}

// SaveState saves the maze, the agent and the random state.
func (m *Maze) SaveState() ([]byte, error) {
	pcg, err := m.pcg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(mazeState{PCG: pcg, Seeded: m.seeded, Width: m.width, Height: m.height, MaxSteps: m.maxSteps,
		Walls: m.walls, X: m.x, Y: m.y, Steps: m.steps, Done: m.done})
}

// LoadState restores what SaveState saved.
func (m *Maze) LoadState(b []byte) error {
	var s mazeState
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s.Walls != nil && len(s.Walls) != s.Width*s.Height {
		return fmt.Errorf("maze state: %d walls for %dx%d", len(s.Walls), s.Width, s.Height)
	}
	if err := m.pcg.UnmarshalBinary(s.PCG); err != nil {
		return err
	}
	m.seeded, m.width, m.height, m.maxSteps, m.walls = s.Seeded, s.Width, s.Height, s.MaxSteps, s.Walls
	m.x, m.y, m.steps, m.done = s.X, s.Y, s.Steps, s.Done
	return nil
}

var (
	_ Env[int] = (*Maze)(nil)
	_ Stateful = (*Maze)(nil)
)
