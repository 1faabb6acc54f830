package httpapi

import (
	"context"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// stream is the HTTP side of one session. It is the session's [server.Sink]:
// every message the host sends is encoded at once into a complete SSE event
// and kept in a bounded ring, so the kernel never waits on the network and a
// reader that stops reading delays nobody but itself (docs/DECISIONS.md, Transports). The
// ring doubles as the replay buffer for Last-Event-ID.
type stream struct {
	a    *api
	id   string
	sess *server.Session

	mu        sync.Mutex
	ring      []frame // circular; ring[head] is the oldest of n frames
	head, n   int
	bytes     int
	next      uint64 // sequence number of the next message, from 1
	delivered uint64 // highest sequence number a reader handed to the network
	gen       uint64 // generation of the newest reader; older readers end
	closed    bool
	notify    chan struct{} // closed on any change; nil while nobody waits

	ex exchanges // POST /send requests answered in their own response (exchange.go)
}

// frame is one complete SSE event: "id: N\ndata: <message>\n\n".
type frame struct {
	seq  uint64
	data []byte
}

func newStream(a *api) *stream {
	return &stream{a: a, ring: make([]frame, a.opts.BufferMessages), next: 1}
}

// attach binds the stream to its session; it is called before the session
// can send anything to it.
func (st *stream) attach(s *server.Session) {
	st.mu.Lock()
	st.id, st.sess = s.ID(), s
	st.mu.Unlock()
}

// limit is the ring's bound in bytes: a session that has not handshaken
// gets the small pending buffer, so that the many sessions anyone can open
// hold little each (docs/SECURITY.md, The edge).
func (st *stream) limit() int {
	if st.sess != nil && !st.sess.Live() && !st.sess.HostMade() {
		return st.a.opts.PendingBufferBytes
	}
	return st.a.opts.BufferBytes
}

var encPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Transport names the sink for the by-transport session gauge.
func (*stream) Transport() string { return "http" }

// Send encodes p and appends it to the ring. It never blocks on a reader.
func (st *stream) Send(p *wire.Packet) (int, error) {
	if n, ok := st.ex.route(p); ok {
		return n, nil
	}
	bp := encPool.Get().(*[]byte)
	line, err := wire.AppendEncode((*bp)[:0], &p.Envelope, p.Msg)
	if err != nil {
		encPool.Put(bp)
		return 0, err
	}
	st.mu.Lock()
	seq := st.next
	st.next++
	// Evict the oldest frames while the ring is over either bound; the newest
	// frame is always kept, however large.
	size := len(line) + 32
	limit := st.limit()
	for st.n > 0 && (st.n == len(st.ring) || st.bytes+size > limit) {
		st.evict()
	}
	i := (st.head + st.n) % len(st.ring)
	buf := st.ring[i].data[:0] // reuse an evicted frame's memory
	buf = append(buf, "id: "...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, line...)
	buf = append(buf, "\n\n"...)
	st.ring[i] = frame{seq: seq, data: buf}
	st.n++
	st.bytes += cap(buf)
	st.wake()
	st.mu.Unlock()
	*bp = line
	encPool.Put(bp)
	return len(line), nil
}

// evict drops the oldest frame. A frame no reader delivered yet is lost to
// this session's reader; the reader notes the gap on its stream when it
// reaches it (docs/DECISIONS.md, HTTP transport).
//
// Its memory is kept for the next frame written to its slot only when it
// is no larger than the ring's share per slot: the bound counts the
// frames held, and without this a slot that once held a large message
// would keep that memory for good, every slot of the ring the largest
// message it ever held (the ring's slots times the output cap).
func (st *stream) evict() {
	f := &st.ring[st.head]
	st.bytes -= cap(f.data)
	if cap(f.data) <= st.limit()/len(st.ring) {
		f.data = f.data[:0]
	} else {
		f.data = nil
	}
	st.head = (st.head + 1) % len(st.ring)
	st.n--
}

func (st *stream) wake() {
	if st.notify != nil {
		close(st.notify)
		st.notify = nil
	}
}

// Close is called by the kernel when the session ends: readers deliver what
// is left and then end their streams.
func (st *stream) Close() {
	st.mu.Lock()
	st.closed = true
	st.wake()
	id := st.id
	st.mu.Unlock()
	if id != "" {
		st.a.forget(id)
	}
}

func (st *stream) isClosed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.closed
}

// oldest returns the sequence number of the oldest frame held (next when empty).
func (st *stream) oldest() uint64 {
	if st.n == 0 {
		return st.next
	}
	return st.ring[st.head].seq
}

// reader opens a reader that starts after sequence number after, or after
// what earlier readers delivered when after is nil. It ends any older reader.
func (st *stream) reader(ctx context.Context, after *uint64) *sseReader {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.gen++
	st.wake()
	cursor := st.delivered
	if after != nil {
		cursor = min(*after, st.next-1)
	}
	return &sseReader{st: st, ctx: ctx, gen: st.gen, cursor: cursor, pending: []byte(": aep stream " + st.id + "\n\n")}
}

// sseReader is the body of one GET /stream response. The generated strict
// handler reads it and flushes after every Read, so each Read returns at most
// one event (or the rest of one that did not fit).
type sseReader struct {
	st      *stream
	ctx     context.Context
	gen     uint64
	cursor  uint64 // last sequence number handed out
	pending []byte // rest of the current event, or a comment
	timer   *time.Timer
}

// Read blocks until there is an event, a heartbeat is due, or the stream
// ends: the request's context is done, the session closed and everything was
// delivered, or a newer reader of the same session took over.
func (r *sseReader) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	st := r.st
	for {
		st.mu.Lock()
		if st.gen != r.gen {
			st.mu.Unlock()
			return 0, io.EOF
		}
		if oldest := st.oldest(); r.cursor+1 < oldest {
			// The reader fell behind the ring: say so in a comment, once per gap.
			lost := oldest - 1 - r.cursor
			from := r.cursor + 1
			r.cursor = oldest - 1
			st.mu.Unlock()
			st.a.log.Warn("sse reader fell behind; oldest messages dropped", "session", st.sess.Handle(), "dropped", lost)
			r.pending = []byte(": dropped " + strconv.FormatUint(lost, 10) + " messages from id " + strconv.FormatUint(from, 10) + ": the reader fell behind the replay buffer\n\n")
			return r.Read(p)
		}
		if r.cursor+1 < st.next {
			f := &st.ring[(st.head+int(r.cursor+1-st.oldest()))%len(st.ring)]
			n := copy(p, f.data)
			if n < len(f.data) {
				r.pending = append(r.pending[:0], f.data[n:]...)
			}
			r.cursor = f.seq
			st.delivered = max(st.delivered, f.seq)
			st.mu.Unlock()
			return n, nil
		}
		if st.closed {
			st.mu.Unlock()
			return 0, io.EOF
		}
		if st.notify == nil {
			st.notify = make(chan struct{})
		}
		ch := st.notify
		st.mu.Unlock()

		if r.timer == nil {
			r.timer = time.NewTimer(st.a.opts.Heartbeat)
		} else {
			r.timer.Reset(st.a.opts.Heartbeat)
		}
		select {
		case <-ch:
			r.timer.Stop()
		case <-r.timer.C:
			r.pending = append(r.pending[:0], ": heartbeat\n\n"...)
			return r.Read(p)
		case <-r.ctx.Done():
			r.timer.Stop()
			return 0, io.EOF
		}
	}
}

// Close ends the reader; the generated handler calls it when the response ends.
func (r *sseReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}
