// Package httpapi is aep's HTTP+SSE transport (spec §4.1, docs/DECISIONS.md, Transports).
// It implements the strict server interface that oapi-codegen generates from
// openapi.yaml into gen/httpapi and plugs into the kernel through
// [server.Host.NewSession], [server.Session.ReceiveLine] and [server.Sink].
// The HTTP layer only moves messages: the kernel decodes every body and
// answers malformed ones on the stream; HTTP status codes are transport-level
// only (400 missing header, 403 foreign Origin/Host, 404 unknown session,
// 413 body too large).
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	gen "github.com/aephost/aep/gen/httpapi"
	"github.com/aephost/aep/server"
)

// DefaultListen is the loopback address Serve binds when given none.
const DefaultListen = "127.0.0.1:8765"

// Options tune the transport. Zero fields take the defaults.
type Options struct {
	// Heartbeat is the interval of SSE comment lines on an idle stream (default 15s).
	Heartbeat time.Duration
	// BufferMessages bounds each session's replay ring by count (default 512).
	BufferMessages int
	// BufferBytes bounds each session's replay ring by size (default
	// server.limits.session_buffer_bytes); the newest message is kept
	// whatever its size.
	BufferBytes int
	// PendingBufferBytes is BufferBytes for a session that has not
	// handshaken (default server.limits.pending_buffer_bytes): it only gets
	// errors and the handshake's reply, and anyone may open one.
	PendingBufferBytes int
	// AllowedOrigins lists the origins ("https://app.example") and hosts
	// ("aep.internal:8765") besides loopback that may call the API; "*"
	// allows any. Nil means the host's server.allowed_origins.
	AllowedOrigins []string
	// Logger defaults to the host's logger.
	Logger *slog.Logger
	// WebSocket tunes GET /ws (ws.go).
	WebSocket WebSocketOptions
	// Mount serves further handlers by path pattern (http.ServeMux syntax)
	// behind the same Origin/Host, body size and deadline checks, e.g. the
	// MCP face at /mcp (server/mcpface).
	Mount map[string]http.Handler
	// Faces serve other protocols' clients under a path prefix, behind
	// the same Origin/Host and body size checks, opening sessions of
	// their own (the OpenEnv face at /openenv/, server/openenv).
	Faces []Face
}

// Face is a handler of every path under Prefix (a subtree pattern such as
// "/openenv/") that opens sessions: the guard gives its requests the
// client's address ([SessionOptions]), for the handshake throttle.
type Face struct {
	Prefix  string
	Handler http.Handler
	// Upgrade reports whether a request is a WebSocket upgrade: such a
	// request gets no HTTP deadlines, as GET /ws gets none, since its
	// connection is hijacked; the face keeps its peer alive itself.
	Upgrade func(*http.Request) bool
}

func (o Options) withDefaults(h *server.Host) Options {
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.BufferMessages <= 0 {
		o.BufferMessages = 512
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = h.Config().Server.Limits.SessionBufferBytes
	}
	if o.PendingBufferBytes <= 0 {
		o.PendingBufferBytes = h.Config().Server.Limits.PendingBufferBytes
	}
	if o.AllowedOrigins == nil {
		o.AllowedOrigins = h.Config().Server.AllowedOrigins
	}
	if o.Logger == nil {
		o.Logger = h.Logger()
	}
	return o
}

// api implements [gen.StrictServerInterface] over one host.
type api struct {
	h       *server.Host
	opts    Options
	log     *slog.Logger
	maxBody int64
	allow   allowList
	httpCfg server.HTTPConfig
	proxies server.TrustedProxies

	// sendStrict is a.sendHandler, made once (exchangeMiddleware).
	sendStrict gen.StrictHandlerFunc

	mu      sync.RWMutex
	streams map[string]*stream
}

var _ gen.StrictServerInterface = (*api)(nil)

// Handler returns the HTTP transport of h: the routes of openapi.yaml behind
// the Origin/Host check and the body size limit.
func Handler(h *server.Host, opts Options) http.Handler {
	opts = opts.withDefaults(h)
	a := &api{h: h, opts: opts, log: opts.Logger, maxBody: int64(h.Config().Server.Limits.MaxMessageBytes),
		allow: parseAllowList(opts.AllowedOrigins), streams: map[string]*stream{},
		httpCfg: h.Config().Transport.HTTP, proxies: h.TrustedProxies()}
	a.sendStrict = a.sendHandler
	h.TrackBuffered(a.bufferedBytes) // read only when /metrics is scraped
	// Both of oapi-codegen's error hooks lead to one function, so every
	// transport error has our JSON body and no 5xx echoes an internal error
	// (so no library text reaches an agent).
	strict := gen.NewStrictHandlerWithOptions(a, []gen.StrictMiddlewareFunc{a.exchangeMiddleware}, gen.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: a.fail, ResponseErrorHandlerFunc: a.fail})
	// One router for the generated routes, GET /ws and the mounts
	// (router.go).
	rt := newRouter()
	gen.HandlerWithOptions(strict, gen.StdHTTPServerOptions{BaseRouter: rt, ErrorHandlerFunc: a.fail})
	a.addWebSocket(rt)
	for pattern, hd := range opts.Mount {
		rt.Handle(pattern, hd)
	}
	for _, f := range opts.Faces {
		rt.Handle(f.Prefix, f.Handler)
	}
	return &guard{a: a, next: rt, faces: opts.Faces}
}

// Serve serves h's HTTP transport on listenAddr (DefaultListen when empty)
// until ctx ends, then ends every stream and shuts the server down.
func Serve(ctx context.Context, h *server.Host, listenAddr string) error {
	return ServeWith(ctx, h, listenAddr, Options{})
}

// ServeWith is Serve with opts.
func ServeWith(ctx context.Context, h *server.Host, listenAddr string, opts Options) error {
	if listenAddr == "" {
		listenAddr = DefaultListen
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listenAddr, err)
	}
	return ServeListener(ctx, h, ln, opts)
}

// ServeListener is Serve on a listener the caller opened; it closes ln.
func ServeListener(ctx context.Context, h *server.Host, ln net.Listener, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = h.Logger()
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("HTTP transport listens beyond loopback; requests still need an allowed Host and Origin", "addr", ln.Addr().String())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := h.Config()
	hc := cfg.Transport.HTTP
	if cfg.Server.ProxyProtocol {
		ln = &proxyListener{Listener: ln, trusted: h.TrustedProxies()}
	}
	// Only the header and idle deadlines are server-wide; bodies and writes
	// have theirs per route (guard.deadlines), since a server-wide write or
	// read timeout would cut every long-lived stream (docs/SECURITY.md).
	srv := &http.Server{
		Handler:           Handler(h, opts),
		ReadHeaderTimeout: time.Duration(hc.ReadHeaderTimeout),
		IdleTimeout:       time.Duration(hc.IdleTimeout),
		MaxHeaderBytes:    hc.MaxHeaderBytes,
		ConnContext:       connContext,
		// Request contexts derive from ctx, so ending ctx ends every SSE
		// stream; Shutdown alone would wait for them forever.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("HTTP transport serving", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// guard applies the checks that come before routing: Origin and Host (403),
// then the body size (413), so an oversized body is refused before any
// session lookup (docs/DECISIONS.md, Transports).
type guard struct {
	a     *api
	next  http.Handler
	faces []Face
}

// face returns the face that serves r's path, if any.
func (g *guard) face(r *http.Request) *Face {
	for i := range g.faces {
		if strings.HasPrefix(r.URL.Path, g.faces[i].Prefix) {
			return &g.faces[i]
		}
	}
	return nil
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rw := &respWriter{ResponseWriter: w}
	if !g.a.allow.host(r.Host) {
		g.a.fail(rw, r, &statusError{http.StatusForbidden, "forbidden", "host " + strconv.Quote(r.Host) + " is not allowed"})
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !g.a.allow.origin(o) {
		g.a.fail(rw, r, &statusError{http.StatusForbidden, "forbidden", "origin " + strconv.Quote(o) + " is not allowed"})
		return
	}
	if r.ContentLength > g.a.maxBody {
		g.a.fail(rw, r, &http.MaxBytesError{Limit: g.a.maxBody})
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(rw, r.Body, g.a.maxBody)
	}
	f := g.face(r)
	if f == nil || f.Upgrade == nil || !f.Upgrade(r) {
		g.deadlines(rw, r)
	}
	if r.URL.Path == "/session" || r.URL.Path == "/ws" || f != nil {
		// The routes that open sessions, the only ones that ask
		// (SessionOptions); the others are spared the request's copy.
		r = r.WithContext(context.WithValue(r.Context(), clientAddrKey{}, clientAddr(r, g.a.proxies)))
	}
	g.next.ServeHTTP(rw, r)
	// The end of an answer is written after the handler returns.
	rw.extend()
}

// respWriter remembers whether the response has begun, so that an error met
// while streaming is logged instead of written into the stream. On a
// stream it gives every write its own deadline (perWrite).
type respWriter struct {
	http.ResponseWriter
	started  bool
	rc       http.ResponseController // of ResponseWriter, once deadlines set it
	perWrite time.Duration
	deadline time.Time    // the write deadline set last
	body     bodyDeadline // the request's body, when it has a read deadline
}

// extend gives the next write of a stream its deadline: at most perWrite
// away, as docs/SECURITY.md promises, and at least nine tenths of it. The
// connection's deadline (a timer of the runtime's poller, often with a
// wake of the poller: microseconds) is moved only once more than a tenth
// of perWrite has passed since it was set, not for every write, most of
// which only fill the response's buffer.
func (w *respWriter) extend() {
	if w.perWrite <= 0 {
		return
	}
	// time.Until reads only the monotonic clock, half the cost of the
	// time.Now a deadline is set from.
	if !w.deadline.IsZero() && time.Until(w.deadline) >= w.perWrite-w.perWrite/10 {
		return
	}
	w.deadline = time.Now().Add(w.perWrite)
	_ = w.rc.SetWriteDeadline(w.deadline)
}

func (w *respWriter) WriteHeader(code int) {
	w.started = true
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(b []byte) (int, error) {
	w.started = true
	w.extend()
	return w.ResponseWriter.Write(b)
}

// Flush lets the generated SSE writer flush after every event. A flush is
// where a stream's bytes reach the connection, so it has a deadline too.
func (w *respWriter) Flush() {
	w.extend()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusError is a transport-level refusal with its status and short code.
type statusError struct {
	status  int
	code    string
	message string
}

func (e *statusError) Error() string { return e.message }

// fail writes the JSON error body of every transport error; it is the one
// target of oapi-codegen's three error hooks. A 5xx carries a correlation id
// and never the internal error, which goes to the log only.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, message := classify(err)
	if status == http.StatusRequestTimeout {
		a.log.Debug("http request body timed out", "path", r.URL.Path, "remote", r.RemoteAddr)
	}
	if status >= 500 {
		if r.Context().Err() != nil {
			a.log.Debug("http request ended by the client", "path", r.URL.Path, "err", err)
			return
		}
		corr := "http-" + rand.Text()[:12]
		a.log.Error("http transport error", "correlation", corr, "method", r.Method, "path", r.URL.Path, "err", err)
		message = "internal error (correlation " + corr + ")"
	}
	if rw, ok := w.(*respWriter); ok && rw.started {
		a.log.Debug("http error after the response began", "path", r.URL.Path, "err", err)
		return
	}
	writeJSON(w, status, gen.Error{Ok: false, Error: code, Message: message})
}

func classify(err error) (status int, code, message string) {
	var (
		se   *statusError
		mb   *http.MaxBytesError
		ne   net.Error
		req  *gen.RequiredHeaderError
		inv  *gen.InvalidParamFormatError
		many *gen.TooManyValuesForParamError
	)
	switch {
	case errors.As(err, &se):
		return se.status, se.code, se.message
	case errors.As(err, &mb):
		return http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body is over the limit of %d bytes", mb.Limit)
	case errors.As(err, &ne) && ne.Timeout():
		// The body did not arrive within read_body_timeout.
		return http.StatusRequestTimeout, "timeout", "the request body took too long to arrive"
	case errors.As(err, &req):
		return http.StatusBadRequest, "bad_request", "header " + req.ParamName + " is required"
	case errors.As(err, &inv):
		return http.StatusBadRequest, "bad_request", "header " + inv.ParamName + " is malformed"
	case errors.As(err, &many):
		return http.StatusBadRequest, "bad_request", "header " + many.ParamName + " must be given once"
	}
	return http.StatusInternalServerError, "internal", ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// lookup finds the stream of a session. A child session that the host
// created and that waits for its handshake is reached by its id too (docs/DECISIONS.md,
// Transports): its output is attached to a new stream here. A live session of
// another transport is not taken over.
func (a *api) lookup(id string) (*stream, bool) {
	a.mu.RLock()
	st, ok := a.streams[id]
	a.mu.RUnlock()
	if ok {
		return st, true
	}
	s, ok := a.h.Session(id)
	if !ok || !s.HostMade() || s.Live() {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.streams[id]; ok {
		return st, true
	}
	st = newStream(a)
	st.attach(s)
	a.streams[id] = st
	s.Attach(st)
	return st, true
}

func (a *api) forget(id string) {
	a.mu.Lock()
	delete(a.streams, id)
	a.mu.Unlock()
}

// CreateSession implements POST /session. The session exists before its
// handshake, so the id returned here is the one the handshake reports.
func (a *api) CreateSession(ctx context.Context, _ gen.CreateSessionRequestObject) (gen.CreateSessionResponseObject, error) {
	st := newStream(a)
	opts := SessionOptions(ctx)
	// Not under a.mu: NewSession may evict (close) the oldest pending
	// session, whose stream then takes a.mu to forget itself. The new
	// stream keeps what the session sends before it is registered.
	s, err := a.h.NewSession(st, opts...)
	if err != nil {
		// Only a closing or draining host refuses: pending sessions evict each other.
		if errors.Is(err, server.ErrTooManySessions) || errors.Is(err, server.ErrClosed) || errors.Is(err, server.ErrDraining) {
			return gen.CreateSession503JSONResponse{Ok: false, Error: "unavailable", Message: err.Error()}, nil
		}
		return nil, fmt.Errorf("new session: %w", err)
	}
	st.attach(s)
	a.mu.Lock()
	a.streams[st.id] = st
	a.mu.Unlock()
	// Evicted already (a flood of new sessions): its Close may have run
	// before it was registered, so forget it here.
	if st.isClosed() {
		a.forget(st.id)
	}
	return gen.CreateSession200JSONResponse{SessionId: st.id}, nil
}

// Send is POST /send in the generated strict interface, which requires
// it; no request reaches it: the strict middleware hands every POST /send
// to sendHandler instead (exchange.go, exchangeMiddleware), which reads
// the headers the interface does not carry. In the stream mode it stands
// for, the body goes to the kernel as one line, whatever it holds; its
// answer, or its parse_error, arrives on the stream.
func (a *api) Send(ctx context.Context, req gen.SendRequestObject) (gen.SendResponseObject, error) {
	return a.send(ctx, req, modeStream, "")
}

// send answers POST /send in mode (exchangeMiddleware); traceparent is
// the request's traceparent header, when the host traces.
func (a *api) send(ctx context.Context, req gen.SendRequestObject, mode exchangeMode, traceparent string) (gen.SendResponseObject, error) {
	st, ok := a.lookup(req.Params.XSessionId)
	if !ok {
		return gen.Send404JSONResponse{NotFoundJSONResponse: a.notFound(req.Params.XSessionId)}, nil
	}
	var line []byte
	if req.Body != nil {
		// The body's bytes, not a copy: the line is only read (scanned
		// and decoded, whose models copy what they keep), and the string
		// the generated handler made of the body is this request's alone.
		line = unsafe.Slice(unsafe.StringData(*req.Body), len(*req.Body))
	}
	if mode != modeStream {
		return a.sendExchange(ctx, st, line, mode, traceparent), nil
	}
	if traceparent != "" {
		st.sess.ReceiveLineWith(line, server.LineOptions{Traceparent: traceparent})
		return accepted{}, nil
	}
	st.sess.ReceiveLine(line)
	return accepted{}, nil
}

// accepted is gen.Send202JSONResponse written from a constant: the body
// never varies, and /send is the hot path (the generated encoder costs a
// reflection-based encoding per message).
type accepted struct{}

var acceptedBody = []byte(`{"ok":true}` + "\n")

func (accepted) VisitSendResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, err := w.Write(acceptedBody)
	return err
}

var _ gen.SendResponseObject = accepted{}

// notFound answers a session id no session has: not_found, or terminated
// for a session the operator terminated a short while ago, so that a
// client knows it was ended on purpose and must not move it
// (operator.Host.WasTerminated).
func (a *api) notFound(id string) gen.NotFoundJSONResponse {
	if a.h.Operator().WasTerminated(id) {
		return gen.NotFoundJSONResponse{Ok: false, Error: "terminated", Message: "the operator terminated this session"}
	}
	return gen.NotFoundJSONResponse{Ok: false, Error: "not_found", Message: "no session " + strconv.Quote(id)}
}

var noCache = "no-cache"

// Stream implements GET /stream. The generated handler copies the reader to
// the response and flushes after every Read, that is after every event.
func (a *api) Stream(ctx context.Context, req gen.StreamRequestObject) (gen.StreamResponseObject, error) {
	var after *uint64
	if v := req.Params.LastEventID; v != nil && strings.TrimSpace(*v) != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(*v), 10, 64)
		if err != nil {
			return gen.Stream400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{Ok: false, Error: "bad_request",
				Message: "Last-Event-ID must be an event id of this stream (a decimal number)"}}, nil
		}
		after = &n
	}
	st, ok := a.lookup(req.Params.XSessionId)
	if !ok {
		return gen.Stream404JSONResponse{NotFoundJSONResponse: a.notFound(req.Params.XSessionId)}, nil
	}
	return gen.Stream200TexteventStreamCharsetUtf8Response{Body: st.reader(ctx, after),
		Headers: gen.Stream200ResponseHeaders{CacheControl: &noCache}}, nil
}

// Healthz implements GET /healthz.
func (a *api) Healthz(ctx context.Context, _ gen.HealthzRequestObject) (gen.HealthzResponseObject, error) {
	return gen.Healthz200JSONResponse{Ok: true, Sessions: a.h.LiveSessions()}, nil
}

// allowList decides which Host and Origin headers may reach the API: loopback
// names always, plus server.allowed_origins. Checking Host as well as Origin
// stops DNS rebinding against a loopback host.
type allowList struct {
	any     bool
	origins map[string]bool // "scheme://host[:port]", lower case
	hosts   map[string]bool // host names, lower case
}

func parseAllowList(entries []string) allowList {
	l := allowList{origins: map[string]bool{}, hosts: map[string]bool{}}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "*":
			l.any = true
		case strings.Contains(e, "://"):
			if u, err := url.Parse(e); err == nil && u.Host != "" {
				l.origins[u.Scheme+"://"+u.Host] = true
				l.hosts[u.Hostname()] = true
			}
		case e != "":
			l.hosts[hostname(e)] = true
		}
	}
	return l
}

func (l allowList) host(hostport string) bool {
	h := hostname(hostport)
	return l.any || isLoopback(h) || l.hosts[h]
}

func (l allowList) origin(origin string) bool {
	if l.any {
		return true
	}
	u, err := url.Parse(strings.ToLower(origin))
	if err != nil || u.Host == "" {
		return false // includes the opaque origin "null"
	}
	return isLoopback(u.Hostname()) || l.origins[u.Scheme+"://"+u.Host] || l.hosts[u.Hostname()]
}

func hostname(hostport string) string {
	hostport = strings.ToLower(hostport)
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

func isLoopback(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
