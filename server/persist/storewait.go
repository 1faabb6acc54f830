package persist

// A store outage is not session loss (docs/deploy.md, Readiness is for new
// sessions only): what an agent asked of the store — a snapshot, a restore,
// a listing, an export — waits for a store that does not answer, bounded
// by server.snapshots.store_wait, and then fails with a clear, retryable
// error. It never falls back to what it can reach instead: a restore that
// cannot read the store's newest snapshot does not take an older one.

import (
	"context"
	"errors"
	"time"

	"github.com/aephost/aep/wire"
)

// DefaultStoreWait is server.snapshots.store_wait when unset.
const DefaultStoreWait = 10 * time.Second

// ErrStoreUnavailable answers a request whose store did not answer within
// store_wait: runtime_error, reason store_unavailable, retryable. The
// store's own error may name its address, so it goes to the log only.
var ErrStoreUnavailable = wire.Reason("store_unavailable",
	errors.New("the host's store does not answer; nothing was changed, try again later"))

// storeWait is how long a request waits for the store.
func (p *Keeper) storeWait() time.Duration {
	if w := p.set.Snapshots.StoreWait; w > 0 {
		return w
	}
	return DefaultStoreWait
}

// storeCall runs op against the store. When op fails and the store does
// not answer a ping either, the store is down: op is tried again, with
// back-off, until it succeeds, fails for another reason, or wait has
// passed — then the answer is ErrStoreUnavailable. wait 0 tries once
// (automatic rounds, which must not stall on one session). op must be
// safe to run again: it changed nothing if it failed.
func (p *Keeper) storeCall(ctx context.Context, what string, wait time.Duration, op func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || p.store == nil || ctx.Err() != nil || !p.storeDown(ctx) {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			p.log.Warn("store unavailable", "op", what, "attempts", attempt, "waited", wait, "err", err)
			return ErrStoreUnavailable
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(backoff, left)):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// storeDown reports whether the store fails a ping (within 2 s).
func (p *Keeper) storeDown(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return p.store.DB().PingContext(pctx) != nil
}
