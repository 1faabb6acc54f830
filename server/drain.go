package server

import (
	"context"
	"errors"
	"fmt"
	"time"
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
// is: it belongs to work in flight), requests in flight are waited for
// until ctx ends, and then, when snapshot is set and the host has a store,
// every live session is snapshotted to it (target sql, with a copy of its
// files, server/persist/archive.go) so it can be restored elsewhere. Sessions stay open; [Host.Close] ends them.
//
// A drain that snapshots seals the host first: no session admits another
// request (each is answered shutting_down, so its client knows it never
// ran and may send it again where the session moves), and requests still
// in flight when ctx ends are cancelled (answered `cancelled`: they may or
// may not have run) before the snapshots are taken. So every request
// answered as done is in the snapshot of its session.
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
		h.sealed.Store(true)
	}
	res := DrainResult{}
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		res.Unfinished = h.inFlight()
		if res.Unfinished == 0 {
			break
		}
		select {
		case <-ctx.Done():
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
	// A child is saved with its own records by its parent's plugins; each
	// snapshot gets its own short deadline, the drain's may be spent.
	var err error
	res.Snapshots, res.NotSaved, err = h.persist.DrainSnapshots(ctx)
	return res, err
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
