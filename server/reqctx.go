package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// reqCtx is the context of one request: the session's context with the
// request's deadline (server.limits.request_timeout). It behaves as
// context.WithDeadline(parent, deadline) does, but sets that context (and
// its timer) up only when Done is first asked for. Most handlers answer
// without waiting on anything, and starting and stopping a timer was the
// largest single cost of a round trip (docs/PERFORMANCE.md, Kernel).
type reqCtx struct {
	parent   context.Context
	deadline time.Time
	// waiter, when set, is the context of the one waiting for the reply
	// on the goroutine the request runs on (a single exchange); its end
	// calls gone, once. It is watched from the first Done, as the
	// deadline is: a handler that never waits answers before anyone
	// could go away in the meantime, and watching costs a registration
	// with the waiter's context on every request (docs/PERFORMANCE.md).
	waiter   context.Context
	gone     Goner
	goneSent atomic.Bool
	// call is the request whose context this is, which Value answers for
	// callKey: the host's log lines made with this context name the
	// request and its session (observe.go).
	call *call

	mu          sync.Mutex
	inner       context.Context // set on the first Done
	stop        context.CancelFunc
	stopWatcher func() bool
	cancelled   bool
}

func newReqCtx(parent context.Context, timeout time.Duration) (*reqCtx, context.CancelFunc) {
	c := &reqCtx{}
	c.init(parent, time.Now().Add(timeout))
	return c, c.cancel
}

// init sets up a zero reqCtx in place: a request's lives in its call, not
// in an allocation of its own.
func (c *reqCtx) init(parent context.Context, deadline time.Time) {
	c.parent, c.deadline = parent, deadline
}

// live returns the underlying context once it exists, else nil.
func (c *reqCtx) live() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inner
}

func (c *reqCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.stop = context.WithDeadline(c.parent, c.deadline)
		if c.cancelled || c.goneSent.Load() {
			// Err has already answered Canceled (the waiter left): Done
			// must agree at once, not when the cancel lands.
			c.stop()
		} else if c.waiter != nil {
			c.stopWatcher = context.AfterFunc(c.waiter, c.waiterGone)
		}
	}
	return c.inner.Done()
}

func (c *reqCtx) Err() error {
	c.mu.Lock()
	inner, cancelled := c.inner, c.cancelled
	c.mu.Unlock()
	switch {
	case inner != nil:
		return inner.Err()
	case cancelled:
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if c.waiter != nil && c.waiter.Err() != nil {
		// A handler that polls Err instead of waiting on Done: the
		// waiter's end is told as Done would have told it, off this
		// goroutine (gone answers the request, which takes locks the
		// handler may hold).
		if c.goneSent.CompareAndSwap(false, true) {
			go c.gone.Gone()
		}
		return context.Canceled
	}
	if time.Until(c.deadline) <= 0 { // the monotonic clock alone: half time.Now's cost
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers from the underlying context once it exists, so that a
// context derived from this one (which asks for Done first) finds the
// standard library's cancel machinery and needs no goroutine of its own.
func (c *reqCtx) Value(key any) any {
	if _, ok := key.(callKey); ok && c.call != nil {
		return c.call
	}
	if inner := c.live(); inner != nil {
		return inner.Value(key)
	}
	return c.parent.Value(key)
}

func (c *reqCtx) String() string { return "server.reqCtx" }

// watch sets the waiter whose end calls gone (see reqCtx.waiter); before
// the request runs.
func (c *reqCtx) watch(waiter context.Context, gone Goner) {
	c.waiter, c.gone = waiter, gone
}

func (c *reqCtx) waiterGone() {
	if c.goneSent.CompareAndSwap(false, true) {
		c.gone.Gone()
	}
}

func (c *reqCtx) cancel() {
	c.mu.Lock()
	c.cancelled = true
	stop, stopWatcher := c.stop, c.stopWatcher
	c.stopWatcher = nil
	c.mu.Unlock()
	if stopWatcher != nil {
		stopWatcher()
	}
	if stop != nil {
		stop()
	}
}
