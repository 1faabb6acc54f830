package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Forks are the connected clients of a session fork, in the order of the
// host's reply.
type Forks struct {
	// Reply is the host's session/fork/resp (Copy, NotForked, ...).
	Reply *msg.SessionForkResp
	// Clients are handshaken clients of the forks, Clients[i] of Reply.Forks[i].
	Clients []*Client
}

// Close closes every fork's client, ending the forks' sessions.
func (f *Forks) Close() error {
	var errs []error
	for _, c := range f.Clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// AttachFunc connects a transport to an existing session that waits for
// its handshake (a fork or a subagent's child), by its session id.
type AttachFunc func(ctx context.Context, sessionID string) (Transport, error)

// ForkOption adjusts [Client.Fork].
type ForkOption func(*forkOptions)

type forkOptions struct {
	snapshot *string
	attach   AttachFunc
	hs       *msg.HandshakeReq
}

// FromSnapshot forks from a snapshot of the session instead of its
// current state (session/fork/req snapshot_id).
func FromSnapshot(snapshotID string) ForkOption {
	return func(o *forkOptions) { o.snapshot = &snapshotID }
}

// ForkAttach sets how the forks are reached. HTTP and WebSocket clients
// need none (the forks are reached over the same transport, the session
// id in X-Session-Id); in process, pass [InProcessAttach].
func ForkAttach(fn AttachFunc) ForkOption {
	return func(o *forkOptions) { o.attach = fn }
}

// ForkHandshake sets the forks' handshake; by default each fork handshakes
// as this client did (agent id, token, capabilities).
func ForkHandshake(agentID, token string, caps ...string) ForkOption {
	return func(o *forkOptions) {
		if caps == nil {
			caps = []string{}
		}
		o.hs = &msg.HandshakeReq{AgentID: agentID, AuthToken: token, AgentCaps: caps}
	}
}

// InProcessAttach reaches sessions of h in process, with codec (and reg
// for the JSON codec, h's registry when nil), as [InProcess] connects.
func InProcessAttach(h *server.Host, codec Codec, reg *wire.Registry) AttachFunc {
	return func(ctx context.Context, id string) (Transport, error) {
		if codec == Direct {
			p, err := h.ConnectDirectTo(id, 256)
			if err != nil {
				return nil, err
			}
			return p, nil
		}
		p, err := h.ConnectLinesTo(id, 256)
		if err != nil {
			return nil, err
		}
		r := reg
		if r == nil {
			r = h.Registry()
		}
		return Lines(p, r), nil
	}
}

// Fork forks this session n ways (session/fork/req, SPEC §1; docs/DECISIONS.md,
// Session fork) and returns a handshaken client for each fork. Every fork
// starts from this session's state at the time of the request (its
// working memory, episodes and files), or from a snapshot with
// [FromSnapshot]; from then on each goes its own way, and this session is
// unchanged. A fork that cannot be reached or refuses its handshake closes
// the forks already connected and returns the error; forks not yet reached
// are closed by the host after Reply.HandshakeTimeout.
func (c *Client) Fork(ctx context.Context, n int, opts ...ForkOption) (*Forks, error) {
	var o forkOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.hs == nil {
		c.mu.Lock()
		o.hs = c.hs
		c.mu.Unlock()
		if o.hs == nil {
			return nil, errors.New("fork: handshake first, or pass ForkHandshake")
		}
	}
	if o.attach == nil {
		o.attach = c.attacher()
		if o.attach == nil {
			return nil, errors.New("fork: this transport cannot reach another session; pass ForkAttach (InProcessAttach in process)")
		}
	}
	reply, err := c.SessionFork(ctx, &msg.SessionForkReq{Count: n, SnapshotID: o.snapshot})
	if err != nil {
		return nil, err
	}
	out := &Forks{Reply: reply}
	for i, f := range reply.Forks {
		t, err := o.attach(ctx, f.SessionID)
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("fork %d of %d: attaching: %w", i+1, len(reply.Forks), err)
		}
		fc := New(t)
		out.Clients = append(out.Clients, fc)
		if _, err := fc.Handshake(ctx, o.hs.AgentID, o.hs.AuthToken, o.hs.AgentCaps...); err != nil {
			out.Close()
			return nil, fmt.Errorf("fork %d of %d: handshake: %w", i+1, len(reply.Forks), err)
		}
	}
	return out, nil
}

// attacher reaches other sessions over this client's own transport, when
// it can: HTTP (X-Session-Id on /send and /stream) and WebSocket
// (X-Session-Id on the upgrade).
func (c *Client) attacher() AttachFunc {
	c.mu.Lock()
	t := c.t // a move may replace it
	c.mu.Unlock()
	lt, ok := t.(*lineTransport)
	if !ok {
		return nil
	}
	switch conn := lt.conn.(type) {
	case *HTTPConn:
		return func(ctx context.Context, id string) (Transport, error) {
			hc, err := AttachHTTP(ctx, conn.base, id, conn.hc)
			if err != nil {
				return nil, err
			}
			return Lines(hc, lt.reg), nil
		}
	case *WSConn:
		return func(ctx context.Context, id string) (Transport, error) {
			opts := conn.opts
			opts.SessionID = id
			wc, err := DialWebSocket(ctx, conn.url, opts)
			if err != nil {
				return nil, err
			}
			return Lines(wc, lt.reg), nil
		}
	}
	return nil
}
