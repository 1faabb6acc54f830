package server

// Session fork (docs/DECISIONS.md, Session fork). session/fork/req makes
// `count` new top-level sessions from the sender's state: the kernel takes
// the same per-plugin state a snapshot takes (snapshot.go, sessionState),
// in memory only, and restores it into each fork; the session directory is
// copied, with copy-on-write clones where the file system has them (from
// a sql snapshot that carries its files, they are extracted instead). A fork
// is counted against max_sessions from its creation, waits for its
// handshake with the host token, and is reached by its transport id like a
// subagent's child (child.go, attachChild; the HTTP and WebSocket
// transports). Its transport id goes to the sender only, in the reply.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/wire"
)

// Forker is implemented by a [Snapshotter] whose state comes to a fork
// otherwise than to a restore. RestoreFork restores state, taken from
// another session, into a new forked session, and returns what of that
// state the fork does not carry as it runs in the source (running
// processes, toolkits that need their secrets again); the kernel fills in
// each item's plugin. A Snapshotter that is not a Forker gets Restore.
type Forker interface {
	RestoreFork(ctx context.Context, sessionID string, state []byte) ([]msg.NotForked, error)
}

// ErrDrainingFork refuses a fork on a draining host: forks are new
// top-level sessions, which a draining host does not open (drain.go).
var ErrDrainingFork = wire.Reason("draining", errors.New("the host is draining and opens no new sessions; fork on another host"))

// HostMade reports whether the host made the session for an agent to
// attach to: a subagent's child, a fork, or a session the operator opened
// (admin.go). Transports attach a client to such a session by its id
// while it waits for its handshake.
func (s *Session) HostMade() bool { return s.parent != nil || s.forked || s.operatorOpened }

// Forked reports whether session/fork made the session.
func (s *Session) Forked() bool { return s.forked }

// forkSession makes count forks of s, from its current state or from
// snapshot snapshotID. On error no fork is left open.
func (h *Host) forkSession(ctx context.Context, s *Session, count int, snapshotID string) (*msg.SessionForkResp, error) {
	if s.parent != nil {
		// A fork is a top-level session: a subagent's would shed its
		// parent's capability subset, step limit and memory scope.
		return nil, fmt.Errorf("a subagent's session cannot be forked: its forks would be top-level sessions without its limits; fork the top-level session: %w", wire.ErrDenied)
	}
	var (
		p       *snapshotPayload
		srcDir  string
		archive []byte // the files of a snapshot that carries them
		err     error
	)
	if snapshotID != "" {
		if p, err = h.openSnapshot(ctx, snapshotID); err != nil {
			return nil, err
		}
		switch {
		case p.Files != nil && p.Files.State == filesStored:
			// A sql snapshot carries its files (snapfiles.go).
			if archive, err = h.snapshotArchive(ctx, snapshotID, p.Files); err != nil {
				return nil, err
			}
		case p.Files == nil || p.Files.State == filesOmitted:
			// The snapshot refers to its session's files as they are now
			// (server/sessionfs.go: the directory was pinned when it was taken).
			if hd := p.SessionHandle; hd != "" && filepath.Base(hd) == hd && strings.HasPrefix(hd, "h-") {
				srcDir = filepath.Join(h.sessionsRoot(), hd)
			}
		}
	} else {
		if p, _, err = h.sessionState(ctx, s); err != nil {
			return nil, err
		}
		d, err := h.SessionDir(s.handle)
		if err != nil {
			return nil, err
		}
		srcDir = d.Path
	}
	// Every saved state must have its plugin here before any fork is made,
	// as for a restore.
	type step struct {
		p     *plugin
		sn    Snapshotter
		state []byte
	}
	steps := make([]step, 0, len(p.Plugins))
	for _, ps := range p.Plugins {
		pl, sn, ok := h.snapshotPlugin(ps)
		if !ok {
			return nil, wire.Reason("snapshot_plugin_missing", fmt.Errorf("the state to fork holds the state of plugin %q (%s), which this host does not load as a snapshotter; no fork was made", ps.Name, ps.Key))
		}
		steps = append(steps, step{p: pl, sn: sn, state: ps.State})
	}
	if srcDir != "" {
		if _, err := os.Stat(srcDir); err != nil {
			srcDir = "" // never used, or gone: the forks start with no files
		}
	}
	if srcDir != "" {
		files := h.cfg.Server.Budgets.Files
		used, entries := usage(srcDir, files)
		if used > h.SessionQuota() {
			return nil, fmt.Errorf("the files to fork (%d bytes) are beyond the session quota %d: %w", used, h.SessionQuota(), ErrQuota)
		}
		if entries > files {
			return nil, errFiles(int64(files), "the session directory to fork holds %d files, over the budget of %d (server.budgets.files)", entries, files)
		}
	}

	resp := &msg.SessionForkResp{Forks: make([]msg.ForkInfo, 0, count), NotForked: []msg.NotForked{},
		HandshakeTimeout: time.Duration(h.cfg.Server.Limits.HandshakeTimeout).Seconds()}
	copyMode := msg.SessionForkRespCopyNone
	var made []*Session
	fail := func(err error) (*msg.SessionForkResp, error) {
		for _, f := range made {
			f.Close()
		}
		return nil, err
	}
	if srcDir != "" {
		// Every fork gets the same files, whole: plugins writing the
		// directory from their own processes hold them until the copies
		// are made (sessionfs.go, FileHolder).
		release, err := h.holdFiles(ctx, srcDir)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	for i := 0; i < count; i++ {
		f, err := h.newSession(nil, nil, nil, nil, func(x *Session) {
			// A fork is its source's tenant's, with that tenant's budgets.
			x.forked, x.tenant = true, s.tenant
			if s.tenant != nil {
				x.budget = newBudget(s.tenant.limits())
			}
		})
		switch {
		case errors.Is(err, ErrTenantSessions):
			return fail(&wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf("fork %d of %d: your tenant is at its total of sessions on this host; no fork was kept", i+1, count),
				Detail: map[string]any{"reason": "tenant_sessions", "limit": s.tenant.total().Sessions}})
		case errors.Is(err, ErrTooManySessions):
			return fail(wire.Reason("too_many_sessions", fmt.Errorf("fork %d of %d: the host is at server.limits.max_sessions; no fork was kept", i+1, count)))
		case errors.Is(err, ErrDraining):
			return fail(ErrDrainingFork)
		case err != nil:
			return fail(fmt.Errorf("fork: %w", err))
		}
		made = append(made, f)
		if archive != nil {
			dst, err := h.SessionDir(f.handle)
			if err != nil {
				return fail(err)
			}
			staged, err := stageFiles(archive, dst.Path, h.filesLimits(h.SessionQuota()))
			if err != nil {
				return fail(wire.Public(fmt.Errorf("fork: the snapshot's files: %w; no fork was kept", err)))
			}
			if err := staged.commit(); err != nil {
				return fail(wire.Public(fmt.Errorf("fork: putting the snapshot's files in place: %w", err)))
			}
			if staged.entries > 0 {
				copyMode = msg.SessionForkRespCopyCopy
			}
		}
		if srcDir != "" {
			dst, err := h.SessionDir(f.handle)
			if err != nil {
				return fail(err)
			}
			mode, err := cloneTree(srcDir, dst.Path)
			if err != nil {
				return fail(wire.Public(fmt.Errorf("fork: copying the session directory: %w", err)))
			}
			if mode == msg.SessionForkRespCopyCopy || copyMode == msg.SessionForkRespCopyNone {
				copyMode = mode
			}
		}
		for _, st := range steps {
			var notes []msg.NotForked
			if fk, ok := st.sn.(Forker); ok {
				notes, err = fk.RestoreFork(ctx, f.handle, st.state)
			} else {
				err = st.sn.Restore(ctx, f.handle, st.state)
			}
			if err != nil {
				return fail(wire.Public(fmt.Errorf("plugin %q: restoring into a fork: %w; no fork was kept", st.p.Name, err)))
			}
			if i == 0 {
				for _, n := range notes {
					n.Plugin = st.p.Name
					resp.NotForked = append(resp.NotForked, n)
				}
			}
		}
		// A fork owns what its source owned, as a restore does
		// (snapshotlist.go): the source's snapshots and its lineage.
		h.inherit(f.id, p.owner(), p.Owned)
		resp.Forks = append(resp.Forks, msg.ForkInfo{SessionID: f.id, Handle: f.handle})
	}
	resp.Copy = &copyMode
	handles := make([]string, len(made))
	for i, f := range made {
		handles[i] = f.handle
	}
	h.log.Info("session forked", "session", s.handle, "snapshot_id", snapshotID, "forks", handles, "copy", copyMode, "not_forked", len(resp.NotForked))
	return resp, nil
}

// cloneTree copies the directories and regular files of src into dst,
// each file as a copy-on-write clone (FICLONE) where the file system
// allows, else byte by byte; it reports "reflink" when every file was
// cloned and "copy" when any was copied. Symbolic links are neither
// followed nor copied (they could name files outside the directory), as
// in copyTree.
func cloneTree(src, dst string) (msg.SessionForkRespCopy, error) {
	root, err := os.OpenRoot(src)
	if err != nil {
		return "", err
	}
	defer root.Close()
	mode := msg.SessionForkRespCopyReflink
	files := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dst, p)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o700)
		case e.Type().IsRegular():
			files++
			cloned, err := cloneFile(root, p, target)
			if errors.Is(err, confine.ErrNotRegular) {
				return nil // a FIFO by now: not copied, as one found by the walk
			}
			if err != nil {
				return err
			}
			if !cloned {
				mode = msg.SessionForkRespCopyCopy
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if files == 0 {
		return msg.SessionForkRespCopyNone, nil
	}
	return mode, nil
}

// cloneFile makes target a clone of root's file p, or a copy when the file
// system cannot clone (no reflinks, another device); it reports which.
func cloneFile(root *os.Root, p, target string) (bool, error) {
	in, err := confine.Open(root, p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return false, err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err == nil {
		return true, out.Close()
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, err
	}
	return false, out.Close()
}
