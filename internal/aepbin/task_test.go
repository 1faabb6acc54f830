package aepbin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// TestGradeCannotBeTamperedInEveryTier: a real `aep serve` in each of the
// host's modes (as root, as uid 65534, in the supervised tier) serving a
// task whose hidden tests anyone may write: an agent that edits them (by
// the task folder's host path, or any grade.sh it finds) or leaves a
// background process rewriting its answer cannot change its grade.
func TestGradeCannotBeTamperedInEveryTier(t *testing.T) {
	grader := `if [ "$(cat answer.txt)" = "42" ]; then echo 1; else echo 0; fi`
	for _, m := range hostModes {
		t.Run(m.name, func(t *testing.T) {
			// Readable by the host whichever uid it runs as.
			tasks, err := os.MkdirTemp("", "aep-tasks-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(tasks) })
			dir := filepath.Join(tasks, "guarded")
			for _, d := range []string{tasks, dir, filepath.Join(dir, "files")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				os.Chmod(d, 0o755)
			}
			def, _ := json.Marshal(map[string]any{"description": "answer 42", "grader": []string{"sh", "-c", `sh "$AEP_TASK_DIR/grade.sh"`},
				"grader_timeout_seconds": 10, "max_steps": 20})
			hidden := filepath.Join(dir, "grade.sh")
			for name, body := range map[string]string{"task.json": string(def), "instructions.md": "Write 42 into answer.txt.", "grade.sh": grader} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// Writable by anyone: only containment protects the hidden tests.
			os.Chmod(dir, 0o777)
			os.Chmod(hidden, 0o666)
			opts := m.opts
			opts.Caps = []string{"env"}
			opts.Config += fmt.Sprintf("plugins:\n  - name: env\n    type: env\n    cls: aep.env.builtin\n    config:\n      tasks_dir: %s\n", tasks)
			h := aepbin.Start(t, opts)
			if got := h.Tier(); got == "" || m.tier != "" && got != m.tier {
				t.Fatalf("the host picked tier %q, want %q", got, m.tier)
			}
			c := h.Client
			r, err := c.EnvReset(ctx(t), &msg.EnvResetReq{EnvName: "task/guarded"})
			if err != nil {
				t.Fatal(err)
			}
			type obs struct {
				Content *string `json:"content"`
				Output  *string `json:"output"`
			}
			act := func(a map[string]any) (*msg.EnvStepResp, obs) {
				t.Helper()
				b, _ := json.Marshal(a)
				st, err := c.EnvStep(ctx(t), &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: b})
				if err != nil {
					t.Fatal(err)
				}
				var o obs
				if err := json.Unmarshal(st.Observation, &o); err != nil {
					t.Fatal(err)
				}
				return st, o
			}
			act(map[string]any{"op": "write", "path": "answer.txt", "content": "41"})
			tag := fmt.Sprintf("%d.%d", 6000+os.Getpid()%1000, time.Now().UnixNano()%100000)
			_, o := act(map[string]any{"op": "run", "command": `echo "task dir: [$AEP_TASK_DIR]"; ` +
				`echo 'echo 1' > ` + hidden + `; find / -name grade.sh -exec sh -c 'echo "echo 1" > "$1"' _ {} \; 2>/dev/null; ` +
				`setsid sh -c 'sleep 1; while :; do echo 42 > answer.txt; sleep 0.05; done' </dev/null >/dev/null 2>&1 & ` +
				`setsid sleep ` + tag + ` </dev/null >/dev/null 2>&1 & echo left`})
			if o.Output == nil || !strings.Contains(*o.Output, "task dir: []") {
				t.Fatalf("the run saw the task folder: %+v", o)
			}
			for deadline := time.Now().Add(5 * time.Second); aepbin.Running(tag); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("a background process of the run outlived it")
				}
			}
			if b, _ := os.ReadFile(hidden); string(b) != grader {
				t.Fatalf("the hidden tests changed: %q", b)
			}
			time.Sleep(1500 * time.Millisecond) // past when the left-behind loop would write
			if _, o := act(map[string]any{"op": "read", "path": "answer.txt"}); o.Content == nil || *o.Content != "41" {
				t.Fatalf("the answer changed after the run: %+v", o)
			}
			if st, o := act(map[string]any{"op": "submit"}); !st.Terminated || st.Reward != 0 {
				t.Fatalf("tampered grade: reward %v, %+v", st.Reward, o)
			}
		})
	}
}
