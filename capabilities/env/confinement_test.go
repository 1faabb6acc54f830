package env_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

// TestEveryWirePathConfined checks path confinement (docs/DECISIONS.md, State) for every path the wire
// carries — env/data/add's destination and source, env/data/get's path and
// glob, and the task environment's read and write paths: "..", absolute
// paths, symlinks out (also to a sibling whose name extends the root's) and
// NUL bytes are refused with a clear error, and nothing outside a root is
// read or written. TestDataPlane and TestTaskEnvironmentEndToEnd cover some
// of these cells; this table covers them all.
func TestEveryWirePathConfined(t *testing.T) {
	data, staging, tasks, work := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	writeTask(t, tasks, "answer", "echo 1", 5)
	good := stage(t, staging, "in/good.txt", "good data")
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	// A sibling of the staging root whose name extends it, and a symlink to
	// it inside the staging root.
	stagingSib := staging + "x"
	must(t, os.MkdirAll(stagingSib, 0o755))
	t.Cleanup(func() { os.RemoveAll(stagingSib) })
	must(t, os.WriteFile(filepath.Join(stagingSib, "s.txt"), []byte("sibling"), 0o644))
	must(t, os.Symlink(stagingSib, filepath.Join(staging, "sib")))
	must(t, os.Symlink(outside, filepath.Join(staging, "out")))

	h := newHost(t, &env.Plugin{Settings: env.Settings{DataRoot: data, StagingRoot: staging, TasksDir: tasks, WorkRoot: work}})
	c := aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	ctx := aeptest.Context(t)
	if _, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: []msg.DataPart{good}}); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(data, aeptest.Handle(t, c))
	dataSib := mine + "x"
	must(t, os.MkdirAll(dataSib, 0o755))
	t.Cleanup(func() { os.RemoveAll(dataSib) })
	must(t, os.WriteFile(filepath.Join(dataSib, "s.txt"), []byte("sibling"), 0o644))
	must(t, os.Symlink(dataSib, filepath.Join(mine, "sib")))
	must(t, os.Symlink(outside, filepath.Join(mine, "out")))

	// The task episode's work directory, a sibling of it and symlinks.
	ep := reset(t, c, "task/answer", 0, "").EpisodeID
	act := func(a env.TaskAction) (map[string]any, error) {
		b, _ := json.Marshal(a)
		st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: b})
		if err != nil {
			return nil, err
		}
		var o map[string]any
		must(t, json.Unmarshal(st.Observation, &o))
		return o, nil
	}
	// Runs are contained (they see their directory at /workspace in tier
	// a): the episode's directory is the one tasks/ep-* in the session's
	// directory.
	_, err := act(env.TaskAction{Op: "run", Command: "pwd"})
	must(t, err)
	sd, err := h.SessionDir(aeptest.Handle(t, c))
	must(t, err)
	eps, _ := filepath.Glob(filepath.Join(sd.Path, "tasks", "ep-*"))
	if len(eps) != 1 {
		t.Fatalf("episode directories in the session directory %q: %v", sd.Path, eps)
	}
	wd := eps[0]
	workSib := wd + "x"
	must(t, os.MkdirAll(workSib, 0o755))
	t.Cleanup(func() { os.RemoveAll(workSib) })
	must(t, os.WriteFile(filepath.Join(workSib, "s.txt"), []byte("sibling"), 0o644))
	must(t, os.Symlink(workSib, filepath.Join(wd, "sib")))
	must(t, os.Symlink(outside, filepath.Join(wd, "out")))

	add := func(dest, source string) func() error {
		return func() error {
			_, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: []msg.DataPart{{Path: dest, Source: source, Sha256: good.Sha256, Size: good.Size}}})
			return err
		}
	}
	get := func(path, glob *string) func() error {
		return func() error {
			_, err := c.EnvDataGet(ctx, &msg.EnvDataGetReq{Path: path, Glob: glob, Inline: true})
			return err
		}
	}
	task := func(op, path string) func() error {
		return func() error { _, err := act(env.TaskAction{Op: op, Path: path, Content: "x"}); return err }
	}
	sibBase := func(dir string) string { return "../" + filepath.Base(dir) + "x/s.txt" }
	src := good.Source
	cases := []struct {
		name string
		call func() error
		sub  string
	}{
		{"add dest dotdot", add("../x.txt", src), `".."`},
		{"add dest sibling by dotdot", add(sibBase(mine), src), `".."`},
		{"add dest absolute", add(filepath.Join(outside, "x.txt"), src), "absolute"},
		{"add dest symlink out", add("out/x.txt", src), "symbolic link"},
		{"add dest symlink to sibling", add("sib/x.txt", src), "symbolic link"},
		{"add dest NUL", add("x\x00.txt", src), "NUL"},
		{"add source dotdot", add("x.txt", "../"+filepath.Base(outside)+"/secret"), `".."`},
		{"add source sibling by dotdot", add("x.txt", sibBase(staging)), `".."`},
		{"add source absolute", add("x.txt", filepath.Join(stagingSib, "s.txt")), "absolute"},
		{"add source symlink out", add("x.txt", "out/secret"), "symbolic link"},
		{"add source symlink to sibling", add("x.txt", "sib/s.txt"), "symbolic link"},
		{"add source NUL", add("x.txt", "in/good.txt\x00"), "NUL"},
		{"get path dotdot", get(aeptest.Ptr("../x"), nil), `".."`},
		{"get path sibling by dotdot", get(aeptest.Ptr(sibBase(mine)), nil), `".."`},
		{"get path absolute", get(aeptest.Ptr(filepath.Join(dataSib, "s.txt")), nil), "absolute"},
		{"get path symlink out", get(aeptest.Ptr("out/secret"), nil), "symbolic link"},
		{"get path symlink to sibling", get(aeptest.Ptr("sib/s.txt"), nil), "symbolic link"},
		{"get path NUL", get(aeptest.Ptr("in/good.txt\x00"), nil), "NUL"},
		{"get glob dotdot", get(nil, aeptest.Ptr("../*")), `".."`},
		{"get glob absolute", get(nil, aeptest.Ptr(dataSib+"/*")), "absolute"},
		{"get glob NUL", get(nil, aeptest.Ptr("*\x00")), "NUL"},
		{"task read dotdot", task("read", "../x"), `".."`},
		{"task read sibling by dotdot", task("read", sibBase(wd)), `".."`},
		{"task read absolute", task("read", filepath.Join(workSib, "s.txt")), "absolute"},
		{"task read symlink out", task("read", "out/secret"), "symbolic link"},
		{"task read symlink to sibling", task("read", "sib/s.txt"), "symbolic link"},
		{"task read NUL", task("read", "a\x00"), "NUL"},
		{"task write dotdot", task("write", "../x"), `".."`},
		{"task write sibling by dotdot", task("write", sibBase(wd)), `".."`},
		{"task write absolute", task("write", filepath.Join(workSib, "new.txt")), "absolute"},
		{"task write symlink out", task("write", "out/new.txt"), "symbolic link"},
		{"task write symlink to sibling", task("write", "sib/new.txt"), "symbolic link"},
		{"task write NUL", task("write", "a\x00"), "NUL"},
	}
	for _, tc := range cases {
		// A path of the data plane is the request's own field: a rule of its
		// shape (schema_violation). A task's path is inside its action, which
		// only the environment judges (runtime_error, invalid_action).
		code := wire.CodeSchemaViolation
		if strings.HasPrefix(tc.name, "task ") {
			code = wire.CodeRuntimeError
		}
		t.Run(tc.name, func(t *testing.T) { aeptest.WantError(t, tc.call(), code, tc.sub) })
	}
	// Nothing was written outside a root, and the data root holds what it held.
	for _, dir := range []string{outside, stagingSib, dataSib, workSib} {
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("%s holds %d entries after the refusals", dir, len(ents))
		}
	}
	if got := listData(t, mine); len(got) != 1 || got["in/good.txt"] != "good data" {
		t.Errorf("data root after the refusals: %v", got)
	}
	// A glob matching into a symlink finds nothing behind it.
	g, err := c.EnvDataGet(ctx, &msg.EnvDataGetReq{Glob: aeptest.Ptr("*/*"), Inline: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range g.Files {
		if f.Path != "in/good.txt" {
			t.Errorf("glob */* found %s", f.Path)
		}
	}
}
