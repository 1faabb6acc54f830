package openenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/wire"
)

// WebSocket /openenv/<env>/ws (reference §4): one aep session per
// connection, created on connect in the host's pending pool like any
// transport's, handshaken with the token of the first message (an
// Authorization: Bearer header of the upgrade, else aep_token in the
// first reset's data), ended when the connection ends. Text frames, one
// JSON object each, strictly one reply per request in order.

// OpenEnv's WebSocket error codes (reference §4.3).
const (
	codeInvalidJSON = "INVALID_JSON"
	codeUnknownType = "UNKNOWN_TYPE"
	codeValidation  = "VALIDATION_ERROR"
	codeExecution   = "EXECUTION_ERROR"
	codeCapacity    = "CAPACITY_REACHED"
	codeFactory     = "FACTORY_ERROR"
	codeSession     = "SESSION_ERROR"
)

// noCancel is the context of frame reads and writes: the connection's end
// closes the socket once, which ends a blocked read or write as well (as
// server/httpapi/ws.go does, to spare the library a cancellable context
// per frame).
var noCancel = context.Background()

// Reading modes of wsConn.turn (its low bits; the rest counts runs).
const (
	modeReading = 0
	modeRunning = 1
	modeHanded  = 2
	modeBits    = 3
)

// wsConn is one OpenEnv WebSocket connection and its aep session.
type wsConn struct {
	f      *Face
	ef     *envFace
	c      *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	b      *backend
	bearer string // the upgrade's Authorization: Bearer token, if any

	// Touched only by the goroutine that holds run.
	run  sync.Mutex
	live bool // handshaken
	ep   episode
	out  []byte // the frame being written

	// turn says who reads (modeBits) and counts runs, so that a reading
	// goroutine whose run was handed off knows it (readLoop).
	turn     atomic.Uint64
	done     chan struct{}
	doneOnce sync.Once
	ours     atomic.Bool // the face itself is ending the session
}

func (f *Face) serveWS(w http.ResponseWriter, r *http.Request, ef *envFace) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The HTTP transport's guard checked Origin and Host against
		// server.allowed_origins before this; the library's same-host
		// rule would refuse origins that list allows.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		f.log.Debug("openenv websocket upgrade failed", "err", err)
		return
	}
	// Frames are bounded by the host's message limit below, where an
	// oversized one is answered and the connection goes on.
	c.SetReadLimit(-1)
	ctx, cancel := context.WithCancel(r.Context())
	conn := &wsConn{f: f, ef: ef, c: c, ctx: ctx, cancel: cancel, bearer: bearer(r), done: make(chan struct{})}
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = c.CloseNow() })
	defer stop()
	b, err := f.newBackend(conn.ended, httpapi.SessionOptions(r.Context())...)
	if err != nil {
		// OpenEnv reports a session it cannot create after the upgrade,
		// as an error frame, then closes (reference §9 item 9).
		conn.fatal(codeSession, errUnavailable.Error(), nil, websocket.StatusTryAgainLater)
		<-conn.done
		return
	}
	conn.b = b
	go conn.readLoop()
	conn.pingLoop()
	<-conn.done
}

// finish ends the connection and its session, once.
func (c *wsConn) finish() {
	c.doneOnce.Do(func() {
		c.ours.Store(true)
		if c.b != nil {
			c.b.close()
		}
		c.cancel()
		close(c.done)
	})
}

// ended runs when the aep session ends. When the face did not end it
// (the host's idle or handshake expiry, an eviction from the pending
// pool, a drain, a tenant removed), the client is told in an error frame
// before the socket closes.
func (c *wsConn) ended() {
	if c.ours.Load() {
		return
	}
	c.fatal(codeSession, "the aep session ended (idle or handshake timeout, eviction, host shutdown or drain); connect again", nil, websocket.StatusGoingAway)
}

// fatal sends an error frame, then closes the connection with status and
// ends the session (the reading goroutine stops reading: closeWith).
func (c *wsConn) fatal(code, message string, extra map[string]any, status websocket.StatusCode) {
	c.ours.Store(true)
	frame := errorFrame(nil, code, message, extra)
	wctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	_ = c.c.Write(wctx, websocket.MessageText, frame)
	cancel()
	c.closeWith(status, message)
}

// clipReason fits a close reason in its 123 bytes.
func clipReason(s string) string {
	if len(s) <= 120 {
		return s
	}
	return s[:120]
}

// pingLoop keeps the connection alive and notices a peer gone without a
// close: a ping unanswered within the interval drops the connection.
func (c *wsConn) pingLoop() {
	t := time.NewTicker(c.f.ping)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.f.ping)
		err := c.c.Ping(ctx)
		cancel()
		if err != nil {
			c.finish()
			return
		}
	}
}

// readLoop reads frames until the connection ends, running each request
// on this goroutine. When a request runs past handoffAfter the watchdog
// starts a new readLoop, which reads on (answering the client's pings,
// noticing a close) and waits on run before it handles its frame, so
// requests stay in order; this goroutine ends after its request.
func (c *wsConn) readLoop() {
	for {
		frame, size, err := c.read()
		if errors.Is(err, errBinary) {
			return // answered and being closed
		}
		if err != nil {
			c.finish()
			return
		}
		c.run.Lock()
		select {
		case <-c.done:
			c.run.Unlock()
			return
		default:
		}
		v := c.turn.Load()&^modeBits + 1<<2
		c.turn.Store(v | modeRunning)
		c.f.watch.begin(c, v)
		keep := c.handle(frame, size)
		c.run.Unlock()
		if !keep {
			return // closeWith ends the connection
		}
		if !c.turn.CompareAndSwap(v|modeRunning, v|modeReading) {
			return // handed off: another goroutine reads now
		}
		c.f.watch.end(c, v)
	}
}

// handOff starts a new reader when run v still runs (watchdog).
func (c *wsConn) handOff(v uint64) {
	if c.turn.CompareAndSwap(v|modeRunning, v|modeHanded) {
		go c.readLoop()
	}
}

// errBinary marks a binary frame, which ends the session (reference §4.3).
var errBinary = errors.New("binary frame")

// read returns the next text frame, at most the host's message limit; a
// longer one is read to its end and reported by its size with a nil frame.
// A binary frame is answered and ends the connection.
func (c *wsConn) read() ([]byte, int, error) {
	typ, r, err := c.c.Reader(noCancel)
	if err != nil {
		return nil, 0, err
	}
	if typ != websocket.MessageText {
		c.fatal(codeSession, "WebSocket error: binary frames are not supported; send JSON text frames", nil, websocket.StatusUnsupportedData)
		return nil, 0, errBinary
	}
	limit := c.f.maxFrame
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

// frame is a client message, its envelope checked (reference §4.2).
type frame struct {
	typ  string
	data json.RawMessage // nil when absent
}

// frameError is the error frame a malformed message gets, and whether the
// session survives it.
type frameError struct {
	code    string
	message string
	extra   map[string]any
	fatal   bool
}

// parseFrame checks a frame's JSON and envelope. The envelope models of
// OpenEnv forbid extra keys; data is required for step, absent for state
// and close, an object when given.
func parseFrame(b []byte) (*frame, *frameError) {
	m, ok := members(b)
	if !ok {
		if utf8.Valid(b) && json.Valid(b) {
			return nil, &frameError{code: codeSession, message: "WebSocket error: a message must be a JSON object", fatal: true}
		}
		return nil, &frameError{code: codeInvalidJSON, message: "Invalid JSON"}
	}
	raw, ok := get(m, "type")
	var typ string
	if !ok || json.Unmarshal(raw, &typ) != nil {
		shown := "None"
		if ok {
			shown = string(raw)
		}
		return nil, &frameError{code: codeUnknownType, message: "Unknown message type: " + clipText(shown)}
	}
	var allowed []string
	switch typ {
	case "reset", "step", "mcp":
		allowed = []string{"type", "data"}
	case "state", "close":
		allowed = []string{"type"}
	default:
		return nil, &frameError{code: codeUnknownType, message: "Unknown message type: " + clipText(typ)}
	}
	var errs []pyError
	for _, x := range m {
		if !slices.Contains(allowed, x.key) {
			errs = append(errs, extra([]any{x.key}, clipInput(x.val)))
		}
	}
	data, has := get(m, "data")
	switch {
	case typ == "step" && !has:
		errs = append(errs, missing([]any{"data"}, clipInput(b)))
	case has && slices.Contains(allowed, "data"):
		if !isObject(data) {
			errs = append(errs, wrongType("dict_type", "Input should be a valid dictionary", []any{"data"}, clipInput(data)))
		}
	}
	if errs != nil {
		return nil, validation("Invalid message", errs)
	}
	return &frame{typ: typ, data: data}, nil
}

func validation(message string, errs []pyError) *frameError {
	return &frameError{code: codeValidation, message: message, extra: map[string]any{"errors": errs}}
}

// clipText cuts an echoed text to wire.MaxEcho bytes.
func clipText(s string) string {
	if len(s) <= wire.MaxEcho {
		return s
	}
	n := wire.MaxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// clipInput keeps an echoed input short: a bad frame never buys an answer
// as large as itself (docs/SECURITY.md, Short error echoes).
func clipInput(v json.RawMessage) json.RawMessage {
	if len(v) <= wire.MaxEcho {
		return v
	}
	b, _ := json.Marshal(clipText(string(v)))
	return b
}

// errorFrame writes {"type":"error","data":{"message","code",…extra}}.
func errorFrame(b []byte, code, message string, extra map[string]any) []byte {
	data := map[string]any{"message": message, "code": code}
	for k, v := range extra {
		data[k] = v
	}
	return wrap(b, "error", mustJSON(data))
}

// wrap writes {"type": typ, "data": data}.
func wrap(b []byte, typ string, data []byte) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// aepExtra are the keys an error frame of an aep error carries besides
// OpenEnv's: the aep code (spec §7), its reason and whether a retry may
// succeed.
func aepExtra(e *aepError) map[string]any {
	x := map[string]any{"aep_code": e.code, "retryable": e.retryable}
	if r := e.reason(); r != "" {
		x["aep_reason"] = r
	}
	return x
}

// handle answers one frame; it reports whether the connection goes on.
func (c *wsConn) handle(b []byte, size int) bool {
	var fr *frame
	var fe *frameError
	if b == nil {
		fe = &frameError{code: codeValidation, message: "message of " + strconv.Itoa(size) + " bytes is over the limit of " + strconv.Itoa(c.f.maxFrame) + " bytes",
			extra: map[string]any{"aep_code": string(wire.CodeParseError), "aep_reason": "too_large"}}
	} else {
		fr, fe = parseFrame(b)
	}
	if !c.live {
		// Nothing is answered before the token but its refusal
		// (docs/SECURITY.md, The OpenEnv face).
		if !c.authenticate(fr) {
			return false
		}
	}
	if fe != nil {
		c.send(errorFrame(c.out[:0], fe.code, fe.message, fe.extra))
		if fe.fatal {
			c.closeWith(websocket.StatusPolicyViolation, fe.message)
			return false
		}
		return true
	}
	switch fr.typ {
	case "reset":
		c.reset(fr)
	case "step":
		c.step(fr)
	case "state":
		c.state()
	case "mcp":
		c.mcp(fr)
	case "close":
		c.ours.Store(true)
		c.b.close()
		c.closeWith(websocket.StatusNormalClosure, "")
		return false
	}
	return true
}

// authenticate handshakes the session with the first message's token: the
// upgrade's bearer header, else aep_token of a reset's data. It answers a
// missing or refused token itself and reports whether to go on.
func (c *wsConn) authenticate(fr *frame) bool {
	token := c.bearer
	var record *bool
	if fr != nil && fr.typ == "reset" && fr.data != nil {
		if data, ok := object(fr.data); ok {
			args, _ := parseReset(data, false, nil)
			if token == "" {
				token = args.token
			}
			record = args.record
		}
	}
	if token == "" {
		c.fatal(codeSession, "unauthorized: the aep token is required before anything else: pass aep_token to the first reset (reset(aep_token=...)) or an Authorization: Bearer header",
			map[string]any{"aep_code": string(wire.CodeUnauthorized)}, websocket.StatusPolicyViolation)
		return false
	}
	if err := c.b.handshake(c.ctx, c.f.agentID, token, record); err != nil {
		c.refuse(err)
		return false
	}
	c.live = true
	return true
}

// refuse answers a failed handshake and closes: OpenEnv's capacity error
// for the host's or the tenant's session limit, its factory error for a
// tenant without the env capability, its session error otherwise.
func (c *wsConn) refuse(err error) {
	var e *aepError
	if !errors.As(err, &e) {
		c.fatal(codeSession, "the aep session ended before its handshake", nil, websocket.StatusGoingAway)
		return
	}
	x := aepExtra(e)
	switch {
	case e.reason() == "too_many_sessions":
		max := c.f.h.Config().Server.Limits.MaxSessions
		active := c.f.h.LiveSessions()
		x["active_sessions"], x["max_sessions"] = active, max
		c.fatal(codeCapacity, "Server at capacity: "+strconv.Itoa(active)+"/"+strconv.Itoa(max)+" sessions active. Cannot accept new connections.", x, websocket.StatusTryAgainLater)
	case e.reason() == "tenant_sessions":
		limit, _ := e.detail["limit"].(int)
		if f, ok := e.detail["limit"].(float64); ok {
			limit = int(f)
		}
		x["active_sessions"], x["max_sessions"] = limit, limit
		c.fatal(codeCapacity, "Server at capacity: "+strconv.Itoa(limit)+"/"+strconv.Itoa(limit)+" sessions of your tenant active. Cannot accept new connections.", x, websocket.StatusTryAgainLater)
	case e.code == string(wire.CodeCapabilityMissing):
		x["factory_name"] = c.ef.info.EnvName
		c.fatal(codeFactory, "the env capability is not enabled for this token's tenant", x, websocket.StatusPolicyViolation)
	case e.code == string(wire.CodeUnauthorized):
		c.fatal(codeSession, "unauthorized: the aep token was refused", x, websocket.StatusPolicyViolation)
	default:
		c.fatal(codeSession, e.message, x, websocket.StatusTryAgainLater)
	}
}

// send writes one frame; a failed write ends the connection (the reader
// then sees it closed).
func (c *wsConn) send(b []byte) {
	c.out = b
	if err := c.c.Write(noCancel, websocket.MessageText, b); err != nil {
		c.cancel()
	}
}

// closeWith closes the connection with a close handshake, on its own
// goroutine (the peer may never answer; the library waits 5 s), then ends
// the session. The reading goroutine must stop reading: Close reads the
// peer's close frame itself.
func (c *wsConn) closeWith(code websocket.StatusCode, reason string) {
	c.ours.Store(true)
	go func() {
		_ = c.c.Close(code, clipReason(reason))
		c.finish()
	}()
}

// fail answers an aep error of a request with OpenEnv's code for it.
func (c *wsConn) fail(code string, err error) {
	var e *aepError
	if !errors.As(err, &e) {
		c.send(errorFrame(c.out[:0], codeSession, "the aep session ended", nil))
		c.closeWith(websocket.StatusGoingAway, "the aep session ended")
		return
	}
	message := e.message
	if code == codeValidation {
		message = "Invalid message: " + e.message
		x := aepExtra(e)
		x["errors"] = []pyError{{Type: "value_error", Loc: []any{"data"}, Msg: e.message}}
		c.send(errorFrame(c.out[:0], code, message, x))
		return
	}
	c.send(errorFrame(c.out[:0], code, message, aepExtra(e)))
}

func (c *wsConn) reset(fr *frame) {
	data := map[string]json.RawMessage{}
	if fr.data != nil {
		data, _ = object(fr.data)
	}
	args, errs := parseReset(data, false, []any{"data"})
	if errs != nil {
		c.send(errorFrame(c.out[:0], codeValidation, "Invalid message", map[string]any{"errors": errs}))
		return
	}
	req := &msg.EnvResetReq{EnvName: c.ef.info.EnvName, Seed: args.seed, Options: args.opts}
	if c.ep.id != "" {
		// The connection's one environment instance is reset again, as
		// OpenEnv resets the session's environment: an external
		// environment keeps its process, guess its options.
		id := c.ep.id
		req.EpisodeID = &id
	}
	m, err := c.b.do(c.ctx, req)
	var e *aepError
	if err != nil && req.EpisodeID != nil && c.ep.broken && errors.As(err, &e) && e.reason() == "episode_closed" {
		// The episode was closed under a failure (a step that overran
		// its timeout, a panic): a new one.
		req.EpisodeID = nil
		m, err = c.b.do(c.ctx, req)
	}
	if err != nil {
		code := codeExecution
		if errors.As(err, &e) && e.agentFault() {
			code = codeValidation
		}
		c.fail(code, err)
		return
	}
	resp := m.(*msg.EnvResetResp)
	c.ep = episode{id: resp.EpisodeID, label: args.label}
	out := append(c.out[:0], `{"type":"observation","data":`...)
	out = appendResult(out, result{obs: resp.Observation, info: resp.Info})
	c.send(append(out, '}'))
}

func (c *wsConn) step(fr *frame) {
	action, errs := actionOf(fr.data, []any{"data"})
	if errs != nil {
		c.send(errorFrame(c.out[:0], codeValidation, "Invalid message", map[string]any{"errors": errs}))
		return
	}
	if c.ep.id == "" {
		c.send(errorFrame(c.out[:0], codeExecution, "no episode yet: send reset first", nil))
		return
	}
	m, err := c.b.do(c.ctx, &msg.EnvStepReq{EpisodeID: c.ep.id, Action: action})
	if err != nil {
		var e *aepError
		code := codeExecution
		if errors.As(err, &e) && e.agentFault() && !c.ep.done && !c.ep.broken {
			code = codeValidation // the action: the episode itself was steppable
		} else {
			c.ep.broken = c.ep.broken || !c.ep.done
		}
		c.fail(code, err)
		return
	}
	st := m.(*msg.EnvStepResp)
	c.ep.step, c.ep.done = st.Step, st.Terminated || st.Truncated
	reward := st.Reward
	out := append(c.out[:0], `{"type":"observation","data":`...)
	out = appendResult(out, result{obs: st.Observation, info: st.Info, terminated: st.Terminated, truncated: st.Truncated, reward: &reward})
	c.send(append(out, '}'))
}

func (c *wsConn) state() {
	if c.ep.id == "" {
		c.send(wrap(c.out[:0], "state", mustJSON(stateOf(nil, nil, c.b.s.Handle()))))
		return
	}
	m, err := c.b.do(c.ctx, &msg.EnvObserveReq{EpisodeID: c.ep.id})
	if err != nil {
		c.fail(codeExecution, err)
		return
	}
	c.send(wrap(c.out[:0], "state", mustJSON(stateOf(&c.ep, m.(*msg.EnvObserveResp), c.b.s.Handle()))))
}

// mcp answers OpenEnv's tunnelled MCP as an environment without MCP
// support does (reference §3.7): aep's MCP face is /mcp on the host.
func (c *wsConn) mcp(fr *frame) {
	id := json.RawMessage("null")
	if data, ok := object(fr.data); ok {
		if v, ok := data["id"]; ok {
			id = clipInput(v)
		}
	}
	out := append(c.out[:0], `{"type":"mcp","data":{"jsonrpc":"2.0","id":`...)
	out = append(out, bytes.TrimSpace(id)...)
	out = append(out, `,"error":{"code":-32603,"message":"Environment does not support MCP","data":"aep serves MCP on its own face, /mcp (docs/mcp.md)"}}}`...)
	c.send(out)
}
