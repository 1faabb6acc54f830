package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/aephost/aep/wire"
)

// ErrSessionClosed is returned by in-process pipes whose session ended.
var ErrSessionClosed = errors.New("session closed")

// queue is the bounded host→agent queue of one in-process connection. The
// agent→host direction needs no queue of its own: a send hands the message
// to the session, which only queues requests for its workers and never
// waits on a handler.
type queue[T any] struct {
	ch     chan T
	closed chan struct{}
	once   sync.Once
	// deliver, once set by subscribe, receives every message in place of ch:
	// it runs on the sending goroutine, which saves the agent side one
	// goroutine hand-off per message.
	deliver atomic.Pointer[func(T)]
	ended   atomic.Pointer[func(error)]
}

func newQueue[T any](n int) *queue[T] {
	if n <= 0 {
		n = 256
	}
	return &queue[T]{ch: make(chan T, n), closed: make(chan struct{})}
}

// put blocks while the queue is full, applying backpressure to this
// session's handlers only, until the session closes.
func (q *queue[T]) put(v T) error {
	if fn := q.deliver.Load(); fn != nil {
		select {
		case <-q.closed:
			return ErrSessionClosed
		default:
		}
		(*fn)(v)
		return nil
	}
	select {
	case q.ch <- v:
		return nil
	case <-q.closed:
		return ErrSessionClosed
	}
}

func (q *queue[T]) get(ctx context.Context) (T, error) {
	var zero T
	select {
	case v := <-q.ch:
		return v, nil
	default:
	}
	select {
	case v := <-q.ch:
		return v, nil
	case <-q.closed:
		// Deliver what was queued before the close.
		select {
		case v := <-q.ch:
			return v, nil
		default:
			return zero, ErrSessionClosed
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (q *queue[T]) close() {
	q.once.Do(func() {
		close(q.closed)
		if fn := q.ended.Load(); fn != nil {
			(*fn)(ErrSessionClosed)
		}
	})
}

// subscribe switches the queue to calling deliver for each message, and
// ended once when the session closes. It must be called before the agent
// sends its first message, while nothing can be queued yet; it reports
// false, changing nothing, if something was.
func (q *queue[T]) subscribe(deliver func(T), ended func(error)) bool {
	if len(q.ch) > 0 {
		return false
	}
	var once sync.Once
	end := func(err error) { once.Do(func() { ended(err) }) }
	q.ended.Store(&end)
	q.deliver.Store(&deliver)
	select {
	case <-q.closed:
		// Closed before end was stored, so close may not have called it.
		end(ErrSessionClosed)
	default:
	}
	return true
}

// LinePipe is the agent's end of an in-process connection with the JSON
// codec: the same NDJSON lines as the other transports cross it, so it
// exercises the real decoder.
type LinePipe struct {
	s *Session
	q *queue[[]byte]
}

type lineSink struct{ q *queue[[]byte] }

// Transport names the sink for the by-transport session gauge.
func (lineSink) Transport() string { return "inprocess" }

func (k lineSink) Send(p *wire.Packet) (int, error) {
	line, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		return 0, err
	}
	return len(line), k.q.put(line)
}

func (k lineSink) Close() { k.q.close() }

// ConnectLines opens a session reached through a LinePipe. buffer bounds
// the host→agent queue.
func (h *Host) ConnectLines(buffer int) (*LinePipe, error) {
	q := newQueue[[]byte](buffer)
	s, err := h.NewSession(lineSink{q})
	if err != nil {
		return nil, err
	}
	return &LinePipe{s: s, q: q}, nil
}

// Session returns the session behind the pipe.
func (p *LinePipe) Session() *Session { return p.s }

// WriteLine sends one line to the host.
func (p *LinePipe) WriteLine(ctx context.Context, line []byte) error {
	// The state, not done: a closing session closes its sink (the reader
	// sees the end) before done, and a write after that end must fail.
	if p.s.closing() {
		return ErrSessionClosed
	}
	p.s.ReceiveLine(line)
	return nil
}

// ReadLine returns the next line the host sent.
func (p *LinePipe) ReadLine(ctx context.Context) ([]byte, error) { return p.q.get(ctx) }

// DeliverLines makes the pipe call deliver with each line the host sends,
// on the host's goroutine, instead of queueing it for ReadLine; see
// [DirectPipe.Deliver].
func (p *LinePipe) DeliverLines(deliver func([]byte), ended func(error)) bool {
	return p.q.subscribe(deliver, ended)
}

// Close ends the session.
func (p *LinePipe) Close() error {
	p.s.closeOrDetach(lineSink{p.q})
	return nil
}

// DirectPipe is the agent's end of an in-process connection with the direct
// codec: typed values cross it without JSON, still validated by the
// generated validators (docs/DECISIONS.md, Transports). Values are shared, not copied:
// neither side may change a message after sending it.
type DirectPipe struct {
	s *Session
	q *queue[*wire.Packet]
}

type directSink struct{ q *queue[*wire.Packet] }

// Transport names the sink for the by-transport session gauge.
func (directSink) Transport() string { return "inprocess" }

func (k directSink) Send(p *wire.Packet) (int, error) { return 0, k.q.put(p) }
func (k directSink) Close()                           { k.q.close() }

// ConnectDirect opens a session reached through a DirectPipe. opts are
// passed to NewSession (the MCP face gives the client's address, for the
// handshake throttle).
func (h *Host) ConnectDirect(buffer int, opts ...SessionOption) (*DirectPipe, error) {
	q := newQueue[*wire.Packet](buffer)
	s, err := h.NewSession(directSink{q}, opts...)
	if err != nil {
		return nil, err
	}
	return &DirectPipe{s: s, q: q}, nil
}

// Session returns the session behind the pipe.
func (p *DirectPipe) Session() *Session { return p.s }

// Send hands one message to the host.
func (p *DirectPipe) Send(ctx context.Context, env *wire.Envelope, m wire.Message) error {
	if p.s.closing() { // as LinePipe.WriteLine
		return ErrSessionClosed
	}
	p.s.ReceivePacket(env, m)
	return nil
}

// Recv returns the next message the host sent.
func (p *DirectPipe) Recv(ctx context.Context) (*wire.Packet, error) { return p.q.get(ctx) }

// Deliver makes the pipe call deliver with each message the host sends, on
// the host's goroutine, instead of queueing it for Recv; ended is called
// once when the session closes. deliver must not block for long: it holds
// up the request that sends. Call it before sending anything; it reports
// false if a message was already queued.
func (p *DirectPipe) Deliver(deliver func(*wire.Packet), ended func(error)) bool {
	return p.q.subscribe(deliver, ended)
}

// Close ends the session.
func (p *DirectPipe) Close() error {
	p.s.closeOrDetach(directSink{p.q})
	return nil
}
