package server

// Automatic snapshots (docs/DECISIONS.md, Sessions that move). With
// server.snapshots.auto_interval set and a store, one goroutine of the
// host snapshots every live top-level session to the store (target sql,
// kind auto, with a copy of its files: snapfiles.go) once per interval, so
// a host that dies without draining loses only what changed since. It:
//
//   - skips a session that nothing touched since its last automatic
//     snapshot: no request admitted or finished (the session's last
//     activity, which a subagent's requests also move), none in flight,
//     and the same names, sizes and times in its directory (a process
//     may write files between requests);
//   - keeps only the newest automatic snapshot of each session: the one
//     before is deleted once the new one is written, so there is always
//     one; a drain's snapshot replaces it too;
//   - deletes a session's automatic snapshot when the session ends on a
//     running host (shutdown, expiry): it existed for the host's death
//     only. Those of a host that died stay for from_session, until
//     server.snapshots.max_age, or until the session that restored them
//     deletes them;
//   - works one session at a time, off the request path: a snapshot holds
//     a plugin's lock only while that plugin copies its state;
//   - stops when the host closes; an error is logged and the session is
//     tried again at the next tick.

import (
	"context"
	"time"

	"github.com/aephost/aep/ent/snapshot"
)

// autoSnapshotTimeout bounds one automatic snapshot.
const autoSnapshotTimeout = 30 * time.Second

// autoSnapper is the state of the automatic snapshots.
type autoSnapper struct {
	interval time.Duration
	// last holds, by session handle, what the session looked like at its
	// last automatic snapshot. Only the snapshot goroutine touches it.
	last map[string]autoMark
	// ended carries the owner keys of sessions that ended on a running
	// host, whose automatic snapshot goes.
	ended chan string
}

type autoMark struct {
	active int64  // Session.lastActive
	files  uint64 // dirFingerprint
}

// startAutoSnapshots starts the goroutine when auto_interval is set.
func (h *Host) startAutoSnapshots() {
	iv := time.Duration(h.cfg.Server.Snapshots.AutoInterval)
	if iv <= 0 {
		return
	}
	if h.store == nil {
		h.log.Warn("server.snapshots.auto_interval is set, and this host has no store: no automatic snapshots are taken")
		return
	}
	h.auto = &autoSnapper{interval: iv, last: map[string]autoMark{}, ended: make(chan string, 1024)}
	h.log.Info("automatic snapshots", "interval", iv, "files_max_bytes", h.cfg.Server.Snapshots.filesMaxBytes())
	h.janitor.Add(1)
	go h.autoSnapshots()
}

// autoSnapshots is the goroutine: one round per interval.
func (h *Host) autoSnapshots() {
	defer h.janitor.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(h.auto.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case owner := <-h.auto.ended:
			h.deleteAutoSnapshots(ctx, owner, "")
		case <-t.C:
			h.autoRound(ctx)
		}
	}
}

// autoRound snapshots every live top-level session that changed.
func (h *Host) autoRound(ctx context.Context) {
	live := map[string]bool{}
	taken, skipped := 0, 0
	for _, s := range h.sessionList() {
		if ctx.Err() != nil {
			return
		}
		if !s.Live() || s.parent != nil {
			continue // a child's state is in its parent's plugins' snapshots
		}
		live[s.handle] = true
		if h.autoSnapshot(ctx, s) {
			taken++
		} else {
			skipped++
		}
	}
	for hd := range h.auto.last {
		if !live[hd] {
			delete(h.auto.last, hd)
		}
	}
	if taken > 0 {
		h.log.Debug("automatic snapshots", "taken", taken, "unchanged_or_failed", skipped)
		h.applyRetention(ctx, "", "", "", true) // max_age, once a round
	}
}

// autoSnapshot snapshots s unless nothing changed since its last
// automatic snapshot, and reports whether it took one.
func (h *Host) autoSnapshot(ctx context.Context, s *Session) bool {
	// Read before the snapshot: a change while it is taken shows at the next round.
	active := s.lastActive.Load()
	s.mu.Lock()
	busy := s.pending > 0
	s.mu.Unlock()
	mark := autoMark{active: active, files: dirFingerprint(h.sessionDirOf(s).Path, h.cfg.Server.Snapshots.filesMaxEntries())}
	if prev, ok := h.auto.last[s.handle]; ok && !busy && prev == mark {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, autoSnapshotTimeout)
	defer cancel()
	t, err := h.takeSnapshot(sctx, s, "sql", kindAuto)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("automatic snapshot failed; tried again at the next round", "session", s.handle, "err", err)
		}
		return false
	}
	h.auto.last[s.handle] = mark
	h.deleteAutoSnapshots(sctx, t.owner, t.id)
	return true
}

// deleteAutoSnapshots deletes the automatic snapshots of the session with
// owner key owner, except keep.
func (h *Host) deleteAutoSnapshots(ctx context.Context, owner, keep string) {
	q := h.store.Client.Snapshot.Delete().Where(snapshot.SessionID(owner), snapshot.Kind(kindAuto))
	if keep != "" {
		q = q.Where(snapshot.IDNEQ(keep))
	}
	n, err := q.Exec(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("deleting older automatic snapshots", "err", err)
		}
		return
	}
	if n > 0 {
		h.log.Debug("older automatic snapshots deleted", "count", n)
	}
}

// autoSessionEnded is told of a session that ended: on a host that runs
// on, its automatic snapshot goes (see the file comment). A full queue
// leaves it to max_age.
func (h *Host) autoSessionEnded(s *Session) {
	if h.auto == nil || s.parent != nil {
		return
	}
	h.mu.Lock()
	closing := h.closed
	h.mu.Unlock()
	if closing || h.draining.Load() {
		return // the host is going: the snapshot is what the session may move with
	}
	select {
	case h.auto.ended <- ownerKey(s.id):
	default:
		h.log.Warn("automatic snapshot of an ended session left to server.snapshots.max_age: the deletion queue is full", "session", s.handle)
	}
}
