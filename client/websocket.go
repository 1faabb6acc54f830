package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/wire"
)

// WSOptions tune [DialWebSocket]. The zero value is ready to use.
type WSOptions struct {
	// SessionID attaches to an existing session (a child session the host
	// created) instead of opening a new one. It travels in a header, never
	// in the URL.
	SessionID string
	// Header adds request headers to the upgrade (Origin, for example).
	Header http.Header
	// HTTPClient performs the upgrade; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Registry decodes replies (msg.Registry() when nil); used by [WebSocket].
	Registry *wire.Registry
	// IdleCheck: a message written on a connection that has received
	// nothing for this long is preceded by a ping, and goes out only once
	// the pong came back. A connection whose host died while the client
	// was idle is then found dead before the message is written, so the
	// message is known never to have reached a host: a client that moves
	// ([Moving]) sends it in the new session instead of reporting it
	// [ErrInterrupted]. Zero means one second; negative turns the check off.
	IdleCheck time.Duration
}

// idleCheck returns the option's value with its default applied.
func (o WSOptions) idleCheck() time.Duration {
	if o.IdleCheck == 0 {
		return time.Second
	}
	return o.IdleCheck
}

// pingTimeout bounds the wait for the pong of an idle check; past it the
// connection is taken for dead and re-attached.
const pingTimeout = 10 * time.Second

// WSConn is a [LineConn] over aep's WebSocket transport (GET /ws): one
// session per connection, one message per text frame. A connection that
// drops is re-attached to its session with the count of messages received,
// so the host replays what was missed while its buffer holds it
// (docs/DECISIONS.md, WebSocket transport).
type WSConn struct {
	url  string
	opts WSOptions
	sid  string

	lines chan []byte
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	// heard is when a frame last came in (or a ping was answered), in
	// Unix nanoseconds: the idle check's clock.
	heard atomic.Int64

	mu sync.Mutex
	c  *websocket.Conn
	// ended is closed once the pump has seen c end and set err or gap.
	ended chan struct{}
	seen  uint64 // messages received in this session, across connections
	err   error
	// gap is non-nil while the pump re-attaches a dropped connection;
	// writes wait for it rather than go to the dead connection.
	gap chan struct{}
}

// WebSocket connects a [Client] to the host's GET /ws at url
// (e.g. "ws://127.0.0.1:8765/ws"). Call Handshake next.
func WebSocket(ctx context.Context, url string, opts *WSOptions) (*Client, error) {
	if opts == nil {
		opts = &WSOptions{}
	}
	conn, err := DialWebSocket(ctx, url, *opts)
	if err != nil {
		return nil, err
	}
	return New(Lines(conn, opts.Registry)), nil
}

// DialWebSocket opens a WebSocket connection to the host at url.
func DialWebSocket(ctx context.Context, url string, opts WSOptions) (*WSConn, error) {
	w := &WSConn{url: url, opts: opts, sid: opts.SessionID, lines: make(chan []byte, 64), done: make(chan struct{})}
	w.ctx, w.stop = context.WithCancel(context.Background())
	c, err := w.dial(ctx, false)
	if err != nil {
		w.stop()
		return nil, err
	}
	w.c, w.ended = c, make(chan struct{})
	w.heard.Store(time.Now().UnixNano())
	go w.pump(c, w.ended)
	return w, nil
}

// SessionID returns the id of the connection's session.
func (w *WSConn) SessionID() string { return w.sid }

func (w *WSConn) dial(ctx context.Context, reattach bool) (*websocket.Conn, error) {
	h := http.Header{}
	for k, v := range w.opts.Header {
		h[k] = v
	}
	if w.sid != "" {
		h.Set("X-Session-Id", w.sid)
	}
	if reattach {
		h.Set("Last-Event-ID", strconv.FormatUint(w.seen, 10))
	}
	c, resp, err := websocket.Dial(ctx, w.url, &websocket.DialOptions{HTTPClient: w.opts.HTTPClient, HTTPHeader: h,
		CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("websocket %s: status %d: %w", w.url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("websocket %s: %w", w.url, err)
	}
	// The host enforces the message limit; replies may be as large.
	c.SetReadLimit(-1)
	if id := resp.Header.Get("X-Session-Id"); id != "" {
		w.sid = id
	}
	return c, nil
}

// errNotSent marks a write that never left the client: the connection had
// ended for good, or the caller gave up while it was being re-attached.
var errNotSent = errors.New("not sent")

// WriteLine sends one message as a text frame. While a dropped connection
// is being re-attached it waits for the new one; on a connection idle for
// longer than [WSOptions.IdleCheck] it first makes sure the host answers.
func (w *WSConn) WriteLine(ctx context.Context, line []byte) error {
	for {
		w.mu.Lock()
		c, err, gap, ended := w.c, w.err, w.gap, w.ended
		w.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%w: %w", errNotSent, err)
		}
		if gap == nil {
			if alive, err := w.check(ctx, c, ended); err != nil {
				return fmt.Errorf("%w: %w", errNotSent, err)
			} else if !alive {
				continue // ended: wait for the re-attached connection
			}
			if err := c.Write(ctx, websocket.MessageText, line); err != nil {
				return fmt.Errorf("websocket write: %w", err)
			}
			return nil
		}
		select {
		case <-gap:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errNotSent, ctx.Err())
		}
	}
}

// check pings c if it has been idle past the idle check, and reports
// whether it answered. A connection that did not is closed (if it has not
// ended already) and check waits until the pump has seen it end; an error
// means ctx ended first.
func (w *WSConn) check(ctx context.Context, c *websocket.Conn, ended chan struct{}) (bool, error) {
	idle := w.opts.idleCheck()
	if idle < 0 || time.Since(time.Unix(0, w.heard.Load())) < idle {
		return true, nil
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := c.Ping(pctx)
	cancel()
	if err == nil {
		w.heard.Store(time.Now().UnixNano())
		return true, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	// No pong: the host is gone, or unreachable. Nothing was written, so
	// whatever happens to the connection the message is still unsent.
	_ = c.CloseNow()
	select {
	case <-ended:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// ReadLine returns the next message the host sent.
func (w *WSConn) ReadLine(ctx context.Context) ([]byte, error) {
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.mu.Lock()
			defer w.mu.Unlock()
			return nil, w.err
		}
		return l, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close closes the connection; the host keeps the session for its grace
// period unless it was shut down first.
func (w *WSConn) Close() error {
	w.stop()
	w.mu.Lock()
	c := w.c
	w.mu.Unlock()
	err := c.Close(websocket.StatusNormalClosure, "")
	<-w.done
	if errors.Is(err, net.ErrClosed) {
		// The host closed it first (a session that ended, as Client.Close's
		// shutdown asks): closed is what was wanted.
		err = nil
	}
	return err
}

// pump reads frames into lines, re-attaching up to three times with back-off
// when the connection drops (not when the host closes it on purpose).
func (w *WSConn) pump(c *websocket.Conn, ended chan struct{}) {
	defer close(w.done)
	defer close(w.lines)
	for {
		err := w.readAll(c)
		if w.ctx.Err() != nil || websocket.CloseStatus(err) != -1 {
			w.fail(err)
			close(ended)
			return
		}
		c = nil
		gap := make(chan struct{})
		w.mu.Lock()
		w.gap = gap
		w.mu.Unlock()
		close(ended)
		ended = make(chan struct{})
		for try := range 3 {
			select {
			case <-time.After(time.Duration(50<<try) * time.Millisecond):
			case <-w.ctx.Done():
				w.fail(w.ctx.Err())
				return
			}
			ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
			nc, derr := w.dial(ctx, true)
			cancel()
			if derr == nil {
				c = nc
				break
			}
			err = derr
		}
		if c == nil {
			w.fail(err)
		} else {
			w.heard.Store(time.Now().UnixNano())
			w.mu.Lock()
			w.c, w.ended = c, ended
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.gap = nil
		w.mu.Unlock()
		close(gap)
		if c == nil {
			return
		}
	}
}

func (w *WSConn) readAll(c *websocket.Conn) error {
	for {
		typ, b, err := c.Read(w.ctx)
		if err != nil {
			return err
		}
		w.heard.Store(time.Now().UnixNano())
		if typ != websocket.MessageText {
			continue
		}
		w.mu.Lock()
		w.seen++
		w.mu.Unlock()
		select {
		case w.lines <- b:
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
}

func (w *WSConn) fail(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		err = errors.New("connection closed")
	}
	w.mu.Lock()
	if w.err == nil {
		w.err = fmt.Errorf("websocket: %w", err)
	}
	w.mu.Unlock()
}

var _ LineConn = (*WSConn)(nil)
