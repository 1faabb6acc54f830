package persist

// Automatic snapshots (docs/DECISIONS.md, Sessions that move, and A
// declared crash-loss window). With a store, and server.snapshots
// auto_interval or crash_window set, the host keeps one automatic
// snapshot of every live top-level session in the store (target sql,
// kind auto, with a copy of its files: archive.go), so a host that dies
// without draining loses only what changed since. It is saved:
//
//   - every auto_interval, by a round over the live sessions that skips
//     a session nothing touched since its last save: no request admitted
//     or finished (the session's last activity, which a subagent's
//     requests also move), none in flight, and the same names, sizes and
//     times in its directory (a process may write files between
//     requests);
//   - with crash_window, half a window after the session's first change
//     not yet saved (crashwin.go).
//
// Both write over the session's one automatic row in place, one
// statement, so there is always exactly one and never a moment with none
// (a row made before, or deleted under the host, is replaced by a new
// one). The files archive is written only when the directory's
// fingerprint changed since the row's archive was made (snapshot.go,
// writeSnapshot). A session's saves are one at a time (autoSession.mu),
// off its request path: a save holds a plugin's lock only while that
// plugin copies its state. The row is deleted when the session ends on
// a running host (shutdown, expiry): it existed for the host's death
// only. Those of a host that died stay for from_session, until
// server.snapshots.max_age, or until the session that restored them
// deletes them. Stop ends the saving; an error is logged and the session
// is tried again.

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/ent/snapshot"
)

// autoSnapshotTimeout bounds one automatic snapshot.
const autoSnapshotTimeout = 30 * time.Second

// autoSnapper is the state of the automatic snapshots.
type autoSnapper struct {
	interval time.Duration // auto_interval; 0 no rounds
	window   time.Duration // crash_window; 0 no crash saver

	mu sync.Mutex
	// sessions holds, by handle, the automatic saving of each live
	// top-level session saved at least once.
	sessions map[string]*autoSession
	// ended carries the owner keys of sessions that ended on a running
	// host, whose automatic snapshot goes.
	ended chan string

	// The crash saver (crashwin.go): sessions waiting for their save, by
	// due time, and a wake-up for the
	// savers; saved is closed and replaced on every save that ends, what
	// a request held back by the window waits for.
	due   dueSaves
	wake  chan struct{}
	saved chan struct{}
}

// autoSession is the automatic saving of one session.
type autoSession struct {
	mu    sync.Mutex // held while the session is saved
	row   autoRow
	mark  autoMark // what the session looked like at its last save
	saved bool     // mark is set
	ended bool     // the session is ending: never saved again
	// failures counts the saves that failed in a row: the crash saver
	// waits longer before each retry and logs fewer of them, and no
	// request of the session is held for a save that keeps failing.
	failures atomic.Int32
}

// autoRow is what the host knows of a session's automatic snapshot row.
type autoRow struct {
	id        string     // "" until written
	files     *filesInfo // what the row's archive holds
	filesMark uint64     // the directory's fingerprint, taken before that archive was made
}

type autoMark struct {
	active int64  // the session's last activity
	files  uint64 // dirFingerprint
}

// startAutoSnapshots starts the rounds when auto_interval is set and the
// crash savers when crash_window is.
func (p *Keeper) startAutoSnapshots() {
	iv, win := p.set.Snapshots.AutoInterval, p.set.Snapshots.CrashWindow
	if iv <= 0 && win <= 0 {
		return
	}
	if p.store == nil {
		p.log.Warn("server.snapshots.auto_interval or crash_window is set, and this host has no store: no automatic snapshots are taken")
		return
	}
	p.auto = &autoSnapper{interval: iv, window: win, sessions: map[string]*autoSession{}, ended: make(chan string, 1024),
		wake: make(chan struct{}, 1), saved: make(chan struct{})}
	p.log.Info("automatic snapshots", "interval", iv, "crash_window", win, "files_max_bytes", p.set.Snapshots.filesMaxBytes())
	ctx, cancel := context.WithCancel(context.Background())
	p.workers.Add(1)
	go func() {
		defer p.workers.Done()
		<-p.stop
		cancel()
	}()
	p.workers.Add(1)
	go p.autoSnapshots(ctx)
	if win > 0 {
		for range crashSavers {
			p.workers.Add(1)
			go p.crashSaver(ctx)
		}
	}
}

// autoSnapshots is the goroutine of the rounds, and of the deletion of
// ended sessions' rows.
func (p *Keeper) autoSnapshots(ctx context.Context) {
	defer p.workers.Done()
	var tick <-chan time.Time
	if p.auto.interval > 0 {
		t := time.NewTicker(p.auto.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case owner := <-p.auto.ended:
			p.deleteAutoSnapshots(ctx, owner, "")
		case <-tick:
			p.autoRound(ctx)
		}
	}
}

// autoRound snapshots every live top-level session that changed.
func (p *Keeper) autoRound(ctx context.Context) {
	taken, skipped := 0, 0
	for _, s := range p.k.LiveTopLevel() {
		if ctx.Err() != nil {
			return
		}
		if ok, _ := p.autoSave(ctx, s, true); ok {
			taken++
		} else {
			skipped++
		}
	}
	if taken > 0 {
		p.log.Debug("automatic snapshots", "taken", taken, "unchanged_or_failed", skipped)
		p.applyRetention(ctx, "", "", "", true) // max_age, once a round
	}
}

// autoSession returns the automatic saving of s, made on first use; nil
// once the session is ending.
func (a *autoSnapper) session(s Session) *autoSession {
	a.mu.Lock()
	defer a.mu.Unlock()
	as := a.sessions[s.Handle()]
	if as == nil {
		if s.Ended() {
			return nil
		}
		as = &autoSession{}
		a.sessions[s.Handle()] = as
	}
	return as
}

// autoSave saves s over its automatic snapshot, and reports whether it
// did. unlessUnchanged (a round) skips a session nothing touched since
// its last save. The session's unsaved-change time is cleared before its
// state is read, and put back when the save fails, so a change made
// while it is saved is saved next.
func (p *Keeper) autoSave(ctx context.Context, s Session, unlessUnchanged bool) (bool, error) {
	as := p.auto.session(s)
	if as == nil {
		return false, nil
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.ended || s.Ended() {
		return false, nil
	}
	// Read before the snapshot: a change while it is taken shows at the next save.
	active, busy := s.Activity()
	if unlessUnchanged && as.saved && !busy && as.mark.active == active &&
		as.mark.files == dirFingerprint(p.DirOf(s).Path, p.set.Snapshots.filesMaxEntries()) {
		return false, nil
	}
	u := s.Unsaved()
	// Since is set only from 0, and cleared only here, under as.mu: what
	// is loaded is what is swapped out, unless it was 0.
	u.Saving.Store(u.Since.Load())
	since := u.Since.Swap(0)
	u.Saving.Store(since)
	sctx, cancel := context.WithTimeout(ctx, autoSnapshotTimeout)
	defer cancel()
	newRow := as.row.id == ""
	t, err := p.takeSnapshotInto(sctx, s, "sql", KindAuto, &as.row)
	if err != nil {
		putBackUnsaved(&u.Since, since)
	}
	u.Saving.Store(0)
	if err != nil {
		n := int(as.failures.Add(1))
		p.auto.savedOne()
		if ctx.Err() == nil && n&(n-1) == 0 { // the 1st, 2nd, 4th, 8th…
			p.log.Warn("automatic snapshot failed; tried again", "session", s.Handle(), "failures_in_a_row", n, "err", err)
		}
		return false, &saveFailed{err, n}
	}
	as.failures.Store(0)
	p.auto.savedOne()
	as.mark, as.saved = autoMark{active: active, files: as.row.filesMark}, true
	if newRow {
		// Rows an earlier host or an earlier row of this session left.
		p.deleteAutoSnapshots(sctx, t.owner, t.id)
	}
	return true, nil
}

// saveFailed is a failed automatic save, and how many failed in a row.
type saveFailed struct {
	err   error
	inRow int
}

func (e *saveFailed) Error() string { return e.err.Error() }
func (e *saveFailed) Unwrap() error { return e.err }

// putBackUnsaved restores since, the time of a change a failed save did
// not save, unless an older one is recorded; it reports whether the
// time was clear (no later change queued the session meanwhile).
func putBackUnsaved(unsaved *atomic.Int64, since int64) bool {
	if since == 0 {
		return false
	}
	for {
		cur := unsaved.Load()
		if cur != 0 && cur <= since {
			return false
		}
		if unsaved.CompareAndSwap(cur, since) {
			return cur == 0
		}
	}
}

// savedOne tells the requests that wait for a save (crashwin.go) that
// one ended.
func (a *autoSnapper) savedOne() {
	a.mu.Lock()
	close(a.saved)
	a.saved = make(chan struct{})
	a.mu.Unlock()
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

// SessionClosing is told of a top-level session whose plugin state is
// about to be dropped: its automatic saving ends first (a save under way
// finishes), so no save can write a half-dropped state over its row.
func (p *Keeper) SessionClosing(s Session) {
	if p.auto == nil || !s.TopLevel() {
		return
	}
	p.auto.mu.Lock()
	as := p.auto.sessions[s.Handle()]
	delete(p.auto.sessions, s.Handle())
	p.auto.mu.Unlock()
	if as != nil {
		as.mu.Lock()
		as.ended = true
		as.mu.Unlock()
	}
}

// autoSessionEnded is told of a session that ended: on a host that runs
// on, its automatic snapshot goes (see the file comment). A full queue
// leaves it to max_age.
func (p *Keeper) autoSessionEnded(s Session, hostGoing bool) {
	if p.auto == nil || !s.TopLevel() {
		return
	}
	p.SessionClosing(s) // in case the kernel did not say
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
