package persist

// The crash window (server.snapshots.crash_window; docs/DECISIONS.md, A
// declared crash-loss window). The kernel records, per top-level session
// tree, the time of its oldest change not yet saved ([Session].Unsaved),
// when a request starts and when it is answered, and tells the keeper
// only when that time was clear ([Keeper.Changed]). The session is then
// queued, and one of crashSavers saves it over its automatic snapshot
// (autosnap.go) half a window later, whatever it answered meanwhile. A
// request of a session whose oldest unsaved change is older than the
// window waits for the save before it runs ([Keeper.HoldForSave]), up to
// store_wait, so a slow store slows the session down instead of
// stretching the window. A session whose last save failed — a store
// that does not take writes, a state that cannot be saved — is not held
// (the host goes on serving its sessions through a store outage): its
// save is tried again half a window later, doubling with each failure in
// a row up to maxRetryWait, and the failures are logged.

import (
	"container/heap"
	"context"
	"errors"
	"time"
)

// crashSavers is how many sessions are saved at once.
const crashSavers = 4

// maxRetryWait bounds the wait before a failed save is tried again.
const maxRetryWait = 30 * time.Second

// minCrashWindow is the shortest crash_window accepted: a save is a
// store round trip, and half a window must leave room for it.
const minCrashWindow = 200 * time.Millisecond

// dueSave is a session waiting for its save, and when it is due.
type dueSave struct {
	s   Session
	due time.Time
}

// CrashWindow is server.snapshots.crash_window when the crash saver runs
// (a store and the setting), else 0: whether the kernel records changes.
func (p *Keeper) CrashWindow() time.Duration {
	if p.store == nil {
		return 0
	}
	return p.set.Snapshots.CrashWindow
}

// Changed is told of a top-level session whose first change since its
// last save was just recorded: the session is saved half a window later.
func (p *Keeper) Changed(s Session) {
	if p.auto == nil || p.auto.window <= 0 {
		return
	}
	p.auto.push(s, time.Now().Add(p.auto.window/2))
}

// dueSaves is the queue of sessions waiting for their save, a min-heap
// by due time (container/heap): a retry after failures, due later, does
// not hold back the sessions queued after it.
type dueSaves []dueSave

func (q dueSaves) Len() int           { return len(q) }
func (q dueSaves) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q dueSaves) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueSaves) Push(x any)        { *q = append(*q, x.(dueSave)) }
func (q *dueSaves) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = dueSave{}
	*q = old[:len(old)-1]
	return d
}

func (a *autoSnapper) push(s Session, due time.Time) {
	a.mu.Lock()
	heap.Push(&a.due, dueSave{s, due})
	a.mu.Unlock()
	a.signal()
}

// signal wakes one saver waiting in next.
func (a *autoSnapper) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// next takes the session whose save is due first, once it is due.
func (a *autoSnapper) next(ctx context.Context) (dueSave, bool) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var tick <-chan time.Time
		a.mu.Lock()
		if len(a.due) > 0 {
			wait := time.Until(a.due[0].due)
			if wait <= 0 {
				d := heap.Pop(&a.due).(dueSave)
				more := len(a.due) > 0
				a.mu.Unlock()
				if more {
					a.signal() // another saver looks at the next one
				}
				return d, true
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return dueSave{}, false
		case <-a.wake:
		case <-tick:
		}
	}
}

// crashSaver is one of the goroutines that save queued sessions, each
// once it is due.
func (p *Keeper) crashSaver(ctx context.Context) {
	defer p.workers.Done()
	for {
		d, ok := p.auto.next(ctx)
		if !ok {
			return
		}
		if d.s.Unsaved().Since.Load() == 0 {
			continue // a round, or an earlier entry, saved it
		}
		if _, err := p.autoSave(ctx, d.s, false); err != nil && ctx.Err() == nil {
			// Its unsaved time is back (autoSave): queue it again, half a
			// window later, doubling with each failure in a row up to
			// maxRetryWait (a store down, a state that cannot be saved).
			wait := p.auto.window / 2
			var sf *saveFailed
			if errors.As(err, &sf) {
				for n := 1; n < sf.inRow && wait < maxRetryWait; n++ {
					wait *= 2
				}
			}
			p.auto.push(d.s, time.Now().Add(min(wait, maxRetryWait)))
		}
	}
}

// HoldForSave holds back a request of session s (top-level: a
// subagent's tree's root) that arrived at now while the oldest change of
// s not yet saved is older than the crash window: it returns once that
// change is saved, the wait passed store_wait, the session's last save
// failed (a store that does not answer, a state that cannot be saved),
// or ctx ends. Otherwise it returns at once: two atomic loads.
func (p *Keeper) HoldForSave(ctx context.Context, s Session, now time.Time) {
	a := p.auto
	if a == nil || a.window <= 0 {
		return
	}
	u := s.Unsaved()
	since := u.oldest()
	if since == 0 || now.UnixNano()-since < int64(a.window) {
		return
	}
	a.mu.Lock()
	as := a.sessions[s.Handle()]
	a.mu.Unlock()
	deadline := time.NewTimer(p.storeWait())
	defer deadline.Stop()
	for {
		// The signal is taken before the check, so a save that ends
		// between the two is not missed.
		a.mu.Lock()
		saved := a.saved
		a.mu.Unlock()
		if cur := u.oldest(); cur == 0 || cur > since || (as != nil && as.failures.Load() > 0) {
			return // saved, or its saves fail: not held for one that may never come
		}
		select {
		case <-saved:
		case <-deadline.C:
			p.log.Warn("a request ran past the crash window: its session's save did not end within store_wait",
				"session", s.Handle(), "unsaved_for", time.Since(time.Unix(0, since)).Round(time.Millisecond))
			return
		case <-ctx.Done():
			return
		}
	}
}
