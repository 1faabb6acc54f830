package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/server/sandbox"
)

// The isolation tests (docs/SECURITY.md, Isolation) run in every tier this
// machine provides. Tier (b) runs with the host as uid 65534: the test
// binary re-executes itself under that uid (CI runs as root) and the
// helper below runs the same checks there, forcing the supervised mode.

const helperEnv = "AEP_ISOLATION_HELPER"

// tiers are the modes under test; "supervised-65534" is the supervised
// tier with the host itself unprivileged.
func tiers(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the tier tests start from root (they drop to uid 65534 for tier b)")
	}
	out := []string{"namespaces", "supervised", "supervised-65534"}
	if sandbox.BwrapPath() != "" {
		out = append(out, "bwrap")
	} else if os.Getenv("CI") != "" {
		t.Fatal("bubblewrap (bwrap) is not installed; .ci/run installs it")
	}
	return out
}

// secretTree is what no contained command may read: a data dir with a
// store and a config file holding the host token, readable by anyone by
// their permissions, so only the sandbox stops a reader.
func secretTree(t *testing.T) (dataDir string) {
	t.Helper()
	base, err := os.MkdirTemp("", "aep-iso-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	for name, body := range map[string]string{"aep.db": "SQLite format 3 token-in-store", "config.yaml": "server:\n  auth_token: token-in-config\n"} {
		if err := os.WriteFile(filepath.Join(base, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// sessionDir is a session directory the test's host (or its helper) owns.
func sessionDir(t *testing.T, name string) string {
	t.Helper()
	d := filepath.Join(os.TempDir(), fmt.Sprintf("aep-iso-%s-%d", name, time.Now().UnixNano()))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// asHelper runs the named test function in a copy of the test binary as
// uid 65534 with the supervised mode forced, and fails t with its output
// if it fails.
func asHelper(t *testing.T, test string, extraEnv ...string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary lives below a directory only root may enter; uid
	// 65534 gets its own copy.
	cp := filepath.Join(sessionDir(t, "bin"), "sandbox.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(cp), 0o755)
	cmd := exec.Command(cp, "-test.run", "^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), append(extraEnv, helperEnv+"=1")...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("helper as uid 65534:\n%s", out)
	if err != nil {
		t.Fatalf("helper failed: %v", err)
	}
}

func modeOf(tier string) sandbox.Mode {
	if strings.HasPrefix(tier, "supervised") {
		return sandbox.ModeSupervised
	}
	return sandbox.Mode(tier)
}

// TestIsolationReadsNoSecret: a contained command finds no host secret in
// its environment, and cannot read the store, the config file or the
// host's own /proc entry, while its session directory works.
func TestIsolationReadsNoSecret(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		checkNoSecret(t, sandbox.ModeSupervised)
		return
	}
	for _, tier := range tiers(t) {
		t.Run(tier, func(t *testing.T) {
			if tier == "supervised-65534" {
				asHelper(t, "TestIsolationReadsNoSecret")
				return
			}
			checkNoSecret(t, modeOf(tier))
		})
	}
}

func checkNoSecret(t *testing.T, mode sandbox.Mode) {
	tier, what, err := sandbox.Describe(mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("uid %d: tier %s: %s", os.Geteuid(), tier, what)
	t.Setenv("AEP_AUTH_TOKEN", "token-in-env")
	data := secretTree(t)
	work := sessionDir(t, "s")
	env, _ := sandbox.Environ(nil, work, nil)
	script := fmt.Sprintf(`env; echo mine > mine.txt && cat mine.txt
for f in %s/aep.db %s/config.yaml /proc/%d/environ /proc/1/environ; do cat "$f" 2>/dev/null && echo "READ $f"; done
ls %s 2>/dev/null && echo LISTED`, data, data, os.Getpid(), data)
	res, out, errs := run(t, sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: work, Env: env, Sandboxed: true, Mode: mode})
	if res.Outcome != sandbox.Exited || res.ExitCode != 0 && !strings.Contains(out, "mine") {
		t.Fatalf("run: %+v\n%s\n%s", res, out, errs)
	}
	for _, secret := range []string{"token-in-env", "token-in-store", "token-in-config", "READ", "LISTED"} {
		if strings.Contains(out, secret) {
			t.Errorf("the command saw %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "mine") {
		t.Errorf("the session directory did not work:\n%s\n%s", out, errs)
	}
}

// findProc returns the host pids whose command line contains tag.
func findProc(tag string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), tag) {
			if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); strings.Contains(string(st), ") Z ") {
				continue // a zombie has ended
			}
			out = append(out, pid)
		}
	}
	return out
}

// bothSleeps finds the processes whose whole command line is
// "sleep <tag>1" or "sleep <tag>2" (hostHelper's script once both exec'd).
func bothSleeps(tag string) []int {
	var out []int
	for _, pid := range findProc("sleep " + tag) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if c := string(b); c == "sleep\x00"+tag+"1\x00" || c == "sleep\x00"+tag+"2\x00" {
			out = append(out, pid)
		}
	}
	return out
}

// goneWithin waits until no process carries tag.
func goneWithin(t *testing.T, tag string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if len(findProc(tag)) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("processes with %q outlived the run: %v", tag, findProc(tag))
}

// TestIsolationSetsidGrandchildEnds: a grandchild that left the command's
// process group and session is gone within 5 s of the run's end, both when
// the command exits and when the owner kills it.
func TestIsolationSetsidGrandchildEnds(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		checkGrandchild(t, sandbox.ModeSupervised)
		return
	}
	for _, tier := range tiers(t) {
		t.Run(tier, func(t *testing.T) {
			if tier == "supervised-65534" {
				asHelper(t, "TestIsolationSetsidGrandchildEnds")
				return
			}
			checkGrandchild(t, modeOf(tier))
		})
	}
}

func checkGrandchild(t *testing.T, mode sandbox.Mode) {
	for _, kill := range []bool{false, true} {
		tag := fmt.Sprintf("%d.%d", 4000+time.Now().UnixNano()%1000, os.Getpid())
		script := fmt.Sprintf(`setsid sh -c 'exec sleep %s' </dev/null >/dev/null 2>&1 & sleep 0.2; echo started`, tag)
		if kill {
			script += "; exec sleep 300"
		} else {
			script += "; sleep 1" // long enough to see the grandchild
		}
		work := sessionDir(t, "g")
		var out syncBuf
		p, err := sandbox.Start(sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: work, Sandboxed: true, Mode: mode, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		p.Stdin.Close()
		for i := 0; i < 100 && !strings.Contains(out.String(), "started"); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if len(findProc("sleep "+tag)) == 0 {
			t.Fatalf("the grandchild did not start (%q)", out.String())
		}
		if kill {
			p.Kill()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = p.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		goneWithin(t, "sleep "+tag, 5*time.Second)
	}
}

// TestIsolationForkBomb: a fork bomb stops at the pids limit, and another
// run meanwhile answers.
func TestIsolationForkBomb(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		checkForkBomb(t, sandbox.ModeSupervised)
		return
	}
	for _, tier := range tiers(t) {
		t.Run(tier, func(t *testing.T) {
			if tier == "supervised-65534" {
				asHelper(t, "TestIsolationForkBomb")
				return
			}
			checkForkBomb(t, modeOf(tier))
		})
	}
}

func checkForkBomb(t *testing.T, mode sandbox.Mode) {
	work := sessionDir(t, "f")
	var errs syncBuf
	bomb, err := sandbox.Start(sandbox.Spec{Argv: []string{"sh", "-c", "b() { b | b & }; b; sleep 2"}, Dir: work, Sandboxed: true, Mode: mode,
		Stderr: &errs, Limits: sandbox.Limits{Timeout: 4 * time.Second, MaxProcs: 32}})
	if err != nil {
		t.Fatal(err)
	}
	bomb.Stdin.Close()
	time.Sleep(500 * time.Millisecond)
	// The host still starts and ends another run while the bomb is live.
	res, out, _ := run(t, sandbox.Spec{Argv: []string{"echo", "alive"}, Dir: sessionDir(t, "f2"), Sandboxed: true, Mode: mode})
	if res.Outcome != sandbox.Exited || !strings.Contains(out, "alive") {
		t.Fatalf("a run beside the bomb: %+v %q", res, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bomb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errs.String(), "fork") && !strings.Contains(errs.String(), "Resource temporarily unavailable") {
		t.Errorf("no fork failed at the limit; stderr: %.300s", errs.String())
	}
}

// TestIsolationHostKilled: after kill -9 of the host every process of its
// runs is gone, a setsid grandchild included. The host is a copy of this
// test binary running hostHelper.
func TestIsolationHostKilled(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		if os.Getenv("AEP_HOST_HELPER") != "" {
			hostHelper(t)
		}
		return
	}
	for _, tier := range tiers(t) {
		t.Run(tier, func(t *testing.T) {
			tag := fmt.Sprintf("%d.%d", 5000+time.Now().UnixNano()%1000, os.Getpid())
			exe, _ := os.Executable()
			cmd := exec.Command(exe, "-test.run", "^TestIsolationHostKilled$")
			cmd.Env = append(os.Environ(), helperEnv+"=1", "AEP_HOST_HELPER="+string(modeOf(tier)), "AEP_TAG="+tag)
			if tier == "supervised-65534" {
				cp := filepath.Join(sessionDir(t, "bin"), "sandbox.test")
				b, _ := os.ReadFile(exe)
				os.WriteFile(cp, b, 0o755)
				cmd.Path, cmd.Args[0] = cp, cp
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
			}
			cmd.Dir = "/"
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			ready := false
			for sc.Scan() {
				if strings.Contains(sc.Text(), "READY") {
					ready = true
					break
				}
			}
			if !ready {
				cmd.Wait()
				t.Fatal("the host helper never got ready")
			}
			// Both must have become sleep: before, the shell's own command
			// line names both tags, and during an exec a process's command
			// line may read empty.
			for deadline := time.Now().Add(5 * time.Second); len(bothSleeps(tag)) != 2; {
				if time.Now().After(deadline) {
					t.Fatalf("want the child and the setsid grandchild, found %v", bothSleeps(tag))
				}
				time.Sleep(10 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			goneWithin(t, "sleep "+tag, 5*time.Second)
		})
	}
}

func hostHelper(t *testing.T) {
	mode, tag := sandbox.Mode(os.Getenv("AEP_HOST_HELPER")), os.Getenv("AEP_TAG")
	work, err := os.MkdirTemp("", "aep-host-")
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`setsid sh -c 'exec sleep %s' </dev/null >/dev/null 2>&1 & exec sleep %s`, tag+"1", tag+"2")
	p, err := sandbox.Start(sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: work, Sandboxed: true, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500 && len(bothSleeps(tag)) < 2; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("READY")
	<-p.Done()
}
