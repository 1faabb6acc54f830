package server

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// Sink receives what the host sends to one session's agent. Send must be
// safe for concurrent use and may block to apply backpressure to that
// session only. It returns the encoded size when it encodes (for audit).
type Sink interface {
	Send(p *wire.Packet) (int, error)
	// Close tells the transport the session ended.
	Close()
}

type sessionState int32

const (
	stateNew sessionState = iota
	stateLive
	stateDraining
	stateClosed
)

// Session is one isolated agent session (spec §1, 5 rule 4).
type Session struct {
	h  *Host
	id string // the transport id: a bearer secret (handle.go)
	// scrub is the list of secrets the session may know, kept for the
	// scrubbing of audit lines, metrics and spans (secrets.go).
	scrub atomic.Pointer[scrubCache]
	// lastSnapshot is when this host last wrote a snapshot of the session
	// (unix nanos, 0: never), for aep_snapshot_age_seconds (observe.go).
	lastSnapshot atomic.Int64
	// budget is the session tree's one budget (budget.go).
	budget *budget
	// tenant is whose the session is (tenant.go): set at the handshake,
	// a subagent's and a fork's from their source; tenantCounted says it
	// counts in its tenant's total of sessions.
	tenant        *tenant
	tenantCounted bool
	// handle is the session's public name (handle.go): what plugins, audit,
	// logs and other sessions know it by.
	handle string
	parent *Session
	token  *[32]byte // a child's own token; nil means the host's
	// childCaps limits a child session to a subset of its parent's capabilities.
	childCaps map[string]bool
	child     *childInfo // set for child sessions (child.go)
	// forked marks a session made by session/fork (server/persist/fork.go): top-level,
	// counted from its creation and attached like a child.
	forked bool
	// operatorOpened marks a session the operator opened for a tenant
	// through the admin API (admin.go): top-level, its tenant set, counted
	// from its creation, attached like a child and handshaken with the
	// token the host issued for it alone.
	operatorOpened bool
	// terminated is set when the operator terminated the session (admin.go):
	// what is in flight, and whatever arrives after, is answered
	// errTerminated.
	terminated atomic.Bool
	// newest is the newest snapshot this host wrote of the session.
	newest atomic.Pointer[snapshotNote]
	// point is the session's point (docs/DECISIONS.md, Points): how many
	// state-changing requests (wire.Entry.ChangesState) it answered, from
	// the point it started or was restored at. Every reply carries it.
	point atomic.Uint64
	// parked counts the refusals of a sealed session waiting for its
	// drain's snapshot (drain.go, refuseSealed).
	parked  atomic.Int32
	steps   atomic.Int64 // requests a child session has made (child.go)
	created time.Time
	remote  netip.Addr // the client's address, when the transport knows it

	// Guarded by Host.mu (pending.go): the session's place in the pending
	// pool, or whether it counts against max_sessions.
	pendingAt *list.Element
	counted   bool

	state      atomic.Int32
	lastActive atomic.Int64 // unix nanos
	// unsaved is, on a top-level session, the time (unix nanos) of its
	// tree's oldest change not yet in its automatic snapshot, 0 none
	// (changed, server/persist/crashwin.go).
	unsaved unsavedChanges
	enabled atomic.Pointer[map[string]bool]
	rec     atomic.Pointer[recorder] // set when the trajectory is recorded (server/persist/trajectory.go)
	tap     atomic.Pointer[tapList]  // set while an inspector page follows the session (inspect.go)

	mu       sync.Mutex
	sink     Sink
	agentID  string
	accepted []msg.CapabilityEntry
	inflight map[string]*call
	pending  int           // admitted and not finished
	workers  int           // worker goroutines running
	idle     chan struct{} // closed when workers drops to 0 (waitWorkers)
	queue    chan *call
	drained  chan struct{}         // closed when pending drops to 0 while draining
	kids     map[*Session]struct{} // child sessions not yet closed (child.go)
	hsLimit  *rate.Limiter         // failed handshakes of this session (throttle.go)

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newSession(h *Host, sink Sink, parent *Session, token *[32]byte) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		h: h, id: newSessionID(h.cfg.Server.HostID), handle: newHandle(), parent: parent, token: token, created: time.Now(),
		sink: sink, inflight: map[string]*call{},
		queue: make(chan *call, h.cfg.Server.Limits.QueueSize),
		ctx:   ctx, cancel: cancel, done: make(chan struct{}),
	}
	// One budget per session tree: a subagent spends its root's
	// (budget.go).
	if parent != nil {
		s.budget, s.tenant = parent.budget, parent.tenant
	} else {
		s.budget = newBudget(h.defaultLimits())
	}
	s.touch()
	return s
}

// newSessionID returns "s-<hostID>-<32 hex>": the host's name lets a proxy
// in front of several hosts route the session's requests to its host by
// configuration only (deploy/, docs/DECISIONS.md, Many hosts behind a
// proxy); the 128 random bits, fixed in length at the end so the host part
// is found unambiguously, make it a bearer secret no one can guess.
func newSessionID(hostID string) string { return "s-" + hostID + "-" + rand16() + rand16() }

// ID returns the session's transport id, which the handshake reports. It
// is a bearer secret: only transports use it (handle.go).
func (s *Session) ID() string { return s.id }

// Parent returns the parent session of a child session, or nil.
func (s *Session) Parent() *Session { return s.parent }

// HostMade reports whether the host made the session for an agent to
// attach to: a subagent's child, a fork, or a session the operator opened
// (admin.go). Transports attach a client to such a session by its id
// while it waits for its handshake.
func (s *Session) HostMade() bool { return s.parent != nil || s.forked || s.operatorOpened }

// Live reports whether the session has handshaken and not ended.
func (s *Session) Live() bool { return sessionState(s.state.Load()) == stateLive }

// closing reports whether Close has begun: done may not be closed yet.
func (s *Session) closing() bool { return sessionState(s.state.Load()) == stateClosed }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Context is cancelled when the session ends.
func (s *Session) Context() context.Context { return s.ctx }

// Attach replaces the session's sink (a transport reconnecting).
func (s *Session) Attach(sink Sink) {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
}

// Enabled reports whether a capability is enabled for the session.
func (s *Session) Enabled(capability string) bool {
	m := s.enabled.Load()
	return m != nil && (*m)[capability]
}

func (s *Session) touch() { s.touchAt(time.Now()) }

func (s *Session) touchAt(now time.Time) { s.lastActive.Store(now.UnixNano()) }

func (s *Session) expired(now time.Time, handshake, idle time.Duration) bool {
	switch sessionState(s.state.Load()) {
	case stateNew:
		return now.Sub(s.created) > handshake
	case stateLive:
		s.mu.Lock()
		busy := s.pending > 0
		s.mu.Unlock()
		return !busy && now.Sub(time.Unix(0, s.lastActive.Load())) > idle
	}
	return false
}

func (s *Session) send(p *wire.Packet) int {
	if !p.HasPoint && p.ReqID != "" && !strings.HasSuffix(p.Type, "/event") {
		// A reply: it says where the session is (schemas/envelope.json).
		// An error answering a line without a readable id answers no
		// request of the session, and every transport sends it alike.
		p.Point, p.HasPoint = s.point.Load(), true
	}
	if r := s.rec.Load(); r != nil {
		r.Host(p)
	}
	if t := s.tap.Load(); t != nil {
		t.host(s, p)
	}
	if w := s.h.watch.Load(); w != nil {
		w.sent(s, p)
	}
	s.mu.Lock()
	sink := s.sink
	s.mu.Unlock()
	if sink == nil {
		return 0
	}
	if checkSent != nil {
		checkSent(p)
	}
	n, err := sink.Send(p)
	if err != nil {
		s.h.log.Warn("send failed", "session", s.handle, "type", p.Type, "err", err)
	}
	return n
}

// sendError answers reqID with an error message. It answers lines that
// were never admitted, on sessions that may not have handshaken, so the id
// it echoes is cut (wire.ClipID): a bad line must not buy a reply as large
// as itself (docs/SECURITY.md).
func (s *Session) sendError(reqID string, e *wire.Error) int {
	return s.send(&wire.Packet{Envelope: wire.Envelope{Type: "error", ID: wire.NewID(), ReqID: wire.ClipID(reqID)}, Msg: errorMessage(e)})
}

func errorMessage(e *wire.Error) *msg.Error {
	m := &msg.Error{Code: string(e.Code), Message: e.Message, Detail: e.Detail, Retryable: e.Retryable()}
	if e.Capability != "" && contractCapabilities()[e.Capability] {
		c := e.Capability
		m.CapabilityName = &c
	}
	return m
}

// contractCapabilities are the names an error's capability_name may hold
// (schemas/core.json CapabilityName): the capabilities of the protocol's
// namespaces, and session. A capability a module brings from outside
// schemas/ is not the contract's, so its errors carry no capability_name.
var contractCapabilities = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{sessionCapability: true}
	for _, c := range msg.Registry().Capabilities() {
		out[c] = true
	}
	return out
})

// ReceiveLine handles one line of the JSON codec. It never blocks on a
// handler: requests are queued for the session's workers.
func (s *Session) ReceiveLine(line []byte) { s.receiveLine(line, here{}) }

// ReceiveLineHere is [Session.ReceiveLine] that runs a request on the
// calling goroutine when the session has nothing else in flight, saving the
// hand-off to a worker (docs/PERFORMANCE.md, WebSocket and single-exchange
// HTTP); otherwise the request is queued as ReceiveLine queues it. It
// returns once the request is answered or queued. The caller's reading
// stops while a request runs here, so a transport that uses it must either
// wait for that reply anyway (a single exchange) or hand its reading to
// another goroutine when the request takes long (ws.go), or a `cancel`
// could not reach it.
func (s *Session) ReceiveLineHere(line []byte) { s.receiveLine(line, here{run: true}) }

// here says whether a request may run on the receiving goroutine, and who
// waits for its reply there (ReceiveScannedHere).
type here struct {
	run    bool
	waiter context.Context
	gone   Goner
	// traceparent is the one the transport carried (an HTTP header), for
	// a line without its own.
	traceparent string
}

// LineOptions say how [Session.ReceiveLineWith] takes a line.
type LineOptions struct {
	// Here runs the request on the calling goroutine when the session has
	// nothing else in flight, as [Session.ReceiveLineHere] does.
	Here bool
	// Traceparent is a W3C traceparent the transport carried beside the
	// line (the traceparent header of POST /send or of the WebSocket's
	// upgrade): the host's spans of the line's request join that trace
	// unless the message has a traceparent field of its own.
	Traceparent string
}

// ReceiveLineWith is [Session.ReceiveLine] (with o.Here,
// [Session.ReceiveLineHere]) of a line that came with what o says.
func (s *Session) ReceiveLineWith(line []byte, o LineOptions) {
	s.receiveLine(line, here{run: o.Here, traceparent: o.Traceparent})
}

// Goner is told when the one waiting for a request's reply goes away while
// the request runs (ReceiveScannedHere). An interface rather than a func:
// the single exchange passes itself, where a closure would be an
// allocation on every request.
type Goner interface{ Gone() }

// ReceiveScannedHere is [Session.ReceiveLineHere] of a line the caller
// already scanned into sc with [wire.Scan], without error (the single
// exchange reads the id first): the line is not scanned again. A request
// run here whose caller's ctx ends calls gone.Gone (once) as soon as its
// handler waits on its own context, or polls it; the caller cancels it
// with that, as `cancel` does. A request queued instead is the caller's to
// watch after this returns.
func (s *Session) ReceiveScannedHere(ctx context.Context, line []byte, sc *wire.Scanned, gone Goner) {
	if len(line) > s.h.cfg.Server.Limits.MaxMessageBytes {
		s.RejectOversized(len(line))
		return
	}
	e, m, err := s.h.reg.DecodeScanned(line, sc)
	s.receiveDecoded(line, sc, e, m, err, here{run: true, waiter: ctx, gone: gone})
}

func (s *Session) receiveLine(line []byte, h here) {
	if len(line) > s.h.cfg.Server.Limits.MaxMessageBytes {
		s.RejectOversized(len(line))
		return
	}
	var sc wire.Scanned
	e, m, err := s.h.reg.Decode(line, &sc)
	s.receiveDecoded(line, &sc, e, m, err, h)
}

// receiveDecoded answers a line that did not decode, or receives its
// message. Apart from receiveLine, so that a line scanned by the caller
// costs no scan of its own.
func (s *Session) receiveDecoded(line []byte, sc *wire.Scanned, e *wire.Entry, m wire.Message, err error, h here) {
	if err != nil {
		if t := s.tap.Load(); t != nil {
			t.invalid(s, line, sc.ID)
		}
		we := wire.AsError(err)
		if sc.Type == "handshake/req" && we.Code == wire.CodeSchemaViolation {
			// handshake/resp always answers a handshake (docs/DECISIONS.md, Wire).
			t0 := time.Now()
			s.handshakeRefused(sc.ID, we)
			s.answered(handshakeType, &sc.Envelope, t0, we.Code)
			return
		}
		s.sendError(sc.ID, we)
		return
	}
	// A copy of the envelope goes on, which a queued request keeps: the
	// scan (some 400 bytes) need not stay with it.
	env := sc.Envelope
	if env.Traceparent == "" {
		env.Traceparent = h.traceparent
	}
	s.receive(e, &env, m, len(line), sc.SessionID, h)
}

// RejectOversized answers a line of n bytes that was over the message limit
// without handing it to the decoder. Streaming transports call it after
// discarding such a line up to its newline, so they never buffer more than
// the limit (docs/DECISIONS.md, Wire: the connection goes on with the next line).
func (s *Session) RejectOversized(n int) {
	s.touch()
	max := s.h.cfg.Server.Limits.MaxMessageBytes
	s.sendError("", &wire.Error{Code: wire.CodeParseError,
		Message: fmt.Sprintf("message of %d bytes is over the limit of %d bytes", n, max),
		Detail:  map[string]any{"reason": "too_large", "limit": max}})
}

// ReceivePacket handles one typed message of the direct codec, validated by
// the generated validators like a decoded line.
func (s *Session) ReceivePacket(env *wire.Envelope, m wire.Message) { s.receivePacket(env, m, here{}) }

// ReceivePacketHere is [Session.ReceivePacket] that runs a request on the
// calling goroutine when the session has nothing else in flight, as
// [Session.ReceiveLineHere] does for a line: a transport that translates
// each frame of its own protocol into one typed request and waits for the
// reply (server/openenv) saves the hand-off to a worker. The same duty
// holds: the caller's reading stops while the request runs here, so it
// must hand its reading on when the request takes long.
func (s *Session) ReceivePacketHere(env *wire.Envelope, m wire.Message) {
	s.receivePacket(env, m, here{run: true})
}

func (s *Session) receivePacket(env *wire.Envelope, m wire.Message, h here) {
	e, err := s.h.reg.Check(env, m)
	if err != nil {
		s.sendError(env.ID, wire.AsError(err))
		return
	}
	bodySession := ""
	if b, ok := m.(interface{ BodySessionID() string }); ok {
		bodySession = b.BodySessionID()
	}
	s.receive(e, env, m, 0, bodySession, h)
}

// agentKind is request or notification, as trajectories and taps name
// what an agent sent.
func agentKind(e *wire.Entry) string {
	if e.Kind == wire.KindRequest {
		return "request"
	}
	return "notification"
}

func (s *Session) receive(e *wire.Entry, env *wire.Envelope, m wire.Message, size int, bodySession string, h here) {
	// One reading of the clock for the request's arrival, its deadline
	// and its latency when it runs at once (time.Now is some 60 ns here).
	now := time.Now()
	s.touchAt(now)
	if r := s.rec.Load(); r != nil {
		r.Agent(agentKind(e), env, m)
	}
	if t := s.tap.Load(); t != nil {
		t.agent(s, agentKind(e), env, m, now)
	}
	switch e.Type {
	case "handshake/req":
		s.answered(e.Type, env, now, s.handshake(env, m.(*msg.HandshakeReq)))
		return
	case "cancel":
		if s.Live() || sessionState(s.state.Load()) == stateDraining {
			s.cancelCall(m.(*msg.Cancel).ReqID)
		}
		return
	}
	st := sessionState(s.state.Load())
	if st == stateNew {
		s.refuse(e, env, now, &wire.Error{Code: wire.CodeUnauthorized, Message: "handshake required before " + e.Type})
		return
	}
	if s.terminated.Load() {
		s.refuse(e, env, now, errTerminated())
		return
	}
	if st == stateLive && s.h.sealed.Load() {
		s.refuseSealed(e, env, now) // drain.go
		return
	}
	if st != stateLive {
		s.refuse(e, env, now, &wire.Error{Code: wire.CodeRuntimeError, Message: "session is shutting down", Detail: map[string]any{"reason": "shutting_down"}})
		return
	}
	if bodySession != "" && bodySession != s.id {
		s.refuse(e, env, now, &wire.Error{Code: wire.CodeUnauthorized, Message: "session_id does not match the sender's session"})
		return
	}
	switch e.Type {
	case "ping":
		s.send(&wire.Packet{Envelope: wire.Envelope{Type: "pong", ID: wire.NewID(), ReqID: env.ID},
			Msg: &msg.Pong{UptimeSeconds: time.Since(s.h.started).Seconds()}})
		s.answered(e.Type, env, now, "")
		return
	case "shutdown":
		timeout := 10.0 // schemas/core.json: absent means 10 seconds
		if t := m.(*msg.Shutdown).Timeout; t != nil {
			timeout = *t
		}
		s.shutdown(timeout)
		return
	}
	if e.Capability != "" && !s.Enabled(e.Capability) {
		s.refuse(e, env, now, &wire.Error{Code: wire.CodeCapabilityMissing, Capability: e.Capability,
			Message: fmt.Sprintf("capability %q is not enabled for this session", e.Capability)})
		return
	}
	if err := s.takeStep(); err != nil { // a child's step limit (child.go)
		s.sendError(env.ID, err)
		return
	}
	if f := beforeAdmit.Load(); f != nil {
		(*f)()
	}
	s.admit(&call{s: s, id: env.ID, entry: e, msg: m, inBytes: size, t0: now, traceparent: env.Traceparent}, h)
}

// beforeAdmit, set only by tests (export_test.go), runs between a
// request's checks and its admission: the window a drain's seal must
// close.
var beforeAdmit atomic.Pointer[func()]

// admit queues a request for the session's workers: up to max_parallel run
// at once, up to queue_size wait, and beyond that the request is refused as
// overloaded (docs/DECISIONS.md, Dispatch). With here, a request that finds
// nothing else in flight runs on the calling goroutine instead, counted as
// a worker while it runs, so max_parallel still bounds what runs at once.
func (s *Session) admit(c *call, h here) {
	s.mu.Lock()
	if s.h.sealed.Load() {
		// Sealed since receive looked: a drain that saw no request of this
		// session in flight (pending, read under s.mu after the seal) may
		// be snapshotting it, and a request admitted now would be answered
		// past the snapshot's point (docs/DECISIONS.md, Points). Refused as
		// receive refuses it.
		s.mu.Unlock()
		s.refuseSealed(c.entry, &wire.Envelope{Type: c.entry.Type, ID: c.id, Traceparent: c.traceparent}, c.t0)
		return
	}
	if _, dup := s.inflight[c.id]; dup {
		s.mu.Unlock()
		s.sendError(c.id, &wire.Error{Code: wire.CodeSchemaViolation, Message: "a request with id " + wire.Clip(c.id) + " is already in flight", Detail: map[string]any{"field": "id"}})
		return
	}
	if h.run && s.pending == 0 && s.workers < s.h.cfg.Server.MaxParallel && s.ctx.Err() == nil {
		s.inflight[c.id] = c
		s.pending++
		s.workers++
		s.mu.Unlock()
		c.waiter, c.waiterGone = h.waiter, h.gone
		s.run(c)
		s.finish(c)
		s.hereDone()
		return
	}
	select {
	case s.queue <- c:
	default:
		s.mu.Unlock()
		s.h.met.over.Inc()
		s.h.countMessage(c.entry.Type, outcomeOverloaded)
		s.sendError(c.id, wire.AsError(wire.ErrOverloaded))
		s.h.traceAnswered(s, c.entry.Type, &wire.Envelope{ID: c.id, Traceparent: c.traceparent}, c.t0, outcomeOverloaded)
		return
	}
	s.inflight[c.id] = c
	s.pending++
	if s.pending > s.workers && s.workers < s.h.cfg.Server.MaxParallel {
		s.workers++
		go s.work()
	}
	s.mu.Unlock()
}

func (s *Session) work() {
	defer s.workerDone()
	for {
		select {
		case <-s.ctx.Done():
			return
		case c := <-s.queue:
			c.t0 = time.Now() // it waited: its time starts now
			s.run(c)
			s.finish(c)
		}
	}
}

// hereDone ends a run on a caller's goroutine (admit). Requests queued
// meanwhile, when max_parallel left no room for a worker, get one now.
func (s *Session) hereDone() {
	s.mu.Lock()
	if s.pending >= s.workers && s.ctx.Err() == nil {
		// Still counted as a worker, this run's slot passes to a new one.
		go s.work()
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.workerDone()
}

func (s *Session) workerDone() {
	s.mu.Lock()
	s.workers--
	if s.workers == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
}

// waitWorkers waits until every worker of the closed session has returned,
// so the audit record a worker writes right after its reply is queued
// before the host closes the auditor.
func (s *Session) waitWorkers(ctx context.Context) error {
	s.mu.Lock()
	if s.workers == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("session %s: a handler ignored cancellation: %w", s.handle, ctx.Err())
	}
}

func (s *Session) finish(c *call) {
	s.mu.Lock()
	delete(s.inflight, c.id)
	s.pending--
	if s.pending == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
	s.mu.Unlock()
	now := time.Now()
	s.touchAt(now)
	if c.entry.ChangesState {
		s.changed(now) // what the request did is acknowledged now
	}
}

// run executes one admitted request on a worker.
func (s *Session) run(c *call) {
	ctx := &c.ctx
	ctx.init(s.ctx, c.t0.Add(time.Duration(s.h.cfg.Server.Limits.RequestTimeout)))
	ctx.call = c
	defer ctx.cancel()
	if c.waiter != nil {
		ctx.watch(c.waiter, c.waiterGone)
	}
	tm := s.h.met.forType(c.entry.Type)
	if !c.start() {
		tm.count(string(wire.CodeCancelled))
		return // cancelled while queued; already answered
	}
	t0 := c.t0
	if c.entry.ChangesState {
		s.holdForSave(ctx, t0)
		s.changed(t0)
	}
	sctx, span := s.h.startRequestSpan(ctx, c, false)
	resp, err := s.h.dispatch(sctx, c, c.entry, c.msg)
	if ctx.Err() != nil && err == nil && resp == nil {
		err = ctx.Err()
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || (ctx.Err() == context.DeadlineExceeded && errors.Is(err, context.Canceled)) {
			err = wire.Public(fmt.Errorf("request exceeded %s: %w", time.Duration(s.h.cfg.Server.Limits.RequestTimeout), wire.ErrTimeout))
		}
		we := s.h.wireError(c, err)
		if ce := c.cancelledWith(); ce != nil {
			we = ce // what the agent was answered
		}
		c.replyError(we)
		d := since(t0)
		tm.latency.Observe(d.Seconds())
		tm.count(string(we.Code))
		s.h.met.countTenant(s.tenant, string(we.Code))
		endSpan(span, string(we.Code))
		s.h.logAnswered(sctx, s, c.entry.Type, c.id, string(we.Code), d)
		s.h.flushAudit(c, 0)
		return
	}
	n := c.reply(resp)
	d := since(t0)
	tm.latency.Observe(d.Seconds())
	code := ""
	if ce := c.cancelledWith(); ce != nil {
		code = string(ce.Code)
	}
	tm.count(code)
	s.h.met.countTenant(s.tenant, code)
	endSpan(span, spanCode(c, code))
	s.h.logAnswered(sctx, s, c.entry.Type, c.id, code, d)
	s.h.flushAudit(c, n)
}

// cancelCall stops an in-flight or queued request; it is answered with
// `cancelled` at once, whatever its handler does next (docs/DECISIONS.md, Wire).
func (s *Session) cancelCall(reqID string) {
	s.mu.Lock()
	c := s.inflight[reqID]
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.cancelNow()
}

// shutdown drains the session: nothing new is admitted, requests in flight
// are answered (or cancelled after timeout seconds), then the session closes.
func (s *Session) shutdown(timeout float64) {
	if !s.state.CompareAndSwap(int32(stateLive), int32(stateDraining)) {
		return
	}
	s.mu.Lock()
	var drained chan struct{}
	if s.pending > 0 {
		drained = make(chan struct{})
		s.drained = drained
	}
	s.mu.Unlock()
	go func() {
		if drained != nil {
			select {
			case <-drained:
			case <-time.After(time.Duration(timeout * float64(time.Second))):
			}
		}
		s.Close()
	}()
}

// Close ends the session: requests in flight are cancelled, plugins are told,
// and the transport's sink is closed. Children of the session are closed too.
func (s *Session) Close() {
	for {
		st := s.state.Load()
		if sessionState(st) == stateClosed {
			return
		}
		if s.state.CompareAndSwap(st, int32(stateClosed)) {
			break
		}
	}
	s.closeChildren()
	s.cancelInFlight()
	s.cancel()
	s.h.forget(s)
	s.mu.Lock()
	sink := s.sink
	s.mu.Unlock()
	if sink != nil {
		if hc, ok := sink.(connectionSink); ok && s.terminated.Load() {
			// The client's connection stays a while, so its next
			// request is answered that the session was terminated
			// rather than finding the connection gone (admin.go).
			hc.SessionTerminated()
			time.AfterFunc(terminatedLinger, sink.Close)
		} else {
			sink.Close()
		}
	}
	close(s.done)
}

// call is one request in flight; it is the Scope its handlers receive.
type call struct {
	s       *Session
	id      string
	entry   *wire.Entry
	msg     wire.Message
	inBytes int
	parent  *call // set for internal requests
	depth   int
	t0      time.Time // when it arrived, or left the queue to run
	// traceparent is the W3C traceparent the request came with (its
	// envelope's, else its transport's), for its span (observe.go).
	traceparent string
	// waiter and waiterGone: the caller that waits for the reply of a
	// request run on its goroutine, and how it cancels the request when
	// it goes away (ReceiveScannedHere).
	waiter     context.Context
	waiterGone Goner
	// answered is the plugin whose reply is being sent; answerRec its audit
	// record, completed with the reply's size.
	answered  *plugin
	answerRec *AuditRecord

	// ctx is the context of a request that runs (Session.run), and out
	// its answer: both are the call's own rather than allocations of
	// their own on every request.
	ctx reqCtx
	out wire.Packet

	mu        sync.Mutex
	started   bool
	cancelled bool
	// byOperator says a cancelled call was answered errTerminated, not
	// `cancelled` (a bool, beside the others: no larger call per request).
	byOperator bool
	replied    bool
	seq        int
}

var _ wire.Scope = (*call)(nil)

// SessionID returns the session's public handle: plugins know a session
// by it and never see the transport id (handle.go).
func (c *call) SessionID() string { return c.s.handle }
func (c *call) RequestID() string { return c.id }
func (c *call) Enabled(capability string) bool {
	return c.s.Enabled(CanonicalCapability(capability))
}

// start marks the call running, its ctx set up; false if it was cancelled
// while queued.
func (c *call) start() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled {
		return false
	}
	c.started = true
	return true
}

// wasCancelled reports whether `cancel` stopped the call.
func (c *call) wasCancelled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled
}

// cancelledWith is the error a cancelled call was answered (nil when the
// call was not cancelled): `cancelled`, or the operator's termination.
func (c *call) cancelledWith() *wire.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cancelled {
		return nil
	}
	if c.byOperator {
		return errTerminated()
	}
	return wire.AsError(wire.ErrCancelled)
}

func (c *call) cancelNow() {
	c.cancelWith(c.s.terminated.Load())
}

// cancelWith stops the call, answering it at once: `cancelled` for a
// `cancel` or a drain, errTerminated when the operator terminated the
// session (byOperator).
func (c *call) cancelWith(byOperator bool) {
	e := wire.AsError(wire.ErrCancelled)
	if byOperator {
		e = errTerminated()
	}
	c.mu.Lock()
	if !c.cancelled {
		c.byOperator = byOperator
	}
	c.cancelled = true
	running := c.started
	c.mu.Unlock()
	// Answer before the handler's context ends: a handler that returns
	// ctx.Err() at once would otherwise race this reply with its own
	// runtime_error, and `cancel` is promised a `cancelled` (docs/DECISIONS.md, Wire).
	c.replyError(e)
	if running {
		c.ctx.cancel()
	}
}

// Emit sends an event of the request's namespace while it is in flight
// (spec §6, docs/DECISIONS.md, Wire: seq counts from 0 per request).
func (c *call) Emit(kind wire.EventKind, data map[string]any) error {
	return c.emit(c.entry.Namespace+"/event", kind, data)
}

func (c *call) emit(typ string, kind wire.EventKind, data map[string]any) error {
	if c.parent != nil {
		return c.parent.emit(typ, kind, data)
	}
	if data == nil {
		data = map[string]any{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replied {
		return wire.ErrNotInFlight
	}
	ev := &msg.Event{Kind: msg.EventKind(kind), Data: msg.EventData(data), Seq: c.seq}
	c.seq++
	c.s.send(&wire.Packet{Envelope: wire.Envelope{Type: typ, ID: wire.NewID(), ReqID: c.id}, Msg: ev})
	return nil
}

// reply sends the answer unless one was already sent; it returns the encoded size.
func (c *call) reply(m wire.Message) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replied {
		return 0
	}
	c.replied = true
	typ := m.MessageType()
	if typ == "" {
		typ = c.entry.Reply
	}
	c.out = wire.Packet{Envelope: wire.Envelope{Type: typ, ID: wire.NewID(), ReqID: c.id}, Msg: m}
	if c.entry.ChangesState && c.parent == nil {
		// Its state change is done (the handler returned): the reply
		// takes the next point, so a snapshot that read the point before
		// it holds everything answered up to there (docs/DECISIONS.md,
		// Points).
		c.out.Point, c.out.HasPoint = c.s.point.Add(1), true
	}
	return c.s.send(&c.out)
}

func (c *call) replyError(e *wire.Error) int {
	if e.Capability == "" {
		e.Capability = c.entry.Capability
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replied {
		return 0
	}
	c.replied = true
	c.out = wire.Packet{Envelope: wire.Envelope{Type: "error", ID: wire.NewID(), ReqID: c.id}, Msg: errorMessage(e)}
	return c.s.send(&c.out)
}

// Dispatch runs req through the kernel as this session would, for
// capabilities that drive others (docs/DECISIONS.md, Dispatch: internal requests bypass
// the admission queue and are bounded by a nesting depth instead).
func (c *call) Dispatch(ctx context.Context, req wire.Message) (wire.Message, error) {
	if c.depth+1 > c.s.h.cfg.Server.Limits.MaxDepth {
		return nil, &wire.Error{Code: wire.CodeRuntimeError, Message: fmt.Sprintf("internal dispatch nested deeper than %d", c.s.h.cfg.Server.Limits.MaxDepth), Detail: map[string]any{"reason": "depth_limit"}}
	}
	env := wire.Envelope{ID: wire.NewID()}
	e, err := c.s.h.reg.Check(&env, req)
	if err != nil {
		return nil, err
	}
	if e.Kind != wire.KindRequest || e.Kernel {
		return nil, wire.Errorf(wire.CodeSchemaViolation, "%s cannot be dispatched internally", e.Type)
	}
	if e.Capability != "" && !c.s.Enabled(e.Capability) {
		return nil, &wire.Error{Code: wire.CodeCapabilityMissing, Capability: e.Capability, Message: fmt.Sprintf("capability %q is not enabled for this session", e.Capability)}
	}
	// A subagent's steps count every request its session causes, its
	// chains' internal ones included (budget.go).
	if err := c.s.takeStep(); err != nil {
		return nil, err
	}
	inner := &call{s: c.s, id: env.ID, entry: e, msg: req, parent: c, depth: c.depth + 1}
	sctx, span := c.s.h.startRequestSpan(ctx, inner, true)
	resp, err := c.s.h.dispatch(sctx, inner, e, req)
	if span != nil {
		code := ""
		if err != nil {
			code = string(wire.AsError(err).Code)
		}
		endSpan(span, spanCode(inner, code))
	}
	c.s.h.flushAudit(inner, 0)
	if err != nil {
		// The caller (a chain, a subagent) may pass the error on to the
		// agent, so it gets the same safe form a reply would.
		return nil, c.s.h.wireError(inner, err)
	}
	return resp, nil
}
