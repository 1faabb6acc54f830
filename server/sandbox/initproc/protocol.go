package initproc

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"syscall"
)

// Env carries the init's instructions; the init removes it from the
// command's environment.
const Env = "AEP_SANDBOX_INIT"

// File descriptors of the init (the host's ExtraFiles start at 3).
const (
	FDStatus  = 3 // init → host: a "started" line, then the final report
	FDControl = 4 // host → init: one byte per signal to forward
	FDCgroups = 5 // cgroup.procs files the init writes "0" to, in order
)

// Workspace is where a contained command sees its session directory
// (tier a); the spec's default data root /workspace/data lies in it.
const Workspace = "/workspace"

// RunMarker names the variable the init puts in a command's environment
// (a run id), by which the host recognises the run's processes that were
// re-parented to it in tier (b).
const RunMarker = "AEP_SANDBOX_RUN"

// SystemPaths are the host paths a contained command sees, read-only:
// binaries, libraries and the few /etc files programs need to load and to
// resolve names. Never the data dir, the store, a config file or another
// session's directory.
var SystemPaths = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/hosts",
	"/etc/resolv.conf", "/etc/ssl", "/etc/ca-certificates", "/etc/mime.types",
}

// Config is what the host tells the init.
type Config struct {
	Namespaces bool     `json:"namespaces,omitempty"` // set up mounts itself (the namespaces mode)
	Supervised bool     `json:"supervised,omitempty"` // tier (b): Landlock, subreaper, sweep
	NewRoot    string   `json:"new_root,omitempty"`   // namespaces: empty directory the new root is built on
	UID        int      `json:"uid,omitempty"`        // > 0: the command runs as this uid and gid
	RunID      string   `json:"run_id,omitempty"`     // the value of RunMarker
	ReadOnly   []string `json:"read_only,omitempty"`  // further read-only paths (namespaces, Landlock)
	FSize      int64    `json:"fsize,omitempty"`      // RLIMIT_FSIZE of the command
	WorkRO     bool     `json:"work_ro,omitempty"`    // the work directory is read-only
	Argv       []string `json:"argv"`
	Dir        string   `json:"dir"`
	WorkDir    string   `json:"work_dir"`
	Cgroups    int      `json:"cgroups"`
	CPUSeconds int64    `json:"cpu_seconds,omitempty"`
	// Rlimit fallbacks when no cgroup enforces these.
	MemBytes int64 `json:"mem_bytes,omitempty"`
	NProc    int   `json:"nproc,omitempty"`
	// Seccomp is the raw system-call filter (struct sock_filter[]) the init
	// installs on the thread it forks the command from; empty in the bwrap
	// tier, where bubblewrap installs it.
	Seccomp []byte `json:"seccomp,omitempty"`
	// NoNetwork also closes TCP with Landlock (ABI 4 and later) in the
	// supervised tier, beside the filter.
	NoNetwork bool `json:"no_network,omitempty"`

	// A spare (server/sandbox/spare.go) is started with only Spare,
	// Namespaces and NewRoot; the rest comes on the control pipe when it
	// is given a run, with these, which a cold init has from its fds and
	// environment.
	Spare      bool     `json:"spare,omitempty"`
	CgroupDirs []string `json:"cgroup_dirs,omitempty"` // the init opens cgroup.procs in each
	Env        []string `json:"env,omitempty"`         // the command's environment
	// Paths are the work directory and the read-only paths as the host
	// sees them; a spare whose mount namespace (copied when it started)
	// shows another file there refuses the run.
	Paths []PathID `json:"paths,omitempty"`
}

// PathID names a file by device and inode.
type PathID struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// IDOf gives path's device and inode as this process sees them.
func IDOf(path string) (PathID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return PathID{}, false
	}
	return PathID{Path: path, Dev: uint64(st.Dev), Ino: st.Ino}, true
}

// stale says why the spare's view of the run's paths is not the host's,
// or "" when it is.
func (c Config) stale() string {
	for _, want := range c.Paths {
		got, ok := IDOf(want.Path)
		if !ok || got != want {
			return fmt.Sprintf("the spare init sees another %s than the host", want.Path)
		}
	}
	return ""
}

// MaxInstructions bounds what a spare reads from the host: a 4-byte
// big-endian length and the JSON of a [Config].
const MaxInstructions = 4 << 20

func readInstructions(r io.Reader, cfg *Config) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxInstructions {
		return fmt.Errorf("sandbox instructions of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, cfg)
}

// Report is what the init tells the host; the first line has only Started
// or SetupError, the second how the command ended.
type Report struct {
	Ready      bool   `json:"ready,omitempty"` // a spare has made its root and waits for a run
	Stale      bool   `json:"stale,omitempty"` // a spare refused its run (its view of the paths is stale)
	Started    bool   `json:"started,omitempty"`
	SetupError string `json:"setup_error,omitempty"`
	Exit       int    `json:"exit"`
	Signal     int    `json:"signal,omitempty"`
	CPUMicros  int64  `json:"cpu_us"`
	MaxRSS     int64  `json:"max_rss"`
	// Reaped (the namespaces mode) says that every process of the run's
	// PID namespace but the init has ended and been reaped, and that the
	// init holds none of the run's output pipes: the run is over,
	// though the init and its namespaces have not gone yet.
	Reaped bool `json:"reaped,omitempty"`
	// MemFail is the rlimit fallback's verdict (server/sandbox, memoryFailure).
	MemFail bool `json:"mem_fail,omitempty"`
	// Program says why the command could not start, when it is the
	// program's fault: ProgramNotFound or ProgramNotExecutable.
	Program string `json:"program,omitempty"`
}

// Values of Report.Program.
const (
	ProgramNotFound      = "not_found"
	ProgramNotExecutable = "not_executable"
)
