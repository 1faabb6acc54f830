package sandbox

import (
	"bytes"
	"errors"
	"fmt"
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

// The isolation tiers (docs/SECURITY.md, Isolation). Tier (a), "namespaces",
// runs a command in its own PID, mount, IPC and UTS namespaces, as an
// unprivileged uid, seeing only [SystemPaths], its session directory at
// [Workspace] and the paths its caller names read-only; bubblewrap provides
// it when installed and working, else (as root) the host's own init.
// Tier (b), "supervised", is for hosts where namespaces are not available
// (not root and user namespaces off): the host becomes a child subreaper,
// the init gets PR_SET_PDEATHSIG and is a subreaper too, ends every
// descendant when the command ends, the command's view of the file system
// is cut to the same allowlist by Landlock (when the kernel has it), and
// rlimits (RLIMIT_NPROC, RLIMIT_CPU, RLIMIT_DATA, RLIMIT_FSIZE) bound it,
// under [SandboxUID] when the host is root.
type Tier string

// Tiers, best first.
const (
	TierNamespaces Tier = "namespaces"
	TierSupervised Tier = "supervised"
)

// ModeSupervised selects tier (b) explicitly.
const ModeSupervised Mode = "supervised"

// Workspace is where a contained command sees its session directory
// (tier a); the spec's default data root /workspace/data lies in it.
const Workspace = initproc.Workspace

// SandboxUID is the uid (and gid) contained commands run as when the host
// is root: a uid of their own, which owns nothing of the host's. Not
// nobody (65534): RLIMIT_NPROC counts every process of a uid, so commands
// sharing nobody with an unprivileged host, or with anything else the
// machine runs as nobody, would spend each other's process allowance.
const SandboxUID = 64646

// DefaultMaxProcs is the pids limit of a contained run whose caller sets none.
const DefaultMaxProcs = 256

// RunMarker names the variable the init puts in a command's environment
// (a run id), by which the host recognises the run's processes that were
// re-parented to it in tier (b).
const RunMarker = initproc.RunMarker

// SystemPaths are the host paths a contained command sees, read-only:
// binaries, libraries and the few /etc files programs need to load and to
// resolve names. Never the data dir, the store, a config file or another
// session's directory.
var SystemPaths = initproc.SystemPaths

// TierOf names the tier a mechanism provides.
func TierOf(mechanism string) Tier {
	if mechanism == string(ModeSupervised) {
		return TierSupervised
	}
	return TierNamespaces
}

var (
	bwrapProbeOnce sync.Once
	bwrapProbeErr  error
)

// bwrapWorks runs bubblewrap once with the options a run uses, so a host
// where it is installed but cannot make namespaces (user namespaces off,
// not root) falls back instead of failing every run.
func bwrapWorks() error {
	bwrapProbeOnce.Do(func() {
		if BwrapPath() == "" {
			bwrapProbeErr = errors.New("bubblewrap (bwrap) is not installed")
			return
		}
		out, err := exec.Command(BwrapPath(), "--ro-bind", "/", "/", "--unshare-pid", "--unshare-ipc", "--", "/bin/true").CombinedOutput()
		if err != nil {
			bwrapProbeErr = fmt.Errorf("bubblewrap cannot make namespaces here: %v %s", err, bytes.TrimSpace(out))
		}
	})
	return bwrapProbeErr
}

// Describe says, for the start-up log, which tier and mechanism mode
// gives and what the supervised tier can enforce here.
func Describe(m Mode) (Tier, string, error) {
	mech, err := Mechanism(m)
	if err != nil {
		return "", "", err
	}
	t := TierOf(mech)
	what := mech
	if t == TierSupervised {
		if v := initproc.LandlockABI(); v > 0 {
			what += fmt.Sprintf(" (Landlock ABI %d confines paths)", v)
		} else {
			what += " (no Landlock: paths are not confined beyond file permissions)"
		}
	}
	if os.Geteuid() == 0 {
		what += fmt.Sprintf(", commands run as uid %d", SandboxUID)
	}
	return t, what, nil
}

// PathsConfined reports whether a run of mode m can open only the paths
// it is shown: always in tier (a), and in tier (b) only where the kernel
// has Landlock. Work that must never reach the host's own files (the sql
// toolkit's SQLite worker) is refused where it is false.
func PathsConfined(m Mode) (bool, error) {
	mech, err := Mechanism(m)
	if err != nil {
		return false, err
	}
	return TierOf(mech) == TierNamespaces || initproc.LandlockABI() > 0, nil
}

// handOver gives the session directory to the uid contained commands run
// as, when the host is root: files the host wrote (write_file, env/data)
// must stay writable for them. It walks through an os.Root, so a symlink a
// command planted cannot lead the chown out of the directory.
func handOver(dir string) error {
	if os.Geteuid() != 0 || dir == "" {
		return nil
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished meanwhile; a running command may delete files
		}
		if err := r.Lchown(p, SandboxUID, SandboxUID); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("handing %s to uid %d: %w", p, SandboxUID, err)
		}
		return nil
	})
}

var subreaperOnce sync.Once

// becomeSubreaper makes the host the child subreaper of tier (b): a
// command's descendants whose parents died come back to the host, not to
// the system's init, so the host can end them (see [sweepHost]).
func becomeSubreaper() {
	subreaperOnce.Do(func() {
		const prSetChildSubreaper = 36
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	})
}

// carries reports whether pid's environment holds the run marker id.
func carries(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(RunMarker + "=" + id)
	for _, kv := range bytes.Split(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// sweepHost ends the processes of run id that were re-parented to the host
// (tier b: their init died before it could end them), and reaps them: the
// host is their subreaper, and only these pids are waited for, so the
// host's other children keep their own waiters.
func sweepHost(id string) {
	self := os.Getpid()
	for round := 0; round < 50; round++ {
		var found []int
		for _, pid := range initproc.Children(self) {
			if carries(pid, id) {
				found = append(found, pid)
			}
		}
		if len(found) == 0 {
			return
		}
		for _, pid := range found {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range found {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// within reports whether p is dir or below it.
func withinDir(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
