package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReqCtx checks that the lazily armed request context behaves as
// context.WithDeadline does, whether or not Done was asked for first.
func TestReqCtx(t *testing.T) {
	waitDone := func(t *testing.T, ctx context.Context) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed")
		}
	}
	t.Run("deadline", func(t *testing.T) {
		c, cancel := newReqCtx(context.Background(), time.Hour)
		defer cancel()
		d, ok := c.Deadline()
		if !ok || time.Until(d) < 59*time.Minute {
			t.Errorf("Deadline = %v, %v", d, ok)
		}
		if c.Err() != nil {
			t.Errorf("Err = %v before anything happened", c.Err())
		}
	})
	for _, armed := range []bool{false, true} {
		name := map[bool]string{false: "lazy", true: "armed"}[armed]
		t.Run(name+"/timeout", func(t *testing.T) {
			c, cancel := newReqCtx(context.Background(), 20*time.Millisecond)
			defer cancel()
			if armed {
				waitDone(t, c)
			} else {
				time.Sleep(30 * time.Millisecond)
			}
			if !errors.Is(c.Err(), context.DeadlineExceeded) {
				t.Errorf("Err = %v", c.Err())
			}
			waitDone(t, c)
		})
		t.Run(name+"/cancel", func(t *testing.T) {
			c, cancel := newReqCtx(context.Background(), time.Hour)
			if armed {
				_ = c.Done()
			}
			cancel()
			if !errors.Is(c.Err(), context.Canceled) {
				t.Errorf("Err = %v", c.Err())
			}
			waitDone(t, c)
		})
		t.Run(name+"/parent", func(t *testing.T) {
			parent, pcancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
			c, cancel := newReqCtx(parent, time.Hour)
			defer cancel()
			if armed {
				_ = c.Done()
			}
			if c.Value(ctxKey{}) != "v" {
				t.Errorf("Value = %v", c.Value(ctxKey{}))
			}
			child, ccancel := context.WithCancel(c)
			defer ccancel()
			pcancel()
			if !errors.Is(c.Err(), context.Canceled) {
				t.Errorf("Err = %v", c.Err())
			}
			waitDone(t, c)
			waitDone(t, child)
		})
	}
	t.Run("child of lazy sees the deadline", func(t *testing.T) {
		c, cancel := newReqCtx(context.Background(), 20*time.Millisecond)
		defer cancel()
		child, ccancel := context.WithCancel(c)
		defer ccancel()
		waitDone(t, child)
		if !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Errorf("child Err = %v", child.Err())
		}
	})
}

// ctxKey is a context key of this test file's own type.
type ctxKey struct{}

// TestReqCtxWaiter: the end of the waiter of a request run on its
// goroutine (a single exchange's client) calls gone exactly once, if the
// handler waits on its context (Done) or polls it (Err), whether the
// waiter ended before or after; never once the request has ended.
func TestReqCtxWaiter(t *testing.T) {
	type step int
	const (
		askDone step = iota
		pollErr
	)
	cases := []struct {
		name       string
		how        step
		endFirst   bool // the waiter ends before the handler asks
		endRequest bool // the request ends before the waiter does
		wantGone   bool
	}{
		{"done, then the waiter ends", askDone, false, false, true},
		{"the waiter ended, then done", askDone, true, false, true},
		{"the waiter ended, then err", pollErr, true, false, true},
		{"done, the request ends, then the waiter", askDone, false, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			waiter, endWaiter := context.WithCancel(context.Background())
			defer endWaiter()
			calls := make(chan struct{}, 4)
			c, cancel := newReqCtx(context.Background(), time.Hour)
			defer cancel()
			c.watch(waiter, goneFunc(func() { calls <- struct{}{} }))
			if tc.endFirst {
				endWaiter()
			}
			switch tc.how {
			case askDone:
				_ = c.Done()
			case pollErr:
				if !errors.Is(c.Err(), context.Canceled) {
					t.Errorf("Err = %v after the waiter ended", c.Err())
				}
				_ = c.Err()
				// The watch Done arms must not call gone again, and a
				// context whose Err said Canceled is done from then on.
				select {
				case <-c.Done():
				default:
					t.Error("Done not closed after Err answered Canceled")
				}
				if c.Err() == nil {
					t.Error("Err went back to nil")
				}
			}
			if tc.endRequest {
				cancel()
			}
			endWaiter()
			if !tc.wantGone {
				select {
				case <-calls:
					t.Fatal("gone called after the request ended")
				case <-time.After(50 * time.Millisecond):
				}
				return
			}
			select {
			case <-calls:
			case <-time.After(5 * time.Second):
				t.Fatal("gone not called")
			}
			select {
			case <-calls:
				t.Fatal("gone called twice")
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
	t.Run("a handler that neither waits nor polls", func(t *testing.T) {
		waiter, endWaiter := context.WithCancel(context.Background())
		calls := make(chan struct{}, 1)
		c, cancel := newReqCtx(context.Background(), time.Hour)
		c.watch(waiter, goneFunc(func() { calls <- struct{}{} }))
		endWaiter()
		cancel()
		select {
		case <-calls:
			t.Fatal("gone called for a request that never waited")
		case <-time.After(50 * time.Millisecond):
		}
	})
}

// goneFunc is a func as a Goner.
type goneFunc func()

func (f goneFunc) Gone() { f() }
