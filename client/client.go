// Package client is the Go client of aep: it handshakes, sends requests and
// waits for their replies, delivers events to a callback, and offers one
// typed method per request type (generated in gen/msg). Transports plug in
// through the Transport interface: in process (JSON or direct codec), and
// any transport of NDJSON lines. A client made by [Moving] survives the
// loss of its session: it opens a new one through the same URL and
// restores the old one's snapshot (move.go).
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// Transport carries messages between the client and one host session.
type Transport interface {
	Send(ctx context.Context, env *wire.Envelope, m wire.Message) error
	Recv(ctx context.Context) (*wire.Packet, error)
	Close() error
}

// Event is one event delivered while a request is in flight (spec §6).
type Event struct {
	Type  string // e.g. "tool/event"
	ReqID string
	Kind  wire.EventKind
	Data  map[string]any
	Seq   int
}

type eventKey struct{}

// WithEvents returns a context whose requests deliver their events to fn,
// in order, before the request returns. With the in-process transports fn
// runs on the host's goroutine that sends the event, so it should return
// quickly: it holds up that request.
func WithEvents(ctx context.Context, fn func(Event)) context.Context {
	return context.WithValue(ctx, eventKey{}, fn)
}

// ErrClosed is returned for requests on a client whose transport ended.
var ErrClosed = errors.New("client closed")

// Client is a connection to one host session (to a chain of them when it
// moves, [Moving]). It is safe for concurrent use.
type Client struct {
	msg.Client // typed request methods

	mu        sync.Mutex
	t         Transport
	gen       uint64 // generation of t; a move attaches its transport under a new one
	lastGen   uint64 // the newest generation handed out
	pending   map[string]*pending
	sessionID string
	hs        *msg.HandshakeReq // the accepted handshake, which forks (fork.go) and moves (move.go) repeat
	done      chan struct{}
	err       error
	endOnce   sync.Once
	// closing is set by Close and Shutdown: the session's end is then the
	// caller's doing, not a loss to move away from.
	closing bool
	// point is the highest point the replies of the current session
	// carried (docs/DECISIONS.md, Points): what a move passes as
	// last_point, so no host resumes the client from an earlier one
	// without saying so.
	point uint64

	mv     *mover        // nil unless the client moves
	moving chan struct{} // non-nil while a move runs; closed when it ends
	life   context.Context
	stop   context.CancelFunc
}

// deliverer is implemented by transports that hand over what the host sends
// by calling a function on the host's goroutine instead of through Recv (the
// in-process pipes): a reply then reaches its waiting request with one
// goroutine hand-off fewer.
type deliverer interface {
	Deliver(deliver func(*wire.Packet), ended func(error)) bool
}

type pending struct {
	reply   chan result
	onEvent func(Event)
	gen     uint64 // the generation of the transport it was sent on
}

type result struct {
	m   wire.Message
	err error
}

// New starts a client on t. Call Handshake before any other request.
func New(t Transport) *Client {
	c := &Client{t: t, pending: map[string]*pending{}, done: make(chan struct{})}
	c.life, c.stop = context.WithCancel(context.Background())
	c.Client = msg.Client{Requester: c}
	c.attach(t, 0)
	return c
}

// attach starts reading what t delivers; its end is reported as the loss
// of generation gen.
func (c *Client) attach(t Transport, gen uint64) {
	ended := func(err error) { c.lost(gen, err) }
	if d, ok := t.(deliverer); ok && d.Deliver(c.handle, ended) {
		return
	}
	if lt, ok := t.(*lineTransport); ok {
		if d, ok := lt.conn.(lineDeliverer); ok && d.DeliverLines(func(line []byte) { c.handleLine(lt.reg, line, ended) }, ended) {
			return
		}
	}
	go c.read(t, ended)
}

// SessionID returns the session id from the handshake.
func (c *Client) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// Point returns the highest point the replies of the client's session
// carried (schemas/envelope.json): every state-changing request answered
// up to it is acknowledged work a restore must hold. A session/restore
// reply sets it to the point the session resumed from; a move, to the
// point of the snapshot it restored. Pass it as last_point when restoring
// this session elsewhere (session/restore/req from_session).
func (c *Client) Point() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.point
}

// Handshake opens the session (spec §2.4). A refused handshake returns the
// response and a *wire.Error with its code.
func (c *Client) Handshake(ctx context.Context, agentID, token string, caps ...string) (*msg.HandshakeResp, error) {
	if caps == nil {
		caps = []string{}
	}
	req := &msg.HandshakeReq{AgentID: agentID, AgentCaps: caps, AuthToken: token}
	resp, err := c.Client.Handshake(ctx, req)
	if err != nil {
		return nil, err
	}
	if !resp.Ok {
		e := &wire.Error{Code: wire.CodeUnauthorized, Message: "handshake refused"}
		if resp.Error != nil {
			e.Code, e.Message, e.Detail = wire.Code(resp.Error.Code), resp.Error.Message, resp.Error.Detail
		}
		return resp, e
	}
	c.mu.Lock()
	if resp.SessionID != nil {
		c.sessionID = *resp.SessionID
	}
	c.hs = req
	c.mu.Unlock()
	return resp, nil
}

// Request sends req and waits for its reply. An `error` reply is returned as
// a *wire.Error (with Code and Retryable). If ctx ends first, the request is
// cancelled on the host and ctx's error is returned. On a client that moves
// ([Moving]), a request whose session was lost before its reply came fails
// with an error wrapping [ErrInterrupted]; one made while a move runs waits
// for it and goes to the new session.
func (c *Client) Request(ctx context.Context, req wire.Message) (wire.Message, error) {
	if c.mv == nil {
		// Only a move replaces c.t, so it needs no lock here.
		m, err, _ := c.exchange(ctx, c.t, 0, req)
		return m, err
	}
	return c.moveRequest(ctx, req)
}

// exchange sends req on t, the transport of generation gen, and waits for
// its reply. sendErr reports that Send itself failed (the error is then
// Send's), as opposed to a reply, the client's end or ctx.
func (c *Client) exchange(ctx context.Context, t Transport, gen uint64, req wire.Message) (m wire.Message, err error, sendErr bool) {
	id := wire.NewID()
	p := &pending{reply: make(chan result, 1), gen: gen}
	if fn, ok := ctx.Value(eventKey{}).(func(Event)); ok {
		p.onEvent = fn
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err, false
	}
	c.pending[id] = p
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	env := &wire.Envelope{Type: req.MessageType(), ID: id, Proto: wire.ProtoVersion, TS: wire.Now()}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// The caller's trace: the host's spans of this request join it.
		env.Traceparent = Traceparent(sc)
	}
	if err := t.Send(ctx, env, req); err != nil {
		// A transport that answers within Send (single exchange) may have
		// delivered the reply before failing on what followed it.
		select {
		case r := <-p.reply:
			if !errors.Is(r.err, ErrInterrupted) {
				return r.m, r.err, false
			}
		default:
		}
		return nil, err, true
	}
	select {
	case r := <-p.reply:
		return r.m, r.err, false
	case <-ctx.Done():
		c.notifyOn(t, &msg.Cancel{ReqID: id})
		return nil, ctx.Err(), false
	case <-c.done:
		// The reader delivers a reply before it ends the client, but a
		// select with both ready picks either: the reply wins.
		select {
		case r := <-p.reply:
			return r.m, r.err, false
		default:
		}
		return nil, c.err, false
	}
}

// Notify sends a message that has no reply (cancel, shutdown).
func (c *Client) Notify(ctx context.Context, m wire.Message) error {
	t := c.t
	if c.mv != nil {
		c.mu.Lock()
		t = c.t
		c.mu.Unlock()
	}
	env := &wire.Envelope{Type: m.MessageType(), ID: wire.NewID(), Proto: wire.ProtoVersion, TS: wire.Now()}
	return t.Send(ctx, env, m)
}

// notifyOn sends a cancel for a request on the transport it went out on,
// which a move may since have replaced.
func (c *Client) notifyOn(t Transport, m wire.Message) {
	env := &wire.Envelope{Type: m.MessageType(), ID: wire.NewID(), Proto: wire.ProtoVersion, TS: wire.Now()}
	_ = t.Send(context.Background(), env, m)
}

// Shutdown asks the host to drain and end this session. A client that
// moves does not move away from a session it shut down.
func (c *Client) Shutdown(ctx context.Context, timeoutSeconds float64) error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	return c.Notify(ctx, &msg.Shutdown{Timeout: &timeoutSeconds})
}

// Done is closed when the transport has ended (for a client that moves:
// when it was closed, or a move failed).
func (c *Client) Done() <-chan struct{} { return c.done }

// closeShutdownTimeout bounds the `shutdown` Close sends.
const closeShutdownTimeout = 2 * time.Second

// Close ends the client's session on the host — a `shutdown` with no
// grace, so what is still in flight is cancelled — then the transport,
// and stops a move under way. Over every transport the session ends now,
// rather than when it idles out (HTTP, single exchange) or when its
// WebSocket's re-attach grace passes: an abandoned session would
// otherwise stay, and a drain would spend its time saving it. Use
// [Client.Shutdown] first to let requests in flight finish.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closing = true
	t := c.t
	live := c.sessionID != "" && c.err == nil && c.moving == nil
	c.mu.Unlock()
	c.stop()
	if live {
		ctx, cancel := context.WithTimeout(context.Background(), closeShutdownTimeout)
		now := 0.0
		// Best effort: a session already gone needs no shutdown.
		_ = t.Send(ctx, &wire.Envelope{Type: "shutdown", ID: wire.NewID(), Proto: wire.ProtoVersion, TS: wire.Now()}, &msg.Shutdown{Timeout: &now})
		cancel()
	}
	return t.Close()
}

func (c *Client) read(t Transport, ended func(error)) {
	for {
		p, err := t.Recv(context.Background())
		if err != nil {
			ended(err)
			return
		}
		c.handle(p)
	}
}

// lineDeliverer is a LineConn that can hand over lines the way a
// deliverer hands over messages (the in-process JSON pipe).
type lineDeliverer interface {
	DeliverLines(deliver func([]byte), ended func(error)) bool
}

// handleLine decodes one host line and routes it; a line that does not
// decode ends the transport, as it does when read from Recv.
func (c *Client) handleLine(reg *wire.Registry, line []byte, ended func(error)) {
	p, err := DecodeHostLine(reg, line)
	if err != nil {
		ended(err)
		return
	}
	c.handle(p)
}

// end records why the client ended and fails the requests waiting.
func (c *Client) end(err error) {
	c.endOnce.Do(func() {
		c.mu.Lock()
		if errors.Is(err, ErrClosed) {
			c.err = err
		} else {
			c.err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		c.mu.Unlock()
		c.stop()
		close(c.done)
	})
}

// handle routes one message from the host to the request it answers. It
// never blocks on a waiting request: each has room for its one reply.
func (c *Client) handle(p *wire.Packet) {
	c.mu.Lock()
	pc := c.pending[p.ReqID]
	if pc != nil && p.HasPoint && !strings.HasSuffix(p.Type, "/event") {
		c.notePoint(pc.gen, p)
	}
	c.mu.Unlock()
	if pc == nil {
		return // a reply to a request that gave up waiting
	}
	var r result
	switch m := p.Msg.(type) {
	case *msg.Event:
		if pc.onEvent != nil {
			pc.onEvent(Event{Type: p.Type, ReqID: p.ReqID, Kind: wire.EventKind(m.Kind), Data: m.Data, Seq: m.Seq})
		}
		return
	case *msg.Error:
		e := &wire.Error{Code: wire.Code(m.Code), Message: m.Message, Detail: m.Detail}
		if m.CapabilityName != nil {
			e.Capability = *m.CapabilityName
		}
		r.err = e
	default:
		r.m = p.Msg
	}
	select {
	case pc.reply <- r:
	default: // a second reply; the host sends exactly one
	}
}

// notePoint records the point of a reply that came on the transport of
// generation gen: the highest one the current session's replies carried,
// or, for a restore, the point the session resumed from. Replies on a
// transport a move left or has not yet made current are not the
// session's points. c.mu is held.
func (c *Client) notePoint(gen uint64, p *wire.Packet) {
	if gen != c.gen || c.moving != nil {
		return
	}
	if p.Type == "session/restore/resp" || p.Point > c.point {
		c.point = p.Point
	}
}

// DecodeHostLine decodes one line the host sent, using reg for reply types;
// `<ns>/event` lines decode to *msg.Event.
func DecodeHostLine(reg *wire.Registry, line []byte) (*wire.Packet, error) {
	var sc wire.Scanned
	if err := wire.Scan(line, &sc); err != nil {
		return nil, err
	}
	p := &wire.Packet{Envelope: sc.Envelope, Size: len(line)}
	if strings.HasSuffix(sc.Type, "/event") {
		var ev msg.Event
		if err := wire.Unmarshal(line, &ev); err != nil {
			return nil, err
		}
		p.Msg = &ev
		return p, nil
	}
	e := reg.Lookup(sc.Type)
	if e == nil {
		return nil, fmt.Errorf("unknown type %q from host", sc.Type)
	}
	m, err := wire.DecodeBody(e, line)
	if err != nil {
		return nil, err
	}
	p.Msg = m
	return p, nil
}
