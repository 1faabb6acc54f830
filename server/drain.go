package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aephost/aep/wire"
)

// ErrDraining is returned by [Host.NewSession] while the host drains.
var ErrDraining = errors.New("host is draining; no new sessions")

// DrainResult says what a drain did.
type DrainResult struct {
	// Unfinished is how many requests were still in flight at the deadline.
	Unfinished int
	// Snapshots maps each live session's public handle to the snapshot
	// taken of it (operator.snapshot_on_drain).
	Snapshots map[string]string
	// Snapshotted says whether the drain took snapshots: it was asked to
	// and the host has a store to keep them in.
	Snapshotted bool
	// NotSaved counts the live sessions (not subagents) left without a
	// snapshot: all of them when the drain takes none, else those whose
	// snapshot failed.
	NotSaved int
	// Took is how long the drain took.
	Took time.Duration
}

// Draining reports whether [Host.Drain] has begun.
func (h *Host) Draining() bool { return h.draining.Load() }

// drainPoll is how often Drain looks at the requests in flight.
const drainPoll = 20 * time.Millisecond

// Drain prepares the host to stop (docs/operating.md, Drain): no new
// session is accepted from now on (a child a live session spawns still
// is: it belongs to work in flight), requests in flight are waited for,
// and then, when snapshot is set and the host has a store, every live
// session is snapshotted to it (target sql, with a copy of its files,
// server/persist/archive.go) so it can be restored elsewhere. Sessions
// stay open; [Host.Close] ends them. Everything ends by ctx's deadline
// (operator.drain_timeout from SIGTERM).
//
// A drain that snapshots seals the host first: no session admits another
// request (each is answered shutting_down, so its client knows it never
// ran and may send it again where the session moves), and requests still
// in flight at the first half of ctx's time are cancelled (answered
// `cancelled`: they may or may not have run) before the snapshots are
// taken, in the other half, in parallel (server.snapshots.drain_parallel,
// server/persist/drain.go). So every request answered as done is in the
// snapshot of its session, whose point says so (docs/DECISIONS.md,
// Points).
//
// A drain snapshots before it tells a client to move: a request refused
// as shutting_down is answered once its session's snapshot is written
// (or given up), and the answer's detail names it (snapshot_id, point);
// a client that needs it sooner is told how long to wait for it
// (snapshot_wait, seconds), see sealedRefusal.
func (h *Host) Drain(ctx context.Context, snapshot bool) (res DrainResult, err error) {
	t0 := time.Now()
	defer func() {
		res.Took = time.Since(t0)
		res.Snapshotted = snapshot && h.store != nil
		if !res.Snapshotted {
			for _, s := range h.sessionList() {
				if s.Live() && s.parent == nil {
					res.NotSaved++
				}
			}
		}
		h.met.drainNanos.Store(int64(res.Took))
		h.met.drainNotSaved.Store(int64(res.NotSaved))
	}()
	return h.drain(ctx, snapshot)
}

// drain is Drain without its accounting.
func (h *Host) drain(ctx context.Context, snapshot bool) (DrainResult, error) {
	h.draining.Store(true)
	seal := snapshot && h.store != nil
	if seal {
		h.openDrainNotes(ctx)
		h.sealed.Store(true)
		defer h.closeDrainNotes()
	}
	res := DrainResult{}
	// With a snapshot phase to come, requests in flight get the first
	// half of the drain's time, the snapshots the rest.
	wctx := ctx
	if dl, ok := ctx.Deadline(); ok && seal {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
		defer cancel()
	}
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		res.Unfinished = h.inFlight()
		if res.Unfinished == 0 {
			break
		}
		select {
		case <-wctx.Done():
		case <-t.C:
			continue
		}
		break
	}
	if !seal {
		return res, nil
	}
	if res.Unfinished > 0 {
		h.cancelInFlight()
	}
	// A child is saved with its own records by its parent's plugins.
	var err error
	res.Snapshots, res.NotSaved, err = h.drainSnapshots(ctx)
	return res, err
}

// drainNote is a sealed session's part of a drain: done is closed once
// the drain saved the session (id, point) or gave up on it, and its
// refused requests are answered then, naming the snapshot.
type drainNote struct {
	done  chan struct{}
	once  sync.Once
	id    string
	point uint64
}

// openDrainNotes makes the note of every live top-level session before
// the host is sealed, and records when the drain ends.
func (h *Host) openDrainNotes(ctx context.Context) {
	if dl, ok := ctx.Deadline(); ok {
		h.drainDeadline.Store(dl.UnixNano())
	}
	for _, s := range h.sessionList() {
		if s.parent == nil {
			h.drainNotes.Store(s, &drainNote{done: make(chan struct{})})
		}
	}
}

// drainNoteDone records what the drain did with session s: saved as
// snapshot id at point, or not (err).
func (h *Host) drainNoteDone(s *Session, id string, point uint64, err error) {
	v, ok := h.drainNotes.Load(s)
	if !ok {
		return
	}
	n := v.(*drainNote)
	n.once.Do(func() {
		if err == nil {
			n.id, n.point = id, point
		}
		close(n.done)
	})
}

// closeDrainNotes ends every note the drain left open (a drain cut
// short), so no refusal waits past it.
func (h *Host) closeDrainNotes() {
	h.drainNotes.Range(func(_, v any) bool {
		n := v.(*drainNote)
		n.once.Do(func() { close(n.done) })
		return true
	})
}

// refuseSealed answers a request a sealed session does not admit
// (shutting_down). A drain snapshots before it tells a client to move:
// while the session's snapshot is not yet written, the refusal waits for
// it (at most until the drain's deadline; beyond the session's queue_size
// refusals waiting, at once), then names it in its detail — snapshot_id
// and point, the point it covers — so the client restores exactly that
// one. A refusal that cannot wait says how long the client should wait
// for the snapshot instead (snapshot_wait, seconds).
func (s *Session) refuseSealed(e *wire.Entry, env *wire.Envelope, t0 time.Time) {
	root := s
	for root.parent != nil {
		root = root.parent
	}
	var n *drainNote
	if v, ok := s.h.drainNotes.Load(root); ok {
		n = v.(*drainNote)
	}
	if n == nil || n.finished() {
		s.refuse(e, env, t0, s.h.sealedError(n))
		return
	}
	if s.parked.Add(1) > int32(cap(s.queue)) {
		s.parked.Add(-1)
		s.refuse(e, env, t0, s.h.sealedError(n))
		return
	}
	env2 := *env
	go func() {
		defer s.parked.Add(-1)
		var timeout <-chan time.Time
		if dl := s.h.drainDeadline.Load(); dl != 0 {
			t := time.NewTimer(time.Until(time.Unix(0, dl)))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-n.done:
		case <-timeout:
		case <-s.done:
		}
		s.refuse(e, &env2, t0, s.h.sealedError(n))
	}()
}

func (n *drainNote) finished() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// sealedError is shutting_down as a sealed session answers it: naming the
// drain's snapshot of the session once written, else how long the
// client may wait for it.
func (h *Host) sealedError(n *drainNote) *wire.Error {
	e := &wire.Error{Code: wire.CodeRuntimeError, Detail: map[string]any{"reason": "shutting_down"},
		Message: "the host is draining: this session is saved and moves; open a new session and restore it (session/restore/req from_session)"}
	d := e.Detail.(map[string]any)
	switch {
	case n == nil:
		e.Message = "session is shutting down"
	case n.finished() && n.id != "":
		d["snapshot_id"], d["point"] = n.id, n.point
	case n.finished():
		e.Message = "the host is draining and could not save this session"
	default:
		if dl := h.drainDeadline.Load(); dl != 0 {
			d["snapshot_wait"] = max(time.Until(time.Unix(0, dl)).Seconds(), 0)
		}
	}
	return e
}

// cancelInFlight cancels every admitted request of every session, as
// `cancel` would: each is answered `cancelled` at once.
func (h *Host) cancelInFlight() {
	for _, s := range h.sessionList() {
		s.cancelInFlight()
	}
}

// cancelInFlight cancels every admitted request of s, as `cancel` would.
// The calls are collected under the lock and cancelled outside it:
// cancelling answers the call, whose bookkeeping takes the lock.
func (s *Session) cancelInFlight() {
	s.mu.Lock()
	calls := make([]*call, 0, len(s.inflight))
	for _, c := range s.inflight {
		calls = append(calls, c)
	}
	s.mu.Unlock()
	for _, c := range calls {
		c.cancelNow()
	}
}

// inFlight counts admitted requests not yet answered over all sessions.
func (h *Host) inFlight() int {
	n := 0
	for _, s := range h.sessionList() {
		s.mu.Lock()
		n += s.pending
		s.mu.Unlock()
	}
	return n
}

func (h *Host) sessionList() []*Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	return out
}

// Ready reports whether the host should receive new sessions (GET
// /readyz): its plugins are provisioned (a Host exists only then), it is
// not draining or closed, and its store answers.
func (h *Host) Ready(ctx context.Context) error {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case h.draining.Load():
		return ErrDraining
	}
	if h.store != nil {
		if err := h.store.DB().PingContext(ctx); err != nil {
			return fmt.Errorf("store unreachable: %w", err)
		}
	}
	return nil
}
