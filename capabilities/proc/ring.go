package proc

import (
	"sync"
	"unicode/utf8"
)

// ring keeps the last size bytes of one output stream. Writes never block
// (the copying goroutine drains the pipe at the child's pace whatever the
// readers do); offsets count bytes since the stream began, so a reader whose
// cursor fell out of the buffer learns how many bytes it lost.
type ring struct {
	mu     sync.Mutex
	buf    []byte
	size   int
	start  int64 // offset of buf[0]... of the oldest byte held
	end    int64 // offset after the newest byte
	closed bool
	notify chan struct{} // closed and replaced on every write and on close
}

func newRing(size int) *ring {
	return &ring{buf: make([]byte, 0, min(size, 64<<10)), size: size, notify: make(chan struct{})}
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	n := len(p)
	if len(p) >= r.size {
		r.start = r.end + int64(len(p)-r.size)
		r.buf = append(r.buf[:0], p[len(p)-r.size:]...)
	} else {
		if over := len(r.buf) + len(p) - r.size; over > 0 {
			r.buf = append(r.buf[:0], r.buf[over:]...)
			r.start += int64(over)
		}
		r.buf = append(r.buf, p...)
	}
	r.end += int64(n)
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
	return n, nil
}

// close marks the end of the stream.
func (r *ring) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.notify)
		r.notify = make(chan struct{})
	}
	r.mu.Unlock()
}

// chunk is what read returns.
type chunk struct {
	data    []byte
	cursor  int64 // where data starts
	next    int64
	dropped int64
	eof     bool
}

// read returns up to max bytes from cursor, cut back to a whole UTF-8
// character where the cut falls inside one, and a channel closed at the
// next write (for follow).
func (r *ring) read(cursor int64, max int) (chunk, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := chunk{cursor: cursor}
	if cursor < r.start {
		c.dropped = r.start - cursor
		c.cursor = r.start
	}
	if c.cursor > r.end {
		c.cursor = r.end
	}
	from := int(c.cursor - r.start)
	to := min(len(r.buf), from+max)
	if to < len(r.buf) || !r.closed {
		// Do not split a character unless nothing else fits.
		for cut := to; cut > from && cut > to-utf8.UTFMax; cut-- {
			if utf8.RuneStart(r.buf[cut-1]) {
				if !utf8.FullRune(r.buf[cut-1 : to]) {
					to = cut - 1
				}
				break
			}
		}
	}
	c.data = append([]byte(nil), r.buf[from:to]...)
	c.next = c.cursor + int64(len(c.data))
	c.eof = r.closed && c.next == r.end
	return c, r.notify
}
