package openenv

import (
	"math"
	"sync"
	"time"
)

// handoffAfter is how long a request may run on its connection's reading
// goroutine before the reading moves to a new goroutine (wsConn.readLoop):
// control frames (the client's pings, a close) then wait at most this long
// to be read, and a request that runs longer pays one goroutine start.
const handoffAfter = 500 * time.Microsecond

// watchdog hands a connection's reading to a new goroutine once its
// request has run for handoffAfter. One timer serves every connection of
// the face and is armed only while requests run, as the WebSocket
// transport's (server/httpapi/wswatch.go) does: a timer armed per request
// wakes the runtime's network poller each time, a cost of its own on
// every step.
type watchdog struct {
	epoch time.Time

	mu      sync.Mutex
	running map[*wsConn]watchedRun
	armed   bool
	t       *time.Timer
}

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

func (w *watchdog) begin(c *wsConn, turn uint64) {
	now := time.Since(w.epoch)
	w.mu.Lock()
	w.running[c] = watchedRun{turn: turn, since: now}
	if !w.armed {
		w.armed = true
		w.t.Reset(handoffAfter)
	}
	w.mu.Unlock()
}

func (w *watchdog) end(c *wsConn, turn uint64) {
	w.mu.Lock()
	if r, ok := w.running[c]; ok && r.turn == turn {
		delete(w.running, c)
	}
	w.mu.Unlock()
}

// fire hands off every run older than handoffAfter and waits for the next
// to come due, or stops when none is left.
func (w *watchdog) fire() {
	now := time.Since(w.epoch)
	type due struct {
		c    *wsConn
		turn uint64
	}
	var handed []due
	w.mu.Lock()
	next := time.Duration(math.MaxInt64)
	for c, r := range w.running {
		if at := r.since + handoffAfter; at <= now {
			handed = append(handed, due{c, r.turn})
			delete(w.running, c)
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
		d.c.handOff(d.turn)
	}
}
