package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// One file system per session (docs/SECURITY.md, Isolation). Each session
// owns one directory, <data dir>/sessions/<session handle>, made on first
// use; it is named by the public handle (handle.go), so listing the
// sessions directory shows no transport id.
// The tools workspace, proc working directories, the env data root and
// task work directories all live in it, and every sandbox mounts it at
// /workspace. A subagent's directory follows its memory scope (spec §1):
// shared → its parent's; restricted → its parent's, read-only; isolated →
// its own; snapshot → its own, a copy of the parent's made at spawn. A
// directory is removed when its owner session ends, unless a snapshot of
// that session refers to it: a file snapshot, or a sql snapshot taken
// without its files (a sql snapshot carries a copy of them, snapfiles.go).

// DefaultSessionQuota bounds the bytes of one session directory.
const DefaultSessionQuota int64 = 256 << 20

// SessionDir is a session's file system.
type SessionDir struct {
	// Path is the host path of the directory.
	Path string
	// ReadOnly is set for a restricted subagent: it may read its parent's
	// files and write none.
	ReadOnly bool
	// Owner is the handle of the session whose directory it is (the
	// session itself, or the ancestor it shares with).
	Owner string
}

// ErrQuota is the cause when a write would take a session directory past its quota.
var ErrQuota = fmt.Errorf("session directory quota exceeded: %w", wire.ErrDenied)

// ErrReadOnly is the cause of a write by a restricted subagent.
var ErrReadOnly = fmt.Errorf("the session directory is read-only for a restricted subagent: %w", wire.ErrDenied)

type sessionFS struct {
	mu     sync.Mutex
	pinned map[string]bool // owners a snapshot refers to
}

// sessionsRoot is where the session directories live.
func (h *Host) sessionsRoot() string {
	if h.dataDir != "" {
		return filepath.Join(h.dataDir, "sessions")
	}
	// A host without a data dir (embedded, tests) still gives each session
	// its own directory.
	return filepath.Join(os.TempDir(), fmt.Sprintf("aep-sessions-%d", os.Getpid()))
}

// SessionQuota is the byte quota of one session directory.
func (h *Host) SessionQuota() int64 {
	if q := h.cfg.Server.Isolation.SessionQuotaBytes; q > 0 {
		return q
	}
	return DefaultSessionQuota
}

// SandboxMode is the configured mode of every contained process.
func (h *Host) SandboxMode() sandbox.Mode {
	if m := h.cfg.Server.Isolation.Sandbox; m != "" {
		return m
	}
	return sandbox.ModeAuto
}

// SessionDir returns the directory of a live session, by its handle
// (wire.Scope.SessionID), made on first use.
func (h *Host) SessionDir(sessionID string) (SessionDir, error) {
	s, ok := h.SessionByHandle(sessionID)
	if !ok {
		return SessionDir{}, fmt.Errorf("session directory: %w", ErrSessionEnded)
	}
	d := h.sessionDirOf(s)
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return SessionDir{}, fmt.Errorf("session directory: %w", err)
	}
	// The parent stays traversable for the uid a supervised command runs
	// as when the host is root; the directories in it are 0700 and handed
	// to that uid before each run (server/sandbox).
	_ = os.Chmod(filepath.Dir(d.Path), 0o711)
	return d, nil
}

// sessionDirOf resolves the directory session s sees, without making it.
func (h *Host) sessionDirOf(s *Session) SessionDir {
	d := SessionDir{Owner: s.handle}
	for cur := s; cur.parent != nil && cur.child != nil; cur = cur.parent {
		scope := cur.child.scope
		if scope != "shared" && scope != "restricted" {
			break
		}
		if scope == "restricted" {
			d.ReadOnly = true
		}
		d.Owner = cur.parent.handle
	}
	d.Path = filepath.Join(h.sessionsRoot(), d.Owner)
	return d
}

// FileHolder is implemented by plugins whose own processes write session
// directories (the sql toolkit's SQLite workers). Before the kernel copies
// a directory — a sql snapshot's files, a fork, a snapshot-scoped
// subagent's copy — it asks each to bring what it keeps under dir to a
// consistent state (a database checkpointed into its main file) and to
// change nothing there until release is called.
type FileHolder interface {
	HoldFiles(ctx context.Context, dir string) (release func(), err error)
}

// holdFiles holds dir for a copy (see [FileHolder]); release undoes it.
func (h *Host) holdFiles(ctx context.Context, dir string) (release func(), err error) {
	var releases []func()
	release = func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for _, fh := range h.fileHolders {
		r, err := fh.v.HoldFiles(ctx, dir)
		if err != nil {
			release()
			return nil, fmt.Errorf("plugin %q: holding the session's files for a copy: %w", fh.p.Name, err)
		}
		releases = append(releases, r)
	}
	return release, nil
}

// SessionUsage is the bytes held in a session directory.
func SessionUsage(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

// CheckWrite says whether a session may add n bytes to its directory:
// [ErrReadOnly] for a restricted subagent, [ErrQuota] past the quota, the
// files budget's refusal when the directory holds as many files as it may
// (a write may add one). A write of no bytes (truncating a file) is let
// through over the byte quota: it is how an agent makes room.
func (h *Host) CheckWrite(sessionID string, n int64) error {
	d, err := h.SessionDir(sessionID)
	if err != nil {
		return err
	}
	if d.ReadOnly {
		return ErrReadOnly
	}
	lim := h.defaultLimits()
	var t *tenant
	if s, ok := h.SessionByHandle(sessionID); ok {
		lim, t = s.budget.lim, s.tenant
	}
	files := lim.Files
	used, entries := usage(d.Path, files)
	if n > 0 && used+n > lim.DiskBytes {
		return fmt.Errorf("%d bytes used, %d more asked, quota %d: %w", used, n, lim.DiskBytes, ErrQuota)
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
	src, err := h.SessionDir(parent.handle)
	if err != nil {
		return err
	}
	files := h.cfg.Server.Budgets.Files
	used, entries := usage(src.Path, files)
	if used > h.SessionQuota() {
		return fmt.Errorf("snapshot of the parent's files (%d bytes) beyond the quota %d: %w", used, h.SessionQuota(), ErrQuota)
	}
	if entries > files {
		return errFiles(int64(files), "the parent's directory holds %d files, over the budget of %d (server.budgets.files)", entries, files)
	}
	dst, err := h.SessionDir(child.handle)
	if err != nil {
		return err
	}
	release, err := h.holdFiles(context.Background(), src.Path)
	if err != nil {
		return err
	}
	defer release()
	return copyTree(src.Path, dst.Path)
}

// copyTree copies regular files and directories; symlinks are not
// followed nor copied (they could name files outside the directory).
func copyTree(src, dst string) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dst, p)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o700)
		case e.Type().IsRegular():
			in, err := confine.Open(root, p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if errors.Is(err, confine.ErrNotRegular) {
				return nil // a FIFO by now: not copied, as one found by the walk
			}
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
		return nil
	})
}

// pinSessionDir keeps a session's directory past its end: a snapshot refers to it.
func (h *Host) pinSessionDir(sessionID string) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.fs.pinned == nil {
		h.fs.pinned = map[string]bool{}
	}
	h.fs.pinned[sessionID] = true
}

// releaseSessionDir removes the directory a session owns when it ends,
// after the plugins dropped its state (its processes are gone), unless a
// snapshot refers to it. A shared or restricted child owns none.
func (h *Host) releaseSessionDir(sessionID string) {
	h.fs.mu.Lock()
	keep := h.fs.pinned[sessionID]
	h.fs.mu.Unlock()
	if keep || sessionID == "" {
		return
	}
	dir := filepath.Join(h.sessionsRoot(), sessionID)
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.log.Warn("removing a session directory", "session", sessionID, "err", err)
	}
}

// logIsolation says at start-up which tier contained processes get.
func (h *Host) logIsolation() {
	tier, what, err := sandbox.Describe(h.SandboxMode())
	if err != nil {
		h.log.Warn("isolation: the configured sandbox cannot be provided; capabilities that run processes will refuse to start", "mode", h.SandboxMode(), "err", err)
		return
	}
	sandbox.AllowUserNamespaces(h.cfg.Server.Isolation.AllowUserNamespaces)
	// What the host inherited from its parent reaches no child of its own.
	sandbox.SealInheritedFDs()
	sandbox.Prewarm(h.SandboxMode())
	h.log.Info("isolation", "tier", tier, "mechanism", what, "network", sandbox.DescribeNetwork(h.SandboxMode()),
		"user_namespaces", h.cfg.Server.Isolation.AllowUserNamespaces,
		"session_quota_bytes", h.SessionQuota(), "sessions_dir", h.sessionsRoot())
}
