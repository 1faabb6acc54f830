package httpapi

import (
	"io"
	"sync"
	"time"
)

// bodyWatch enforces read_body_timeout (docs/SECURITY.md, Deadlines per
// route) without a timer per request. Arming a connection's read deadline
// and lifting it again costs two changes of the runtime poller's timers,
// often with a wake of the poller: more than a microsecond, on every POST,
// for a body that has nearly always arrived with its headers. Instead a
// request whose body is being read is noted here, and a ticker every tenth
// of the timeout sets a deadline long past on the connection of any that
// has read for the whole timeout, which ends its read at once. A body is
// thus cut between the timeout and 1.1 times it.
type bodyWatch struct {
	timeout time.Duration

	mu      sync.Mutex
	reading map[*respWriter]time.Time // since when
	ticking bool
}

// aLongTimeAgo is a read deadline that has passed: the read blocked on it
// fails with a timeout at once.
var aLongTimeAgo = time.Unix(1, 0)

// idleTicks is how many ticks with nothing to watch end the ticker; the
// next body starts it again.
const idleTicks = 10

// begin watches the body of w's request, which reads through w.body.
func (bw *bodyWatch) begin(w *respWriter) {
	now := time.Now()
	bw.mu.Lock()
	if bw.reading == nil {
		bw.reading = make(map[*respWriter]time.Time)
	}
	bw.reading[w] = now
	w.body.watched = true
	start := !bw.ticking
	bw.ticking = true
	bw.mu.Unlock()
	if start {
		go bw.tick()
	}
}

// end stops watching w's body: read to its end, failed, or left unread
// when the handler returned. It reports when the watch began, and whether
// the read was cut (its connection's read deadline has passed).
func (bw *bodyWatch) end(w *respWriter) (since time.Time, cut bool) {
	bw.mu.Lock()
	since, watched := bw.reading[w]
	delete(bw.reading, w)
	bw.mu.Unlock()
	w.body.watched = false
	return since, !watched
}

func (bw *bodyWatch) tick() {
	t := time.NewTicker(max(bw.timeout/10, time.Millisecond))
	defer t.Stop()
	idle := 0
	for now := range t.C {
		bw.mu.Lock()
		for w, since := range bw.reading {
			if now.Sub(since) >= bw.timeout {
				// Under the lock: the request has not ended its watch,
				// so its connection is still its own.
				_ = w.rc.SetReadDeadline(aLongTimeAgo)
				delete(bw.reading, w)
			}
		}
		if len(bw.reading) > 0 {
			idle = 0
		} else if idle++; idle >= idleTicks {
			bw.ticking = false
			bw.mu.Unlock()
			return
		}
		bw.mu.Unlock()
	}
}

// watchedBody is a request's body while bodyWatch watches it.
type watchedBody struct {
	io.ReadCloser
	w       *respWriter
	watch   *bodyWatch
	watched bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.watched {
		// At its end net/http lifts the read deadline itself and reads
		// on in the background, to notice a client that goes away; a
		// deadline the watch set meanwhile would cut that read, and
		// with it a request that waits for its answer, so it is lifted.
		if _, cut := b.watch.end(b.w); cut && err == io.EOF {
			_ = b.w.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

// unread ends the watch of a body the handler returned without reading to
// its end. net/http reads what is left of it after the handler, to reuse
// the connection: that read keeps a deadline, set on the connection now.
func (bw *bodyWatch) unread(w *respWriter) {
	if since, cut := bw.end(w); !cut {
		_ = w.rc.SetReadDeadline(since.Add(bw.timeout))
	}
}
