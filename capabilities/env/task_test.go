package env_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

// writeTask makes a task folder with a real grader script.
func writeTask(t *testing.T, tasks, name, grader string, graderTimeout float64) {
	t.Helper()
	dir := filepath.Join(tasks, name)
	must(t, os.MkdirAll(filepath.Join(dir, "files", "src"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "instructions.md"), []byte("Write 42 into answer.txt, then submit."), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "files", "src", "hello.txt"), []byte("hello"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "grade.sh"), []byte(grader), 0o755))
	def, _ := json.Marshal(map[string]any{"description": "answer 42", "grader": []string{"sh", "-c", `sh "$AEP_TASK_DIR/grade.sh"`},
		"grader_timeout_seconds": graderTimeout, "max_steps": 20})
	must(t, os.WriteFile(filepath.Join(dir, "task.json"), def, 0o644))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type taskObs struct {
	Instructions string   `json:"instructions"`
	Files        []string `json:"files"`
	Content      *string  `json:"content"`
	Output       *string  `json:"output"`
	ExitCode     *int     `json:"exit_code"`
	Error        string   `json:"error"`
}

func TestTaskEnvironmentEndToEnd(t *testing.T) {
	tasks, work, data := t.TempDir(), t.TempDir(), t.TempDir()
	writeTask(t, tasks, "answer", `if [ "$(cat answer.txt)" = "42" ]; then echo graded; echo 0.75; else echo 0; fi`, 10)
	writeTask(t, tasks, "slow", "sleep 5; echo 1", 0.2)
	h := newHost(t, &env.Plugin{Settings: env.Settings{TasksDir: tasks, WorkRoot: work, DataRoot: data}})
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := aeptest.ConnectWith(t, h, cd.codec, nil, "env")
			ctx := aeptest.Context(t)
			act := func(id string, a env.TaskAction) (*msg.EnvStepResp, taskObs, error) {
				b, _ := json.Marshal(a)
				st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: id, Action: b})
				var o taskObs
				if err == nil {
					must(t, json.Unmarshal(st.Observation, &o))
				}
				return st, o, err
			}
			r := reset(t, c, "task/answer", 0, "")
			var o taskObs
			must(t, json.Unmarshal(r.Observation, &o))
			if !strings.Contains(o.Instructions, "42") || len(o.Files) != 1 || o.Files[0] != "src/hello.txt" {
				t.Fatalf("reset observation: %s", r.Observation)
			}
			if _, o, err := act(r.EpisodeID, env.TaskAction{Op: "read", Path: "src/hello.txt"}); err != nil || o.Content == nil || *o.Content != "hello" {
				t.Fatalf("read: %+v %v", o, err)
			}
			if _, _, err := act(r.EpisodeID, env.TaskAction{Op: "write", Path: "answer.txt", Content: "41"}); err != nil {
				t.Fatal(err)
			}
			st, o, err := act(r.EpisodeID, env.TaskAction{Op: "submit"})
			if err != nil || !st.Terminated || st.Reward != 0 {
				t.Fatalf("wrong answer graded: %+v %+v %v", st, o, err)
			}
			// A reset brings back the starting files only.
			r2, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "task/answer", EpisodeID: &r.EpisodeID})
			must(t, err)
			must(t, json.Unmarshal(r2.Observation, &o))
			if len(o.Files) != 1 {
				t.Fatalf("reset kept files: %v", o.Files)
			}
			if _, _, err := act(r.EpisodeID, env.TaskAction{Op: "write", Path: "answer.txt", Content: "42"}); err != nil {
				t.Fatal(err)
			}
			// The episode's files are in the session's directory, not under
			// work_root (which holds grading copies only).
			sd, err := h.SessionDir(aeptest.Handle(t, c))
			must(t, err)
			if got, _ := filepath.Glob(filepath.Join(sd.Path, "tasks", "ep-*", "answer.txt")); len(got) != 1 {
				t.Fatalf("answer.txt in the session directory: %v", got)
			}
			if got, _ := filepath.Glob(filepath.Join(work, "ep-*")); len(got) != 0 {
				t.Fatalf("episode directories under work_root: %v", got)
			}
			if _, o, err := act(r.EpisodeID, env.TaskAction{Op: "run", Command: "cat answer.txt; exit 3"}); err != nil || *o.Output != "42" || *o.ExitCode != 3 {
				t.Fatalf("run: %+v %v", o, err)
			}
			_, o, err = act(r.EpisodeID, env.TaskAction{Op: "run", Command: "sleep 5", TimeoutSeconds: 0.2})
			if err != nil || !strings.Contains(o.Error, "timed out") {
				t.Fatalf("run timeout: %+v %v", o, err)
			}
			// Paths stay inside the work directory.
			_, _, err = act(r.EpisodeID, env.TaskAction{Op: "write", Path: "../escape.txt", Content: "x"})
			aeptest.WantError(t, err, wire.CodeRuntimeError, `".."`)
			_, _, err = act(r.EpisodeID, env.TaskAction{Op: "read", Path: "/etc/passwd"})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "absolute")
			outside := t.TempDir()
			if _, _, err := act(r.EpisodeID, env.TaskAction{Op: "run", Command: "ln -s " + outside + " out"}); err != nil {
				t.Fatal(err)
			}
			_, _, err = act(r.EpisodeID, env.TaskAction{Op: "write", Path: "out/x.txt", Content: "x"})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "symbolic link")
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("a write escaped through a symlink: %v", ents)
			}
			st, o, err = act(r.EpisodeID, env.TaskAction{Op: "submit"})
			if err != nil || !st.Terminated || st.Reward != 0.75 || !strings.Contains(*o.Output, "graded") {
				t.Fatalf("right answer graded: %+v %+v %v", st, o, err)
			}
			// A grader that overruns its timeout gives reward 0 and says so.
			s := reset(t, c, "task/slow", 0, "")
			t0 := time.Now()
			st, o, err = act(s.EpisodeID, env.TaskAction{Op: "submit"})
			if err != nil || st.Reward != 0 || !strings.Contains(o.Error, "timed out") || time.Since(t0) > 3*time.Second {
				t.Fatalf("slow grader: %+v %+v %v", st, o, err)
			}
			// Episodes never touch the data root (spec §3).
			if ents, _ := os.ReadDir(filepath.Join(data, aeptest.Handle(t, c))); len(ents) != 0 {
				t.Fatalf("episode wrote into the data root: %v", ents)
			}
		})
	}
	// Ending a session closes its episodes: their work directories go.
	c := aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	reset(t, c, "task/answer", 0, "")
	sd, err := h.SessionDir(aeptest.Handle(t, c))
	must(t, err)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, _ := os.ReadDir(work)
		eps, _ := filepath.Glob(filepath.Join(sd.Path, "tasks", "ep-*"))
		if len(ents) == 0 && len(eps) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("work directories left after the sessions ended: %d", len(ents))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWorkRootInsideDataRootIsRefused(t *testing.T) {
	data := t.TempDir()
	tasks := t.TempDir()
	writeTask(t, tasks, "answer", "echo 1", 5)
	p := &env.Plugin{Settings: env.Settings{TasksDir: tasks, DataRoot: data, WorkRoot: filepath.Join(data, "work")}}
	err := p.Provision(aeptest.Context(t), serverEnv())
	if err == nil || !strings.Contains(err.Error(), "inside data_root") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

// TestGradeCannotBeTampered: an agent that edits the hidden tests (by the
// task folder's host path, or anywhere it can find a grade.sh) or leaves a
// background process rewriting its answer cannot change the grade: runs
// are contained and never see the task folder, their processes end with
// them, and the grader runs on copies in a sandbox of its own.
func TestGradeCannotBeTampered(t *testing.T) {
	tasks, work, data := t.TempDir(), t.TempDir(), t.TempDir()
	os.Chmod(tasks, 0o755)
	grader := `if [ "$(cat answer.txt)" = "42" ]; then echo 1; else echo 0; fi`
	writeTask(t, tasks, "guarded", grader, 10)
	hidden := filepath.Join(tasks, "guarded", "grade.sh")
	must(t, os.Chmod(filepath.Dir(hidden), 0o777))
	must(t, os.Chmod(hidden, 0o666)) // writable by anyone: only containment protects it
	h := newHost(t, &env.Plugin{Settings: env.Settings{TasksDir: tasks, WorkRoot: work, DataRoot: data}})
	c := aeptest.Connect(t, h, "env")
	ctx := aeptest.Context(t)
	r := reset(t, c, "task/guarded", 0, "")
	act := func(a env.TaskAction) (*msg.EnvStepResp, taskObs) {
		t.Helper()
		b, _ := json.Marshal(a)
		st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: b})
		if err != nil {
			t.Fatal(err)
		}
		var o taskObs
		must(t, json.Unmarshal(st.Observation, &o))
		return st, o
	}
	act(env.TaskAction{Op: "write", Path: "answer.txt", Content: "41"})
	tag := fmt.Sprintf("%d.%d", 5000+os.Getpid()%1000, time.Now().UnixNano()%100000)
	_, o := act(env.TaskAction{Op: "run", Command: `echo "task dir: [$AEP_TASK_DIR]"; ` +
		`echo 'echo 1' > ` + hidden + `; find / -name grade.sh -exec sh -c 'echo "echo 1" > "$1"' _ {} \; 2>/dev/null; ` +
		`setsid sh -c 'sleep 1; while :; do echo 42 > answer.txt; sleep 0.05; done' </dev/null >/dev/null 2>&1 & ` +
		`setsid sleep ` + tag + ` </dev/null >/dev/null 2>&1 & echo left`})
	if o.Output == nil || !strings.Contains(*o.Output, "task dir: []") {
		t.Fatalf("the run saw the task folder: %+v", o)
	}
	for deadline := time.Now().Add(5 * time.Second); processRunning(tag); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a background process of the run outlived it")
		}
	}
	if b, _ := os.ReadFile(hidden); string(b) != grader {
		t.Fatalf("the hidden tests changed: %q", b)
	}
	// Past the moment the left-behind loop would have rewritten the answer.
	time.Sleep(1500 * time.Millisecond)
	if _, o := act(env.TaskAction{Op: "read", Path: "answer.txt"}); o.Content == nil || *o.Content != "41" {
		t.Fatalf("the answer changed after the run: %+v", o)
	}
	st, o := act(env.TaskAction{Op: "submit"})
	if !st.Terminated || st.Reward != 0 {
		t.Fatalf("tampered grade: reward %v, %+v", st.Reward, o)
	}
}

func processRunning(tag string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), tag) && !strings.Contains(string(st), ") Z ") {
			return true
		}
	}
	return false
}
