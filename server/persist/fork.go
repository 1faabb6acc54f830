package persist

// Session fork (docs/DECISIONS.md, Session fork). session/fork/req makes
// `count` new top-level sessions from the sender's state: the same
// per-plugin state a snapshot takes (snapshot.go, sessionState), in memory
// only, is restored into each fork; the session directory is copied, with
// copy-on-write clones where the file system has them (clone.go; from a
// sql snapshot that carries its files, they are extracted instead). The
// kernel makes each fork ([Kernel.NewFork]): counted against max_sessions
// from its creation, waiting for its handshake with the host token, and
// reached by its transport id like a subagent's child (server/child.go,
// attachChild; the HTTP and WebSocket transports). Its transport id goes
// to the sender only, in the reply.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// forkSource is what forks are made from: the saved state, and the
// session's files as a directory to copy or an archive to extract.
type forkSource struct {
	pl      *snapshotPayload
	dir     string
	archive []byte // the files of a snapshot that carries them
}

// forkStep is one plugin's state to restore into each fork.
type forkStep struct {
	name  string
	sn    Snapshotter
	state []byte
}

// forkSession makes count forks of s, from its current state or from
// snapshot snapshotID. On error no fork is left open.
func (p *Keeper) forkSession(ctx context.Context, s Session, count int, snapshotID string) (*msg.SessionForkResp, error) {
	if !s.TopLevel() {
		// A fork is a top-level session: a subagent's would shed its
		// parent's capability subset, step limit and memory scope.
		return nil, fmt.Errorf("a subagent's session cannot be forked: its forks would be top-level sessions without its limits; fork the top-level session: %w", wire.ErrDenied)
	}
	src, err := p.forkSource(ctx, s, snapshotID)
	if err != nil {
		return nil, err
	}
	steps, err := p.forkSteps(src.pl)
	if err != nil {
		return nil, err
	}
	if err := p.checkForkFiles(&src); err != nil {
		return nil, err
	}
	f := &forking{p: p, s: s, src: src, steps: steps, count: count, copyMode: msg.SessionForkRespCopyNone,
		resp: &msg.SessionForkResp{Forks: make([]msg.ForkInfo, 0, count), NotForked: []msg.NotForked{},
			HandshakeTimeout: p.set.HandshakeTimeout.Seconds()}}
	if src.dir != "" {
		// Every fork gets the same files, whole: plugins writing the
		// directory from their own processes hold them until the copies
		// are made (dirs.go, FileHolder).
		release, err := p.holdFiles(ctx, src.dir)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	for i := 0; i < count; i++ {
		if err := f.makeOne(ctx, i); err != nil {
			f.closeMade()
			return nil, err
		}
	}
	f.resp.Copy = &f.copyMode
	point := int(src.pl.point())
	f.resp.FromPoint = &point
	handles := make([]string, len(f.made))
	for i, fk := range f.made {
		handles[i] = fk.Handle()
	}
	p.log.Info("session forked", "session", s.Handle(), "snapshot_id", snapshotID, "forks", handles, "copy", f.copyMode, "not_forked", len(f.resp.NotForked))
	return f.resp, nil
}

// forkSource reads what the forks of s are made from: s itself, or
// snapshot snapshotID.
func (p *Keeper) forkSource(ctx context.Context, s Session, snapshotID string) (forkSource, error) {
	if snapshotID == "" {
		pl, _, err := p.sessionState(ctx, s)
		if err != nil {
			return forkSource{}, err
		}
		d, err := p.SessionDir(s)
		if err != nil {
			return forkSource{}, err
		}
		return forkSource{pl: pl, dir: d.Path}, nil
	}
	pl, err := p.openSnapshot(ctx, s.Tenant(), snapshotID)
	if err != nil {
		return forkSource{}, err
	}
	src := forkSource{pl: pl}
	switch {
	case pl.Files != nil && pl.Files.State == filesStored:
		// A sql snapshot carries its files (archive.go).
		if src.archive, err = p.snapshotArchive(ctx, snapshotID, pl.Files); err != nil {
			return forkSource{}, err
		}
	case pl.Files == nil || pl.Files.State == filesOmitted:
		// The snapshot refers to its session's files as they are now
		// (dirs.go: the directory was pinned when it was taken).
		if hd := pl.SessionHandle; hd != "" && filepath.Base(hd) == hd && strings.HasPrefix(hd, "h-") {
			src.dir = filepath.Join(p.dirs.root, hd)
		}
	}
	return src, nil
}

// forkSteps matches every saved state to a loaded snapshotter before any
// fork is made, as a restore does.
func (p *Keeper) forkSteps(pl *snapshotPayload) ([]forkStep, error) {
	steps := make([]forkStep, 0, len(pl.Plugins))
	for _, ps := range pl.Plugins {
		snp, ok := p.snapshotPlugin(ps)
		if !ok {
			return nil, wire.Reason("snapshot_plugin_missing", fmt.Errorf("the state to fork holds the state of plugin %q (%s), which this host does not load as a snapshotter; no fork was made", ps.Name, ps.Key))
		}
		steps = append(steps, forkStep{name: snp.Name, sn: snp.v, state: ps.State})
	}
	return steps, nil
}

// checkForkFiles drops a source directory that is gone (the forks start
// with no files) and refuses one past a session directory's bounds.
func (p *Keeper) checkForkFiles(src *forkSource) error {
	if src.dir == "" {
		return nil
	}
	if _, err := os.Stat(src.dir); err != nil {
		src.dir = "" // never used, or gone: the forks start with no files
		return nil
	}
	used, entries := p.k.Usage(src.dir)
	if used > p.set.SessionQuota {
		return fmt.Errorf("the files to fork (%d bytes) are beyond the session quota %d: %w", used, p.set.SessionQuota, ErrQuota)
	}
	if files := p.set.Files; entries > files {
		return p.k.FilesRefusal("the session directory to fork holds %d files, over the budget of %d (server.budgets.files)", entries, files)
	}
	return nil
}

// forking is one session/fork under way.
type forking struct {
	p        *Keeper
	s        Session
	src      forkSource
	steps    []forkStep
	count    int
	resp     *msg.SessionForkResp
	copyMode msg.SessionForkRespCopy
	made     []Session
}

// makeOne makes fork i: a new session with the source's files and
// plugin states, owning what the source owned.
func (f *forking) makeOne(ctx context.Context, i int) error {
	fk, err := f.p.k.NewFork(f.s, i+1, f.count)
	if err != nil {
		return err
	}
	f.made = append(f.made, fk)
	// The fork starts where its source's state was taken: its handshake
	// reply carries that point (docs/DECISIONS.md, Points).
	fk.SetPoint(f.src.pl.point())
	if err := f.copyFiles(fk); err != nil {
		return err
	}
	notes, err := f.restoreInto(ctx, fk)
	if err != nil {
		return err
	}
	if i == 0 {
		f.resp.NotForked = append(f.resp.NotForked, notes...)
	}
	// A fork owns what its source owned, as a restore does
	// (stored.go): the source's snapshots and its lineage.
	f.p.inherit(fk.ID(), f.src.pl.owner(), f.src.pl.Owned)
	f.resp.Forks = append(f.resp.Forks, msg.ForkInfo{SessionID: fk.ID(), Handle: fk.Handle()})
	return nil
}

// copyFiles gives fork fk the source's files, and notes how they came.
func (f *forking) copyFiles(fk Session) error {
	if f.src.archive != nil {
		dst, err := f.p.SessionDir(fk)
		if err != nil {
			return err
		}
		staged, err := stageFiles(f.src.archive, dst.Path, f.p.filesLimits(f.p.set.SessionQuota))
		if err != nil {
			return wire.Public(fmt.Errorf("fork: the snapshot's files: %w; no fork was kept", err))
		}
		if err := staged.commit(); err != nil {
			return wire.Public(fmt.Errorf("fork: putting the snapshot's files in place: %w", err))
		}
		if staged.entries > 0 {
			f.copyMode = msg.SessionForkRespCopyCopy
		}
	}
	if f.src.dir != "" {
		dst, err := f.p.SessionDir(fk)
		if err != nil {
			return err
		}
		mode, err := cloneTree(f.src.dir, dst.Path)
		if err != nil {
			return wire.Public(fmt.Errorf("fork: copying the session directory: %w", err))
		}
		if mode == msg.SessionForkRespCopyCopy || f.copyMode == msg.SessionForkRespCopyNone {
			f.copyMode = mode
		}
	}
	return nil
}

// restoreInto restores every plugin's state into fork fk, and returns
// what of it the fork does not carry, by plugin.
func (f *forking) restoreInto(ctx context.Context, fk Session) ([]msg.NotForked, error) {
	var out []msg.NotForked
	for _, st := range f.steps {
		var (
			notes []msg.NotForked
			err   error
		)
		if fr, ok := st.sn.(Forker); ok {
			notes, err = fr.RestoreFork(ctx, fk.Handle(), st.state)
		} else {
			err = st.sn.Restore(ctx, fk.Handle(), st.state)
		}
		if err != nil {
			return nil, wire.Public(fmt.Errorf("plugin %q: restoring into a fork: %w; no fork was kept", st.name, err))
		}
		for _, n := range notes {
			n.Plugin = st.name
			out = append(out, n)
		}
	}
	return out, nil
}

// closeMade ends the forks made so far: a fork that fails keeps none.
func (f *forking) closeMade() {
	for _, fk := range f.made {
		fk.Close()
	}
}
