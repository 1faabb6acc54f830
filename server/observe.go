package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aephost/aep/internal/version"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// defaultMaxToolLabels is operator.max_tool_labels when unset.
const defaultMaxToolLabels = 100

// otherTool is the label of tools beyond operator.max_tool_labels.
const otherTool = "other"

// unknownTool is the label of calls of a name no plugin serves.
const unknownTool = "unknown"

// invalidType labels messages whose type is unknown or undecodable, so a
// peer cannot grow the label set with invented types.
const invalidType = "invalid"

// metrics are the host's Prometheus collectors. Every label has a bounded
// set of values: message types come from the registry, codes from the
// protocol's catalogue, tool names are folded beyond a configured count,
// and no label holds a session id (docs/operating.md, Metrics).
type metrics struct {
	reg *prometheus.Registry

	messages  *prometheus.CounterVec   // type, code
	latency   *prometheus.HistogramVec // type
	byType    map[string]*typeMetrics  // pre-resolved per request type; read-only after newMetrics
	invalid   *typeMetrics
	over      prometheus.Counter
	toolVec   *prometheus.CounterVec // tool, error_code
	tenantVec *prometheus.CounterVec // tenant, code

	maxTools int
	toolMu   sync.RWMutex
	tools    map[string]*toolMetrics // distinct tool label → counters

	buffered sync.Map // registered stream-buffer sources: *func() int64 → struct{}

	// Snapshots (snapshot.go): taken by kind and result, how long they
	// took and how large they were.
	snaps     map[string][2]prometheus.Counter // kind → {ok, error}
	snapTime  prometheus.Histogram
	snapBytes prometheus.Histogram

	// The last drain (drain.go): how long it took, and how many live
	// sessions it left without a snapshot; read at scrape time.
	drainNanos    atomic.Int64
	drainNotSaved atomic.Int64
}

// requestBuckets resolve the microsecond steps of an RL environment and a
// ping (5 µs to 1 ms in 2–2.5× steps) as well as the minutes a tool may
// run: 22 bounds, so the 62 request types of the default registry cost
// some 1,550 series at idle (docs/operating.md, Metrics).
var requestBuckets = []float64{
	.000005, .00001, .000025, .00005, .0001, .00025, .0005,
	.001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 30, 60,
}

// snapshotAgeBuckets bound the age of a session's newest snapshot: from
// seconds (automatic snapshots) to a day.
var snapshotAgeBuckets = []float64{10, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400}

// typeMetrics holds one request type's counters, resolved once so the
// request path does a map read and an atomic add, no label hashing.
type typeMetrics struct {
	ok      prometheus.Counter
	codes   sync.Map // wire.Code → prometheus.Counter, resolved on first use
	typ     string
	vec     *prometheus.CounterVec
	latency prometheus.Observer
}

func (t *typeMetrics) count(code string) {
	if code == "" {
		t.ok.Inc()
		return
	}
	if c, ok := t.codes.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := t.vec.WithLabelValues(t.typ, code)
	t.codes.Store(code, c)
	c.Inc()
}

type toolMetrics struct {
	codes sync.Map // error_code ("" = ok) → prometheus.Counter
	label string
}

func newMetrics(h *Host, maxTools int) *metrics {
	if maxTools <= 0 {
		maxTools = defaultMaxToolLabels
	}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_messages_total",
			Help: "Requests answered, by type and outcome code (ok, or the error code)."}, []string{"type", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aep_request_duration_seconds",
			Help:    "Time from a request's start (its arrival, or its leaving the admission queue) to its reply, by type.",
			Buckets: requestBuckets}, []string{"type"}),
		over: prometheus.NewCounter(prometheus.CounterOpts{Name: "aep_overloaded_total",
			Help: "Requests refused as overloaded because the session's admission queue was full."}),
		toolVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_tool_calls_total",
			Help: `Tool calls by tool ("unknown" for a name no plugin serves; beyond operator.max_tool_labels: "other") and error_code (ok, UNKNOWN_TOOL, TOOL_DENIED, TOOL_ERROR or a protocol code).`}, []string{"tool", "error_code"}),
		tenantVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_tenant_requests_total",
			Help: "Requests answered, by tenant (server.tenants; never a secret) and outcome code (ok, or the error code)."}, []string{"tenant", "code"}),
		maxTools: maxTools,
		tools:    map[string]*toolMetrics{},
		byType:   map[string]*typeMetrics{},
	}
	for _, e := range h.reg.Entries() {
		if e.Kind == wire.KindRequest {
			m.byType[e.Type] = m.newType(e.Type)
		}
	}
	m.invalid = m.newType(invalidType)
	snaps := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_snapshots_total",
		Help: "Snapshots taken, by why (request: an agent's session/snapshot; auto; drain) and result (ok, error)."}, []string{"kind", "result"})
	m.snaps = map[string][2]prometheus.Counter{}
	for _, k := range []string{kindRequest, kindAuto, kindDrain} {
		m.snaps[k] = [2]prometheus.Counter{snaps.WithLabelValues(k, "ok"), snaps.WithLabelValues(k, "error")}
	}
	m.snapTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aep_snapshot_duration_seconds",
		Help:    "Time one snapshot took, from reading the plugins' state to its write to the store or disk, failed ones included.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	m.snapBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "aep_snapshot_bytes",
		Help:    "Size of each snapshot written: the state document and the archive of the session's files.",
		Buckets: prometheus.ExponentialBuckets(1024, 4, 10)}) // 1 KiB to 256 MiB
	v := version.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "aep_build_info",
		Help:        "1, labelled with the build: version and commit as `aep version` prints them, and the Go version.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "go": v.Go}})
	build.Set(1)
	m.reg.MustRegister(m.messages, m.latency, m.over, m.toolVec, m.tenantVec, &hostCollector{h: h, m: m},
		snaps, m.snapTime, m.snapBytes, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if h.store != nil {
		m.reg.MustRegister(h.store.Collector())
	}
	return m
}

func (m *metrics) newType(typ string) *typeMetrics {
	return &typeMetrics{ok: m.messages.WithLabelValues(typ, "ok"), typ: typ, vec: m.messages, latency: m.latency.WithLabelValues(typ)}
}

func (m *metrics) forType(typ string) *typeMetrics {
	if t, ok := m.byType[typ]; ok {
		return t
	}
	return m.invalid
}

// countTenant counts one answered request of tenant t ("" code: ok). The
// tenants are the operator's, so the label is bounded.
func (m *metrics) countTenant(t *tenant, code string) {
	if t == nil {
		return
	}
	if code == "" {
		code = "ok"
	}
	if c, ok := t.codes.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.tenantVec.WithLabelValues(t.name, code)
	t.codes.Store(code, c)
	c.Inc()
}

// tool counts one tool call; names beyond maxTools fold into "other".
func (m *metrics) tool(name, errorCode string) {
	m.toolMu.RLock()
	t, ok := m.tools[name]
	m.toolMu.RUnlock()
	if !ok {
		m.toolMu.Lock()
		if t, ok = m.tools[name]; !ok {
			label := name
			if len(m.tools) >= m.maxTools {
				label = otherTool
			}
			t = &toolMetrics{label: label}
			// Names past the bound share one entry per name in this map
			// only until it holds 4× the bound; then they share "other"
			// without a map entry, so memory stays bounded too.
			if label != otherTool || len(m.tools) < 4*m.maxTools {
				m.tools[name] = t
			}
		}
		m.toolMu.Unlock()
	}
	code := errorCode
	if code == "" {
		code = "ok"
	}
	if c, ok := t.codes.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.toolVec.WithLabelValues(t.label, code)
	t.codes.Store(code, c)
	c.Inc()
}

// hostCollector reads gauges at scrape time, so sessions, queues and
// buffers cost the request path nothing.
type hostCollector struct {
	h *Host
	m *metrics
}

var (
	descSessions  = prometheus.NewDesc("aep_sessions", "Sessions by state (pending: not handshaken; live; draining).", []string{"state"}, nil)
	descTransport = prometheus.NewDesc("aep_sessions_by_transport", "Open sessions by transport.", []string{"transport"}, nil)
	descQueue     = prometheus.NewDesc("aep_queue_depth", "Admitted requests not yet answered, over all sessions.", nil, nil)
	descAudit     = prometheus.NewDesc("aep_audit_records_total", "Audit records written to the log, and dropped because its queue was full.", []string{"result"}, nil)
	descSandbox   = prometheus.NewDesc("aep_sandbox_outcomes_total", "How sandboxed runs ended (server/sandbox outcomes).", []string{"outcome"}, nil)
	descBuffered  = prometheus.NewDesc("aep_stream_buffer_bytes", "Bytes held in stream replay buffers (HTTP and WebSocket).", nil, nil)
	descDraining  = prometheus.NewDesc("aep_draining", "1 while the host drains (no new sessions).", nil, nil)
	descSnapAge   = prometheus.NewDesc("aep_snapshot_age_seconds", "Age of each live session's newest snapshot taken on this host, one observation per session at scrape time.", nil, nil)
	descNoSnap    = prometheus.NewDesc("aep_sessions_without_snapshot", "Live sessions (not subagents) of which this host has taken no snapshot.", nil, nil)
	descDrainTime = prometheus.NewDesc("aep_drain_duration_seconds", "How long the host's drain took: waiting for requests in flight, then the snapshots (0 until a drain ended).", nil, nil)
	descTenant    = prometheus.NewDesc("aep_tenant_sessions", "Live sessions of each tenant (server.tenants), subagents and forks included.", []string{"tenant"}, nil)
	descNotSaved  = prometheus.NewDesc("aep_drain_sessions_not_saved", "Live sessions the drain left without a snapshot: every one when operator.snapshot_on_drain is off, else those whose snapshot failed or did not fit in operator.drain_timeout.", nil, nil)
)

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descTransport, descQueue, descAudit, descSandbox, descBuffered, descDraining, descSnapAge, descNoSnap, descDrainTime, descNotSaved, descTenant} {
		ch <- d
	}
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.h
	h.mu.Lock()
	ss := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		ss = append(ss, s)
	}
	h.mu.Unlock()
	states := map[string]float64{"pending": 0, "live": 0, "draining": 0}
	transports := map[string]float64{}
	queued := 0
	now := time.Now().UnixNano()
	ages := make(map[float64]uint64, len(snapshotAgeBuckets))
	var ageSum float64
	var aged, unsaved uint64
	for _, s := range ss {
		if s.Live() && s.parent == nil {
			if at := s.lastSnapshot.Load(); at != 0 {
				age := float64(now-at) / 1e9
				aged++
				ageSum += age
				for _, b := range snapshotAgeBuckets {
					if age <= b {
						ages[b]++
					}
				}
			} else {
				unsaved++
			}
		}
		switch sessionState(s.state.Load()) {
		case stateNew:
			states["pending"]++
		case stateLive:
			states["live"]++
		case stateDraining:
			states["draining"]++
		}
		s.mu.Lock()
		queued += s.pending
		sink := s.sink
		s.mu.Unlock()
		transports[transportOf(s, sink)]++
	}
	for k, v := range states {
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, v, k)
	}
	for k, v := range transports {
		ch <- prometheus.MustNewConstMetric(descTransport, prometheus.GaugeValue, v, k)
	}
	ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(queued))
	if a, ok := h.auditor.(interface{ Written() int64 }); ok {
		ch <- prometheus.MustNewConstMetric(descAudit, prometheus.CounterValue, float64(a.Written()), "written")
	}
	if a, ok := h.auditor.(interface{ Dropped() int64 }); ok {
		ch <- prometheus.MustNewConstMetric(descAudit, prometheus.CounterValue, float64(a.Dropped()), "dropped")
	}
	h.tenants.mu.RLock()
	for _, t := range h.tenants.list {
		ch <- prometheus.MustNewConstMetric(descTenant, prometheus.GaugeValue, float64(t.sessions.Load()), t.name)
	}
	h.tenants.mu.RUnlock()
	for o, n := range sandbox.OutcomeCounts() {
		ch <- prometheus.MustNewConstMetric(descSandbox, prometheus.CounterValue, float64(n), string(o))
	}
	var held int64
	c.m.buffered.Range(func(k, _ any) bool {
		held += (*k.(*func() int64))()
		return true
	})
	ch <- prometheus.MustNewConstMetric(descBuffered, prometheus.GaugeValue, float64(held))
	d := 0.0
	if h.draining.Load() {
		d = 1
	}
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, d)
	ch <- prometheus.MustNewConstHistogram(descSnapAge, aged, ageSum, ages)
	ch <- prometheus.MustNewConstMetric(descNoSnap, prometheus.GaugeValue, float64(unsaved))
	ch <- prometheus.MustNewConstMetric(descDrainTime, prometheus.GaugeValue, float64(c.m.drainNanos.Load())/1e9)
	ch <- prometheus.MustNewConstMetric(descNotSaved, prometheus.GaugeValue, float64(c.m.drainNotSaved.Load()))
}

// snapshotDone records one snapshot of kind that began at t0: its result,
// duration and, when written, size; a written one is s's newest.
func (m *metrics) snapshotDone(s *Session, kind string, t0 time.Time, bytes int, err error) {
	now := time.Now()
	m.snapTime.Observe(now.Sub(t0).Seconds())
	c, ok := m.snaps[kind]
	if !ok {
		return
	}
	if err != nil {
		c[1].Inc()
		return
	}
	c[0].Inc()
	m.snapBytes.Observe(float64(bytes))
	s.lastSnapshot.Store(now.UnixNano())
}

// transportOf names a session's transport for the by-transport gauge: a
// sink says its own name (Transport() string); child sessions are
// "subagent"; anything else "other".
func transportOf(s *Session, sink Sink) string {
	if s.parent != nil {
		return "subagent"
	}
	if t, ok := sink.(interface{ Transport() string }); ok {
		return t.Transport()
	}
	return "other"
}

// MetricsRegistry returns the host's Prometheus registry, which the
// operator listener serves at /metrics (docs/operating.md).
func (h *Host) MetricsRegistry() *prometheus.Registry { return h.met.reg }

// TrackBuffered registers a source of bytes held in stream buffers (a
// transport's replay rings), read at scrape time; the returned function
// unregisters it.
func (h *Host) TrackBuffered(f func() int64) (untrack func()) {
	p := &f
	h.met.buffered.Store(p, struct{}{})
	return func() { h.met.buffered.Delete(p) }
}

// countMessage counts one answered request of type typ with its outcome
// code ("" = ok).
func (h *Host) countMessage(typ string, code wire.Code) {
	h.met.forType(typ).count(string(code))
}

// handshakeType is the type of the handshake, which the kernel answers
// itself (handshake.go).
const handshakeType = "handshake/req"

// answered accounts for a request the kernel answered itself, without a
// worker (a handshake, a ping, a refusal before admission) and that
// arrived at t0: its count, latency, span and log line, as a request run
// by a worker gets in Session.run.
func (s *Session) answered(typ string, env *wire.Envelope, t0 time.Time, code wire.Code) {
	tm := s.h.met.forType(typ)
	d := since(t0)
	tm.latency.Observe(d.Seconds())
	tm.count(string(code))
	s.h.traceAnswered(s, typ, env, t0, code)
	s.h.logAnswered(context.Background(), s, typ, env.ID, string(code), d)
}

// refuse answers a request of type e with err before admitting it, and
// accounts for it (answered).
func (s *Session) refuse(e *wire.Entry, env *wire.Envelope, t0 time.Time, err *wire.Error) {
	s.sendError(env.ID, err)
	s.answered(e.Type, env, t0, err.Code)
}

// logAnswered writes the debug line of one answered request: its type, id
// (cut as an error's is: an agent chooses it), the session's public
// handle, its outcome and duration. With JSON logs (log.format) it is one
// JSON object per request; the scrubbing handler adds the trace and span
// ids when ctx has a span.
func (h *Host) logAnswered(ctx context.Context, s *Session, typ, id, code string, d time.Duration) {
	if !h.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	if code == "" {
		code = "ok"
	}
	h.log.LogAttrs(ctx, slog.LevelDebug, "request answered",
		slog.String("type", typ), slog.String("request_id", wire.ClipID(id)), slog.String("session", s.handle),
		slog.String("code", code), slog.Float64("duration_ms", float64(d.Microseconds())/1000))
}

// callKey finds the request a context belongs to (reqCtx.Value).
type callKey struct{}

// callOf returns the request ctx belongs to, or nil.
func callOf(ctx context.Context) *call {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// --- tracing -----------------------------------------------------------

// tracerName is the instrumentation scope of the host's spans.
const tracerName = "github.com/aephost/aep/server"

// startRequestSpan starts the span of one request (or internal dispatch);
// with tracing off it returns ctx unchanged and a nil span, at no cost.
func (h *Host) startRequestSpan(ctx context.Context, c *call, internal bool) (context.Context, trace.Span) {
	if h.tracer == nil {
		return ctx, nil
	}
	kind := trace.SpanKindServer
	if internal {
		kind = trace.SpanKindInternal
	} else if c.traceparent != "" {
		ctx = withRemoteParent(ctx, c.traceparent)
	}
	secrets := h.knownSecrets(c.s)
	attrs := []attribute.KeyValue{
		attribute.String("aep.type", c.entry.Type),
		attribute.String("aep.request_id", scrub(c.id, secrets)),
		attribute.String("aep.session", c.s.Handle()),
		attribute.String("aep.tenant", c.s.Tenant()),
		attribute.Int("aep.depth", c.depth),
	}
	if cr, ok := c.msg.(interface{ GetCorrelationID() string }); ok && cr.GetCorrelationID() != "" {
		attrs = append(attrs, attribute.String("aep.correlation_id", scrub(cr.GetCorrelationID(), secrets)))
	}
	if at, ok := c.msg.(interface{ AuditTarget() string }); ok && at.AuditTarget() != "" {
		attrs = append(attrs, attribute.String("aep.target", scrub(at.AuditTarget(), secrets)))
	}
	return h.tracer.Start(ctx, c.entry.Type, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// traceContext parses W3C traceparent headers and fields.
var traceContext = propagation.TraceContext{}

// withRemoteParent returns ctx with the span that traceparent names as its
// remote parent, or ctx unchanged when traceparent does not parse: a
// malformed traceparent is ignored, as W3C Trace Context asks, and the
// request's span starts a trace of its own.
func withRemoteParent(ctx context.Context, traceparent string) context.Context {
	sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent}))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Tracing reports whether the host records spans, so that a transport
// looks for a traceparent header only then.
func (h *Host) Tracing() bool { return h.tracer != nil }

// traceAnswered records the span of a request the kernel answered
// without a worker (Session.answered), from its arrival at t0 to now.
func (h *Host) traceAnswered(s *Session, typ string, env *wire.Envelope, t0 time.Time, code wire.Code) {
	if h.tracer == nil {
		return
	}
	ctx := context.Background()
	if env.Traceparent != "" {
		ctx = withRemoteParent(ctx, env.Traceparent)
	}
	_, span := h.tracer.Start(ctx, typ, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0),
		trace.WithAttributes(attribute.String("aep.type", typ), attribute.String("aep.request_id", scrub(wire.ClipID(env.ID), h.knownSecrets(s))),
			attribute.String("aep.session", s.handle), attribute.Int("aep.depth", 0)))
	endSpan(span, string(code))
}

// spanCode is the outcome a request's span records: the protocol code of
// an error reply, else the error_code of a failed tool call
// (UNKNOWN_TOOL, TOOL_DENIED, TOOL_ERROR), which the audit record of its
// answer holds; "" for a success.
func spanCode(c *call, code string) string {
	if code == "" && c.answerRec != nil && !c.answerRec.Success {
		return c.answerRec.ErrorCode
	}
	return code
}

// endSpan records the outcome code on span and ends it.
func endSpan(span trace.Span, code string) {
	if span == nil {
		return
	}
	if code != "" {
		span.SetAttributes(attribute.String("aep.code", code))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

// startPluginSpan starts the span of one plugin invocation.
func (h *Host) startPluginSpan(ctx context.Context, p *plugin, e *wire.Entry) (context.Context, trace.Span) {
	if h.tracer == nil {
		return ctx, nil
	}
	return h.tracer.Start(ctx, "plugin "+p.Name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("aep.plugin", p.Name), attribute.String("aep.type", e.Type)))
}

// WithTracerProvider makes the host record OpenTelemetry spans through tp:
// one per request, one per plugin invocation, internal dispatch nested
// (docs/operating.md, Traces). Without it no span is made.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *hostOptions) { o.tracer = tp.Tracer(tracerName) }
}

// since is time.Since, kept beside the metrics that use it.
func since(t0 time.Time) time.Duration { return time.Since(t0) }

// toolOwner is the claim kind of tool names (wire.Entry.Owner of
// tool/call): requests of a type it owns are tool calls for the metrics.
const toolOwner = "tool"

// outcomeOverloaded labels requests refused as overloaded: on the wire a
// runtime_error with detail.reason "overloaded", counted apart because it
// is the one an operator tunes queue_size for.
const outcomeOverloaded wire.Code = "overloaded"
