package persist

// Restoring a snapshot into a live session (spec §3 Session live →
// snapshot → live). Nothing changes unless everything does: the snapshot
// is verified whole first (snapshot.go), its files are extracted beside
// the session's directory before any plugin is touched (stage.go), a
// plugin that fails midway has the plugins restored before it rolled back
// to their state before the restore, and the files replace the directory
// only once every plugin restored.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// restoreStep is one plugin's part of a restore: the state to restore,
// and the state it had before, for the rollback.
type restoreStep struct {
	name  string
	sn    Snapshotter
	state []byte
	prev  []byte
}

// pointGate is what a restore checks the snapshot's point against
// (docs/DECISIONS.md, Points): the client's last seen point, and whether
// it accepts to lose what the snapshot does not hold.
type pointGate struct {
	last   uint64
	accept bool
}

// pointGap is a gap a restore went on with: the snapshot's point and the
// client's last seen one.
type pointGap struct{ point, last uint64 }

// errPointGap refuses a restore whose snapshot of point covers less than
// the client's last seen point: runtime_error, detail.reason point_gap,
// naming what would be lost. The detail says the snapshot's point, the
// client's and how many acknowledged state-changing requests lie
// between; nothing was changed.
func errPointGap(id string, point, last uint64) error {
	return &wire.Error{Code: wire.CodeRuntimeError,
		Message: fmt.Sprintf("snapshot %s covers the session up to point %d, and you saw point %d: restoring it would lose %d acknowledged state-changing requests (points %d to %d); nothing was restored. Ask again for a newer snapshot (a draining host writes its own), or pass accept_gap to restore it anyway", id, point, last, last-point, point+1, last),
		Detail:  map[string]any{"reason": "point_gap", "snapshot_id": id, "point": point, "last_point": last, "lost": last - point}}
}

// restored is what a restore did: the plugins whose state came back,
// what became of the files, the point the session resumed from, and the
// gap the caller accepted, if any.
type restored struct {
	restored []string
	files    *msg.SnapshotFiles
	point    uint64
	gap      *pointGap
}

// restoreSession restores snapshot id into session s; with gate, a
// snapshot that covers less than the client's last seen point is refused
// unless the client accepts the gap. On any error nothing has changed
// (see the file comment).
func (p *Keeper) restoreSession(ctx context.Context, s Session, id string, gate *pointGate) (restored, error) {
	pl, err := p.openSnapshot(ctx, s.Tenant(), id)
	if err != nil {
		return restored{}, err
	}
	var gap *pointGap
	if point := pl.point(); gate != nil && point < gate.last {
		if !gate.accept {
			p.log.Info("restore refused: the snapshot covers less than the client saw", "session", s.Handle(), "snapshot_id", id, "point", point, "last_point", gate.last)
			return restored{}, errPointGap(id, point, gate.last)
		}
		gap = &pointGap{point: point, last: gate.last}
	}
	steps, err := p.restoreSteps(id, pl)
	if err != nil {
		return restored{}, err
	}
	staged, files, err := p.stageSnapshotFiles(ctx, s, id, pl)
	if err != nil {
		return restored{}, err
	}
	if staged != nil {
		defer staged.discard() // a no-op once committed
	}
	r := &restoreRun{p: p, s: s, id: id, steps: steps}
	if err := r.saveCurrent(ctx); err != nil {
		return restored{}, err
	}
	names, err := r.apply(ctx)
	if err != nil {
		return restored{}, err
	}
	if staged != nil {
		if err := r.commitFiles(ctx, staged); err != nil {
			return restored{}, err
		}
	}
	s.SetPoint(pl.point())
	p.inherit(s.ID(), pl.owner(), pl.Owned)
	p.log.Info("snapshot restored", "session", s.Handle(), "snapshot_id", id, "from_session", pl.SessionHandle, "plugins", len(names),
		"files", files.State, "files_bytes", files.Bytes, "files_entries", files.Entries, "point", pl.point())
	if files.State == msg.SnapshotFilesStateOmitted {
		p.log.Warn("restored a snapshot taken without its files; the session's directory was left as it was", "session", s.Handle(), "snapshot_id", id, "reason", deref(files.Reason))
	}
	if gap != nil {
		p.log.Warn("restored a snapshot that covers less than the client saw, as it accepted", "session", s.Handle(), "snapshot_id", id,
			"point", gap.point, "last_point", gap.last, "lost", gap.last-gap.point)
	}
	return restored{restored: names, files: files, point: pl.point(), gap: gap}, nil
}

// restoreSteps matches every saved state of snapshot id (payload pl) to a
// loaded snapshotter, before any is touched.
func (p *Keeper) restoreSteps(id string, pl *snapshotPayload) ([]restoreStep, error) {
	steps := make([]restoreStep, 0, len(pl.Plugins))
	seen := map[string]bool{}
	for _, ps := range pl.Plugins {
		snp, ok := p.snapshotPlugin(ps)
		if !ok {
			return nil, wire.Reason("snapshot_plugin_missing", fmt.Errorf("snapshot %s holds the state of plugin %q (%s), which this host does not load as a snapshotter; nothing was restored", id, ps.Name, ps.Key))
		}
		if seen[snp.Name] {
			return nil, fmt.Errorf("snapshot %s: %w: plugin %q appears twice", id, ErrSnapshotCorrupt, ps.Name)
		}
		seen[snp.Name] = true
		steps = append(steps, restoreStep{name: snp.Name, sn: snp.v, state: ps.State})
	}
	return steps, nil
}

// restoreRun is one restore of snapshot id into session s, plugin by
// plugin.
type restoreRun struct {
	p     *Keeper
	s     Session
	id    string
	steps []restoreStep
}

// saveCurrent takes the pre-restore state of each plugin, in memory only,
// for the rollback.
func (r *restoreRun) saveCurrent(ctx context.Context) error {
	for i := range r.steps {
		prev, err := r.steps[i].sn.Snapshot(ctx, r.s.Handle())
		if err != nil {
			return wire.Public(fmt.Errorf("plugin %q: saving the current state before restore: %w; nothing was restored", r.steps[i].name, err))
		}
		r.steps[i].prev = prev
	}
	return nil
}

// apply restores each plugin's state; a plugin that fails is rolled back
// with those before it.
func (r *restoreRun) apply(ctx context.Context) ([]string, error) {
	restored := make([]string, 0, len(r.steps))
	for i, st := range r.steps {
		// A restore replaces the plugin's state of the session: the
		// kernel drops what its SessionState containers hold first.
		r.p.k.DropState(st.name, r.s.Handle())
		if err := st.sn.Restore(ctx, r.s.Handle(), st.state); err != nil {
			// The failing plugin may have changed part of its state, so it is rolled back too.
			if rb := r.rollback(ctx, i); rb != nil {
				return nil, wire.Public(fmt.Errorf("plugin %q: restore: %w; rolling back also failed: %v", st.name, err, rb))
			}
			return nil, wire.Public(fmt.Errorf("plugin %q: restore: %w; the session's state was rolled back", st.name, err))
		}
		restored = append(restored, st.name)
	}
	return restored, nil
}

// rollback restores the plugins up to and including index last to their
// pre-restore state.
func (r *restoreRun) rollback(ctx context.Context, last int) error {
	var rbErrs []error
	for j := last; j >= 0; j-- {
		st := r.steps[j]
		r.p.k.DropState(st.name, r.s.Handle())
		if rerr := st.sn.Restore(ctx, r.s.Handle(), st.prev); rerr != nil {
			rbErrs = append(rbErrs, fmt.Errorf("plugin %q: %w", st.name, rerr))
		}
	}
	rb := errors.Join(rbErrs...)
	if rb != nil {
		r.p.log.Error("restore rollback failed", "session", r.s.Handle(), "snapshot_id", r.id, "err", rb)
	}
	return rb
}

// commitFiles puts the staged files in place once every plugin restored;
// if that fails, every plugin is rolled back.
func (r *restoreRun) commitFiles(ctx context.Context, staged *stagedFiles) error {
	if err := staged.commit(); err != nil {
		if rb := r.rollback(ctx, len(r.steps)-1); rb != nil {
			return fmt.Errorf("putting the snapshot's files in place: %w; rolling the plugins back also failed: %v", err, rb)
		}
		return fmt.Errorf("putting the snapshot's files in place: %w; the session's state was rolled back", err)
	}
	if staged.leftover != nil {
		r.p.log.Warn("restore: the replaced files were not all removed", "session", r.s.Handle(), "err", staged.leftover)
	}
	return nil
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// stageSnapshotFiles extracts the files snapshot id (payload pl) carries
// beside the directory of session s, for restoreSession to put in place,
// and says what the restore does with the files: nil and "kept" or
// "omitted" when the snapshot carries none.
func (p *Keeper) stageSnapshotFiles(ctx context.Context, s Session, id string, pl *snapshotPayload) (*stagedFiles, *msg.SnapshotFiles, error) {
	switch {
	case pl.Files == nil:
		return nil, &msg.SnapshotFiles{State: msg.SnapshotFilesStateKept}, nil
	case pl.Files.State != filesStored:
		return nil, pl.Files.wire(msg.SnapshotFilesStateOmitted), nil
	}
	archive, err := p.snapshotArchive(ctx, id, pl.Files)
	if err != nil {
		return nil, nil, err
	}
	d := p.DirOf(s)
	if d.Owner != s.Handle() {
		return nil, nil, fmt.Errorf("snapshot %s carries files, and this subagent's session directory is its parent's: restore it into a top-level session; nothing was restored: %w", id, wire.ErrDenied)
	}
	staged, err := stageFiles(archive, d.Path, p.filesLimits(p.set.SessionQuota))
	if err != nil {
		p.log.Warn("restore refused: the snapshot's files cannot be extracted", "session", s.Handle(), "snapshot_id", id, "err", err)
		return nil, nil, wire.Public(fmt.Errorf("snapshot %s: %w; nothing was restored", id, err))
	}
	f := pl.Files.wire(msg.SnapshotFilesStateRestored)
	f.Bytes, f.Entries = int(staged.bytes), staged.entries
	return staged, f, nil
}

// snapshotArchive reads the files archive of snapshot id and checks it
// against what the snapshot's payload recorded.
func (p *Keeper) snapshotArchive(ctx context.Context, id string, fi *filesInfo) ([]byte, error) {
	if strings.HasPrefix(id, "file-") {
		return p.fileSnapshotArchive(id, fi)
	}
	if p.store == nil || !strings.HasPrefix(id, "sql-") {
		return nil, fmt.Errorf("snapshot %s: %w: it says it carries files this host cannot read; nothing was restored", id, ErrSnapshotCorrupt)
	}
	var row *ent.Snapshot
	err := p.storeCall(ctx, "read snapshot files", p.storeWait(), func(ctx context.Context) (err error) {
		row, err = p.store.Client.Snapshot.Query().Where(snapshot.ID(id)).Select(snapshot.FieldID, snapshot.FieldFiles).Only(ctx)
		return err
	})
	if ent.IsNotFound(err) {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, id)
	}
	if errors.Is(err, ErrStoreUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: files: %w", id, err)
	}
	archive := row.Files
	sum := sha256.Sum256(archive)
	if int64(len(archive)) != fi.ArchiveBytes || hex.EncodeToString(sum[:]) != fi.SHA256 {
		return nil, fmt.Errorf("snapshot %s: %w: its files archive does not match its checksum; nothing was restored", id, ErrSnapshotCorrupt)
	}
	return archive, nil
}

// fileSnapshotArchive reads the files archive beside file snapshot id,
// no more than the payload recorded, and checks it.
func (p *Keeper) fileSnapshotArchive(id string, fi *filesInfo) ([]byte, error) {
	f, err := os.Open(filepath.Join(p.dataDir, snapshotDir, id+filesSuffix))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w: its files archive cannot be read (%v); nothing was restored", id, ErrSnapshotCorrupt, err)
	}
	defer f.Close()
	archive, err := io.ReadAll(io.LimitReader(f, fi.ArchiveBytes+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: files: %w", id, err)
	}
	sum := sha256.Sum256(archive)
	if int64(len(archive)) != fi.ArchiveBytes || hex.EncodeToString(sum[:]) != fi.SHA256 {
		return nil, fmt.Errorf("snapshot %s: %w: its files archive does not match its checksum; nothing was restored", id, ErrSnapshotCorrupt)
	}
	return archive, nil
}
