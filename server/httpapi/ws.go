package httpapi

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/operator"
	"github.com/aephost/aep/wire"
)

// GET /ws (docs/DECISIONS.md, WebSocket transport): one session per
// connection, one protocol message per text frame, the same messages as
// every other transport. The route sits behind the same guard as the
// generated ones (Origin and Host are checked before the upgrade).

// WebSocketOptions tune GET /ws. Zero fields take the defaults.
type WebSocketOptions struct {
	// Ping is the keep-alive interval; a ping unanswered within another
	// interval counts as a dropped connection (default 20s).
	Ping time.Duration
	// Grace is how long a session whose connection dropped waits for a
	// re-attach before it ends as `shutdown` does (default 30s).
	Grace time.Duration
	// MaxDetached bounds the sessions waiting out their grace period; when
	// it is reached the one detached longest ends first (default 256).
	MaxDetached int
}

func (o WebSocketOptions) withDefaults() WebSocketOptions {
	if o.Ping <= 0 {
		o.Ping = 20 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.MaxDetached <= 0 {
		o.MaxDetached = 256
	}
	return o
}

// Close codes of the transport. 1008 (policy violation) marks what the
// client did wrong; the reason text says what.
const (
	closeTooSlow  = websocket.StatusPolicyViolation
	closeNoReplay = websocket.StatusCode(4409) // re-attach asked for messages no longer held
	closeNotFound = websocket.StatusCode(4404) // attach frame names no session
	// closeTerminated ends the connection of a session the operator
	// terminated (server/admin.go), so a client that moves knows not to.
	closeTerminated = websocket.StatusCode(4410)
)

// addWebSocket serves GET /ws beside the generated routes.
func (a *api) addWebSocket(rt *router) {
	hub := &wsHub{a: a, opts: a.opts.WebSocket.withDefaults(), sessions: map[string]*wsSession{}, watch: newWatchdog()}
	a.h.TrackBuffered(hub.bufferedBytes) // read only when /metrics is scraped
	rt.HandleFunc("GET /ws", hub.serve)
}

// wsHub holds the WebSocket sessions of one handler, by session id.
type wsHub struct {
	a     *api
	opts  WebSocketOptions
	watch *watchdog // of runs on the connections' reading goroutines

	mu       sync.Mutex
	sessions map[string]*wsSession
	detached list.List // of *wsSession, oldest drop first
}

// attachment is what a client asks for: a session id and the number of
// messages of that session it has received (Last-Event-ID), if it says.
type attachment struct {
	id       string
	lastSeen *uint64
}

func parseLastSeen(v string) (*uint64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func (hub *wsHub) serve(w http.ResponseWriter, r *http.Request) {
	a := hub.a
	var want *attachment
	if id := r.Header.Get("X-Session-Id"); id != "" {
		last, err := parseLastSeen(r.Header.Get("Last-Event-ID"))
		if err != nil {
			a.fail(w, r, &statusError{http.StatusBadRequest, "bad_request", "Last-Event-ID must be the count of messages received (a decimal number)"})
			return
		}
		want = &attachment{id: id, lastSeen: last}
		if !hub.exists(id) {
			// Refused before the upgrade, like an unknown X-Session-Id on
			// /send; the id stays out of the URL (docs/DECISIONS.md,
			// WebSocket transport).
			nf := a.notFound(id)
			a.fail(w, r, &statusError{http.StatusNotFound, nf.Error, nf.Message})
			return
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	conn := &wsConn{hub: hub, ctx: ctx, cancel: cancel}
	if a.h.Tracing() {
		// The upgrade's traceparent is the parent of the spans of every
		// message on this connection that has none of its own
		// (docs/operating.md, Traces).
		conn.traceparent = traceparentHeader(r)
	}
	var ws *wsSession
	var err error
	if want == nil {
		// A session is created on connect; the first frame is its
		// handshake, or an attach frame that trades it for another session.
		// Its id goes back in the upgrade's X-Session-Id header, so a client
		// can re-attach even before its handshake.
		if ws, err = hub.create(conn, SessionOptions(r.Context())...); err != nil {
			a.fail(w, r, &statusError{http.StatusServiceUnavailable, "unavailable", err.Error()})
			return
		}
		w.Header().Set("X-Session-Id", ws.id)
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The guard in front of every route already checked Origin and Host
		// against server.allowed_origins; the library's own same-host rule
		// would refuse origins that list allows.
		InsecureSkipVerify: true,
		// Messages are small JSON; compression costs more CPU than it saves
		// on loopback and LAN links, and invites compression-ratio attacks.
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		a.log.Debug("websocket upgrade failed", "err", err)
		if ws != nil {
			ws.sess.Close()
		}
		return
	}
	// The kernel's limit is applied per frame below, so that an oversized
	// frame is answered and the connection goes on (docs/DECISIONS.md,
	// Wire); the library's own limit would close the connection.
	c.SetReadLimit(-1)
	conn.c = c
	if want != nil {
		ws, err = hub.attach(conn, want)
	} else {
		err = ws.take(conn, nil)
	}
	if err != nil {
		c.Close(closeNotFound, err.Error())
		return
	}
	conn.run(ws)
}

func (hub *wsHub) exists(id string) bool {
	hub.mu.Lock()
	_, ok := hub.sessions[id]
	hub.mu.Unlock()
	if ok {
		return true
	}
	s, ok := hub.a.h.Session(id)
	return ok && s.HostMade() && !s.Live()
}

// create opens a new session with conn attached.
func (hub *wsHub) create(conn *wsConn, opts ...server.SessionOption) (*wsSession, error) {
	ws := newWSSession(hub)
	// NewSession not under the hub's lock: it may evict (close) the oldest
	// pending session, which takes that lock to forget itself. Nothing can
	// look the session up before its id is returned from here.
	s, err := hub.a.h.NewSession(ws, opts...)
	if err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	hub.mu.Lock()
	ws.id, ws.sess = s.ID(), s
	hub.sessions[ws.id] = ws
	hub.mu.Unlock()
	ws.mu.Lock()
	closed := ws.closed
	ws.mu.Unlock()
	if closed {
		// Evicted already by a flood of new sessions; its Close may have
		// run before it was registered.
		hub.forget(ws)
		return nil, fmt.Errorf("new session: %w", server.ErrEvicted)
	}
	return ws, nil
}

// attach gives conn the session the client names: a session of this
// transport (a re-attach, which replaces any connection it has), or a child
// session the host created that waits for its handshake. A live session of
// another transport is never taken over.
func (hub *wsHub) attach(conn *wsConn, want *attachment) (*wsSession, error) {
	hub.mu.Lock()
	ws, ok := hub.sessions[want.id]
	if !ok {
		s, found := hub.a.h.Session(want.id)
		if !found || !s.HostMade() || s.Live() {
			hub.mu.Unlock()
			return nil, fmt.Errorf("no session %q", want.id)
		}
		ws = newWSSession(hub)
		ws.id, ws.sess = want.id, s
		hub.sessions[want.id] = ws
		s.Attach(ws)
	}
	if ws.elem != nil {
		hub.detached.Remove(ws.elem)
		ws.elem = nil
	}
	hub.mu.Unlock()
	return ws, ws.take(conn, want.lastSeen)
}

func (hub *wsHub) forget(ws *wsSession) {
	hub.mu.Lock()
	if hub.sessions[ws.id] == ws {
		delete(hub.sessions, ws.id)
	}
	if ws.elem != nil {
		hub.detached.Remove(ws.elem)
		ws.elem = nil
	}
	hub.mu.Unlock()
}

// startGrace starts ws's grace period. When MaxDetached sessions already wait,
// the one that waited longest ends now: a flood of dropped connections
// cannot hold sessions beyond that bound.
func (hub *wsHub) startGrace(ws *wsSession, gen uint64) {
	var evict *wsSession
	hub.mu.Lock()
	if ws.elem == nil {
		if hub.detached.Len() >= hub.opts.MaxDetached {
			e := hub.detached.Front()
			evict = e.Value.(*wsSession)
			hub.detached.Remove(e)
			evict.elem = nil
		}
		ws.elem = hub.detached.PushBack(ws)
	}
	hub.mu.Unlock()
	if evict != nil {
		evict.end()
	}
	time.AfterFunc(hub.opts.Grace, func() {
		hub.mu.Lock()
		ws.mu.Lock()
		still := ws.conn == nil && ws.dropGen == gen && ws.elem != nil
		ws.mu.Unlock()
		if still {
			hub.detached.Remove(ws.elem)
			ws.elem = nil
		}
		hub.mu.Unlock()
		if still {
			ws.end()
		}
	})
}

// wsSession is the WebSocket side of one session and its [server.Sink].
// Every message is encoded at once into a bounded ring (the session's buffer
// caps, Options.BufferMessages and BufferBytes), so the kernel never waits
// on the network, and one writer per connection sends the ring in order at
// the pace the client reads: a slow reader is waited for, never skipped.
// The ring is also the replay buffer of a re-attach: frames a connection
// wrote stay until newer ones push them out, but a frame no connection wrote
// is never pushed out; when one would have to be, the reader is past the
// cap (or gone too long), its connection is closed with the reason, and the
// session ends.
type wsSession struct {
	hub  *wsHub
	id   string
	sess *server.Session

	mu       sync.Mutex
	ring     []frame // circular; ring[head] is the oldest of n frames
	head, n  int
	bytes    int
	next     uint64 // sequence number of the next message, from 1
	written  uint64 // last sequence number the attached connection wrote
	conn     *wsConn
	dropGen  uint64 // counts drops, so a stale grace timer does nothing
	closed   bool
	overflow bool
	// terminated is set when the operator terminated the session, before
	// the kernel closes this sink (operator.ConnectionSink).
	terminated atomic.Bool
	writing    bool // someone is writing frames to the connection
	notify     chan struct{}

	elem *list.Element // in wsHub.detached; guarded by wsHub.mu
}

func newWSSession(hub *wsHub) *wsSession {
	return &wsSession{hub: hub, ring: make([]frame, hub.a.opts.BufferMessages), next: 1}
}

func (ws *wsSession) wake() {
	if ws.notify != nil {
		close(ws.notify)
		ws.notify = nil
	}
}

// Send implements [server.Sink].
// Transport names the sink for the by-transport session gauge.
func (*wsSession) Transport() string { return "websocket" }

// SessionTerminated implements [operator.ConnectionSink]: a terminated
// session's connection stays a while, so the client's next request is
// answered why its session is gone, and then closes saying so.
func (ws *wsSession) SessionTerminated() { ws.terminated.Store(true) }

var _ operator.ConnectionSink = (*wsSession)(nil)

func (ws *wsSession) Send(p *wire.Packet) (int, error) {
	line, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", p.Type, err)
	}
	capBytes := ws.hub.a.opts.BufferBytes
	ws.mu.Lock()
	if ws.closed || ws.overflow {
		ws.mu.Unlock()
		return 0, nil
	}
	for ws.n > 0 && (ws.n == len(ws.ring) || ws.bytes+len(line) > capBytes) {
		if ws.ring[ws.head].seq > ws.written {
			ws.overflow = true
			break
		}
		f := &ws.ring[ws.head]
		ws.bytes -= len(f.data)
		f.data = nil
		ws.head = (ws.head + 1) % len(ws.ring)
		ws.n--
	}
	if ws.overflow {
		conn := ws.conn
		unread := ws.bytes
		ws.wake()
		ws.mu.Unlock()
		reason := fmt.Sprintf("reader too slow: %d bytes unread, over the cap of %d", unread, capBytes)
		ws.hub.a.log.Warn("websocket reader over the buffer cap; session ended", "session", ws.sess.Handle(), "unread_bytes", unread)
		// Not here: the kernel may hold locks of this session while it sends.
		go func() {
			if conn != nil {
				conn.closeWith(closeTooSlow, reason)
			}
			ws.sess.Close()
		}()
		return 0, nil
	}
	i := (ws.head + ws.n) % len(ws.ring)
	ws.ring[i] = frame{seq: ws.next, data: line}
	ws.next++
	ws.n++
	ws.bytes += len(line)
	if conn := ws.conn; conn != nil && !ws.writing {
		// Nobody is writing: write on this goroutine, saving the hand-off
		// to the connection's writer (the cost that separates a round trip
		// from the bare echo floor). Should the socket be full, this blocks
		// this session only; its other messages go to the ring meanwhile,
		// up to the cap.
		ws.writing = true
		ws.mu.Unlock()
		ws.drain(conn)
		return len(line), nil
	}
	if !ws.writing {
		// No connection: a connection's writer waiting to take over
		// looks again. While someone writes, the writer's loop takes the
		// frame itself; waking the connection's idle writer too would
		// cost a futex wake per message for nothing.
		ws.wake()
	}
	ws.mu.Unlock()
	return len(line), nil
}

// drain writes the unwritten frames to conn while the caller holds the
// writer's turn (ws.writing), then gives the turn back.
func (ws *wsSession) drain(conn *wsConn) {
	ws.mu.Lock()
	for ws.conn == conn && ws.written+1 < ws.next {
		k := int(ws.written + 1 - ws.ring[ws.head].seq)
		f := ws.ring[(ws.head+k)%len(ws.ring)]
		ws.mu.Unlock()
		err := conn.c.Write(noCancel, websocket.MessageText, f.data)
		ws.mu.Lock()
		if err != nil {
			conn.cancel() // the read loop ends and detaches the connection
			break
		}
		if ws.conn == conn && f.seq > ws.written {
			ws.written = f.seq
		}
	}
	ws.writing = false
	if ws.closed || ws.conn != conn || ws.written+1 < ws.next {
		// The connection's writer has something to do: close it, or
		// hand over to a newer connection. (Everything written and the
		// session open, it has nothing to do, and a wake would only be
		// a futex call per message.)
		ws.wake()
	}
	ws.mu.Unlock()
}

// Close implements [server.Sink]: the session ended. The connection writes
// what is left and closes normally.
func (ws *wsSession) Close() {
	ws.mu.Lock()
	ws.closed = true
	ws.wake()
	ws.mu.Unlock()
	ws.hub.forget(ws)
}

// take makes conn the session's connection, ending any earlier one (the
// newer is the reconnecting client). lastSeen is how many messages of the
// session the client received; the connection starts after them. Without
// it, it starts after what earlier connections wrote.
func (ws *wsSession) take(conn *wsConn, lastSeen *uint64) error {
	ws.mu.Lock()
	if ws.closed || ws.overflow {
		ws.mu.Unlock()
		return errors.New("session ended")
	}
	if lastSeen != nil {
		from := min(*lastSeen, ws.next-1)
		oldest := ws.next
		if ws.n > 0 {
			oldest = ws.ring[ws.head].seq
		}
		if from+1 < oldest {
			ws.mu.Unlock()
			return fmt.Errorf("messages %d to %d are no longer held", from+1, oldest-1)
		}
		ws.written = from
	}
	old := ws.conn
	ws.conn = conn
	ws.wake()
	ws.mu.Unlock()
	if old != nil {
		old.closeWith(websocket.StatusNormalClosure, "another connection took over the session")
	}
	return nil
}

// drop detaches conn after it ended; the session waits out its grace period.
func (ws *wsSession) drop(conn *wsConn) {
	ws.mu.Lock()
	mine := ws.conn == conn
	if mine {
		ws.conn = nil
		ws.dropGen++
	}
	gen := ws.dropGen
	ended := ws.closed || ws.overflow
	ws.mu.Unlock()
	if mine && !ended {
		ws.hub.startGrace(ws, gen)
	}
}

// end finishes a session nobody re-attached to, as `shutdown` would: a
// handshaken session drains its requests first (their replies stay in the
// ring, unread); one that never handshook just closes.
func (ws *wsSession) end() {
	if ws.sess.Live() {
		ws.sess.ReceivePacket(&wire.Envelope{Type: "shutdown", ID: wire.NewID(), Proto: wire.ProtoVersion}, &msg.Shutdown{})
		return
	}
	ws.sess.Close()
}

// wsConn is one WebSocket connection of a session.
type wsConn struct {
	hub    *wsHub
	c      *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	// sess is the session the connection serves; an attach frame changes it.
	sess atomic.Pointer[wsSession]

	closeOnce sync.Once

	// The reading goroutine runs a request itself when its session has
	// nothing else in flight (server.Session.ReceiveLineHere), as the bare
	// echo floor does. Should the request take longer than handoffAfter,
	// handoff starts another goroutine to go on reading (so a `cancel` or
	// another request is not held up) and the first one ends after its
	// request. turn says who reads: its low bits are the mode (reading,
	// runningHere, handedOff), the rest a count of runs, so a goroutine
	// whose run was handed off can tell, even after the new reader began
	// runs of its own.
	turn       atomic.Uint64
	readerDone chan struct{} // closed when reading ended (the connection is done)
	// traceparent is the upgrade request's traceparent header, when the
	// host traces.
	traceparent string
}

const (
	reading     = 0
	runningHere = 1
	handedOff   = 2
	modeBits    = 3
)

// handoffAfter is how long a request may run on the reading goroutine
// before reading moves to another: a `cancel` waits at most this long to be
// read, and a request that runs longer pays one goroutine start.
const handoffAfter = 500 * time.Microsecond

// closeWith closes the connection with a code and reason. The close
// handshake may wait on a peer that reads nothing, so it runs on its own;
// the connection's work ends at once.
func (conn *wsConn) closeWith(code websocket.StatusCode, reason string) {
	conn.closeOnce.Do(func() {
		go func() {
			_ = conn.c.Close(code, reason)
			conn.cancel()
		}()
	})
}

// noCancel is the context of every frame read and written: the library
// ties a cancellable one to the socket on each call (an AfterFunc
// registered and removed, three allocations and the context's lock per
// frame), where the connection's end needs it once (run).
var noCancel = context.Background()

// run serves the connection until it ends.
func (conn *wsConn) run(ws *wsSession) {
	var wg sync.WaitGroup
	wg.Add(2)
	conn.sess.Store(ws)
	conn.readerDone = make(chan struct{})
	// Reads and writes take noCancel; the connection's end closes the
	// socket once, which ends a blocked read or write as well.
	stopClosing := context.AfterFunc(conn.ctx, func() { _ = conn.c.CloseNow() })
	defer stopClosing()
	go func() { defer wg.Done(); conn.writeLoop() }()
	go func() { defer wg.Done(); conn.pingLoop() }()
	// Reading runs on a goroutine of its own: a request may run on it
	// (receiveHere), and the connection's end must not wait for that.
	go conn.readLoop(true)
	<-conn.readerDone
	conn.cancel()
	wg.Wait()
	conn.sess.Load().drop(conn)
}

// readLoop hands each text frame to the kernel until the connection ends
// (then it closes readerDone) or its reading is handed off (then it just
// returns). first is set for the connection's first frame, which may be an
// attach frame.
func (conn *wsConn) readLoop(first bool) {
	a := conn.hub.a
	ws := conn.sess.Load()
	limit := int(a.maxBody)
	handed := false
	defer func() {
		if !handed {
			close(conn.readerDone)
		}
	}()
	for {
		typ, r, err := conn.c.Reader(noCancel)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			conn.closeWith(websocket.StatusUnsupportedData, "protocol messages are text frames")
			return
		}
		line, n, err := readFrame(r, limit)
		if err != nil {
			return
		}
		if line == nil {
			ws.sess.RejectOversized(n)
			first = false
			continue
		}
		if first {
			first = false
			if att, ok := attachFrame(line); ok {
				if ws = conn.switchTo(ws, att); ws == nil {
					return
				}
				continue
			}
		}
		if !conn.receiveHere(ws, line) {
			handed = true
			return // another goroutine reads now
		}
	}
}

// receiveHere gives line to the kernel, which may run it on this goroutine;
// it reports whether this goroutine still reads the connection.
func (conn *wsConn) receiveHere(ws *wsSession, line []byte) bool {
	v := conn.turn.Load()&^modeBits + 1<<2 // a new run
	conn.turn.Store(v | runningHere)
	conn.hub.watch.begin(conn, v)
	if conn.traceparent != "" {
		ws.sess.ReceiveLineWith(line, server.LineOptions{Here: true, Traceparent: conn.traceparent})
	} else {
		ws.sess.ReceiveLineHere(line)
	}
	if !conn.turn.CompareAndSwap(v|runningHere, v|reading) {
		return false // handed off: the new reader's runs are its own
	}
	conn.hub.watch.end(conn, v)
	return true
}

// handOff runs when the run v of the reading goroutine went past
// handoffAfter (watchdog): a new goroutine takes over the reading.
func (conn *wsConn) handOff(v uint64) {
	if !conn.turn.CompareAndSwap(v|runningHere, v|handedOff) {
		return // the run ended meanwhile
	}
	go func() {
		// A new count, in mode reading: the goroutine whose run was
		// handed off sees the change and stops reading.
		conn.turn.Store((conn.turn.Load()&^modeBits + 1<<2) | reading)
		conn.readLoop(false)
	}()
}

// switchTo trades the session created on connect for the one an attach
// frame names. The fresh session never handshook, so it just closes.
func (conn *wsConn) switchTo(fresh *wsSession, att *attachment) *wsSession {
	defer fresh.sess.Close() // after the switch, so the writer sees it first
	ws, err := conn.hub.attach(conn, att)
	if err != nil {
		conn.closeWith(closeNotFound, err.Error())
		return nil
	}
	conn.sess.Store(ws)
	fresh.mu.Lock()
	fresh.conn = nil
	fresh.wake()
	fresh.mu.Unlock()
	return ws
}

// attachFrame recognises the attach frame: the first frame of a connection
// opened without X-Session-Id may be {"session_id": "...", "last_seen": N}
// (no "type"), for clients that cannot set headers, such as browsers.
func attachFrame(line []byte) (*attachment, bool) {
	if !bytes.Contains(line, []byte(`"session_id"`)) {
		return nil, false
	}
	var f struct {
		Type      *string `json:"type"`
		SessionID string  `json:"session_id"`
		LastSeen  *uint64 `json:"last_seen"`
	}
	if json.Unmarshal(line, &f) != nil || f.Type != nil || f.SessionID == "" {
		return nil, false
	}
	return &attachment{id: f.SessionID, lastSeen: f.LastSeen}, true
}

// readFrame reads one message of at most limit bytes into a fresh slice
// (the kernel may keep references into it while the request is queued). A
// longer one is read to its end without being kept and reported by its
// size with a nil line. Most messages fit the first 512 bytes: one
// allocation, where a bytes.Buffer (which wants 512 bytes free before each
// read) takes two or three.
func readFrame(r io.Reader, limit int) ([]byte, int, error) {
	buf := make([]byte, 0, min(512, limit+1))
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(len(buf), limit+1-len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			rest, err := io.Copy(io.Discard, r)
			if err != nil {
				return nil, 0, err
			}
			return nil, len(buf) + int(rest), nil
		}
		if err == io.EOF {
			return buf, len(buf), nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}

// writeLoop writes what no Send wrote inline: a re-attach's replay, and
// frames sent while another goroutine was writing. It also closes the
// connection once the session ended and everything was written.
func (conn *wsConn) writeLoop() {
	for {
		ws := conn.sess.Load()
		ws.mu.Lock()
		if conn.sess.Load() != ws {
			ws.mu.Unlock() // an attach frame moved the connection
			continue
		}
		if ws.conn != conn {
			if ws.closed {
				ws.mu.Unlock()
				return
			}
			// Not attached yet, or a newer connection took over (then
			// this one is being closed and its context ends).
		} else if !ws.writing && ws.written+1 < ws.next {
			ws.writing = true
			ws.mu.Unlock()
			ws.drain(conn)
			continue
		} else if !ws.writing && ws.closed {
			ws.mu.Unlock()
			if ws.terminated.Load() {
				conn.closeWith(closeTerminated, "session terminated by the operator")
			} else {
				conn.closeWith(websocket.StatusNormalClosure, "session ended")
			}
			return
		}
		if ws.notify == nil {
			ws.notify = make(chan struct{})
		}
		ch := ws.notify
		ws.mu.Unlock()
		select {
		case <-ch:
		case <-conn.ctx.Done():
			return
		}
	}
}

// pingLoop keeps the connection alive and notices a peer that vanished
// without closing: a ping unanswered within the interval drops it.
func (conn *wsConn) pingLoop() {
	every := conn.hub.opts.Ping
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-conn.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(conn.ctx, every)
		err := conn.c.Ping(ctx)
		cancel()
		if err != nil {
			if conn.ctx.Err() == nil {
				conn.hub.a.log.Debug("websocket ping unanswered; connection dropped", "err", err)
			}
			_ = conn.c.CloseNow()
			conn.cancel()
			return
		}
	}
}
