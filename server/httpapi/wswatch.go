package httpapi

import (
	"math"
	"sync"
	"time"
)

// watchdog hands a connection's reading to a new goroutine once a request
// has run on its reading goroutine for handoffAfter (wsConn.receiveHere).
// One timer serves every connection of a hub and runs only while requests
// run there: a timer armed and stopped for each request made it the
// earliest of its processor's, and arming it woke the runtime's network
// poller every time (an eventfd write or a futex wake, several
// microseconds: a sixth of an echo round trip). Now it is armed when the
// first run begins and fires at most once per handoffAfter while runs go on.
type watchdog struct {
	epoch time.Time // runs are timed from here on the monotonic clock

	mu      sync.Mutex
	running map[*wsConn]watchedRun
	armed   bool
	t       *time.Timer
}

// watchedRun is one request running on a connection's reading goroutine:
// its turn (wsConn.turn) and when it began.
type watchedRun struct {
	turn  uint64
	since time.Duration
}

func newWatchdog() *watchdog {
	w := &watchdog{epoch: time.Now(), running: map[*wsConn]watchedRun{}}
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Stop()
	return w
}

// begin records a run of conn in turn; end forgets it, unless the
// watchdog has already handed it off (and conn may run another by now).
func (w *watchdog) begin(conn *wsConn, turn uint64) {
	now := time.Since(w.epoch)
	w.mu.Lock()
	w.running[conn] = watchedRun{turn: turn, since: now}
	if !w.armed {
		w.armed = true
		w.t.Reset(handoffAfter)
	}
	w.mu.Unlock()
}

func (w *watchdog) end(conn *wsConn, turn uint64) {
	w.mu.Lock()
	if r, ok := w.running[conn]; ok && r.turn == turn {
		delete(w.running, conn)
	}
	w.mu.Unlock()
}

// fire hands off every run older than handoffAfter and waits for the next
// run to come due, or stops when none is left.
func (w *watchdog) fire() {
	now := time.Since(w.epoch)
	type due struct {
		conn *wsConn
		turn uint64
	}
	var handed []due
	w.mu.Lock()
	next := time.Duration(math.MaxInt64)
	for conn, r := range w.running {
		if at := r.since + handoffAfter; at <= now {
			handed = append(handed, due{conn, r.turn})
			delete(w.running, conn)
		} else {
			next = min(next, at)
		}
	}
	if len(w.running) > 0 {
		w.t.Reset(next - now)
	} else {
		w.armed = false
	}
	w.mu.Unlock()
	for _, d := range handed {
		d.conn.handOff(d.turn)
	}
}
