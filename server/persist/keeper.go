package persist

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/server/store"
)

const (
	// DefaultFilesMaxBytes is server.snapshots.files_max_bytes when unset.
	DefaultFilesMaxBytes int64 = 64 << 20
	// DefaultFilesMaxEntries is server.snapshots.files_max_entries when unset.
	DefaultFilesMaxEntries = 100_000
	// DefaultMaxTrajectoryRecords is server.trajectories.max_records_per_session's default.
	DefaultMaxTrajectoryRecords = 100000
	// maxFilesMaxBytes caps files_max_bytes: the archive is held in memory
	// while it is written to or read from the store.
	maxFilesMaxBytes int64 = 1 << 30
	// minAutoInterval is the shortest auto_interval accepted.
	minAutoInterval = time.Second
)

// Settings are what the host's configuration says of persistence.
type Settings struct {
	// DataDir holds file snapshots and session directories; "" for a
	// host without one (no file snapshots; session directories in the
	// temporary directory).
	DataDir string
	// Store holds sql snapshots and trajectories; nil for none.
	Store *store.Store
	// Log never gets nil.
	Log          *slog.Logger
	Snapshots    SnapshotSettings
	Trajectories TrajectorySettings
	// SessionQuota and Files bound a session directory
	// (server.isolation.session_quota_bytes, server.budgets.files): a
	// copy made for a fork or a snapshot-scoped subagent, and the files a
	// restore extracts.
	SessionQuota int64
	Files        int
	// HandshakeTimeout is how long a fork waits for its handshake, which
	// session/fork's reply tells.
	HandshakeTimeout time.Duration
}

// SnapshotSettings are server.snapshots.
type SnapshotSettings struct {
	// KeepPerSession keeps that many newest snapshots of each session and
	// target; 0 all.
	KeepPerSession int
	// MaxAge deletes older snapshots; 0 none.
	MaxAge time.Duration
	// FilesMaxBytes bounds the files a sql snapshot carries: nil is
	// [DefaultFilesMaxBytes], 0 carries none.
	FilesMaxBytes *int64
	// FilesMaxEntries bounds the entries it carries; 0 is
	// [DefaultFilesMaxEntries].
	FilesMaxEntries int
	// AutoInterval is the period of automatic snapshots; 0 takes none.
	AutoInterval time.Duration
	// CrashWindow bounds the acknowledged work a session loses when its
	// host dies without a drain (crashwin.go); 0 is off.
	CrashWindow time.Duration
	// StoreWait bounds how long a request waits for a store that does not
	// answer (storewait.go); 0 is [DefaultStoreWait].
	StoreWait time.Duration
	// DrainParallel is how many sessions a drain snapshots at once
	// (drain.go); 0 is [DefaultDrainParallel].
	DrainParallel int
}

// TrajectorySettings are server.trajectories.
type TrajectorySettings struct {
	// Record is opt_in (""), all or off.
	Record string
	// MaxAge drops older records; 0 keeps them.
	MaxAge time.Duration
	// MaxRecordsPerSession bounds one session's records; 0 is
	// [DefaultMaxTrajectoryRecords].
	MaxRecordsPerSession int
}

// filesMaxBytes is the effective files_max_bytes (0: files off).
func (c SnapshotSettings) filesMaxBytes() int64 {
	if c.FilesMaxBytes == nil {
		return DefaultFilesMaxBytes
	}
	return *c.FilesMaxBytes
}

// filesMaxEntries is the effective files_max_entries.
func (c SnapshotSettings) filesMaxEntries() int {
	if c.FilesMaxEntries > 0 {
		return c.FilesMaxEntries
	}
	return DefaultFilesMaxEntries
}

// Check returns what makes no sense in server.snapshots, each problem at
// its key.
func (c SnapshotSettings) Check() []error {
	var probs []error
	add := func(key, format string, args ...any) {
		probs = append(probs, configcheck.At("server.snapshots."+key, format, args...))
	}
	if c.KeepPerSession < 0 {
		add("keep_per_session", "must not be negative")
	}
	if c.MaxAge < 0 {
		add("max_age", "must not be negative")
	}
	if c.FilesMaxBytes != nil && (*c.FilesMaxBytes < 0 || *c.FilesMaxBytes > maxFilesMaxBytes) {
		add("files_max_bytes", "%d: want 0 (no files) to %d (1 GiB): the archive is held in memory", *c.FilesMaxBytes, maxFilesMaxBytes)
	}
	if c.FilesMaxEntries < 0 {
		add("files_max_entries", "must not be negative")
	}
	if c.AutoInterval < 0 || (c.AutoInterval > 0 && c.AutoInterval < minAutoInterval) {
		add("auto_interval", "%s: want 0s (off) or at least %s", c.AutoInterval, minAutoInterval)
	}
	if c.CrashWindow < 0 || (c.CrashWindow > 0 && c.CrashWindow < minCrashWindow) {
		add("crash_window", "%s: want 0s (off) or at least %s", c.CrashWindow, minCrashWindow)
	}
	return probs
}

// Check returns what makes no sense in server.trajectories, each problem
// at its key.
func (c TrajectorySettings) Check() []error {
	var probs []error
	switch c.Record {
	case "", "opt_in", "all", "off":
	default:
		probs = append(probs, configcheck.At("server.trajectories.record", "%q: want opt_in, all or off", c.Record))
	}
	if c.MaxAge < 0 {
		probs = append(probs, configcheck.At("server.trajectories.max_age", "must not be negative"))
	}
	if c.MaxRecordsPerSession < 0 {
		probs = append(probs, configcheck.At("server.trajectories.max_records_per_session", "must not be negative"))
	}
	return probs
}

// Keeper keeps the sessions of one host beyond their connections: it
// serves the session namespace's persistence requests (handlers.go),
// records trajectories, takes automatic and drain snapshots, and owns the
// session directories.
type Keeper struct {
	k       Kernel
	set     Settings
	log     *slog.Logger
	dataDir string
	store   *store.Store

	// The optional interfaces of the loaded plugins, found at Start.
	snapshotters  []pluginAs[Snapshotter]
	fileHolders   []pluginAs[FileHolder]
	secretHolders []pluginAs[SecretHolder]

	dirs sessionDirs // dirs.go
	// lineage holds the earlier sessions each live session owns through
	// restores (stored.go): transport id → owner keys.
	lineage sync.Map
	// recorders are the live sessions' trajectory recorders (transport id
	// → *Recorder), and forkLines the lineage of each live fork
	// (transport id → forkLineage), both for the trajectories'
	// lineage (trajectory.go).
	recorders sync.Map
	forkLines sync.Map

	traj *trajWriter  // trajectory.go; nil until Start
	auto *autoSnapper // autosnap.go; nil when off

	stop    chan struct{} // closed by Stop
	stopped sync.Once
	workers sync.WaitGroup // the automatic snapshots' goroutines
}

// New returns the keeper of a host. It serves session directories at
// once (plugins may ask for them while they start); the rest waits for
// [Keeper.Start].
func New(k Kernel, set Settings) *Keeper {
	if set.Log == nil {
		set.Log = slog.New(slog.DiscardHandler)
	}
	p := &Keeper{k: k, set: set, log: set.Log, dataDir: set.DataDir, store: set.Store, stop: make(chan struct{})}
	p.dirs.root = sessionsRoot(set.DataDir)
	return p
}

// Start finds what the loaded plugins implement of this package's
// interfaces, in start order, and starts the trajectory writer and, with
// server.snapshots.auto_interval or crash_window and a store, the
// automatic snapshots.
func (p *Keeper) Start(plugins []Plugin) {
	p.snapshotters = implementing[Snapshotter](plugins)
	p.fileHolders = implementing[FileHolder](plugins)
	p.secretHolders = implementing[SecretHolder](plugins)
	p.startTrajectories()
	p.startAutoSnapshots()
}

// Stop stops the automatic snapshots and waits for those under way. The
// host calls it before it ends its sessions.
func (p *Keeper) Stop() {
	p.stopped.Do(func() { close(p.stop) })
	p.workers.Wait()
}

// Close writes the trajectory records still queued, once the sessions
// have ended, and stops; ctx bounds the wait.
func (p *Keeper) Close(ctx context.Context) error {
	p.Stop()
	return p.traj.close(ctx)
}

// SessionEnded is told of every session that ended, after its plugins
// dropped its state: its lineage goes, its directory is removed unless a
// snapshot refers to it, and on a host that runs on (hostGoing false)
// its automatic snapshot is deleted.
func (p *Keeper) SessionEnded(s Session, hostGoing bool) {
	p.lineage.Delete(s.ID())
	p.recorders.Delete(s.ID())
	p.forkLines.Delete(s.ID())
	p.releaseDir(s.Handle())
	p.autoSessionEnded(s, hostGoing)
}

// secrets returns every secret s may have learned: the kernel's, then
// those of the [SecretHolder]s.
func (p *Keeper) secrets(s Session) []Secret {
	out := p.k.Secrets(s)
	for _, sh := range p.secretHolders {
		for _, v := range sh.v.Secrets() {
			out = append(out, Secret{"a secret of plugin " + `"` + sh.Name + `"`, v})
		}
	}
	return out
}
