package server

// The kernel's side of session persistence. Snapshots, restore, forks,
// sessions that move, automatic snapshots, trajectories and the session
// directories live in server/persist; the kernel reaches that package only
// through the persistence interface below (held in Host.persist), and
// this is the only file of the kernel that names it. The other way, the
// package reaches the kernel only through persist.Kernel and
// persist.Session, which kernelView and sessionView implement here.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/wire"
)

// persistence is what the kernel asks of server/persist
// (*persist.Keeper).
type persistence interface {
	// Start finds the plugins' persistence interfaces and starts the
	// trajectory writer and the automatic snapshots; Stop stops the
	// latter before the host ends its sessions, Close writes the
	// trajectory records still queued after.
	Start(plugins []persist.Plugin)
	Stop()
	Close(ctx context.Context) error

	// The session namespace's persistence requests, for the session
	// they came from (sessionplugin.go).
	SessionSnapshot(ctx context.Context, s persist.Session, req *msg.SessionSnapshotReq) (*msg.SessionSnapshotResp, error)
	SessionRestore(ctx context.Context, s persist.Session, req *msg.SessionRestoreReq) (*msg.SessionRestoreResp, error)
	SessionFork(ctx context.Context, s persist.Session, req *msg.SessionForkReq) (*msg.SessionForkResp, error)
	SessionSnapshotList(ctx context.Context, s persist.Session, req *msg.SessionSnapshotListReq) (*msg.SessionSnapshotListResp, error)
	SessionSnapshotDelete(ctx context.Context, s persist.Session, req *msg.SessionSnapshotDeleteReq) (*msg.SessionSnapshotDeleteResp, error)
	SessionTrajectoryExport(ctx context.Context, s persist.Session, req *msg.SessionTrajectoryExportReq) (*msg.SessionTrajectoryExportResp, error)

	// SnapshotsOf lists the stored snapshots a session may list as its
	// own, newest first, at most limit (the admin API, admin.go).
	SnapshotsOf(ctx context.Context, s persist.Session, limit int) ([]persist.SnapshotInfo, error)

	// Recorder is the trajectory recorder of a session that handshook,
	// or nil (handshake.go).
	Recorder(s persist.Session, asked bool) *persist.Recorder
	// RecordedTail is the newest records of a session's recorded
	// trajectory, by its handle, for the web inspector (inspect.go).
	RecordedTail(ctx context.Context, handle string, limit int) (recs []json.RawMessage, more bool, err error)
	// DrainSnapshots saves every live top-level session on a drain
	// (drain.go), telling done of each as it is saved or given up.
	DrainSnapshots(ctx context.Context, done func(s persist.Session, snapshotID string, point uint64, err error)) (saved map[string]string, notSaved int, err error)
	// SessionEnded is told of every session that ended (host.go, forget);
	// SessionClosing before its plugins drop its state.
	SessionEnded(s persist.Session, hostGoing bool)
	SessionClosing(s persist.Session)

	// The crash window (server/persist/crashwin.go): CrashWindow is 0
	// when it is off; Changed is told of a top-level session whose first
	// unsaved change was recorded (Session.changed); HoldForSave holds
	// back a request of a session that is a window behind.
	CrashWindow() time.Duration
	Changed(s persist.Session)
	HoldForSave(ctx context.Context, s persist.Session, now time.Time)

	// Session directories: where they are, made on first use, and the
	// copy a snapshot-scoped subagent starts from (child.go).
	Root() string
	DirOf(s persist.Session) persist.Dir
	SessionDir(s persist.Session) (persist.Dir, error)
	CopyForChild(child, parent persist.Session) error
}

var _ persistence = (*persist.Keeper)(nil)

// Why a snapshot was taken, as the metrics count them (observe.go).
const (
	kindRequest = persist.KindRequest
	kindAuto    = persist.KindAuto
	kindDrain   = persist.KindDrain
)

// recorder records one session's trajectory (Session.rec).
type recorder = persist.Recorder

// unsavedChanges is what of a session tree's changes its automatic
// snapshot does not hold yet (Session.unsaved).
type unsavedChanges = persist.Unsaved

// sessionDir is a session's directory (Host.SessionDir).
type sessionDir = persist.Dir

// The defaults of server.snapshots.files_max_entries and
// server.trajectories.max_records_per_session (config.go, withDefaults).
const (
	defaultFilesMaxEntries      = persist.DefaultFilesMaxEntries
	defaultMaxTrajectoryRecords = persist.DefaultMaxTrajectoryRecords
	// defaultDrainParallel is server.snapshots.drain_parallel when unset.
	defaultDrainParallel = persist.DefaultDrainParallel
)

// newPersistence makes the host's keeper from its configuration.
func (h *Host) newPersistence() persistence {
	c := h.cfg.Server
	return persist.New(kernelView{h}, persist.Settings{
		DataDir: h.dataDir, Store: h.store, Log: h.log,
		Snapshots: c.Snapshots.settings(), Trajectories: c.Trajectories.settings(),
		SessionQuota: h.SessionQuota(), Files: c.Budgets.Files,
		HandshakeTimeout: time.Duration(c.Limits.HandshakeTimeout),
	})
}

// root is the top-level session of s's tree.
func (s *Session) root() *Session {
	for s.parent != nil {
		s = s.parent
	}
	return s
}

// changed records a change of s's session tree at now, for the crash
// window (server/persist/crashwin.go): the root's oldest unsaved change,
// set only when none is recorded, which is when the keeper is told. Off,
// it is one branch on a constant.
func (s *Session) changed(now time.Time) {
	if !s.h.crashWindow {
		return
	}
	r := s.root()
	if r.unsaved.Since.Load() == 0 && r.unsaved.Since.CompareAndSwap(0, now.UnixNano()) {
		s.h.persist.Changed(r.view())
	}
}

// holdForSave holds back a request of s that arrived at now while its
// tree is a crash window behind its save.
func (s *Session) holdForSave(ctx context.Context, now time.Time) {
	if s.h.crashWindow {
		s.h.persist.HoldForSave(ctx, s.root().view(), now)
	}
}

// startPersistence hands the keeper the loaded plugins, in start order.
func (h *Host) startPersistence() {
	ps := make([]persist.Plugin, len(h.plugins))
	for i, p := range h.plugins {
		ps[i] = persist.Plugin{Name: p.Name, Type: p.Type, Key: h.keys[p.Name], Impl: p.Impl}
	}
	h.persist.Start(ps)
}

func (c SnapshotConfig) settings() persist.SnapshotSettings {
	return persist.SnapshotSettings{KeepPerSession: c.KeepPerSession, MaxAge: time.Duration(c.MaxAge),
		FilesMaxBytes: c.FilesMaxBytes, FilesMaxEntries: c.FilesMaxEntries, AutoInterval: time.Duration(c.AutoInterval),
		CrashWindow: time.Duration(c.CrashWindow), StoreWait: time.Duration(c.StoreWait), DrainParallel: c.DrainParallel}
}

// check rejects settings that make no sense.
func (c SnapshotConfig) check() []error { return c.settings().Check() }

func (c TrajectoryConfig) settings() persist.TrajectorySettings {
	return persist.TrajectorySettings{Record: c.Record, MaxAge: time.Duration(c.MaxAge), MaxRecordsPerSession: c.MaxRecordsPerSession}
}

func (c TrajectoryConfig) check() []error { return c.settings().Check() }

// snapshotsOf lists the stored snapshots session s may list as its own
// (its own and its lineage's), newest first, at most limit.
func (h *Host) snapshotsOf(ctx context.Context, s *Session, limit int) ([]snapshotNote, error) {
	stored, err := h.persist.SnapshotsOf(ctx, s.view(), limit)
	if err != nil {
		return nil, err
	}
	out := make([]snapshotNote, len(stored))
	for i, st := range stored {
		out[i] = snapshotNote{ID: st.ID, Target: st.Target, Kind: st.Kind, At: st.Created, Bytes: st.Bytes}
	}
	return out, nil
}

// recorderFor is the trajectory recorder of session s, which handshook
// with req, or nil when its trajectory is not recorded.
func (h *Host) recorderFor(s *Session, req *msg.HandshakeReq) *recorder {
	return h.persist.Recorder(s.view(), req.RecordTrajectory != nil && *req.RecordTrajectory)
}

// SessionDir returns the directory of a live session, by its handle
// (wire.Scope.SessionID), made on first use (server/persist/dirs.go).
func (h *Host) SessionDir(sessionID string) (sessionDir, error) {
	s, ok := h.SessionByHandle(sessionID)
	if !ok {
		return sessionDir{}, fmt.Errorf("session directory: %w", ErrSessionEnded)
	}
	return h.persist.SessionDir(s.view())
}

// sessionDirOf resolves the directory session s sees, without making it.
func (h *Host) sessionDirOf(s *Session) sessionDir { return h.persist.DirOf(s.view()) }

// CheckWrite says whether a session may add n bytes to its directory:
// persist.ErrReadOnly for a restricted subagent, persist.ErrQuota past
// its disk budget, the tenant's disk total's refusal, the files budget's
// refusal when the directory holds as many files as it may (a write may
// add one). A write of no bytes (truncating a file) is let through over
// the byte quota: it is how an agent makes room.
func (h *Host) CheckWrite(sessionID string, n int64) error {
	d, err := h.SessionDir(sessionID)
	if err != nil {
		return err
	}
	if d.ReadOnly {
		return persist.ErrReadOnly
	}
	lim := h.defaultLimits()
	var t *tenant
	if s, ok := h.SessionByHandle(sessionID); ok {
		lim, t = s.budget.lim, s.tenant
	}
	files := lim.Files
	used, entries := usage(d.Path, files)
	if n > 0 && used+n > lim.DiskBytes {
		return fmt.Errorf("%d bytes used, %d more asked, quota %d: %w", used, n, lim.DiskBytes, persist.ErrQuota)
	}
	if n > 0 {
		if err := h.checkTenantDisk(t); err != nil {
			return err
		}
	}
	if entries >= files {
		return errFiles(int64(files), "the session directory holds %d files, its budget (server.budgets.files); delete files to go on", entries)
	}
	return nil
}

// prepareChildDir copies the parent's directory for a snapshot-scoped
// child, refusing a copy beyond the quota.
func (h *Host) prepareChildDir(child, parent *Session, scope string) error {
	if scope != "snapshot" {
		return nil
	}
	return h.persist.CopyForChild(child.view(), parent.view())
}

// drainSnapshots saves every live top-level session on a drain
// (drain.go), each one's note told as it is saved or given up.
func (h *Host) drainSnapshots(ctx context.Context) (map[string]string, int, error) {
	return h.persist.DrainSnapshots(ctx, func(ps persist.Session, id string, point uint64, err error) {
		h.drainNoteDone(ps.(*sessionView).session(), id, point, err)
	})
}

// kernelView is the kernel as server/persist sees it.
type kernelView struct{ h *Host }

var _ persist.Kernel = kernelView{}

func (k kernelView) LiveTopLevel() []persist.Session {
	var out []persist.Session
	for _, s := range k.h.sessionList() {
		if s.Live() && s.parent == nil {
			out = append(out, s.view())
		}
	}
	return out
}

// errDrainingFork refuses a fork on a draining host: forks are new
// top-level sessions, which a draining host does not open (drain.go).
var errDrainingFork = wire.Reason("draining", errors.New("the host is draining and opens no new sessions; fork on another host"))

func (k kernelView) NewFork(src persist.Session, nth, count int) (persist.Session, error) {
	s := src.(*sessionView).session()
	f, err := k.h.newSession(nil, nil, nil, nil, func(x *Session) {
		// A fork is its source's tenant's, with that tenant's budgets.
		x.forked, x.tenant = true, s.tenant
		if s.tenant != nil {
			x.budget = newBudget(s.tenant.limits())
		}
	})
	switch {
	case errors.Is(err, errTenantSessions):
		return nil, &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf("fork %d of %d: your tenant is at its total of sessions on this host; no fork was kept", nth, count),
			Detail: map[string]any{"reason": "tenant_sessions", "limit": s.tenant.total().Sessions}}
	case errors.Is(err, ErrTooManySessions):
		return nil, wire.Reason("too_many_sessions", fmt.Errorf("fork %d of %d: the host is at server.limits.max_sessions; no fork was kept", nth, count))
	case errors.Is(err, ErrDraining):
		return nil, errDrainingFork
	case err != nil:
		return nil, fmt.Errorf("fork: %w", err)
	}
	return f.view(), nil
}

// Secrets returns the host auth token, the token s handshook with when it
// is not the host's (a child session's own, a tenant's secret), and those
// plugins declared for the host and for the sessions whose state a
// snapshot of s holds (secrets.go).
func (k kernelView) Secrets(ps persist.Session) []persist.Secret {
	s := ps.(*sessionView).session()
	out := []persist.Secret{{What: "the host auth token", Value: k.h.cfg.Server.AuthToken}}
	if t, ok := k.h.sessionTokens.Load(s.id); ok {
		out = append(out, persist.Secret{What: "the session's auth token", Value: t.(string)})
	}
	for _, ns := range k.h.declaredSecrets(s) {
		out = append(out, persist.Secret{What: ns.what, Value: ns.value})
	}
	return out
}

func (k kernelView) DropState(plugin, handle string) { k.h.dropState(plugin, handle) }

// SnapshotDone counts and times the snapshot for the metrics and, when
// it was written, notes it as the session's newest for the admin API.
func (k kernelView) SnapshotDone(ps persist.Session, r persist.SnapshotReport) {
	s := ps.(*sessionView).session()
	k.h.met.snapshotDone(s, r.Kind, r.Began, r.Bytes, r.Err)
	if r.Err == nil {
		s.noteSnapshot(r.ID, r.Target, r.Kind, r.Bytes)
	}
}

func (k kernelView) Usage(dir string) (int64, int) { return usage(dir, k.h.cfg.Server.Budgets.Files) }

func (k kernelView) FilesRefusal(format string, args ...any) error {
	return errFiles(int64(k.h.cfg.Server.Budgets.Files), format, args...)
}

// sessionView is a session as server/persist sees it: the same value,
// with the methods persist.Session asks for, which *Session does not
// export.
type sessionView Session

var _ persist.Session = (*sessionView)(nil)

func (s *Session) view() *sessionView { return (*sessionView)(s) }

func (v *sessionView) session() *Session { return (*Session)(v) }

func (v *sessionView) ID() string        { return v.id }
func (v *sessionView) Handle() string    { return v.handle }
func (v *sessionView) TopLevel() bool    { return v.parent == nil }
func (v *sessionView) Tenant() string    { return StorageTenant(v.session().Tenant()) }
func (v *sessionView) Close()            { v.session().Close() }
func (v *sessionView) Point() uint64     { return v.point.Load() }
func (v *sessionView) SetPoint(p uint64) { v.point.Store(p) }
func (v *sessionView) Ended() bool       { return v.session().closing() }

// Unsaved is the session tree's oldest unsaved change (changed): the
// root's.
func (v *sessionView) Unsaved() *persist.Unsaved { return &v.session().root().unsaved }

func (v *sessionView) Identity() (string, []msg.CapabilityEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.agentID, append([]msg.CapabilityEntry{}, v.accepted...)
}

func (v *sessionView) Activity() (int64, bool) {
	active := v.lastActive.Load()
	v.mu.Lock()
	busy := v.pending > 0
	v.mu.Unlock()
	return active, busy
}

// DirOwner follows the memory scopes up the session tree (spec §1): a
// shared or restricted subagent sees its parent's directory, read-only
// when restricted; any other has its own.
func (v *sessionView) DirOwner() (string, bool) {
	owner, ro := v.handle, false
	for cur := v.session(); cur.parent != nil && cur.child != nil; cur = cur.parent {
		scope := cur.child.scope
		if scope != "shared" && scope != "restricted" {
			break
		}
		if scope == "restricted" {
			ro = true
		}
		owner = cur.parent.handle
	}
	return owner, ro
}
