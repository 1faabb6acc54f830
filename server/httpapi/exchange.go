package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	gen "github.com/aephost/aep/gen/httpapi"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Single-exchange mode of POST /send (docs/DECISIONS.md, HTTP transport):
// with Accept: application/json the request's reply is the response body;
// with Accept: text/event-stream its events and then its reply are the
// response, as SSE. The session's Sink (stream.Send) hands every message
// whose req_id names a waiting exchange to that exchange instead of the
// ring, so nothing answered this way reaches /stream or its replay buffer.

// exchangeMode is how a POST /send is answered.
type exchangeMode uint8

const (
	modeStream exchangeMode = iota // 202; the answer goes to /stream
	modeJSON                       // the reply as the body; events dropped
	modeSSE                        // events then the reply, as SSE
)

// parseAccept picks the mode from an Accept header. Both types (as MCP
// clients send) choose SSE, which can carry everything JSON can; */* and
// absent keep the 202 behaviour clients of the stream rely on.
func parseAccept(h string) exchangeMode {
	if h == "" {
		return modeStream
	}
	var json, sse bool
	for part := range strings.SplitSeq(h, ",") {
		typ, params, _ := strings.Cut(part, ";")
		if q, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok && strings.Trim(q, "0.") == "" {
			continue // q=0 means "not acceptable"
		}
		switch strings.ToLower(strings.TrimSpace(typ)) {
		case "text/event-stream":
			sse = true
		case "application/json":
			json = true
		}
	}
	switch {
	case sse:
		return modeSSE
	case json:
		return modeJSON
	}
	return modeStream
}

// exchangeMiddleware takes POST /send's Accept header, which the strict
// server interface does not see (content negotiation is not a parameter in
// OpenAPI, so openapi.yaml describes it by response types), and answers a
// single exchange itself; the default mode goes on to [api.send] as
// [api.Send] would, which is never called.
//
// The generated handler asks for the middleware on every request, with a
// new f each time; for Send f only calls [api.Send], so the handler made
// once in a.sendStrict serves every POST /send instead of a closure of f
// made per request.
func (a *api) exchangeMiddleware(f gen.StrictHandlerFunc, operationID string) gen.StrictHandlerFunc {
	if operationID != "Send" {
		return f
	}
	return a.sendStrict
}

// sendHandler is [api.exchangeMiddleware]'s handler of POST /send.
func (a *api) sendHandler(ctx context.Context, _ http.ResponseWriter, r *http.Request, req any) (any, error) {
	sr, ok := req.(gen.SendRequestObject)
	if !ok { // the generated handler passes nothing else
		return nil, fmt.Errorf("send: request of type %T", req)
	}
	tp := ""
	if a.h.Tracing() {
		tp = traceparentHeader(r)
	}
	return a.send(ctx, sr, parseAccept(r.Header.Get("Accept")), tp)
}

// traceparentHeader returns the request's W3C traceparent header (W3C
// Trace Context §3.2), which the host's spans of the message join unless
// the message carries a traceparent of its own; "" when absent or given
// more than once (such a header is to be ignored).
func traceparentHeader(r *http.Request) string {
	v := r.Header.Values("Traceparent")
	if len(v) != 1 || len(v[0]) > wire.MaxTraceparent {
		return ""
	}
	return strings.TrimSpace(v[0])
}

// exchanges are the single exchanges waiting on one session, by request id.
type exchanges struct {
	n  atomic.Int32 // len(m), read without the lock on every Send
	mu sync.Mutex
	m  map[string]*exchange
}

// add registers x, or reports false when a request with its id already waits.
func (xs *exchanges) add(x *exchange) bool {
	xs.mu.Lock()
	defer xs.mu.Unlock()
	if _, dup := xs.m[x.id]; dup {
		return false
	}
	if xs.m == nil {
		xs.m = map[string]*exchange{}
	}
	xs.m[x.id] = x
	xs.n.Add(1)
	return true
}

func (xs *exchanges) remove(x *exchange) {
	xs.mu.Lock()
	if xs.m[x.id] == x {
		delete(xs.m, x.id)
		xs.n.Add(-1)
	}
	xs.mu.Unlock()
}

// route hands p to the exchange waiting for its request, if any. The reply
// (any message for the request that is not an event) ends the exchange.
func (xs *exchanges) route(p *wire.Packet) (int, bool) {
	if p.ReqID == "" || xs.n.Load() == 0 {
		return 0, false
	}
	event := strings.HasSuffix(p.Type, "/event")
	xs.mu.Lock()
	x := xs.m[p.ReqID]
	if x != nil && !event {
		delete(xs.m, p.ReqID)
		xs.n.Add(-1)
	}
	xs.mu.Unlock()
	if x == nil {
		return 0, false
	}
	return x.deliver(p, !event), true
}

// exchange is one request answered in its own POST response.
type exchange struct {
	st       *stream // of the session the request was sent to
	id       string
	sse      bool
	maxBytes int // bound on the events held for a slow reader

	mu      sync.Mutex
	events  [][]byte // encoded events not yet written (SSE mode)
	held    int
	dropped int
	reply   []byte // the encoded reply, once it came
	// wake is signalled by every delivery. The JSON mode makes it only
	// when it must wait (replyOrWake): a request run on the exchange's own
	// goroutine has most often been answered by then.
	wake chan struct{}
}

func newExchange(st *stream, id string, mode exchangeMode, maxBytes int) *exchange {
	x := &exchange{st: st, id: id, sse: mode == modeSSE, maxBytes: maxBytes}
	if x.sse {
		x.wake = make(chan struct{}, 1)
	}
	return x
}

// deliver takes one message of the request. In JSON mode events are
// dropped: a response has room for one message, and a tool's events are in
// its result's events anyway (spec §6 rule 1). Past maxBytes of unwritten
// events further events are dropped and counted; the reply is always kept.
func (x *exchange) deliver(p *wire.Packet, reply bool) int {
	if !reply && !x.sse {
		return 0
	}
	line, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		// The kernel's own messages always encode; should one not, the
		// reply must still come, so it becomes an error message.
		line, _ = wire.Encode(&wire.Envelope{Type: "error", ID: wire.NewID(), ReqID: x.id},
			&msg.Error{Code: string(wire.CodeRuntimeError), Message: "the reply could not be encoded", Retryable: true})
	}
	x.mu.Lock()
	switch {
	case reply:
		x.reply = line
	case x.held+len(line) > x.maxBytes:
		x.dropped++
	default:
		x.events = append(x.events, line)
		x.held += len(line)
	}
	wake := x.wake
	x.mu.Unlock()
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return len(line)
}

// replyOrWake returns the reply, or the channel the next delivery will
// signal when it has not come yet.
func (x *exchange) replyOrWake() ([]byte, <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.reply != nil {
		return x.reply, nil
	}
	if x.wake == nil {
		x.wake = make(chan struct{}, 1)
	}
	return nil, x.wake
}

// take returns the events held, the dropped count and the reply (nil until
// it came), and empties the held events.
func (x *exchange) take() (events [][]byte, dropped int, reply []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	events, dropped, reply = x.events, x.dropped, x.reply
	x.events, x.held, x.dropped = nil, 0, 0
	return events, dropped, reply
}

// sendExchange answers one POST /send in single-exchange mode.
func (a *api) sendExchange(ctx context.Context, st *stream, line []byte, mode exchangeMode, traceparent string) gen.SendResponseObject {
	var sc wire.Scanned
	scanErr := wire.Scan(line, &sc)
	if !sc.HasID || sc.IDNotString || sc.ID == "" {
		// The kernel could answer this line only with an error whose
		// req_id is empty, which no exchange can claim; the transport
		// answers it with the kernel's decoder and error table instead.
		_, _, derr := a.h.Registry().Decode(line, &sc)
		if derr == nil { // unreachable: Scan or the id check failed above
			derr = wire.Errorf(wire.CodeParseError, "malformed message")
		}
		return answerNow(mode, errorLine(sc.ID, wire.AsError(derr)))
	}
	if e := a.h.Registry().Lookup(sc.Type); scanErr == nil && e != nil && e.Kind == wire.KindNotification {
		st.sess.ReceiveLine(line) // cancel, shutdown: no reply to wait for
		return accepted{}
	}
	if sc.Traceparent == "" {
		sc.Traceparent = traceparent
	}
	x := newExchange(st, sc.ID, mode, a.opts.BufferBytes)
	if !st.ex.add(x) {
		return answerNow(mode, errorLine(sc.ID, &wire.Error{Code: wire.CodeSchemaViolation,
			Message: "a request with this id is already in flight", Detail: map[string]any{"field": "id"}}))
	}
	if mode == modeSSE || scanErr != nil {
		// A malformed line whose id is readable is the kernel's to answer,
		// as over every other transport: its error, with the session's
		// point, comes to this exchange by that id.
		st.sess.ReceiveLineWith(line, server.LineOptions{Traceparent: traceparent})
		if mode == modeSSE {
			return &sseExchange{x: x, ctx: ctx}
		}
		return x.wait(ctx)
	}
	// This goroutine waits for the reply anyway, so the kernel may run the
	// request on it (server.Session.ReceiveScannedHere); a client that
	// goes away meanwhile cancels it as below, from the moment its handler
	// waits on anything.
	st.sess.ReceiveScannedHere(ctx, line, &sc, x)
	if ctx.Err() != nil {
		// Gone before its reply was taken: a request queued rather than
		// run here is cancelled as `cancel` does (an id no longer in
		// flight is ignored).
		x.Gone()
		return nobodyLeft
	}
	return x.wait(ctx)
}

// wait answers the exchange with its reply when it comes, or nothing when
// the client goes away first (its request is then cancelled).
func (x *exchange) wait(ctx context.Context) gen.SendResponseObject {
	for {
		reply, wake := x.replyOrWake()
		if reply != nil {
			return (*replied)(x)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			x.Gone()
			return nobodyLeft
		}
	}
}

// Gone stops the request of a client that went away, as `cancel` would
// (spec §4.2, docs/DECISIONS.md, Wire). The kernel answers `cancelled` at
// once and that answer reaches the exchange, not /stream; the exchange is
// then dropped in any case. The kernel calls it too (server.Goner), when
// the client leaves while the request runs on the exchange's goroutine.
func (x *exchange) Gone() {
	x.st.sess.ReceivePacket(&wire.Envelope{Type: "cancel", ID: wire.NewID(), Proto: wire.ProtoVersion}, &msg.Cancel{ReqID: x.id})
	x.st.ex.remove(x)
}

func errorLine(reqID string, e *wire.Error) []byte {
	m := &msg.Error{Code: string(e.Code), Message: e.Message, Detail: e.Detail, Retryable: e.Retryable()}
	line, _ := wire.Encode(&wire.Envelope{Type: "error", ID: wire.NewID(), ReqID: reqID}, m)
	return line
}

func answerNow(mode exchangeMode, line []byte) gen.SendResponseObject {
	if mode == modeSSE {
		return sseNow(line)
	}
	return jsonReply(line)
}

// jsonReply is the 200 of the JSON mode: the reply message itself. A nil
// reply (the client went away) writes nothing.
type jsonReply []byte

func (r jsonReply) VisitSendResponse(w http.ResponseWriter) error {
	if r == nil {
		return nil
	}
	// Shared value slices, never changed: Header.Set would allocate one
	// per call, and appending the newline would copy the reply.
	h := w.Header()
	h["Content-Type"], h["X-Content-Type-Options"] = jsonContentType, noSniff
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(r); err != nil {
		return err
	}
	_, err := w.Write(newline)
	return err
}

// nobodyLeft answers an exchange whose client went away: nothing.
var nobodyLeft gen.SendResponseObject = jsonReply(nil)

// replied is the 200 of a JSON-mode exchange whose reply came, written
// from the exchange itself: a pointer is an interface value as it is,
// where a jsonReply would be boxed in an allocation of its own.
type replied exchange

func (r *replied) VisitSendResponse(w http.ResponseWriter) error {
	// Set once under the exchange's lock before the wait saw it there.
	return jsonReply(r.reply).VisitSendResponse(w)
}

var (
	jsonContentType = []string{"application/json"}
	noSniff         = []string{"nosniff"}
	newline         = []byte{'\n'}
)

// sseNow is an SSE answer known before anything was sent to the kernel.
type sseNow []byte

func (r sseNow) VisitSendResponse(w http.ResponseWriter) error {
	startSSE(w)
	_, err := w.Write(sseData(nil, r))
	return err
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// sseData frames one message as an SSE event. These events have no id: they
// are not kept for replay, so there is nothing to resume from.
func sseData(dst, line []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, line...)
	return append(dst, "\n\n"...)
}

// sseExchange streams one request's events and then its reply.
type sseExchange struct {
	x   *exchange
	ctx context.Context
}

func (r *sseExchange) VisitSendResponse(w http.ResponseWriter) error {
	startSSE(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush() // the head goes out now, so the client sees the exchange began
	var buf []byte
	for {
		select {
		case <-r.x.wake:
		case <-r.ctx.Done():
			r.x.Gone()
			return nil
		}
		events, dropped, reply := r.x.take()
		buf = buf[:0]
		if dropped > 0 {
			buf = append(buf, ": dropped events beyond the buffer cap\n\n"...)
		}
		for _, ev := range events {
			buf = sseData(buf, ev)
		}
		if reply != nil {
			buf = sseData(buf, reply)
		}
		if _, err := w.Write(buf); err != nil {
			r.x.Gone()
			return nil // the client is gone; nobody to tell
		}
		if reply != nil {
			return nil
		}
		flush()
	}
}
