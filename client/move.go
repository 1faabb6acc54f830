package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// Moving between hosts (docs/deploy.md, When a host goes away): a client
// made by [Moving] holds one session at a time, on whichever host a proxy
// in front of a fleet sent it to. When that session is lost — its
// transport ends and cannot be re-attached, or the host answers that the
// session is unknown (HTTP 404), draining or gone (503, 502, connection
// refused) — the client opens a new session through the same URL,
// handshakes with the same agent id, token and capabilities, sends
// session/restore/req {from_session: <the lost session's id>}, and carries
// on in the new session.
//
// No request is sent twice where it could run twice. A request the lost
// session may have received fails with an error wrapping
// [ErrInterrupted]: its reply will never come, and whether it ran is
// unknown. A request the old host refused without running it (404 or 503
// to POST /send, a refused connection, a `shutting_down` error reply) is
// sent again in the new session. Requests made while a move runs wait for
// it.

// ErrInterrupted wraps the error of a request whose session was lost
// before its reply came: the request may or may not have run. It is never
// resent; retry it only if running it twice is harmless.
var ErrInterrupted = errors.New("request interrupted: its session was lost before the reply; it may or may not have run")

// ErrMoveFailed wraps why a client could not move to a new session; the
// client has then ended ([Client.Done]).
var ErrMoveFailed = errors.New("moving to a new session failed")

// ErrNoSnapshot is the cause of a failed move whose lost session left no
// snapshot to restore (its host died without draining, or drained without
// operator.snapshot_on_drain), unless [MoveOptions.Fresh] is set.
var ErrNoSnapshot = errors.New("the lost session left no snapshot")

// ErrPointGap is the cause of a failed move whose lost session's newest
// snapshot covers less than the client saw (docs/DECISIONS.md, Points):
// restoring it would silently roll back acknowledged work, so the move
// fails rather than resume from an earlier point, unless
// [MoveOptions.AcceptGap] is set. The wrapped *wire.Error's detail says
// the snapshot's point, the last seen one and how many acknowledged
// state-changing requests lie between.
var ErrPointGap = errors.New("the lost session's newest snapshot does not hold everything the client saw acknowledged")

// A Dialer opens a transport to a new session, e.g. through a proxy in
// front of several hosts. [Moving] calls it for the first session and for
// each move.
type Dialer func(ctx context.Context) (Transport, error)

// WebSocketDialer dials new sessions at url (GET /ws) with opts (nil for
// none); opts.SessionID is ignored.
func WebSocketDialer(url string, opts *WSOptions) Dialer {
	o := WSOptions{}
	if opts != nil {
		o = *opts
	}
	o.SessionID = ""
	return func(ctx context.Context) (Transport, error) {
		conn, err := DialWebSocket(ctx, url, o)
		if err != nil {
			return nil, err
		}
		return Lines(conn, o.Registry), nil
	}
}

// ExchangeDialer dials new sessions at baseURL in single-exchange mode
// ([SingleExchange]); hc and reg may be nil.
func ExchangeDialer(baseURL string, hc *http.Client, reg *wire.Registry) Dialer {
	return func(ctx context.Context) (Transport, error) {
		return DialExchange(ctx, baseURL, hc, reg)
	}
}

// HTTPDialer dials new sessions at baseURL over HTTP with an event stream
// ([DialHTTP]); hc and reg may be nil.
func HTTPDialer(baseURL string, hc *http.Client, reg *wire.Registry) Dialer {
	return func(ctx context.Context) (Transport, error) {
		conn, err := DialHTTP(ctx, baseURL, hc)
		if err != nil {
			return nil, err
		}
		return Lines(conn, reg), nil
	}
}

// MoveOptions tune a client that moves ([Moving]). The zero value is ready
// to use.
type MoveOptions struct {
	// Timeout bounds one move: reaching a live host, the handshake and the
	// restore. Default 30s.
	Timeout time.Duration
	// SnapshotWait is how long a move keeps asking for the lost session's
	// snapshot while the store has none, or none that covers the client's
	// last seen point ([Client.Point]): its host snapshots as it drains,
	// which a proxy's health check may see before. A draining host says
	// how long its snapshot may take (shutting_down's
	// detail.snapshot_wait); the move waits the longer of the two, within
	// Timeout. Default 5s.
	SnapshotWait time.Duration
	// AcceptGap lets a move go on from a snapshot that covers less than
	// the client saw, once SnapshotWait has passed without a newer one:
	// [Move.Gap] then says what was lost. Without it such a move fails
	// with [ErrPointGap]: the client is never resumed from an earlier
	// point without saying so.
	AcceptGap bool
	// Fresh lets a move whose lost session left no snapshot carry on in
	// the new, empty session, reported by [Move.Fresh]. Without it such a
	// move fails with [ErrNoSnapshot]: state the caller relies on is gone.
	Fresh bool
	// OnMove, when set, is called after each move, successful or not, on
	// the goroutine that moved. Requests do not wait for it.
	OnMove func(Move)
}

func (o *MoveOptions) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return 30 * time.Second
}

func (o *MoveOptions) snapshotWait() time.Duration {
	if o.SnapshotWait > 0 {
		return o.SnapshotWait
	}
	return 5 * time.Second
}

// Move records one move of a client. From and To are transport session
// ids: bearer secrets, which must not be logged or shown to others.
type Move struct {
	From, To string
	// SnapshotID is the snapshot of From that was restored into To; empty
	// when the move was Fresh or failed.
	SnapshotID string
	// Restored lists the plugins whose state came back.
	Restored []string
	// Fresh reports a move that found no snapshot of From and went on in
	// an empty session ([MoveOptions.Fresh]).
	Fresh bool
	// LastPoint is the client's last seen point in From, which the
	// restore had to cover; Point is the point To resumed from (the
	// snapshot's). Gap, when set, is what a move with
	// [MoveOptions.AcceptGap] lost: the snapshot covered less than
	// LastPoint.
	LastPoint, Point uint64
	Gap              *msg.PointGap
	// Cause is why the session was taken for lost.
	Cause error
	// Err is why the move failed; nil when it succeeded.
	Err error
	// Took is how long the move took.
	Took time.Duration
}

// mover is the moving state of a [Client].
type mover struct {
	dial  Dialer
	opts  MoveOptions
	moves []Move
}

// Moving dials a first session with dial and returns a client that moves
// to a new session when that one is lost, restoring its snapshot (see
// [ErrInterrupted] for what happens to requests then). opts may be nil.
// Call Handshake next; a session lost before the handshake ends the client.
func Moving(ctx context.Context, dial Dialer, opts *MoveOptions) (*Client, error) {
	t, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	c := &Client{t: t, pending: map[string]*pending{}, done: make(chan struct{}), mv: &mover{dial: dial}}
	if opts != nil {
		c.mv.opts = *opts
	}
	c.life, c.stop = context.WithCancel(context.Background())
	c.Client = msg.Client{Requester: c}
	c.attach(t, 0)
	return c, nil
}

// Moves returns the moves the client made so far, oldest first.
func (c *Client) Moves() []Move {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mv == nil {
		return nil
	}
	return slices.Clone(c.mv.moves)
}

// maxResends bounds how often one request is sent again after refusals,
// each in a new session.
const maxResends = 3

// probeTimeout bounds the check whether a session still answers.
const probeTimeout = 5 * time.Second

// moveRequest is Request on a client that moves.
func (c *Client) moveRequest(ctx context.Context, req wire.Message) (wire.Message, error) {
	for try := 0; ; try++ {
		t, gen, err := c.current(ctx)
		if err != nil {
			return nil, err
		}
		m, err, sendErr := c.exchange(ctx, t, gen, req)
		switch {
		case err == nil || ctx.Err() != nil:
			return m, err
		case sendErr && errors.Is(err, errNotSent):
			// The connection ended for good before the message left.
			if !c.lost(gen, err) {
				return nil, err
			}
		case sendErr:
			if !c.sendLost(ctx, t, gen, err) {
				var se *statusError
				if (errors.As(err, &se) && se.status/100 == 4) || notRun(err) {
					return nil, err // judged or refused before any session saw it
				}
				return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			if !notRun(err) {
				return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
		default:
			switch wire.ReasonOf(wireDetail(err)) {
			case "shutting_down": // the host refused it: the session is ending
				if !c.lostByHost(gen, err) {
					return nil, err
				}
			case "session_ended": // it was running when the session ended
				if c.lostByHost(gen, err) {
					return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
				}
				return nil, err
			case "terminated": // the operator ended the session: never moved
				c.end(err)
				return nil, err
			default:
				return m, err
			}
		}
		if try == maxResends {
			return nil, fmt.Errorf("refused by %d sessions in turn: %w", try+1, err)
		}
		// Not run: send it again once the move has found a new session.
	}
}

// CloseTerminated is the WebSocket close code of a session the operator
// terminated (the admin API, docs/operating.md).
const CloseTerminated websocket.StatusCode = 4410

// Terminated reports whether err says the operator terminated the session
// (the admin API): a reply with detail.reason terminated, or a WebSocket
// closed with [CloseTerminated]. A client that moves ends instead.
func Terminated(err error) bool {
	if wire.ReasonOf(wireDetail(err)) == "terminated" || websocket.CloseStatus(err) == CloseTerminated {
		return true
	}
	// A transport id the host answers 404 terminated (openapi.yaml).
	var se *statusError
	if errors.As(err, &se) && se.status == http.StatusNotFound {
		var body struct {
			Error string `json:"error"`
		}
		return json.Unmarshal([]byte(se.body), &body) == nil && body.Error == "terminated"
	}
	return false
}

func wireDetail(err error) any {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Detail
	}
	return nil
}

// current returns the transport to send on, waiting out a move.
func (c *Client) current(ctx context.Context) (Transport, uint64, error) {
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return nil, 0, err
		}
		if c.moving == nil {
			t, gen := c.t, c.gen
			c.mu.Unlock()
			return t, gen, nil
		}
		ch := c.moving
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// prober is a transport that can ask whether its session still answers:
// an HTTP transport, whose failed POST /send may be the session's loss or
// only a broken connection to the proxy. A WebSocket transport has no such
// check: its connection re-attaches, or ends.
type prober interface {
	probe(ctx context.Context) error
}

// sendLost decides whether a failed Send means the session is lost and,
// if so, starts a move. The session answering a probe is not lost.
func (c *Client) sendLost(ctx context.Context, t Transport, gen uint64, err error) bool {
	var se *statusError
	if errors.As(err, &se) && se.status/100 == 4 && se.status != http.StatusNotFound {
		return false // 400, 403, 413: the host judged the message
	}
	pr, ok := t.(prober)
	if lt, isLines := t.(*lineTransport); isLines {
		pr, ok = lt.conn.(prober)
	}
	if !ok {
		return false
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	perr := pr.probe(pctx)
	cancel()
	if perr == nil {
		return false
	}
	return c.lost(gen, err)
}

// lostByHost handles a reply saying the session is ending, which the
// caller did not ask for: the session is lost.
func (c *Client) lostByHost(gen uint64, err error) bool {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	return !closing && c.lost(gen, err)
}

// notRun reports a Send failure that proves the message never reached a
// session: the proxy or host refused it before any session saw it.
func notRun(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.status == http.StatusNotFound || se.status == http.StatusServiceUnavailable
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// lost handles the loss of the transport of generation gen: its requests
// still waiting fail with ErrInterrupted, and a move starts when gen is the
// client's current one. A client that does not move, has not handshaken,
// or is closing ends instead. It reports whether the client moves (or
// already moved) away from gen.
func (c *Client) lost(gen uint64, cause error) bool {
	if Terminated(cause) {
		// The operator ended the session on purpose: moving would bring
		// it back elsewhere.
		c.end(cause)
		return false
	}
	c.mu.Lock()
	if c.mv == nil || c.hs == nil || c.closing {
		current := gen == c.gen && c.moving == nil
		c.mu.Unlock()
		if current {
			c.end(cause)
		}
		return false
	}
	for _, p := range c.pending {
		if p.gen == gen {
			select {
			case p.reply <- result{err: fmt.Errorf("%w: %w", ErrInterrupted, cause)}:
			default:
			}
		}
	}
	if gen != c.gen || c.err != nil {
		moved := gen < c.gen || c.moving != nil
		c.mu.Unlock()
		return moved
	}
	if c.moving != nil {
		c.mu.Unlock()
		return true
	}
	c.moving = make(chan struct{})
	from, old, hs, point := c.sessionID, c.t, c.hs, c.point
	c.mu.Unlock()
	go c.move(from, old, hs, point, cause)
	return true
}

// newGen hands out a generation for a transport a move opens.
func (c *Client) newGen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastGen++
	return c.lastGen
}

// move finds a new session for the client and restores from's snapshot
// into it, then makes it the client's session; on failure the client ends.
func (c *Client) move(from string, old Transport, hs *msg.HandshakeReq, point uint64, cause error) {
	go old.Close()
	start := time.Now()
	m := Move{From: from, Cause: cause, LastPoint: point}
	ctx, cancel := context.WithTimeout(c.life, c.mv.opts.timeout())
	defer cancel()
	t, gen, sid, err := c.openSession(ctx, hs)
	if err == nil {
		err = c.restoreFrom(ctx, t, gen, from, snapshotWaitHint(cause), &m)
	}
	m.Took = time.Since(start)
	c.mu.Lock()
	if err == nil && c.closing {
		err = ErrClosed
	}
	if err != nil {
		m.Err = err
		c.mv.moves = append(c.mv.moves, m)
		c.mu.Unlock()
		if t != nil {
			if !errors.Is(err, ErrClosed) {
				// Nobody will use the new session: end it now rather than
				// when it idles out.
				sctx, scancel := context.WithTimeout(context.Background(), time.Second)
				_ = t.Send(sctx, &wire.Envelope{Type: "shutdown", ID: wire.NewID(), Proto: wire.ProtoVersion, TS: wire.Now()}, &msg.Shutdown{})
				scancel()
			}
			_ = t.Close()
		}
		c.end(fmt.Errorf("%w: %w", ErrMoveFailed, err))
		c.mu.Lock()
		close(c.moving)
		c.moving = nil
		cb := c.mv.opts.OnMove
		c.mu.Unlock()
		if cb != nil {
			cb(m)
		}
		return
	}
	m.To = sid
	c.t, c.gen, c.sessionID, c.point = t, gen, sid, m.Point
	c.mv.moves = append(c.mv.moves, m)
	close(c.moving)
	c.moving = nil
	cb := c.mv.opts.OnMove
	c.mu.Unlock()
	if cb != nil {
		cb(m)
	}
}

// openSession dials and handshakes a new session, retrying with back-off
// until ctx ends: while a host drains or dies the proxy may still send a
// new session its way for a moment. A refused handshake is final.
func (c *Client) openSession(ctx context.Context, hs *msg.HandshakeReq) (Transport, uint64, string, error) {
	wait := 50 * time.Millisecond
	for {
		gen := c.newGen()
		t, err := c.mv.dial(ctx)
		if err == nil {
			c.attach(t, gen)
			var r wire.Message
			r, err, _ = c.exchange(ctx, t, gen, &msg.HandshakeReq{AgentID: hs.AgentID, AgentCaps: hs.AgentCaps, AuthToken: hs.AuthToken})
			if err == nil {
				resp, ok := r.(*msg.HandshakeResp)
				switch {
				case !ok:
					err = fmt.Errorf("handshake: unexpected reply %T", r)
				case !resp.Ok:
					_ = t.Close()
					e := &wire.Error{Code: wire.CodeUnauthorized, Message: "handshake refused"}
					if resp.Error != nil {
						e.Code, e.Message = wire.Code(resp.Error.Code), resp.Error.Message
					}
					return nil, 0, "", e
				case resp.SessionID == nil:
					err = errors.New("handshake: no session id")
				default:
					return t, gen, *resp.SessionID, nil
				}
			}
			_ = t.Close()
		}
		select {
		case <-ctx.Done():
			return nil, 0, "", fmt.Errorf("no new session: %w (last: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// snapshotWaitHint is how long the host that refused a request as
// shutting_down said its drain's snapshot may take to be written
// (detail.snapshot_wait, seconds); 0 when it said nothing.
func snapshotWaitHint(cause error) time.Duration {
	d, ok := wireDetail(cause).(map[string]any)
	if !ok || wire.ReasonOf(d) != "shutting_down" {
		return 0
	}
	s, ok := d["snapshot_wait"].(float64)
	if !ok || s <= 0 || s > 3600 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// restoreFrom restores the newest snapshot of the session from into the
// session on t, one that covers the client's last seen point
// (m.LastPoint): it keeps asking, up to the longer of SnapshotWait and
// the draining host's hint, while there is none or only an older one.
func (c *Client) restoreFrom(ctx context.Context, t Transport, gen uint64, from string, hint time.Duration, m *Move) error {
	deadline := time.Now().Add(max(c.mv.opts.snapshotWait(), hint))
	last := int(m.LastPoint)
	acceptGap := false
	for {
		req := &msg.SessionRestoreReq{FromSession: &from, LastPoint: &last}
		if acceptGap {
			req.AcceptGap = &acceptGap
		}
		r, err, _ := c.exchange(ctx, t, gen, req)
		if err == nil {
			resp, ok := r.(*msg.SessionRestoreResp)
			if !ok {
				return fmt.Errorf("restore: unexpected reply %T", r)
			}
			m.SnapshotID, m.Restored, m.Gap = resp.SnapshotID, resp.Restored, resp.Gap
			if resp.FromPoint != nil {
				m.Point = uint64(*resp.FromPoint)
			}
			return nil
		}
		switch wire.ReasonOf(wireDetail(err)) {
		case "point_gap":
			// An older snapshot than the client saw: the host that drained
			// may not have written its own yet. Never settle for it
			// unless the caller said so.
			if !time.Now().Before(deadline) {
				if c.mv.opts.AcceptGap {
					acceptGap = true
					continue
				}
				return fmt.Errorf("%w: %w", ErrPointGap, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrPointGap, err)
			case <-time.After(200 * time.Millisecond):
			}
			continue
		case "unknown_snapshot":
		case "store_unavailable":
			// The store is down and the host waited for it already: ask
			// again until the move's deadline, never settle for less.
			select {
			case <-ctx.Done():
				return fmt.Errorf("restore: %w", err)
			case <-time.After(time.Second):
			}
			continue
		default:
			return fmt.Errorf("restore: %w", err)
		}
		if !time.Now().Before(deadline) {
			if c.mv.opts.Fresh {
				m.Fresh = true
				return nil
			}
			return fmt.Errorf("%w: %w", ErrNoSnapshot, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoSnapshot, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
