package env_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// The external environment of these tests is this test binary itself,
// re-executed with AEP_TEST_EXTENV set: a real process speaking the
// protocol of schemas/envproto/envproto.json over its stdin and stdout,
// started in the sandbox like any other.
//
// It is a walk on the integers: reset puts the walker at seed mod 5, the
// action (an integer) is added to the position, reward 1 per step,
// terminated at 10. Some actions misbehave on purpose:
//
//	-1 exits with status 3          -2 hangs
//	-3 writes garbage                -4 dies by SIGKILL
//	-5 answers envproto/error        -6 leaves a child process running
//	-7 answers another request's id  >100 is refused as a bad action
func init() {
	if os.Getenv("AEP_TEST_EXTENV") == "walk" {
		os.Exit(walkEnv(os.Stdin, os.Stdout))
	}
}

func walkEnv(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	w := bufio.NewWriter(out)
	reply := func(id, typ string, body map[string]any) {
		if body == nil {
			body = map[string]any{}
		}
		body["type"], body["req_id"] = typ, id
		b, _ := json.Marshal(body)
		w.Write(append(b, '\n'))
		w.Flush()
	}
	pos := 0
	for sc.Scan() {
		var req struct {
			Type   string          `json:"type"`
			ID     string          `json:"id"`
			Seed   *int64          `json:"seed"`
			Action json.RawMessage `json:"action"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			return 2
		}
		switch req.Type {
		case "envproto/spec/req":
			reply(req.ID, "envproto/spec/resp", map[string]any{"protocol": "1", "name": "walk", "description": "a walk on the integers",
				"action_space": map[string]any{"type": "integer"}, "observation_space": map[string]any{"type": "integer"}, "render_modes": []string{"ansi"}, "snapshots": true})
		case "envproto/reset/req":
			pos = 0
			if req.Seed != nil {
				pos = int(*req.Seed % 5)
			}
			reply(req.ID, "envproto/reset/resp", map[string]any{"observation": pos, "info": map[string]any{"start": pos}})
		case "envproto/step/req":
			a, err := strconv.Atoi(string(req.Action))
			switch {
			case err != nil || a > 100:
				reply(req.ID, "envproto/error", map[string]any{"message": "action must be an integer up to 100", "bad_action": true})
				continue
			case a == -1:
				fmt.Fprintln(os.Stderr, "walk: exiting on purpose")
				return 3
			case a == -2:
				time.Sleep(time.Hour)
			case a == -3:
				fmt.Fprintln(w, "this is not json")
				w.Flush()
				continue
			case a == -4:
				// SIGKILL: Go's runtime turns most other signals into exit status 2.
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour)
			case a == -5:
				reply(req.ID, "envproto/error", map[string]any{"message": "the walker tripped"})
				continue
			case a == -6:
				cmd := exec.Command("sleep", "3600")
				cmd.Start()
				a = 0
			case a == -7:
				reply(req.ID+"0", "envproto/step/resp", map[string]any{"observation": pos, "reward": 1, "terminated": false, "truncated": false})
				continue
			}
			pos += a
			reply(req.ID, "envproto/step/resp", map[string]any{"observation": pos, "reward": 1, "terminated": pos >= 10, "truncated": false})
		case "envproto/state/req":
			reply(req.ID, "envproto/state/resp", map[string]any{"state": strconv.Itoa(pos)})
		case "envproto/restore/req":
			var r struct {
				State string `json:"state"`
			}
			json.Unmarshal(sc.Bytes(), &r)
			pos, _ = strconv.Atoi(r.State)
			reply(req.ID, "envproto/restore/resp", nil)
		case "envproto/render/req":
			reply(req.ID, "envproto/render/resp", map[string]any{"text": fmt.Sprintf("walker at %d", pos)})
		case "envproto/close/req":
			reply(req.ID, "envproto/close/resp", nil)
			return 0
		default:
			reply(req.ID, "envproto/error", map[string]any{"message": "unknown request " + req.Type})
		}
	}
	return 0
}

var (
	walkBinOnce sync.Once
	walkBin     string
	walkBinErr  error
)

// walkBinary copies the test binary into a directory every uid may read,
// so the sandbox's unprivileged uid can run it (go test's build directory
// is the host user's alone).
func walkBinary(t *testing.T) string {
	t.Helper()
	walkBinOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			walkBinErr = err
			return
		}
		dir, err := os.MkdirTemp("", "aep-walkenv-")
		if err != nil {
			walkBinErr = err
			return
		}
		os.Chmod(dir, 0o755)
		src, err := os.Open(exe)
		if err != nil {
			walkBinErr = err
			return
		}
		defer src.Close()
		walkBin = filepath.Join(dir, "walkenv")
		dst, err := os.OpenFile(walkBin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			walkBinErr = err
			return
		}
		if _, err := io.Copy(dst, src); err != nil {
			walkBinErr = err
		}
		dst.Close()
	})
	if walkBinErr != nil {
		t.Fatal(walkBinErr)
	}
	return walkBin
}

// walkConfig is the external environment "walk" for one test; marker is
// a variable value only this test's processes carry, to find any of them
// left running.
func walkConfig(t *testing.T, callTimeout time.Duration) (env.ExternalEnv, string) {
	bin := walkBinary(t)
	marker := "walk-" + wire.RandomHex(6)
	return env.ExternalEnv{Name: "walk", Command: bin, ReadOnly: []string{filepath.Dir(bin)},
		Env:         map[string]string{"AEP_TEST_EXTENV": "walk", "AEP_TEST_MARKER": marker},
		CallTimeout: server.Duration(callTimeout), StartTimeout: server.Duration(20 * time.Second)}, marker
}

// episodes lists the pids of environment processes whose environment
// carries marker (not the sandbox's own processes around them).
func episodes(marker string) []int {
	var out []int
	for _, pid := range running(marker) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(string(b), walkBin+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// running lists the pids of processes whose environment carries marker.
func running(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(b), "AEP_TEST_MARKER="+marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// noneLeft waits for every process carrying marker to be gone.
func noneLeft(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := running(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left running: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func walkHost(t *testing.T, callTimeout time.Duration) (*server.Host, string) {
	cfg, marker := walkConfig(t, callTimeout)
	h := newHost(t, &env.Plugin{Settings: env.Settings{External: []env.ExternalEnv{cfg}, StepTimeout: server.Duration(30 * time.Second)}})
	return h, marker
}

func step(t *testing.T, c *client.Client, id string, action int) (*msg.EnvStepResp, error) {
	t.Helper()
	return c.EnvStep(aeptest.Context(t), &msg.EnvStepReq{EpisodeID: id, Action: json.RawMessage(strconv.Itoa(action))})
}

func TestExternalEnvironment(t *testing.T) {
	h, marker := walkHost(t, 5*time.Second)
	c := aeptest.Connect(t, h, "env")
	ctx := aeptest.Context(t)

	list, err := c.EnvList(ctx, &msg.EnvListReq{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range list.Envs {
		if e.EnvName == "walk" {
			found = true
			if e.Description != "a walk on the integers" || string(e.ActionSpace) != `{"type":"integer"}` || !e.Snapshots {
				t.Fatalf("env/list entry from the spec: %+v", e)
			}
		}
	}
	if !found {
		t.Fatalf("walk not listed: %+v", list.Envs)
	}

	// Same seed, same trajectory, in two episodes (two processes).
	trajectory := func() []string {
		r := reset(t, c, "walk", 7, "")
		out := []string{string(r.Observation) + string(r.Info)}
		for _, a := range []int{1, 3, 4} {
			st, err := step(t, c, r.EpisodeID, a)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %v %v %v", st.Observation, st.Reward, st.Terminated, st.Truncated))
		}
		rd, err := c.EnvRender(ctx, &msg.EnvRenderReq{EpisodeID: r.EpisodeID})
		if err != nil {
			t.Fatal(err)
		}
		return append(out, rd.Text)
	}
	a, b := trajectory(), trajectory()
	want := []string{`2{"start":2}`, "3 1 false false", "6 1 false false", "10 1 true false", "walker at 10"}
	if fmt.Sprint(a) != fmt.Sprint(want) || fmt.Sprint(b) != fmt.Sprint(want) {
		t.Fatalf("trajectories:\n%v\n%v\nwant %v", a, b, want)
	}
	if n := len(episodes(marker)); n != 2 {
		t.Fatalf("want one process per open episode (2), found %d", n)
	}

	// An action the environment refuses is the agent's fault; the episode goes on.
	r := reset(t, c, "walk", 0, "")
	_, err = step(t, c, r.EpisodeID, 101)
	if we := wire.AsError(err); wire.ReasonOf(we.Detail) != "invalid_action" || !strings.Contains(we.Message, "up to 100") {
		t.Fatalf("bad action: %v", err)
	}
	_, err = step(t, c, r.EpisodeID, -5)
	if we := wire.AsError(err); we.Code != wire.CodeRuntimeError || !strings.Contains(we.Message, "the walker tripped") {
		t.Fatalf("envproto/error: %v", err)
	}
	if st, err := step(t, c, r.EpisodeID, 2); err != nil || string(st.Observation) != "2" {
		t.Fatalf("the episode goes on after refusals: %v %v", st, err)
	}
	// A child process the environment leaves behind goes with its session.
	if _, err := step(t, c, r.EpisodeID, -6); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	noneLeft(t, marker)
}

// TestExternalEnvironmentFailures: a crash, a hang, garbage output, a
// death by signal and a wrong req_id each end their episode with a clear
// error and kill its process; the next reset starts a fresh process; the
// host and the session's other episode are unaffected.
func TestExternalEnvironmentFailures(t *testing.T) {
	h, marker := walkHost(t, 3*time.Second)
	c := aeptest.Connect(t, h, "env")
	ctx := aeptest.Context(t)
	bystander := reset(t, c, "walk", 1, "")
	cases := []struct {
		name   string
		action int
		code   wire.Code
		says   string
	}{
		{"crash", -1, wire.CodeRuntimeError, "exited (status 3)"},
		{"hang", -2, wire.CodeTimeout, "did not answer envproto/step/req within 3s"},
		{"garbage", -3, wire.CodeRuntimeError, "broke the protocol"},
		{"signal", -4, wire.CodeSandboxCrash, "SIGKILL"},
		{"wrong id", -7, wire.CodeRuntimeError, "req_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := reset(t, c, "walk", 0, "")
			before := len(episodes(marker))
			_, err := step(t, c, r.EpisodeID, tc.action)
			we := wire.AsError(err)
			if we.Code != tc.code || !strings.Contains(we.Message, tc.says) || !strings.Contains(we.Message, "environment walk") {
				t.Fatalf("got %v (%s), want %s saying %q", err, we.Code, tc.code, tc.says)
			}
			if got := len(episodes(marker)); got != before-1 {
				t.Fatalf("the failed process should be gone: %d processes, %d before", got, before)
			}
			// The episode ended: stepping needs a reset, which starts a fresh process.
			if _, err := step(t, c, r.EpisodeID, 1); wire.ReasonOf(wire.AsError(err).Detail) != "episode_closed" {
				t.Fatalf("stepping an ended episode: %v", err)
			}
			obs, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: r.EpisodeID})
			if err != nil || obs.Status != "truncated" {
				t.Fatalf("observe after the failure: %+v %v", obs, err)
			}
			again, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "walk", EpisodeID: &r.EpisodeID})
			if err != nil || string(again.Observation) != "0" {
				t.Fatalf("reset after the failure: %+v %v", again, err)
			}
			if st, err := step(t, c, r.EpisodeID, 4); err != nil || string(st.Observation) != "4" {
				t.Fatalf("the fresh process steps: %+v %v", st, err)
			}
			if _, err := c.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: r.EpisodeID}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The other episode never noticed.
	if st, err := step(t, c, bystander.EpisodeID, 2); err != nil || string(st.Observation) != "3" {
		t.Fatalf("bystander: %+v %v", st, err)
	}
	c.Close()
	noneLeft(t, marker)
}

// TestExternalEnvironmentDoesNotStart: a command that cannot serve the
// protocol is refused when the plugin starts, not at the first reset.
func TestExternalEnvironmentDoesNotStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string
		args    []string
	}{
		{"missing", "/nonexistent/envserver", nil},
		{"silent", "sh", []string{"-c", "exit 0"}},
		{"garbage", "sh", []string{"-c", "echo hello; sleep 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &env.Plugin{Settings: env.Settings{DataRoot: t.TempDir(),
				External: []env.ExternalEnv{{Name: "bad", Command: tc.command, Args: tc.args, StartTimeout: server.Duration(5 * time.Second)}}}}
			_, err := server.New(aeptest.Context(t), aeptest.Config(nil), server.WithPlugin(aeptest.Plugin("env", p)))
			if err == nil || !strings.Contains(err.Error(), `external environment "bad" does not start`) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// systemPython is a python3 the sandbox shows (its system paths), or "".
func systemPython() string {
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// cartPoleStep is one step of sdk/python/tests/cartpole.py's trajectory.
type cartPoleStep struct {
	Obs        []float64
	Reward     float64
	Terminated bool
	Truncated  bool
}

// TestExternalPythonCartPole serves the pure-Python cart-pole of the
// Python SDK's tests through aep.envserver (run as a script by the system
// Python, in the sandbox) and steps it with the Go client: the same seed
// gives the same trajectory twice, and the very trajectory Python computes
// stepping the environment directly.
func TestExternalPythonCartPole(t *testing.T) {
	py := systemPython()
	if py == "" {
		t.Skip("no python3 among the sandbox's system paths")
	}
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.ExternalEnv{Name: "cartpole", Command: "python3",
		Args:     []string{filepath.Join(sdk, "aep", "envserver.py"), filepath.Join(sdk, "tests", "cartpole.py") + ":CartPole"},
		ReadOnly: []string{sdk}, EnvAllow: []string{"LANG"}, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}}
	h := newHost(t, &env.Plugin{Settings: env.Settings{External: []env.ExternalEnv{cfg}}}, server.WithDataDir(t.TempDir()))

	// The floor: Python stepping the environment itself.
	cmd := exec.Command(py, "-c", "import json, cartpole; print(json.dumps(cartpole.trajectory(cartpole.CartPole(), 3)))")
	cmd.Dir = filepath.Join(sdk, "tests")
	cmd.Env = []string{"PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var direct [][]json.RawMessage
	if err := json.Unmarshal(out, &direct); err != nil {
		t.Fatal(err)
	}
	var want []cartPoleStep
	for _, s := range direct {
		var st cartPoleStep
		json.Unmarshal(s[0], &st.Obs)
		json.Unmarshal(s[1], &st.Reward)
		json.Unmarshal(s[2], &st.Terminated)
		json.Unmarshal(s[3], &st.Truncated)
		want = append(want, st)
	}

	c := aeptest.Connect(t, h, "env")
	ctx := aeptest.Context(t)
	spaces, err := c.EnvSpaces(ctx, &msg.EnvSpacesReq{EnvName: ptr("cartpole")})
	if err != nil || string(spaces.ActionSpace) != `{"type":"integer","minimum":0,"maximum":1}` {
		t.Fatalf("spaces: %+v %v", spaces, err)
	}
	run := func() []cartPoleStep {
		r := reset(t, c, "cartpole", 3, "")
		var obs []float64
		must(t, json.Unmarshal(r.Observation, &obs))
		got := []cartPoleStep{{Obs: obs}}
		for len(got) <= 60 {
			a := 0
			if obs[2]+0.5*obs[3] > 0 { // cartpole.policy
				a = 1
			}
			st, err := step(t, c, r.EpisodeID, a)
			if err != nil {
				t.Fatal(err)
			}
			obs = nil
			must(t, json.Unmarshal(st.Observation, &obs))
			got = append(got, cartPoleStep{obs, st.Reward, st.Terminated, st.Truncated})
			if st.Terminated || st.Truncated {
				break
			}
		}
		if _, err := step(t, c, r.EpisodeID, 2); wire.ReasonOf(wire.AsError(err).Detail) != "invalid_action" {
			t.Fatalf("an action outside Discrete(2): %v", err)
		}
		return got
	}
	first, second := run(), run()
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("same seed, different trajectories:\n%v\n%v", first, second)
	}
	if fmt.Sprint(first) != fmt.Sprint(want) {
		t.Fatalf("through aep:\n%v\ndirect in Python:\n%v", first, want)
	}
	if len(first) < 10 {
		t.Fatalf("a trajectory of %d steps tests little", len(first))
	}

	// check_env through the wire: determinism under a seed, observations
	// in the space the adapter derived, the end of an episode respected.
	checkEnv(t, c, "cartpole", "", []int{0, 1}, 600)

	// The cart-pole saves its state (get_state/set_state): a restored
	// episode continues in a fresh process as the original did.
	r := reset(t, c, "cartpole", 5, "")
	steps := func(n int) string {
		var out []string
		for i := 0; i < n; i++ {
			st, err := step(t, c, r.EpisodeID, i%2)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(st.Observation))
		}
		return strings.Join(out, " ")
	}
	steps(3)
	snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	before := steps(4)
	if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	if after := steps(4); after != before {
		t.Fatalf("after the restore:\n%s\nbefore it:\n%s", after, before)
	}
}

func ptr[T any](v T) *T { return &v }

// TestExternalEnvironmentSnapshot: an external episode whose environment
// saves its state continues after session/restore in a fresh process;
// the replaced process is gone.
func TestExternalEnvironmentSnapshot(t *testing.T) {
	cfg, marker := walkConfig(t, 5*time.Second)
	h := newHost(t, &env.Plugin{Settings: env.Settings{External: []env.ExternalEnv{cfg}}}, server.WithDataDir(t.TempDir()))
	c := aeptest.Connect(t, h, "env")
	ctx := aeptest.Context(t)
	r := reset(t, c, "walk", 7, "")
	if st, err := step(t, c, r.EpisodeID, 1); err != nil || string(st.Observation) != "3" {
		t.Fatalf("%+v %v", st, err)
	}
	fresh := reset(t, c, "walk", 0, "") // reset, never stepped: saved too
	snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := step(t, c, r.EpisodeID, 4); err != nil || string(st.Observation) != "7" {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		want string
	}{{r.EpisodeID, "5"}, {fresh.EpisodeID, "2"}} {
		if st, err := step(t, c, tc.id, 2); err != nil || string(st.Observation) != tc.want {
			t.Fatalf("after the restore: %+v %v, want %s", st, err, tc.want)
		}
	}
	if n := len(episodes(marker)); n != 2 {
		t.Fatalf("%d environment processes after the restore, want 2 (the replaced ones gone)", n)
	}
	c.Close()
	noneLeft(t, marker)
}
