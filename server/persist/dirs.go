package persist

// One file system per session (docs/SECURITY.md, Isolation). Each session
// owns one directory, <data dir>/sessions/<session handle>, made on first
// use; it is named by the public handle (server/handle.go), so listing
// the sessions directory shows no transport id.
// The tools workspace, proc working directories, the env data root and
// task work directories all live in it, and every sandbox mounts it at
// /workspace. A subagent's directory follows its memory scope (spec §1):
// shared → its parent's; restricted → its parent's, read-only; isolated →
// its own; snapshot → its own, a copy of the parent's made at spawn. A
// directory is removed when its owner session ends, unless a snapshot of
// that session refers to it: a file snapshot, or a sql snapshot taken
// without its files (a sql snapshot carries a copy of them, archive.go).
// Which scope a subagent has is the kernel's ([Session.DirOwner]); where
// the directories live, their copies and their removal are this file's.

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
	"github.com/aephost/aep/wire"
)

// Dir is a session's file system.
type Dir struct {
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

// sessionDirs are where the session directories live, and which outlive
// their sessions.
type sessionDirs struct {
	root   string
	mu     sync.Mutex
	pinned map[string]bool // owners a snapshot refers to
}

// sessionsRoot is where the session directories of a host with data
// directory dataDir live.
func sessionsRoot(dataDir string) string {
	if dataDir != "" {
		return filepath.Join(dataDir, "sessions")
	}
	// A host without a data dir (embedded, tests) still gives each session
	// its own directory.
	return filepath.Join(os.TempDir(), fmt.Sprintf("aep-sessions-%d", os.Getpid()))
}

// Root is the directory the session directories live in.
func (p *Keeper) Root() string { return p.dirs.root }

// DirOf resolves the directory session s sees, without making it.
func (p *Keeper) DirOf(s Session) Dir {
	owner, ro := s.DirOwner()
	return Dir{Path: filepath.Join(p.dirs.root, owner), ReadOnly: ro, Owner: owner}
}

// SessionDir returns the directory session s sees, made on first use.
func (p *Keeper) SessionDir(s Session) (Dir, error) {
	d := p.DirOf(s)
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return Dir{}, fmt.Errorf("session directory: %w", err)
	}
	// The parent stays traversable for the uid a supervised command runs
	// as when the host is root; the directories in it are 0700 and handed
	// to that uid before each run (server/sandbox).
	_ = os.Chmod(filepath.Dir(d.Path), 0o711)
	return d, nil
}

// CopyForChild gives a snapshot-scoped subagent child a copy of its
// parent's directory, refusing a copy beyond the quota or the files budget.
func (p *Keeper) CopyForChild(child, parent Session) error {
	src, err := p.SessionDir(parent)
	if err != nil {
		return err
	}
	used, entries := p.k.Usage(src.Path)
	if used > p.set.SessionQuota {
		return fmt.Errorf("snapshot of the parent's files (%d bytes) beyond the quota %d: %w", used, p.set.SessionQuota, ErrQuota)
	}
	if files := p.set.Files; entries > files {
		return p.k.FilesRefusal("the parent's directory holds %d files, over the budget of %d (server.budgets.files)", entries, files)
	}
	dst, err := p.SessionDir(child)
	if err != nil {
		return err
	}
	release, err := p.holdFiles(context.Background(), src.Path)
	if err != nil {
		return err
	}
	defer release()
	return copyTree(src.Path, dst.Path)
}

// holdFiles holds dir for a copy (see [FileHolder]); release undoes it.
func (p *Keeper) holdFiles(ctx context.Context, dir string) (release func(), err error) {
	var releases []func()
	release = func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for _, fh := range p.fileHolders {
		r, err := fh.v.HoldFiles(ctx, dir)
		if err != nil {
			release()
			return nil, fmt.Errorf("plugin %q: holding the session's files for a copy: %w", fh.Name, err)
		}
		releases = append(releases, r)
	}
	return release, nil
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
			return copyFile(root, p, target)
		}
		return nil
	})
}

// copyFile copies root's regular file p to target.
func copyFile(root *os.Root, p, target string) error {
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

// pinDir keeps a session's directory past its end: a snapshot refers to it.
func (p *Keeper) pinDir(handle string) {
	p.dirs.mu.Lock()
	defer p.dirs.mu.Unlock()
	if p.dirs.pinned == nil {
		p.dirs.pinned = map[string]bool{}
	}
	p.dirs.pinned[handle] = true
}

// releaseDir removes the directory a session owns when it ends, after the
// plugins dropped its state (its processes are gone), unless a snapshot
// refers to it. A shared or restricted child owns none.
func (p *Keeper) releaseDir(handle string) {
	p.dirs.mu.Lock()
	keep := p.dirs.pinned[handle]
	p.dirs.mu.Unlock()
	if keep || handle == "" {
		return
	}
	dir := filepath.Join(p.dirs.root, handle)
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("removing a session directory", "session", handle, "err", err)
	}
}
