// Package client is the Go client of aep: it handshakes, sends requests and
// waits for their replies, delivers events to a callback, and offers one
// typed method per request type (generated in gen/msg). Transports plug in
// through the Transport interface: in process (JSON or direct codec), and
// any transport of NDJSON lines.
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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

// Client is a connection to one host session. It is safe for concurrent use.
type Client struct {
	msg.Client // typed request methods

	t         Transport
	mu        sync.Mutex
	pending   map[string]*pending
	sessionID string
	hs        *msg.HandshakeReq // the accepted handshake, which forks repeat (fork.go)
	done      chan struct{}
	err       error
	endOnce   sync.Once
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
}

type result struct {
	m   wire.Message
	err error
}

// New starts a client on t. Call Handshake before any other request.
func New(t Transport) *Client {
	c := &Client{t: t, pending: map[string]*pending{}, done: make(chan struct{})}
	c.Client = msg.Client{Requester: c}
	if d, ok := t.(deliverer); ok && d.Deliver(c.handle, c.end) {
		return c
	}
	if lt, ok := t.(*lineTransport); ok {
		if d, ok := lt.conn.(lineDeliverer); ok && d.DeliverLines(func(line []byte) { c.handleLine(lt.reg, line) }, c.end) {
			return c
		}
	}
	go c.read()
	return c
}

// SessionID returns the session id from the handshake.
func (c *Client) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
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
			e.Code, e.Message = wire.Code(resp.Error.Code), resp.Error.Message
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
// cancelled on the host and ctx's error is returned.
func (c *Client) Request(ctx context.Context, req wire.Message) (wire.Message, error) {
	id := wire.NewID()
	p := &pending{reply: make(chan result, 1)}
	if fn, ok := ctx.Value(eventKey{}).(func(Event)); ok {
		p.onEvent = fn
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.pending[id] = p
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	env := &wire.Envelope{Type: req.MessageType(), ID: id, Proto: wire.ProtoVersion, TS: wire.Now()}
	if err := c.t.Send(ctx, env, req); err != nil {
		return nil, err
	}
	select {
	case r := <-p.reply:
		return r.m, r.err
	case <-ctx.Done():
		_ = c.Notify(context.Background(), &msg.Cancel{ReqID: id})
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.err
	}
}

// Notify sends a message that has no reply (cancel, shutdown).
func (c *Client) Notify(ctx context.Context, m wire.Message) error {
	env := &wire.Envelope{Type: m.MessageType(), ID: wire.NewID(), Proto: wire.ProtoVersion, TS: wire.Now()}
	return c.t.Send(ctx, env, m)
}

// Shutdown asks the host to drain and end this session.
func (c *Client) Shutdown(ctx context.Context, timeoutSeconds float64) error {
	return c.Notify(ctx, &msg.Shutdown{Timeout: &timeoutSeconds})
}

// Done is closed when the transport has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close ends the transport.
func (c *Client) Close() error { return c.t.Close() }

func (c *Client) read() {
	for {
		p, err := c.t.Recv(context.Background())
		if err != nil {
			c.end(err)
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
// decode ends the client, as it does when read from Recv.
func (c *Client) handleLine(reg *wire.Registry, line []byte) {
	p, err := DecodeHostLine(reg, line)
	if err != nil {
		c.end(err)
		return
	}
	c.handle(p)
}

// end records why the transport ended and fails the requests waiting.
func (c *Client) end(err error) {
	c.endOnce.Do(func() {
		c.mu.Lock()
		c.err = fmt.Errorf("%w: %v", ErrClosed, err)
		c.mu.Unlock()
		close(c.done)
	})
}

// handle routes one message from the host to the request it answers. It
// never blocks on a waiting request: each has room for its one reply.
func (c *Client) handle(p *wire.Packet) {
	c.mu.Lock()
	pc := c.pending[p.ReqID]
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
