package initproc_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/server/sandbox/initproc"
)

// startInit starts this test binary as an init with cfg, its status and
// control pipes and extra as fds 3, 4, 5, ...; it returns the reports the
// init writes, closed when the init ends.
func startInit(t *testing.T, cfg initproc.Config, extra ...*os.File) <-chan initproc.Report {
	t.Helper()
	return startInitEnv(t, cfg, []string{"PATH=/usr/bin:/bin"}, extra...)
}

// startInitEnv is startInit with env as the init's environment (besides
// its instructions).
func startInitEnv(t *testing.T, cfg initproc.Config, env []string, extra ...*os.File) <-chan initproc.Report {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append([]string{initproc.Env + "=" + string(raw)}, env...)
	cmd.ExtraFiles = append([]*os.File{statusW, controlR}, extra...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	statusW.Close()
	controlR.Close()
	t.Cleanup(func() {
		controlW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	reports := make(chan initproc.Report, 4)
	go func() {
		defer close(reports)
		defer statusR.Close()
		sc := bufio.NewScanner(statusR)
		for sc.Scan() {
			var r initproc.Report
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				reports <- r
			}
		}
	}()
	return reports
}

func next(t *testing.T, reports <-chan initproc.Report) (initproc.Report, bool) {
	t.Helper()
	select {
	case r, ok := <-reports:
		return r, ok
	case <-time.After(20 * time.Second):
		t.Fatal("the init wrote no report within 20 s")
		return initproc.Report{}, false
	}
}

// A command's first step that cannot join the run's cgroup (here the
// "cgroup.procs" it is given is open read-only) is a setup error the init
// reports at once; it must not wait for a byte that never comes.
func TestFirstStepThatCannotJoinIsASetupError(t *testing.T) {
	ro, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	reports := startInit(t, initproc.Config{Argv: []string{"true"}, Dir: "/", WorkDir: t.TempDir(), Cgroups: 1}, ro)
	r, ok := next(t, reports)
	if !ok || !strings.Contains(r.SetupError, "could not join the run's cgroups") {
		t.Fatalf("report %+v (ok %v); want the first step's setup error", r, ok)
	}
}

// The init finds argv[0] as os/exec would and reports how the command
// ended.
func TestInitRunsAndReports(t *testing.T) {
	cases := []struct {
		name    string
		argv    []string
		exit    int
		program string
	}{
		{"found on PATH", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"absolute path", []string{"/bin/sh", "-c", "exit 0"}, 0, ""},
		{"missing program", []string{"no-such-program-here"}, 0, initproc.ProgramNotFound},
		{"not executable", []string{"/etc/passwd"}, 0, initproc.ProgramNotExecutable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reports := startInit(t, initproc.Config{Argv: c.argv, Dir: "/", WorkDir: t.TempDir()})
			first, ok := next(t, reports)
			if !ok {
				t.Fatal("no report")
			}
			if c.program != "" {
				if first.Program != c.program {
					t.Fatalf("report %+v; want program %q", first, c.program)
				}
				return
			}
			if !first.Started {
				t.Fatalf("first report %+v; want started", first)
			}
			last, ok := next(t, reports)
			if !ok || last.Exit != c.exit || last.Signal != 0 {
				t.Fatalf("final report %+v (ok %v); want exit %d", last, ok, c.exit)
			}
		})
	}
}

// The init finds argv[0] by os/exec's rules (docs/DECISIONS.md, The init
// runs before the host's packages): the same program, or the same kind of
// failure, for every $PATH.
func TestLookPathAsOSExec(t *testing.T) {
	base := t.TempDir()
	mkdir := func(name string) string {
		d := base + "/" + name
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	put := func(dir, name string, mode os.FileMode) {
		if err := os.WriteFile(dir+"/"+name, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir+"/"+name, mode); err != nil {
			t.Fatal(err)
		}
	}
	a, b, work := mkdir("a"), mkdir("b"), mkdir("work")
	put(a, "prog", 0o755)
	put(b, "prog", 0o755)
	put(a, "plain", 0o644)
	put(b, "plain", 0o755)
	put(work, "prog", 0o755)
	put(base, "here", 0o755)
	mkdir("a/dir")
	put(b, "dir", 0o755)
	cases := []struct{ name, path, file string }{
		{"first directory", a + ":" + b, "prog"},
		{"not executable, then executable", a + ":" + b, "plain"},
		{"a directory, then a program", a + ":" + b, "dir"},
		{"missing", a + ":" + b, "nothing"},
		{"trailing slash", a + "/:" + b, "prog"},
		{"dot-dot in an entry", a + "/../b:" + a, "prog"},
		{"relative entry", "work:" + a, "prog"},
		{"empty entry", ":" + a, "here"},
		{"empty PATH", "", "here"},
	}
	// A file system mounted noexec runs nothing, whatever the mode says.
	noexec := mkdir("noexec")
	if err := syscall.Mount("tmpfs", noexec, "tmpfs", syscall.MS_NOEXEC, ""); err == nil {
		t.Cleanup(func() { _ = syscall.Unmount(noexec, syscall.MNT_DETACH) })
		put(noexec, "prog", 0o755)
		cases = append(cases, struct{ name, path, file string }{"noexec mount, then executable", noexec + ":" + b, "prog"})
	} else {
		t.Logf("no noexec case (not root?): %v", err)
	}
	t.Chdir(base)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PATH", c.path)
			want, wantErr := exec.LookPath(c.file)
			if wantErr != nil {
				want = ""
			}
			got, err := initproc.LookPath(c.file)
			if err != nil {
				got = ""
			}
			if got != want || kind(err) != kind(wantErr) {
				t.Fatalf("PATH=%s: %q, %v; os/exec gives %q, %v", c.path, got, err, want, wantErr)
			}
		})
	}
}

// kind is how the init classifies a failure to find the program.
func kind(err error) string {
	switch {
	case err == nil:
		return "found"
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, initproc.ErrNotFound):
		return "not found"
	case errors.Is(err, exec.ErrDot), errors.Is(err, initproc.ErrDot):
		return "relative"
	}
	return "other: " + err.Error()
}

// The command's environment holds the run's marker once, whatever the
// environment it was given: os/exec kept the last of duplicate names.
func TestRunMarkerOnce(t *testing.T) {
	dir := t.TempDir()
	script := `tr '\0' '\n' </proc/$$/environ | grep "^$0=" >out`
	cfg := initproc.Config{Argv: []string{"sh", "-c", script, initproc.RunMarker}, Dir: dir, WorkDir: dir, RunID: "the-run"}
	reports := startInitEnv(t, cfg, []string{"PATH=/usr/bin:/bin", initproc.RunMarker + "=another"})
	if r, ok := next(t, reports); !ok || !r.Started {
		t.Fatalf("first report %+v (ok %v); want started", r, ok)
	}
	if r, ok := next(t, reports); !ok || r.Exit != 0 {
		t.Fatalf("final report %+v (ok %v); want exit 0", r, ok)
	}
	b, err := os.ReadFile(dir + "/out")
	if err != nil {
		t.Fatal(err)
	}
	if want := initproc.RunMarker + "=the-run\n"; string(b) != want {
		t.Fatalf("the command's environment has %q; want %q", b, want)
	}
}
