package sandbox

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// The init: when the host binary (or a test binary, which links this package
// too) is started with AEP_SANDBOX_INIT set, it is the init of a confined
// run and never returns to the program's main. Re-executing the host binary
// keeps the sandbox free of any helper that must be installed.
func init() {
	raw, ok := os.LookupEnv(initEnv)
	if !ok {
		return
	}
	os.Exit(runInit(raw))
}

func writeReport(f *os.File, r report) {
	b, _ := json.Marshal(r)
	_, _ = f.Write(append(b, '\n'))
}

// joinScript is the command's first step, run by /bin/sh with the
// command's argv as its arguments: it writes "0" to each cgroup.procs file
// (fds 3, 4, ...: the shell joins the run's cgroups) and closes it, sets
// the data-segment limit RLIMIT_DATA when memBytes > 0 (every POSIX shell's
// ulimit has -d), reports on the next fd that all went well, and execs
// the command. RLIMIT_DATA counts private writable memory, what
// allocations use, unlike RLIMIT_AS, which also counts address space a
// runtime only reserves (a Go or JVM heap) and would fail such programs at
// start.
func joinScript(cgroups int, memBytes int64) string {
	var b strings.Builder
	for i := 0; i < cgroups; i++ {
		fmt.Fprintf(&b, "printf 0 >&%d || exit 125; exec %d>&-; ", 3+i, 3+i)
	}
	if memBytes > 0 {
		fmt.Fprintf(&b, "ulimit -d %d || exit 125; ", max(memBytes/1024, 1))
	}
	fmt.Fprintf(&b, `printf x >&%d; exec %d>&-; exec "$@"`, 3+cgroups, 3+cgroups)
	return b.String()
}

// runInit joins the cgroups, sets the rlimits, (in namespaces mode) sets up
// mounts and drops privileges, starts the command as its child in its own
// process group, forwards the host's signals to it, and reports how it ended.
func runInit(raw string) int {
	// The pipes to the host are the init's alone: inherited without
	// close-on-exec, they would reach the command, which could then forge
	// the report of how it ended (status) or swallow the owner's signals
	// (control).
	syscall.CloseOnExec(fdStatus)
	syscall.CloseOnExec(fdControl)
	status := os.NewFile(fdStatus, "status")
	fail := func(format string, args ...any) int {
		writeReport(status, report{SetupError: fmt.Sprintf(format, args...)})
		return 1
	}
	var cfg initConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil || len(cfg.Argv) == 0 {
		return fail("sandbox init: bad instructions")
	}
	os.Unsetenv(initEnv)
	// Credentials changed below are per thread; the command is forked from
	// this one.
	runtime.LockOSThread()
	if cfg.Namespaces {
		if err := setupMounts(cfg.WorkDir); err != nil {
			return fail("sandbox mounts: %v", err)
		}
	}
	// The run's cgroups are joined by the command's own first step (the
	// shell below), not by this init: its Go runtime's threads would count
	// against pids.max (cgroup v1 counts threads) and its memory against
	// the memory limit.
	var cgFiles []*os.File
	for i := 0; i < cfg.Cgroups; i++ {
		f := os.NewFile(uintptr(fdCgroups+i), "cgroup.procs")
		syscall.CloseOnExec(fdCgroups + i)
		cgFiles = append(cgFiles, f)
	}
	if cfg.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL a second later (docs/DECISIONS.md, Sandbox outcomes).
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(cfg.CPUSeconds), Max: uint64(cfg.CPUSeconds + 1)}); err != nil {
			return fail("RLIMIT_CPU: %v", err)
		}
	}
	if cfg.NProc > 0 {
		if err := syscall.Setrlimit(rlimitNProc, &syscall.Rlimit{Cur: uint64(cfg.NProc), Max: uint64(cfg.NProc)}); err != nil {
			return fail("RLIMIT_NPROC: %v", err)
		}
	}
	if cfg.Namespaces {
		if err := dropPrivileges(); err != nil {
			return fail("dropping privileges: %v", err)
		}
	}
	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	var ready *os.File
	if len(cgFiles) > 0 || cfg.MemBytes > 0 {
		// A shell joins the cgroups and sets the rlimit fallback of
		// Limits.MemoryBytes, then becomes the command (same pid): both
		// bind the command only. On this init the memory limit would count
		// the init's own runtime (a race-instrumented one dies under it at
		// once), and so would pids.max.
		if cmd.Err != nil {
			return fail("starting %q: %v", cfg.Argv[0], cmd.Err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail("sandbox init: %v", err)
		}
		ready = r
		script := joinScript(len(cgFiles), cfg.MemBytes)
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, "aep-sandbox", cmd.Path}, cfg.Argv[1:]...)...)
		cmd.ExtraFiles = append(append([]*os.File{}, cgFiles...), w)
		defer w.Close()
	}
	cmd.Dir = cfg.Dir
	cmd.Env = os.Environ()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fail("starting %q: %v", cfg.Argv[0], err)
	}
	if ready != nil {
		// The shell writes one byte once it joined every cgroup and set the
		// limit; end of file without it means it could not, and the
		// command never ran (the setup error of docs/DECISIONS.md, Sandbox outcomes).
		for _, f := range cmd.ExtraFiles {
			f.Close()
		}
		b := make([]byte, 1)
		n, _ := ready.Read(b)
		ready.Close()
		if n != 1 {
			_ = cmd.Wait()
			return fail("the command's first step could not join the run's cgroups or set its limit (exit %d)", cmd.ProcessState.ExitCode())
		}
	}
	os.Stdin.Close()
	os.Stdout.Close()
	go forward(os.NewFile(fdControl, "control"), cmd.Process.Pid)
	writeReport(status, report{Started: true})
	_ = cmd.Wait()
	st := cmd.ProcessState
	rep := report{Exit: -1}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			rep.Signal = int(ws.Signal())
		} else {
			rep.Exit = ws.ExitStatus()
		}
	}
	rep.CPUMicros = int64((st.UserTime() + st.SystemTime()) / time.Microsecond)
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		rep.MaxRSS = ru.Maxrss * 1024
	}
	writeReport(status, rep)
	return 0
}

const rlimitNProc = 6 // RLIMIT_NPROC on Linux

// forward turns each byte from the host into a signal to the command's group.
func forward(control *os.File, pid int) {
	var b [1]byte
	for {
		if _, err := control.Read(b[:]); err != nil {
			return
		}
		_ = syscall.Kill(-pid, syscall.Signal(b[0]))
	}
}

// setupMounts gives the namespaces mode bubblewrap's view: every mount
// read-only except the work directory (bound onto itself first), and a
// /proc of the new PID namespace. The init is pid 1 of a fresh mount
// namespace, so none of this reaches the host.
func setupMounts(work string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := syscall.Mount(work, work, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding the work directory: %w", err)
	}
	mps, err := mountPoints()
	if err != nil {
		return err
	}
	for _, m := range mps {
		if within(m.path, work) || within(m.path, "/proc") || within(m.path, "/dev") {
			continue
		}
		flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
		for _, o := range strings.Split(m.opts, ",") {
			switch o {
			case "nosuid":
				flags |= syscall.MS_NOSUID
			case "nodev":
				flags |= syscall.MS_NODEV
			case "noexec":
				flags |= syscall.MS_NOEXEC
			}
		}
		if err := syscall.Mount("", m.path, "", flags, ""); err != nil && !within(m.path, "/sys") {
			return fmt.Errorf("making %s read-only: %w", m.path, err)
		}
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	return nil
}

type mountPoint struct{ path, opts string }

func mountPoints() ([]mountPoint, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountPoint
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 {
			continue
		}
		out = append(out, mountPoint{path: unescapeMount(fs[4]), opts: fs[5]})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// dropPrivileges leaves the command no capabilities (so it cannot undo the
// read-only mounts) and no way to gain any (no_new_privs), on this thread,
// from which the command is forked.
func dropPrivileges() error {
	const (
		prSetNoNewPrivs = 38
		prCapbsetDrop   = 24
	)
	for c := uintptr(0); c < 64; c++ {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, c, 0)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); e != 0 {
		return e
	}
	hdr := struct {
		version uint32
		pid     int32
	}{0x20080522, 0} // _LINUX_CAPABILITY_VERSION_3
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return e
	}
	return nil
}
