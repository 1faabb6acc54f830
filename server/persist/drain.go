package persist

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// drainSnapshotTimeout bounds the snapshot of one session on a drain: the
// drain's own timeout may be spent by then.
const drainSnapshotTimeout = 10 * time.Second

// DrainSnapshots snapshots every live top-level session to the store
// (target sql, kind drain, with a copy of its files: archive.go), so it
// can be restored on another host, and returns the snapshot id of each by
// public handle; a drain's snapshot replaces the session's automatic one.
// The kernel calls it once it has sealed the host and its requests in
// flight are answered (server/drain.go). A session that could not be
// saved is left out of the map and counted in notSaved, its error joined
// into the one returned.
func (p *Keeper) DrainSnapshots(ctx context.Context) (saved map[string]string, notSaved int, err error) {
	out := map[string]string{}
	var errs []error
	for _, s := range p.k.LiveTopLevel() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainSnapshotTimeout)
		t, err := p.takeSnapshot(sctx, s, "sql", KindDrain)
		if err == nil && p.auto != nil {
			// The drain's snapshot is newer: the automatic one goes.
			p.deleteAutoSnapshots(sctx, t.owner, "")
		}
		cancel()
		if err != nil {
			notSaved++
			errs = append(errs, fmt.Errorf("snapshot of session %s: %w", s.Handle(), err))
			continue
		}
		out[s.Handle()] = t.id
		p.log.Info("session snapshotted on drain", "session", s.Handle(), "snapshot_id", t.id, "files", t.files.State)
	}
	return out, notSaved, errors.Join(errs...)
}
