package persist

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// drainSnapshotTimeout bounds the snapshot of one session on a drain,
// within the drain's own deadline.
const drainSnapshotTimeout = 10 * time.Second

// DefaultDrainParallel is server.snapshots.drain_parallel when unset: how
// many sessions a drain snapshots at once. The store's connection pool
// bounds what runs at once anyway; more than it only queues.
const DefaultDrainParallel = 16

// DrainSnapshots snapshots every live top-level session to the store
// (target sql, kind drain, with a copy of its files: archive.go), so it
// can be restored on another host, and returns the snapshot id of each by
// public handle; a drain's snapshot replaces the session's automatic one.
// The kernel calls it once it has sealed the host and its requests in
// flight are answered (server/drain.go).
//
// It fits the grace period (docs/deploy.md, How many sessions a drain
// saves): server.snapshots.drain_parallel sessions are snapshotted at
// once, the most recently active first, so the sessions whose clients are
// working are saved before abandoned and idle ones; nothing runs past
// ctx's deadline (the drain's, operator.drain_timeout from its start).
// done is told of each session as it is saved, or given up. A session
// that could not be saved — its snapshot failed, or ctx ended before its
// turn — is left out of the map, logged and counted in notSaved, its
// error joined into the one returned.
func (p *Keeper) DrainSnapshots(ctx context.Context, done func(s Session, snapshotID string, point uint64, err error)) (saved map[string]string, notSaved int, err error) {
	sessions := p.k.LiveTopLevel()
	active := make(map[Session]int64, len(sessions))
	for _, s := range sessions {
		active[s], _ = s.Activity()
	}
	sort.SliceStable(sessions, func(i, j int) bool { return active[sessions[i]] > active[sessions[j]] })

	workers := p.set.Snapshots.drainParallel()
	var (
		mu   sync.Mutex
		out  = map[string]string{}
		errs []error
		next = make(chan Session)
		wg   sync.WaitGroup
	)
	one := func(s Session) {
		t, err := p.drainOne(ctx, s)
		mu.Lock()
		if err != nil {
			notSaved++
			errs = append(errs, fmt.Errorf("snapshot of session %s: %w", s.Handle(), err))
		} else {
			out[s.Handle()] = t.id
		}
		mu.Unlock()
		if err != nil {
			p.log.Warn("session not saved on drain", "session", s.Handle(), "err", err)
		} else {
			p.log.Info("session snapshotted on drain", "session", s.Handle(), "snapshot_id", t.id, "files", t.files.State, "point", t.point)
		}
		if done != nil {
			done(s, t.id, t.point, err)
		}
	}
	for range min(workers, len(sessions)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				one(s)
			}
		}()
	}
	for _, s := range sessions {
		next <- s
	}
	close(next)
	wg.Wait()
	return out, notSaved, errors.Join(errs...)
}

// errDrainOver is why a session whose turn came after the drain's
// deadline was not saved.
var errDrainOver = errors.New("the drain's time (operator.drain_timeout) ran out before its turn; raise drain_timeout or server.snapshots.drain_parallel (docs/deploy.md)")

// drainOne snapshots one session on a drain, within ctx and
// drainSnapshotTimeout.
func (p *Keeper) drainOne(ctx context.Context, s Session) (snapshotTaken, error) {
	if ctx.Err() != nil {
		return snapshotTaken{}, errDrainOver
	}
	sctx, cancel := context.WithTimeout(ctx, drainSnapshotTimeout)
	defer cancel()
	t, err := p.takeSnapshot(sctx, s, "sql", KindDrain)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", errDrainOver, err)
		}
		return t, err
	}
	if p.auto != nil {
		// The drain's snapshot is newer: the automatic one goes. Its
		// failure costs nothing but a row retention removes later.
		p.deleteAutoSnapshots(sctx, t.owner, "")
	}
	return t, nil
}

func (s SnapshotSettings) drainParallel() int {
	if s.DrainParallel > 0 {
		return s.DrainParallel
	}
	return DefaultDrainParallel
}
