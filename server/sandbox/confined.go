package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aephost/aep/server/sandbox/initproc"
)

// The init's side (server/sandbox/initproc) under the names the host's
// side uses.
const (
	initEnv   = initproc.Env
	fdStatus  = initproc.FDStatus
	fdControl = initproc.FDControl
	fdCgroups = initproc.FDCgroups

	programNotFound      = initproc.ProgramNotFound
	programNotExecutable = initproc.ProgramNotExecutable
)

type (
	initConfig = initproc.Config
	report     = initproc.Report
)

// writeInstructions sends a spare its run: a 4-byte big-endian length and
// the JSON of cfg.
func writeInstructions(w io.Writer, cfg initConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if len(b) > initproc.MaxInstructions {
		return fmt.Errorf("sandbox instructions of %d bytes: %w", len(b), ErrSetup)
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

var (
	bwrapOnce sync.Once
	bwrapPath string
	exeOnce   sync.Once
	exePath   string
	exeErr    error
)

// BwrapPath returns the path of bubblewrap, or "" when it is not installed.
func BwrapPath() string {
	bwrapOnce.Do(func() { bwrapPath, _ = exec.LookPath("bwrap") })
	return bwrapPath
}

// Executable is the host binary's path with its links resolved: what a
// run that executes the host binary itself (a worker of the host's, such
// as the sql toolkit's SQLite worker) names as argv[0] and lists in
// [Spec.ReadOnly], so every tier shows it at that path.
func Executable() (string, error) { return self() }

func self() (string, error) {
	exeOnce.Do(func() {
		exePath, exeErr = os.Executable()
		if exeErr == nil {
			exePath, exeErr = filepath.EvalSymlinks(exePath)
		}
	})
	return exePath, exeErr
}

// Mechanism names what a confined run of mode m would use, or an error
// saying why it cannot be set up (for config validation and docs).
func Mechanism(m Mode) (string, error) {
	switch m {
	case ModeAuto, "":
		// The best tier this host provides (docs/SECURITY.md, Isolation).
		// As root, the host's own init gives tier (a) with its clone flags
		// directly, one process and exec fewer than through bubblewrap,
		// and can keep a spare ready (spare.go).
		if os.Geteuid() == 0 {
			return "namespaces", nil
		}
		if bwrapWorks() == nil {
			return "bwrap", nil
		}
		return string(ModeSupervised), nil
	case ModeBwrap:
		if err := bwrapWorks(); err != nil {
			return "", fmt.Errorf("mode bwrap: %v: %w", err, ErrSetup)
		}
		return "bwrap", nil
	case ModeNamespaces:
		if os.Geteuid() != 0 {
			return "", fmt.Errorf("mode namespaces needs the host to run as root (use bwrap with user namespaces, or supervised): %w", ErrSetup)
		}
		return "namespaces", nil
	case ModeSupervised:
		return string(ModeSupervised), nil
	}
	return "", fmt.Errorf("unknown sandbox mode %q (auto, bwrap, namespaces or supervised): %w", m, ErrSetup)
}

// limitWriter keeps the last bytes written, for error messages about a
// sandbox that failed to start and for the rlimit fallback's out-of-memory
// check, and passes everything on.
type limitWriter struct {
	w   io.Writer
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *limitWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(b[max(0, len(b)-tailBytes):])
	if over := l.buf.Len() - tailBytes; over > 0 {
		l.buf.Next(over)
	}
	l.mu.Unlock()
	return l.w.Write(b)
}

func (l *limitWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (p *Process) startConfined() (err error) {
	mech, err := Mechanism(p.spec.Mode)
	if err != nil {
		return err
	}
	exe, err := self()
	if err != nil {
		return fmt.Errorf("finding the host binary for the sandbox init: %v: %w", err, ErrSetup)
	}
	work := p.spec.WorkDir
	if work == "" {
		work = p.spec.Dir
	}
	if work == "" {
		return fmt.Errorf("a sandboxed run needs a work directory: %w", ErrSetup)
	}
	if p.spec.Dir != "" && !withinDir(p.spec.Dir, work) {
		return fmt.Errorf("working directory %s is outside the work directory: %w", p.spec.Dir, ErrSetup)
	}
	if fi, err := os.Stat(work); err != nil || !fi.IsDir() {
		return fmt.Errorf("the work directory %s is not a directory: %w", work, ErrSetup)
	}
	if err := handOver(work); err != nil {
		return fmt.Errorf("%v: %w", err, ErrSetup)
	}
	lim := p.spec.Limits
	if lim.MaxProcs == 0 {
		lim.MaxProcs = DefaultMaxProcs
	}
	p.tier = TierOf(mech)
	cfg := initConfig{Namespaces: mech == "namespaces", Supervised: p.tier == TierSupervised, Argv: p.spec.Argv,
		Dir: p.spec.Dir, WorkDir: work, ReadOnly: p.spec.ReadOnly, RunID: newRunID(), FSize: lim.FileBytes, WorkRO: p.spec.WorkReadOnly}
	if os.Geteuid() == 0 {
		cfg.UID = SandboxUID
	}
	if p.tier == TierNamespaces {
		// Inside, the work directory is /workspace; the working directory keeps its place in it.
		rel, _ := filepath.Rel(work, orRoot(p.spec.Dir))
		if p.spec.Dir == "" {
			rel = "."
		}
		cfg.Dir = filepath.Join(Workspace, rel)
	}
	if p.tier == TierSupervised {
		becomeSubreaper()
	}
	p.runID = cfg.RunID
	if lim.CPUTime > 0 {
		cfg.CPUSeconds = max(1, int64((lim.CPUTime+time.Second-1)/time.Second))
	}
	// Only root makes cgroups here; an unprivileged host (tier b) has the
	// rlimit fallbacks.
	if (lim.MemoryBytes > 0 || lim.MaxProcs > 0) && os.Geteuid() == 0 {
		cg, err := newCgroups(lim)
		if err != nil {
			return fmt.Errorf("making the run's cgroup: %v: %w", err, ErrSetup)
		}
		p.cg = cg
	}
	defer func() {
		if err != nil && p.cg != nil {
			p.cg.remove()
		}
		if err != nil && p.newRoot != "" {
			os.Remove(p.newRoot)
		}
	}()
	if p.cg == nil || p.cg.mem == "" {
		cfg.MemBytes = lim.MemoryBytes
		if cfg.MemBytes > 0 {
			cfg.MemBytes += lim.AddressReserve
		}
	}
	if p.cg == nil || p.cg.pids == "" {
		cfg.NProc = lim.MaxProcs
	}
	p.rlimitMem = cfg.MemBytes > 0
	filter, err := p.filter()
	if err != nil {
		return err
	}
	if mech != "bwrap" {
		cfg.Seccomp = filter
	}
	cfg.NoNetwork = !p.spec.Network
	if mech == "namespaces" && !p.spec.Network {
		// A spare init already in its namespaces, its root made, takes
		// the run if one is ready (spare.go); else a cold start below.
		if sp := takeSpare(); sp != nil {
			p.refill = time.AfterFunc(spareRefillDelay, askSpare)
			if done, err := p.startOnSpare(sp, cfg); done {
				return err
			}
		}
	}
	if mech == "namespaces" {
		root, err := os.MkdirTemp("", "aep-root-")
		if err != nil {
			return fmt.Errorf("making the sandbox root: %v: %w", err, ErrSetup)
		}
		cfg.NewRoot = root
		p.newRoot = root
	}
	var cgFiles []*os.File
	if p.cg != nil {
		if cgFiles, err = p.cg.procsFiles(); err != nil {
			return fmt.Errorf("opening the run's cgroup: %v: %w", err, ErrSetup)
		}
		defer func() {
			for _, f := range cgFiles {
				f.Close()
			}
		}()
	}
	cfg.Cgroups = len(cgFiles)
	rawCfg, err := json.Marshal(cfg)
	if err != nil {
		return err
	}

	var cmd *exec.Cmd
	var seccompFile *os.File
	if mech == "bwrap" {
		// bubblewrap installs the filter before it starts the init, from
		// a descriptor after the init's own (--seccomp).
		args := bwrapArgs(p.spec, exe, work, cfg.Dir, cfg.UID > 0)
		if len(filter) > 0 {
			if seccompFile, err = filterFile(filter); err != nil {
				return fmt.Errorf("the run's seccomp filter: %v: %w", err, ErrSetup)
			}
			defer seccompFile.Close()
			fd := 3 + 2 + len(cgFiles)
			args = append(args[:len(args)-2], "--seccomp", strconv.Itoa(fd), "--", initPath)
		}
		cmd = exec.Command(BwrapPath(), args...)
	} else if mech == "namespaces" {
		cmd = exec.Command(exe)
		// The init is pid 1 of the namespace: its death, here with the
		// host's, ends every process in it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: namespaceFlags(p.spec.Network), Pdeathsig: syscall.SIGKILL}
	} else {
		// Supervised: SIGTERM, which the init catches to end every
		// descendant before it goes (SIGKILL would leave them behind).
		cmd = exec.Command(exe)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Dir = "/"
	cmd.Env = append(append([]string{}, p.spec.Env...), initEnv+"="+string(rawCfg))
	errs := &limitWriter{w: orDiscard(p.spec.Stderr)}
	if mech != "namespaces" {
		cmd.Stdout, cmd.Stderr = orDiscard(p.spec.Stdout), errs
	}
	p.errTail = errs
	cmd.WaitDelay = 500 * time.Millisecond
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return err
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		return err
	}
	cmd.ExtraFiles = append([]*os.File{statusW, controlR}, cgFiles...)
	if seccompFile != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, seccompFile)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if mech == "namespaces" {
		// The init reports the run's end before its exit (Process.wait).
		if p.output, err = pipeOutput(cmd); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		statusR.Close()
		statusW.Close()
		controlR.Close()
		controlW.Close()
		if p.output != nil {
			p.output.closeAll()
		}
		return fmt.Errorf("starting the sandbox (%s): %s: %w", mech, execReason(err), ErrSetup)
	}
	statusW.Close()
	controlR.Close()
	if p.output != nil {
		p.output.started(orDiscard(p.spec.Stdout), errs)
	}
	p.cmd, p.Stdin, p.Pid = cmd, in, cmd.Process.Pid
	p.started = time.Now()
	p.control = controlW
	br := bufio.NewReader(statusR)
	rep, rerr := readFirst(br)
	if rerr != nil || !rep.Started {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if p.output != nil {
			p.output.wait(outputGrace)
		}
		statusR.Close()
		controlW.Close()
		return startError(mech, rep, errs)
	}
	p.status = &statusFile{File: statusR, br: br}
	return nil
}

// execReason says why an exec failed without the path of what was
// executed (the host binary: no host path reaches an agent); an argument
// list too long is the agent's, and said so.
func execReason(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, syscall.E2BIG):
		return "the command's arguments and environment are too long for the system (E2BIG)"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return "it could not be executed"
}

// filter is the run's system-call filter (seccomp.go). Without seccomp in
// the kernel, a run not granted network is refused: in the supervised
// tier nothing else would keep it off the network.
func (p *Process) filter() ([]byte, error) {
	if !SeccompAvailable() {
		if !p.spec.Network {
			return nil, fmt.Errorf("the kernel does not install seccomp filters, which keep a command off the network: %w", ErrSetup)
		}
		return nil, nil
	}
	noPtrace := p.tier == TierSupervised && initproc.LandlockABI() == 0
	return filterFor(filterKey{network: p.spec.Network, userNS: userNamespaces.Load(), noPtrace: noPtrace})
}

// filterFile is a pipe holding filter, for bubblewrap's --seccomp.
func filterFile(filter []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(filter) // a few hundred bytes: the pipe holds them
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// namespaceFlags are the namespaces of a run in the namespaces mode.
func namespaceFlags(network bool) uintptr {
	flags := syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
	if !network {
		flags |= syscall.CLONE_NEWNET
	}
	return uintptr(flags)
}

// readFirst reads one line of the init's status pipe.
func readFirst(br *bufio.Reader) (report, error) {
	var rep report
	line, err := br.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	return rep, err
}

// startError is the error of a run whose init did not start the command.
func startError(mech string, rep report, errs *limitWriter) error {
	why := rep.SetupError
	if why == "" {
		why = fmt.Sprintf("%s exited before the command started: %s", mech, bytes.TrimSpace([]byte(errs.String())))
	}
	switch rep.Program {
	case programNotFound:
		return fmt.Errorf("%s: %w: %w", why, ErrSetup, exec.ErrNotFound)
	case programNotExecutable:
		return fmt.Errorf("%s: %w: %w", why, ErrSetup, fs.ErrPermission)
	}
	return fmt.Errorf("%s: %w", why, ErrSetup)
}

const tailBytes = 4096

// memoryFailure is the rlimit fallback's out-of-memory check (docs/DECISIONS.md, Sandbox
// outcomes; docs/DECISIONS.md): without a memory cgroup nothing counts OOM
// kills, and under RLIMIT_DATA an allocation fails instead of the process
// being killed. A run that ended abnormally (a signal or a non-zero exit)
// is taken to have failed at the memory limit when its peak RSS reached half
// the limit, or when the tail of its stderr carries a runtime's own
// out-of-memory words (glibc/C "Cannot allocate memory", Perl "Out of
// memory!", Python "MemoryError", Go "out of memory", C++ "bad_alloc",
// Node "heap out of memory").
func memoryFailure(rep *report, limit int64, stderrTail string) bool {
	if rep == nil || (rep.Signal == 0 && rep.Exit == 0) {
		return false
	}
	if rep.MaxRSS >= limit/2 {
		return true
	}
	t := strings.ToLower(stderrTail)
	for _, w := range []string{"cannot allocate memory", "out of memory", "memoryerror", "bad_alloc"} {
		if strings.Contains(t, w) {
			return true
		}
	}
	return false
}

// statusFile is the status pipe after its first line.
type statusFile struct {
	*os.File
	br *bufio.Reader
}

// bwrapArgs builds the bubblewrap command line: an empty root with only
// [SystemPaths] read-only, the work directory writable at [Workspace], the
// caller's read-only paths, a private /tmp, fresh /dev and /proc, own PID,
// IPC and UTS namespaces, no network unless allowed, and death with the
// host. As root, the init keeps CAP_SETUID and CAP_SETGID only, to start
// the command as [SandboxUID]. --new-session is left out on purpose: it
// would move the run out of the process group the host kills (the command
// has no terminal, stdin is a pipe, so TIOCSTI, the reason for it, does
// not apply).
func bwrapArgs(spec Spec, exe, work, dir string, dropUID bool) []string {
	var a []string
	for _, p := range SystemPaths {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", t, p)
			}
		default:
			a = append(a, "--ro-bind", p, p)
		}
	}
	// /tmp is writable for the unprivileged uid, and the directories
	// bubblewrap makes above a read-only path can be traversed by it.
	a = append(a, "--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp",
		"--ro-bind", exe, initPath)
	for _, r := range spec.ReadOnly {
		var parents []string
		for d := filepath.Dir(r); d != "/" && d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if d != "/tmp" {
				a = append(a, "--perms", "0755", "--dir", d)
			}
		}
		a = append(a, "--ro-bind", r, r)
	}
	bind := "--bind"
	if spec.WorkReadOnly {
		bind = "--ro-bind"
	}
	a = append(a, bind, work, Workspace,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--chdir", dir)
	if dropUID {
		a = append(a, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
	}
	if !spec.Network {
		a = append(a, "--unshare-net")
	}
	return append(a, "--", initPath)
}

// initPath is where bubblewrap shows the host binary, the sandbox's init.
const initPath = "/.aep-init"

func orRoot(d string) string {
	if d == "" {
		return "/"
	}
	return d
}

// readReport reads the init's final report; nil when the init died first.
func readReport(s *statusFile) *report {
	line, err := s.br.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return nil
	}
	var r report
	if json.Unmarshal(line, &r) != nil {
		return nil
	}
	return &r
}
