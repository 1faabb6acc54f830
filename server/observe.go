package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
}

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
			Help:    "Time from a request's start on a worker to its reply, by type.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"type"}),
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
	m.reg.MustRegister(m.messages, m.latency, m.over, m.toolVec, m.tenantVec, &hostCollector{h: h, m: m})
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
	descTenant    = prometheus.NewDesc("aep_tenant_sessions", "Live sessions of each tenant (server.tenants), subagents and forks included.", []string{"tenant"}, nil)
)

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descTransport, descQueue, descAudit, descSandbox, descBuffered, descDraining, descTenant} {
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
	for _, s := range ss {
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
	if h.Draining() {
		d = 1
	}
	ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, d)
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
