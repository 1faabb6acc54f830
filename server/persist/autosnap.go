package persist

// Automatic snapshots (docs/DECISIONS.md, Sessions that move). With
// server.snapshots.auto_interval set and a store, one goroutine of the
// host snapshots every live top-level session to the store (target sql,
// kind auto, with a copy of its files: archive.go) once per interval, so
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
	"encoding/binary"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
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
	active int64  // the session's last activity
	files  uint64 // dirFingerprint
}

// startAutoSnapshots starts the goroutine when auto_interval is set.
func (p *Keeper) startAutoSnapshots() {
	iv := p.set.Snapshots.AutoInterval
	if iv <= 0 {
		return
	}
	if p.store == nil {
		p.log.Warn("server.snapshots.auto_interval is set, and this host has no store: no automatic snapshots are taken")
		return
	}
	p.auto = &autoSnapper{interval: iv, last: map[string]autoMark{}, ended: make(chan string, 1024)}
	p.log.Info("automatic snapshots", "interval", iv, "files_max_bytes", p.set.Snapshots.filesMaxBytes())
	p.workers.Add(1)
	go p.autoSnapshots()
}

// autoSnapshots is the goroutine: one round per interval.
func (p *Keeper) autoSnapshots() {
	defer p.workers.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(p.auto.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case owner := <-p.auto.ended:
			p.deleteAutoSnapshots(ctx, owner, "")
		case <-t.C:
			p.autoRound(ctx)
		}
	}
}

// autoRound snapshots every live top-level session that changed.
func (p *Keeper) autoRound(ctx context.Context) {
	live := map[string]bool{}
	taken, skipped := 0, 0
	for _, s := range p.k.LiveTopLevel() {
		if ctx.Err() != nil {
			return
		}
		live[s.Handle()] = true
		if p.autoSnapshot(ctx, s) {
			taken++
		} else {
			skipped++
		}
	}
	for hd := range p.auto.last {
		if !live[hd] {
			delete(p.auto.last, hd)
		}
	}
	if taken > 0 {
		p.log.Debug("automatic snapshots", "taken", taken, "unchanged_or_failed", skipped)
		p.applyRetention(ctx, "", "", "", true) // max_age, once a round
	}
}

// autoSnapshot snapshots s unless nothing changed since its last
// automatic snapshot, and reports whether it took one.
func (p *Keeper) autoSnapshot(ctx context.Context, s Session) bool {
	// Read before the snapshot: a change while it is taken shows at the next round.
	active, busy := s.Activity()
	mark := autoMark{active: active, files: dirFingerprint(p.DirOf(s).Path, p.set.Snapshots.filesMaxEntries())}
	if prev, ok := p.auto.last[s.Handle()]; ok && !busy && prev == mark {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, autoSnapshotTimeout)
	defer cancel()
	t, err := p.takeSnapshot(sctx, s, "sql", KindAuto)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("automatic snapshot failed; tried again at the next round", "session", s.Handle(), "err", err)
		}
		return false
	}
	p.auto.last[s.Handle()] = mark
	p.deleteAutoSnapshots(sctx, t.owner, t.id)
	return true
}

// deleteAutoSnapshots deletes the automatic snapshots of the session with
// owner key owner, except keep.
func (p *Keeper) deleteAutoSnapshots(ctx context.Context, owner, keep string) {
	q := p.store.Client.Snapshot.Delete().Where(snapshot.SessionID(owner), snapshot.Kind(KindAuto))
	if keep != "" {
		q = q.Where(snapshot.IDNEQ(keep))
	}
	n, err := q.Exec(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("deleting older automatic snapshots", "err", err)
		}
		return
	}
	if n > 0 {
		p.log.Debug("older automatic snapshots deleted", "count", n)
	}
}

// autoSessionEnded is told of a session that ended: on a host that runs
// on, its automatic snapshot goes (see the file comment). A full queue
// leaves it to max_age.
func (p *Keeper) autoSessionEnded(s Session, hostGoing bool) {
	if p.auto == nil || !s.TopLevel() {
		return
	}
	if hostGoing {
		return // the host is going: the snapshot is what the session may move with
	}
	select {
	case p.auto.ended <- ownerKey(s.ID()):
	default:
		p.log.Warn("automatic snapshot of an ended session left to server.snapshots.max_age: the deletion queue is full", "session", s.Handle())
	}
}

// dirFingerprint digests the names, sizes, modes and modification times
// under dir without reading a file: what tells an automatic snapshot that
// a session's files did not change. A missing directory is 0.
func dirFingerprint(dir string, maxEntries int) uint64 {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0
	}
	defer root.Close()
	h := fnv.New64a()
	n := 0
	var b [8]byte
	_ = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > maxEntries+1 {
			return fs.SkipAll
		}
		io.WriteString(h, p)
		h.Write([]byte{0})
		if fi, err := e.Info(); err == nil {
			binary.LittleEndian.PutUint64(b[:], uint64(fi.Size()))
			h.Write(b[:])
			binary.LittleEndian.PutUint64(b[:], uint64(fi.ModTime().UnixNano()))
			h.Write(b[:])
			binary.LittleEndian.PutUint64(b[:], uint64(fi.Mode()))
			h.Write(b[:])
		}
		return nil
	})
	return h.Sum64() | 1 // never 0, which is "no directory"
}
