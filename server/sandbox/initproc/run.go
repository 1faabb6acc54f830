// Package initproc is the init of a confined run: the host binary (or a
// test binary, which links it too) started with [Env] set is the init and
// never returns to the program's main. Re-executing the host binary keeps
// the sandbox free of any helper that must be installed.
//
// The init runs from this package's Go init function, so before the
// initialisation of every package that does not need to come first. Go
// initialises packages in the order of their import paths among those
// whose imports are ready, so this package imports only what the
// standard library initialises early: os/exec and path/filepath (each
// would make it wait for some 170 of the host's packages, twice the
// init's CPU at start) are replaced here by syscall.ForkExec and joins of
// clean absolute paths. server/sandbox/boot_test.go keeps it so.
package initproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

func init() {
	raw, ok := os.LookupEnv(Env)
	if !ok {
		return
	}
	os.Exit(runInit(raw))
}

func writeReport(f *os.File, r Report) {
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
	syscall.CloseOnExec(FDStatus)
	syscall.CloseOnExec(FDControl)
	status := os.NewFile(FDStatus, "status")
	fail := func(format string, args ...any) int {
		writeReport(status, Report{SetupError: fmt.Sprintf(format, args...)})
		return 1
	}
	// failStart is a command that cannot start: whether the program is
	// missing or not executable is the caller's to say (the agent's mistake).
	failStart := func(argv0 string, err error) int {
		r := Report{SetupError: fmt.Sprintf("starting %q: %v", argv0, err)}
		switch {
		case errors.Is(err, errNotFound), errors.Is(err, fs.ErrNotExist):
			r.Program = ProgramNotFound
		case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, errDot):
			r.Program = ProgramNotExecutable
		}
		writeReport(status, r)
		return 1
	}
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil || (len(cfg.Argv) == 0 && !cfg.Spare) {
		return fail("sandbox init: bad instructions")
	}
	os.Unsetenv(Env)
	// Credentials changed below are per thread; the command is forked from
	// this one.
	runtime.LockOSThread()
	// Orphans of the command come back to the init, which ends them all
	// when the command ends (docs/SECURITY.md, Isolation).
	const prSetChildSubreaper = 36
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	control := os.NewFile(FDControl, "control")
	// The command's supervision is set up now, before any run (a spare
	// waits for its run after this): the signal handling's first use and
	// the goroutines' threads cost milliseconds on the run's path. They
	// wait for the command's pid.
	//
	// The host's signals (one byte each on the control pipe) go to the
	// command's group. SIGTERM to the init (the host's kill in tier b, or
	// the host's death through PR_SET_PDEATHSIG) ends the command's group
	// and every descendant; the command's own end is reported as usual.
	// One that comes before the command started is kept and acted on as
	// it starts.
	var cmdPid int
	cmdStarted := make(chan struct{})
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	go func() {
		<-cmdStarted
		forward(control, cmdPid)
	}()
	go func() {
		<-cmdStarted
		for range terms {
			_ = syscall.Kill(-cmdPid, syscall.SIGKILL)
			for _, c := range Children(os.Getpid()) {
				_ = syscall.Kill(c, syscall.SIGKILL)
			}
		}
	}()
	// The run's cgroups are joined by the command's own first step (the
	// shell below), not by this init: its Go runtime's threads would count
	// against pids.max (cgroup v1 counts threads) and its memory against
	// the memory limit.
	var cgFiles []*os.File
	env := os.Environ()
	switch {
	case cfg.Spare:
		// A spare (spare.go): the same root for every run is made now; the
		// run's own part waits for the host's instructions.
		if err := prepareRoot(cfg.NewRoot); err != nil {
			return fail("sandbox mounts: %v", err)
		}
		writeReport(status, Report{Ready: true})
		var run Config
		if err := readInstructions(control, &run); err != nil || len(run.Argv) == 0 {
			// The host closed the pipe: the spare is not needed.
			return 1
		}
		run.NewRoot, run.Namespaces = cfg.NewRoot, true
		cfg = run
		// The environment a cold init has: the command's (its PATH finds argv[0]).
		os.Clearenv()
		for _, kv := range cfg.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				os.Setenv(k, v)
			}
		}
		env = os.Environ()
		if why := cfg.stale(); why != "" {
			writeReport(status, Report{SetupError: why, Stale: true})
			return 1
		}
		// Opened while the host's file systems are still in view.
		for _, d := range cfg.CgroupDirs {
			f, err := os.OpenFile(d+"/cgroup.procs", os.O_WRONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return fail("opening the run's cgroup: %v", err)
			}
			cgFiles = append(cgFiles, f)
		}
		if err := finishRoot(cfg); err != nil {
			return fail("sandbox mounts: %v", err)
		}
	case cfg.Namespaces:
		if err := setupRoot(cfg); err != nil {
			return fail("sandbox mounts: %v", err)
		}
		fallthrough
	default:
		for i := 0; i < cfg.Cgroups; i++ {
			f := os.NewFile(uintptr(FDCgroups+i), "cgroup.procs")
			syscall.CloseOnExec(FDCgroups + i)
			cgFiles = append(cgFiles, f)
		}
	}
	// A relative argv[0] ("./run.sh") is found from the command's working
	// directory, as bubblewrap's --chdir gives it.
	if cfg.Dir != "" {
		_ = os.Chdir(cfg.Dir)
	}
	if cfg.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL a second later (docs/DECISIONS.md, Sandbox outcomes).
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(cfg.CPUSeconds), Max: uint64(cfg.CPUSeconds + 1)}); err != nil {
			return fail("RLIMIT_CPU: %v", err)
		}
	}
	if cfg.NProc > 0 {
		// RLIMIT_NPROC counts every task of the real uid, the host's own
		// threads and other runs' processes included (an unprivileged host
		// runs its commands as itself): the run may start NProc more than
		// the uid has now, not NProc in all.
		uid := cfg.UID
		if uid <= 0 {
			uid = os.Getuid()
		}
		n := uint64(cfg.NProc + tasksOf(uid))
		if err := syscall.Setrlimit(rlimitNProc, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return fail("RLIMIT_NPROC: %v", err)
		}
	}
	if cfg.FSize > 0 {
		if err := syscall.Setrlimit(rlimitFSize, &syscall.Rlimit{Cur: uint64(cfg.FSize), Max: uint64(cfg.FSize)}); err != nil {
			return fail("RLIMIT_FSIZE: %v", err)
		}
	}
	if cfg.Namespaces {
		if err := dropPrivileges(cfg.UID > 0); err != nil {
			return fail("dropping privileges: %v", err)
		}
	}
	if cfg.Supervised {
		// On this locked thread only: the command forked from it inherits
		// the domain, while the init's other threads still read /proc to
		// end the command's descendants.
		ro := append(append([]string{}, SystemPaths...), cfg.ReadOnly...)
		rw := []string{cfg.WorkDir}
		if cfg.WorkRO {
			ro, rw = append(ro, cfg.WorkDir), nil
		}
		if err := landlock(ro, rw, cfg.NoNetwork); err != nil {
			return fail("landlock: %v", err)
		}
	}
	if len(cfg.Seccomp) > 0 {
		// Last: every step above may use what the filter refuses.
		if err := installSeccomp(cfg.Seccomp); err != nil {
			return fail("seccomp: %v", err)
		}
	}
	// The command inherits its standard streams and what the run passes
	// on purpose, nothing else: a descriptor the host inherited from its
	// own parent without close-on-exec must not reach it.
	CloseOthersOnExec()
	path, lookErr := lookPath(cfg.Argv[0])
	argv0, argv := path, cfg.Argv
	files := []uintptr{0, 1, 2}
	var ready, readyW *os.File
	if len(cgFiles) > 0 || cfg.MemBytes > 0 {
		// A shell joins the cgroups and sets the rlimit fallback of
		// Limits.MemoryBytes, then becomes the command (same pid): both
		// bind the command only. On this init the memory limit would count
		// the init's own runtime (a race-instrumented one dies under it at
		// once), and so would pids.max.
		if lookErr != nil {
			return failStart(cfg.Argv[0], lookErr)
		}
		// The shell would only fail its exec: a missing or unexecutable
		// program is a setup error.
		if fi, err := os.Stat(path); err != nil {
			return failStart(cfg.Argv[0], err)
		} else if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return failStart(cfg.Argv[0], fs.ErrPermission)
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail("sandbox init: %v", err)
		}
		ready = r
		readyW = w
		script := joinScript(len(cgFiles), cfg.MemBytes)
		argv0, argv = "/bin/sh", append([]string{"/bin/sh", "-c", script, "aep-sandbox", path}, cfg.Argv[1:]...)
		for _, f := range cgFiles {
			files = append(files, f.Fd())
		}
		files = append(files, w.Fd())
	} else if lookErr != nil {
		return failStart(cfg.Argv[0], lookErr)
	}
	cmdEnv := env
	if cfg.RunID != "" {
		// The run's marker, and only it: one already in the environment
		// would come first, what the C library's getenv finds (os/exec
		// kept the last of duplicate names).
		cmdEnv = make([]string, 0, len(env)+1)
		for _, kv := range env {
			if !strings.HasPrefix(kv, RunMarker+"=") {
				cmdEnv = append(cmdEnv, kv)
			}
		}
		cmdEnv = append(cmdEnv, RunMarker+"="+cfg.RunID)
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if cfg.UID > 0 {
		// The command owns nothing of the host's (the session directory
		// was handed to this uid before the run).
		sys.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.UID), Groups: []uint32{}}
	}
	pid, err := syscall.ForkExec(argv0, argv, &syscall.ProcAttr{Dir: cfg.Dir, Env: cmdEnv, Files: files, Sys: sys})
	if ready != nil {
		// The shell has its copies; the init's write end must go, or the
		// read below would never see the end of file of a shell that
		// failed.
		readyW.Close()
		for _, f := range cgFiles {
			f.Close()
		}
	}
	if err != nil {
		return failStart(cfg.Argv[0], err)
	}
	if ready != nil {
		// The shell writes one byte once it joined every cgroup and set the
		// limit; end of file without it means it could not, and the
		// command never ran (the setup error of docs/DECISIONS.md, Sandbox outcomes).
		b := make([]byte, 1)
		n, _ := ready.Read(b)
		ready.Close()
		if n != 1 {
			ws, _ := wait(pid)
			return fail("the command's first step could not join the run's cgroups or set its limit (exit %d)", ws.ExitStatus())
		}
	}
	os.Stdin.Close()
	os.Stdout.Close()
	cmdPid = pid
	close(cmdStarted)
	writeReport(status, Report{Started: true})
	ws, ru := wait(pid)
	rep := Report{Exit: -1}
	// A descendant that left the command's group (setsid) came back to the
	// init as subreaper: it goes now. On another goroutine, since this
	// thread may be under Landlock, which hides /proc. In the namespaces
	// mode the init is pid 1 of the run's PID namespace, and every process
	// left in it ends here too, before the report: the host answers on it
	// (Report.Reaped) without waiting for the init's exit and the
	// teardown of its namespaces.
	if cfg.Namespaces {
		rep.Reaped = endNamespace()
	} else {
		swept := make(chan struct{})
		go func() { sweepOwn(); close(swept) }()
		<-swept
	}
	if ws.Signaled() {
		rep.Signal = int(ws.Signal())
	} else if ws.Exited() {
		rep.Exit = ws.ExitStatus()
	}
	rep.CPUMicros = ru.Utime.Nano()/1000 + ru.Stime.Nano()/1000
	rep.MaxRSS = ru.Maxrss * 1024
	writeReport(status, rep)
	return 0
}

const (
	rlimitNProc = 6 // RLIMIT_NPROC on Linux
	rlimitFSize = 1 // RLIMIT_FSIZE on Linux
)

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

// setupRoot gives the namespaces mode bubblewrap's view: a new root on a
// tmpfs holding only [SystemPaths] and the caller's read-only paths (bound
// read-only), the work directory at [Workspace] (writable), /dev's null,
// zero, full, random and urandom, a private /tmp and /dev/shm and a /proc
// of the new PID namespace; the old root is detached. The init is pid 1 of
// a fresh mount namespace, so none of this reaches the host.
func setupRoot(cfg Config) error {
	if err := prepareRoot(cfg.NewRoot); err != nil {
		return err
	}
	return finishRoot(cfg)
}

// bindInto binds src at dst below the new root nr, read-only when ro; a
// src that does not exist is skipped.
func bindInto(nr, src, dst string, ro bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return nil
	}
	target := under(nr, dst)
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else {
		if err = os.MkdirAll(parent(target), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				f.Close()
			}
		}
	}
	if err != nil {
		return err
	}
	if err := syscall.Mount(src, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", src, err)
	}
	if ro {
		if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", src, err)
		}
	}
	return nil
}

// prepareRoot is the part of [setupRoot] that is the same for every run:
// the tmpfs root with the system paths, /dev, /tmp and /proc. A spare init
// does it before it is given a run (spare.go).
func prepareRoot(nr string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := syscall.Mount("tmpfs", nr, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting the new root: %w", err)
	}
	for _, p := range SystemPaths {
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			t, err := os.Readlink(p)
			if err == nil {
				_ = os.MkdirAll(parent(under(nr, p)), 0o755)
				err = os.Symlink(t, under(nr, p))
			}
			if err != nil {
				return err
			}
			continue
		}
		if err := bindInto(nr, p, p, true); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"} {
		if err := bindInto(nr, d, d, false); err != nil {
			return err
		}
	}
	// What bubblewrap's /dev also has: the descriptors by name.
	for link, target := range map[string]string{"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, under(nr, link)); err != nil {
			return err
		}
	}
	for _, d := range []string{"/proc", "/tmp", "/dev/shm", "/.old"} {
		if err := os.MkdirAll(under(nr, d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{"/tmp", "/dev/shm"} {
		if err := syscall.Mount("tmpfs", under(nr, d), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mounting %s: %w", d, err)
		}
	}
	if err := syscall.Mount("proc", under(nr, "/proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	return nil
}

// finishRoot binds what is the run's own (its read-only paths, after /tmp
// so that one below /tmp is not hidden by it, and the work directory),
// then moves into the new root, detaches the old one and makes the root
// read-only.
func finishRoot(cfg Config) error {
	nr := cfg.NewRoot
	for _, p := range cfg.ReadOnly {
		if err := bindInto(nr, p, p, true); err != nil {
			return err
		}
	}
	if err := bindInto(nr, cfg.WorkDir, Workspace, cfg.WorkRO); err != nil {
		return err
	}
	if err := syscall.PivotRoot(nr, under(nr, "/.old")); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Unmount("/.old", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	_ = os.Remove("/.old")
	if err := syscall.Mount("", "/", "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		return fmt.Errorf("making the new root read-only: %w", err)
	}
	return nil
}

// dropPrivileges leaves the command no capabilities (so it cannot undo the
// read-only mounts) and no way to gain any (no_new_privs), on this thread,
// from which the command is forked.
func dropPrivileges(keepSetuid bool) error {
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
	if keepSetuid {
		// The command is started as an unprivileged uid, which clears
		// every capability it would have had; the init needs CAP_SETUID
		// until then.
		return nil
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

// tasksOf counts the tasks (threads) whose real uid is uid, as RLIMIT_NPROC
// counts them, from /proc/<pid>/status.
func tasksOf(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := strconv.Itoa(uid)
	total := 0
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var mine bool
		threads := 0
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "Uid:"):
				f := strings.Fields(line)
				mine = len(f) > 1 && f[1] == want
			case strings.HasPrefix(line, "Threads:"):
				f := strings.Fields(line)
				if len(f) > 1 {
					threads, _ = strconv.Atoi(f[1])
				}
			}
		}
		if mine {
			total += threads
		}
	}
	return total
}
