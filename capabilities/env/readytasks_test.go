package env_test

import (
	"encoding/json"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

// TestReadyTasks grades each ready coding task of capabilities/env/tasks
// (docs/env.md, Tasks) in the sandbox twice: the starting files as they
// are, which must not earn the full reward, and a correct solution, which
// must; so the hidden tests are real and the tasks solvable.
func TestReadyTasks(t *testing.T) {
	if systemPython() == "" {
		t.Skip("no python3 among the sandbox's system paths for the graders")
	}
	solutions := map[string]map[string]string{
		"fix-stats": {"stats.py": `def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of nothing")
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def mode(values):
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return min(counts, key=lambda v: (-counts[v], v))
`},
		"fizzbuzz": {"fizzbuzz.py": `for i in range(1, 101):
    print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)
`},
		"roman": {"roman.sh": `#!/bin/sh
case "$1" in ''|*[!0-9]*) exit 2 ;; esac
n=$1
[ "$n" -ge 1 ] && [ "$n" -le 3999 ] || exit 2
out=
for pair in 1000:M 900:CM 500:D 400:CD 100:C 90:XC 50:L 40:XL 10:X 9:IX 5:V 4:IV 1:I; do
	v=${pair%%:*}
	s=${pair#*:}
	while [ "$n" -ge "$v" ]; do
		out=$out$s
		n=$((n - v))
	done
done
echo "$out"
`},
	}
	h := newHost(t, &env.Plugin{Settings: env.Settings{TasksDir: "tasks", DataRoot: t.TempDir()}})
	c := aeptest.Connect(t, h, "env")
	ctx := aeptest.Context(t)
	submit := func(t *testing.T, name string, files map[string]string) (float64, string) {
		r := reset(t, c, "task/"+name, 0, "")
		for path, content := range files {
			b, _ := json.Marshal(env.TaskAction{Op: "write", Path: path, Content: content})
			if _, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: b}); err != nil {
				t.Fatal(err)
			}
		}
		st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage(`{"op":"submit"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Terminated {
			t.Fatal("submit did not end the episode")
		}
		var o taskObs
		must(t, json.Unmarshal(st.Observation, &o))
		out := ""
		if o.Output != nil {
			out = *o.Output
		}
		return st.Reward, out
	}
	for name, files := range solutions {
		t.Run(name, func(t *testing.T) {
			if reward, out := submit(t, name, nil); reward >= 1 {
				t.Fatalf("the starting files earn %v:\n%s", reward, out)
			}
			if reward, out := submit(t, name, files); reward != 1 {
				t.Fatalf("a correct solution earns %v:\n%s", reward, out)
			}
		})
	}
}
