package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// A task is a folder of TasksDir (docs/env.md):
//
//	task.json        {"description", "grader": [argv...], "grader_timeout_seconds", "max_steps"}
//	instructions.md  shown to the agent on reset
//	files/           starting files, copied into each episode's work directory
//
// Reset copies files/ into a fresh per-episode work directory in the
// session's directory (tasks/ep-…; under WorkRoot without a host, or for a
// session whose directory is read-only) — never into the data root (spec
// §3). Grading copies go under WorkRoot, outside every session directory. Actions write, read, list
// and run files there; every `run` is contained in the host's tier
// (docs/SECURITY.md, Isolation) and sees only the work directory, never the
// task folder, and whatever it leaves running ends with it. `submit` runs
// the grader in a fresh sandbox of its own, on copies of the agent's
// submission (AEP_WORK_DIR, its working directory) and of the task folder
// (AEP_TASK_DIR), so nothing the agent did can change the hidden tests or
// reach into the grading; its result is the reward.

// taskWorkKey carries, in a reset's context, the directory of the session's
// task episodes: <session dir>/tasks under a host (the plugin sets it),
// else work_root.
type taskWorkKey struct{}

// sessionTasks is the directory of task episodes in a session directory.
const sessionTasks = "tasks"

// TaskAction is an action of a task environment.
type TaskAction struct {
	// Op is write, read, list, run or submit.
	Op string `json:"op"`
	// Path of write and read, relative to the work directory.
	Path string `json:"path,omitempty"`
	// Content of write.
	Content string `json:"content,omitempty"`
	// Command of run, executed by `sh -c` in the work directory.
	Command string `json:"command,omitempty"`
	// TimeoutSeconds of run; the step timeout bounds it too.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// Validate checks the op and its fields before the environment sees it.
func (a *TaskAction) Validate() error {
	switch a.Op {
	case "write", "read":
		if _, err := cleanRel("path", a.Path); err != nil {
			return err
		}
	case "run":
		if strings.TrimSpace(a.Command) == "" {
			return errors.New("run needs a command")
		}
	case "list", "submit":
	default:
		return fmt.Errorf("op %q: want write, read, list, run or submit", a.Op)
	}
	return nil
}

type taskDef struct {
	Description   string   `json:"description"`
	Grader        []string `json:"grader"`
	GraderTimeout float64  `json:"grader_timeout_seconds"`
	MaxSteps      int      `json:"max_steps"`
	dir           string
	instructions  string
	workRoot      string
	stepTimeout   time.Duration
	mode          sandbox.Mode // the host's tier for runs and graders
}

const taskOutputCap = 64 << 10

var taskActionSpace = json.RawMessage(`{"type":"object","required":["op"],"properties":{` +
	`"op":{"enum":["write","read","list","run","submit"]},"path":{"type":"string"},"content":{"type":"string"},` +
	`"command":{"type":"string"},"timeout_seconds":{"type":"number","minimum":0}}}`)

var taskObservationSpace = json.RawMessage(`{"type":"object","properties":{` +
	`"instructions":{"type":"string"},"files":{"type":"array","items":{"type":"string"}},"content":{"type":"string"},` +
	`"output":{"type":"string"},"exit_code":{"type":"integer"},"error":{"type":"string"}}}`)

// loadTasks adds one environment per task folder to the catalog.
func (p *Plugin) loadTasks(pluginDataDir string) error {
	dirs, err := os.ReadDir(p.TasksDir)
	if err != nil {
		return fmt.Errorf("tasks_dir: %w", err)
	}
	work := p.WorkRoot
	if work == "" {
		if pluginDataDir != "" {
			work = filepath.Join(pluginDataDir, "work")
		} else {
			work = filepath.Join(os.TempDir(), "aep-env-work")
		}
	}
	if work, err = filepath.Abs(work); err != nil {
		return err
	}
	if within(p.DataRoot, work) {
		return fmt.Errorf("work_root %q lies inside data_root %q; episodes must never write to the data root", work, p.DataRoot)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("work_root: %w", err)
	}
	p.WorkRoot = work
	mode := sandbox.ModeAuto
	if p.host != nil {
		mode = p.host.SandboxMode()
	}
	if _, _, err := sandbox.Describe(mode); err != nil {
		return fmt.Errorf("task environments need the configured sandbox (server.isolation.sandbox): %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(p.TasksDir, d.Name())
		raw, err := os.ReadFile(filepath.Join(dir, "task.json"))
		if err != nil {
			return fmt.Errorf("task %q: %w", d.Name(), err)
		}
		def := &taskDef{}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(def); err != nil {
			return fmt.Errorf("task %q: task.json: %w", d.Name(), err)
		}
		if len(def.Grader) == 0 {
			return fmt.Errorf("task %q: task.json has no grader", d.Name())
		}
		if def.GraderTimeout <= 0 {
			def.GraderTimeout = 60
		}
		if def.MaxSteps <= 0 {
			def.MaxSteps = 100
		}
		ins, _ := os.ReadFile(filepath.Join(dir, "instructions.md"))
		def.instructions, def.dir, def.workRoot, def.stepTimeout = string(ins), dir, work, time.Duration(p.StepTimeout)
		def.mode = mode
		name := "task/" + d.Name()
		if _, dup := p.catalog[name]; dup {
			return fmt.Errorf("task %q: environment %q exists already", d.Name(), name)
		}
		desc := def.Description
		if desc == "" {
			desc = "task " + d.Name()
		}
		p.catalog[name] = &factory{
			spec: Spec{Name: name, Description: desc, ActionSpace: taskActionSpace, ObservationSpace: taskObservationSpace},
			new:  func(string) (instance, error) { return typed[TaskAction]{&taskEnv{def: def}}, nil },
		}
	}
	return nil
}

// taskEnv is one episode of a task.
type taskEnv struct {
	def   *taskDef
	work  string
	steps int
}

type taskObs struct {
	Instructions string   `json:"instructions,omitempty"`
	Files        []string `json:"files,omitempty"`
	Content      *string  `json:"content,omitempty"`
	Output       *string  `json:"output,omitempty"`
	ExitCode     *int     `json:"exit_code,omitempty"`
	Error        string   `json:"error,omitempty"`
}

// Reset makes a fresh work directory holding the starting files. Tasks are
// deterministic: the seed is accepted and has nothing to seed.
func (t *taskEnv) Reset(ctx context.Context, seed *int64, options json.RawMessage) (Obs, error) {
	t.removeWork()
	parent := t.def.workRoot
	if d, ok := ctx.Value(taskWorkKey{}).(string); ok {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Obs{}, hostFault{fmt.Errorf("task work directory: %w", err)}
		}
		parent = d
	}
	dir, err := os.MkdirTemp(parent, "ep-")
	if err != nil {
		return Obs{}, hostFault{fmt.Errorf("task work directory: %w", err)}
	}
	t.work, t.steps = dir, 0
	if fi, err := os.Stat(filepath.Join(t.def.dir, "files")); err == nil && fi.IsDir() {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return Obs{}, hostFault{err}
		}
		_, err = copyTree(ctx, filepath.Join(t.def.dir, "files"), root, ".")
		root.Close()
		if err != nil {
			return Obs{}, hostFault{fmt.Errorf("copying starting files: %w", err)}
		}
	}
	files, _ := t.list()
	return Obs{Observation: JSON(taskObs{Instructions: t.def.instructions, Files: files})}, nil
}

// Step applies one action in the work directory.
func (t *taskEnv) Step(ctx context.Context, a TaskAction) (Step, error) {
	if t.work == "" {
		return Step{}, errors.New("task: no work directory; reset first")
	}
	root, err := os.OpenRoot(t.work)
	if err != nil {
		return Step{}, hostFault{err}
	}
	defer root.Close()
	t.steps++
	var o taskObs
	st := Step{}
	switch a.Op {
	case "write":
		rel, _ := cleanRel("path", a.Path)
		if dir := filepath.Dir(rel); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return Step{}, fmt.Errorf("write %q: %w", a.Path, pathErr(rootErr("path", a.Path, err)))
			}
		}
		if err := root.WriteFile(rel, []byte(a.Content), 0o644); err != nil {
			return Step{}, fmt.Errorf("write %q: %w", a.Path, pathErr(rootErr("path", a.Path, err)))
		}
		o.Files, _ = t.list()
	case "read":
		rel, _ := cleanRel("path", a.Path)
		b, err := readRegular(root, rel)
		switch {
		case err == nil:
			c := string(b)
			o.Content = &c
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EISDIR):
			o.Error = err.Error()
		default:
			return Step{}, fmt.Errorf("read %q: %w", a.Path, pathErr(rootErr("path", a.Path, err)))
		}
	case "list":
		o.Files, _ = t.list()
	case "run":
		d := t.def.stepTimeout
		if a.TimeoutSeconds > 0 && time.Duration(a.TimeoutSeconds*float64(time.Second)) < d {
			d = time.Duration(a.TimeoutSeconds * float64(time.Second))
		}
		out, code, err := t.exec(ctx, d, t.work, t.work, nil, "sh", "-c", a.Command)
		o.Output, o.ExitCode = &out, &code
		if err != nil {
			o.Error = err.Error()
		}
	case "submit":
		reward, out, code, err := t.grade(ctx)
		o.Output, o.ExitCode = &out, &code
		if err != nil {
			o.Error = err.Error()
		}
		st.Reward, st.Terminated = reward, true
		st.Info = JSON(map[string]any{"grader_exit_code": code})
	}
	if !st.Terminated && t.steps >= t.def.MaxSteps {
		st.Truncated = true
	}
	st.Observation = JSON(o)
	return st, nil
}

// pathErr answers a file operation of a task action that failed: a path
// the action names is the action's, judged by the environment, so even a
// path leaving the work directory is invalid_action (docs/DECISIONS.md,
// Errors of state), never schema_violation.
func pathErr(err error) error {
	return fmt.Errorf("%s: %w", wire.Text(err), ErrBadAction)
}

// grade runs the grader: the last line of its output, if a number, is the
// reward; otherwise exit status 0 gives 1 and anything else 0. A grader
// that overruns gives 0.
func (t *taskEnv) grade(ctx context.Context) (float64, string, int, error) {
	d := time.Duration(t.def.GraderTimeout * float64(time.Second))
	g, err := os.MkdirTemp(t.def.workRoot, "grade-")
	if err != nil {
		return 0, "", -1, hostFault{fmt.Errorf("grading directory: %w", err)}
	}
	defer os.RemoveAll(g)
	root, err := os.OpenRoot(g)
	if err != nil {
		return 0, "", -1, hostFault{err}
	}
	// Copies, made after the last run of the episode ended (and every
	// process it left with it): symbolic links are not copied.
	for _, c := range []struct{ src, dst string }{{t.work, "submission"}, {t.def.dir, "task"}} {
		err := root.Mkdir(c.dst, 0o755)
		if err == nil {
			_, err = copyTree(ctx, c.src, root, c.dst)
		}
		if err != nil {
			root.Close()
			return 0, "", -1, hostFault{fmt.Errorf("preparing the grading sandbox: %w", err)}
		}
	}
	root.Close()
	sub, task := filepath.Join(g, "submission"), filepath.Join(g, "task")
	env := map[string]string{"AEP_TASK_DIR": t.inside(task, g), "AEP_WORK_DIR": t.inside(sub, g)}
	out, code, err := t.exec(ctx, d, g, sub, env, t.def.Grader[0], t.def.Grader[1:]...)
	if err != nil {
		return 0, out, code, fmt.Errorf("grader: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		if v, err := strconv.ParseFloat(last, 64); err == nil {
			return v, out, code, nil
		}
	}
	if code == 0 {
		return 1, out, code, nil
	}
	return 0, out, code, nil
}

// inside is where a contained command sees host path p of its work
// directory work: below /workspace in tier (a), unchanged in tier (b).
func (t *taskEnv) inside(p, work string) string {
	if mech, _ := sandbox.Mechanism(t.def.mode); sandbox.TierOf(mech) == sandbox.TierNamespaces {
		rel, _ := filepath.Rel(work, p)
		return filepath.Join(sandbox.Workspace, rel)
	}
	return p
}

// exec runs a command contained (server/sandbox, the host's tier) with
// work as its only writable directory and dir as its working directory,
// ends it and everything it started when it exits or time is up, and
// returns its combined output (capped) and exit code.
func (t *taskEnv) exec(ctx context.Context, d time.Duration, work, dir string, extra map[string]string, name string, args ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	env, _ := sandbox.Environ(nil, t.inside(work, work), extra)
	var buf capped
	w := &lockedWriter{w: &buf}
	lim := sandbox.Limits{Timeout: d, MaxProcs: sandbox.DefaultMaxProcs}
	// The command or grader is a unit of the session's leaf work
	// (server/budget.go).
	leaf, err := server.AcquireLeafFrom(ctx)
	if err != nil {
		return "", -1, err
	}
	if leaf != nil {
		defer leaf.Release()
		if lim.MemoryBytes, lim.FileBytes, err = leaf.ReserveProcess(ctx, 0); err != nil {
			return "", -1, err
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(leaf.Context(), func() { cancel(leaf.Err()) })()
	}
	p, err := sandbox.Start(sandbox.Spec{Argv: append([]string{name}, args...), Dir: dir, WorkDir: work, Env: env,
		Sandboxed: true, Mode: t.def.mode, Stdout: w, Stderr: w, Limits: lim})
	if err != nil {
		return "", -1, err
	}
	p.Stdin.Close()
	res, werr := p.Wait(ctx)
	if werr != nil {
		p.Kill()
		res = waitDone(p)
	}
	code := res.ExitCode
	switch {
	case ctx.Err() == context.DeadlineExceeded, res.Outcome == sandbox.Timeout:
		return w.String(), code, fmt.Errorf("timed out after %s", d)
	case leaf != nil && leaf.Err() != nil:
		return w.String(), code, leaf.Err()
	case werr != nil:
		return w.String(), code, werr
	}
	return w.String(), code, nil
}

func waitDone(p *sandbox.Process) sandbox.Result {
	<-p.Done()
	return p.Result()
}

// lockedWriter serialises stdout and stderr into one buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  *capped
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// capped keeps the first taskOutputCap bytes written to it.
type capped struct{ b bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := taskOutputCap - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string { return c.b.String() }

// list returns the work directory's files, relative, sorted.
func (t *taskEnv) list() ([]string, error) {
	var out []string
	err := filepath.WalkDir(t.work, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(t.work, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Render lists the work directory.
func (t *taskEnv) Render() (string, error) {
	files, err := t.list()
	if err != nil {
		err = hostFault{err}
	}
	return fmt.Sprintf("task %s, step %d of %d; files: %s", filepath.Base(t.def.dir), t.steps, t.def.MaxSteps, strings.Join(files, ", ")), err
}

// Close removes the work directory.
func (t *taskEnv) Close() error {
	t.removeWork()
	return nil
}

func (t *taskEnv) removeWork() {
	if t.work != "" {
		_ = os.RemoveAll(t.work)
		t.work = ""
	}
}

// readRegular reads a file of the task's work directory, which the
// agent's processes write: never a FIFO or device, and never blocking on
// one (internal/confine).
func readRegular(root *os.Root, rel string) ([]byte, error) {
	f, err := confine.Open(root, rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: rel, Err: syscall.EISDIR}
	}
	return io.ReadAll(f)
}
