package all_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// waitSpan returns the first span named name that pred accepts, waiting
// for it: a request's span ends just after its reply is sent.
func waitSpan(t *testing.T, exp *tracetest.InMemoryExporter, name string, pred func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		for _, s := range exp.GetSpans() {
			if s.Name == name && pred(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q as wanted among %d", name, len(exp.GetSpans()))
		}
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// TestTraceparentInEnvelope: over the JSON codec (the lines other
// transports carry), a request whose envelope has a traceparent gets a
// span in the caller's trace, child of the caller's span; an unknown
// tool's call (a result with success false) and a request refused before
// admission (capability_missing) have error status with their code; a
// malformed traceparent is ignored and the span starts its own trace.
func TestTraceparentInEnvelope(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithTracerProvider(tp))
	pipe, err := h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	ctx := aeptest.Context(t)
	roundTrip := func(line string) map[string]any {
		t.Helper()
		if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
		out, err := pipe.ReadLine(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tpField := fmt.Sprintf(`"traceparent":"00-%s-%s-01"`, callerTrace, callerSpan)
	if r := roundTrip(`{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"a","auth_token":"` + aeptest.Token + `","agent_caps":["tools"],` + tpField + `}`); r["ok"] != true {
		t.Fatalf("handshake: %v", r)
	}
	r := roundTrip(`{"type":"tool/call/req","id":"c1","proto":"1.0","ts":1,"tool_name":"no_such_tool","arguments":{},` + tpField + `}`)
	if res, _ := r["result"].(map[string]any); res["error_code"] != "UNKNOWN_TOOL" {
		t.Fatalf("unknown tool answered %v", r)
	}
	roundTrip(`{"type":"memory/recall/req","id":"c2","proto":"1.0","ts":1,"memory_id":"x",` + tpField + `}`)
	roundTrip(`{"type":"ping","id":"c3","proto":"1.0","ts":1,"traceparent":"00-not-a-trace-01"}`)

	byID := func(id string) func(tracetest.SpanStub) bool {
		return func(s tracetest.SpanStub) bool { return attr(s, "aep.request_id") == id }
	}
	for _, c := range []struct {
		name, id, code string
	}{
		{"handshake/req", "hs", ""},
		{"tool/call/req", "c1", "UNKNOWN_TOOL"},
		{"memory/recall/req", "c2", "capability_missing"},
	} {
		s := waitSpan(t, exp, c.name, byID(c.id))
		if got := s.SpanContext.TraceID().String(); got != callerTrace {
			t.Errorf("%s: trace %s, want the caller's %s", c.name, got, callerTrace)
		}
		if got := s.Parent.SpanID().String(); got != callerSpan || !s.Parent.IsRemote() {
			t.Errorf("%s: parent %s (remote %v), want the caller's span %s", c.name, got, s.Parent.IsRemote(), callerSpan)
		}
		wantStatus := codes.Unset
		if c.code != "" {
			wantStatus = codes.Error
		}
		if s.Status.Code != wantStatus || attr(s, "aep.code") != c.code {
			t.Errorf("%s: status %v, aep.code %q; want %v, %q", c.name, s.Status.Code, attr(s, "aep.code"), wantStatus, c.code)
		}
	}
	ping := waitSpan(t, exp, "ping", byID("c3"))
	if ping.Parent.IsValid() || ping.SpanContext.TraceID().String() == callerTrace {
		t.Errorf("a malformed traceparent was taken: parent %v, trace %s", ping.Parent, ping.SpanContext.TraceID())
	}
}

// lockedBuf is a bytes.Buffer safe for the host's concurrent log writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestJSONRequestLog: with a JSON handler at debug level (log.format json,
// log.level debug), every answered request gives a line that parses as
// JSON and carries its request id, the session's public handle (never
// its transport id) and, traced, the trace id; a secret in a request id
// is scrubbed from it.
func TestJSONRequestLog(t *testing.T) {
	var buf lockedBuf
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithLogger(log), server.WithTracerProvider(tp))
	pipe, err := h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	ctx := aeptest.Context(t)
	send := func(line string) {
		t.Helper()
		if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
		if _, err := pipe.ReadLine(ctx); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"handshake/req","id":"hs-1","proto":"1.0","ts":1,"agent_id":"a","auth_token":"` + aeptest.Token + `","agent_caps":["tools"]}`)
	send(`{"type":"tool/call/req","id":"call-1","proto":"1.0","ts":1,"tool_name":"list_dir","arguments":{},"traceparent":"00-` + callerTrace + `-` + callerSpan + `-01"}`)
	send(`{"type":"ping","id":"ping-1","proto":"1.0","ts":1}`)
	send(`{"type":"ping","id":"with-` + aeptest.Token + `","proto":"1.0","ts":1}`)
	handle := pipe.Session().Handle()

	want := map[string]string{"hs-1": "handshake/req", "call-1": "tool/call/req", "ping-1": "ping", "with-***": "ping"}
	var lines map[string]map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		lines = map[string]map[string]any{}
		sc := bufio.NewScanner(strings.NewReader(buf.String()))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("a log line is not JSON: %v: %s", err, sc.Bytes())
			}
			if m["msg"] == "request answered" {
				lines[fmt.Sprint(m["request_id"])] = m
			}
		}
		if len(lines) >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	for id, typ := range want {
		m, ok := lines[id]
		if !ok {
			t.Errorf("no request line with request_id %q; log:\n%s", id, buf.String())
			continue
		}
		if m["type"] != typ || m["session"] != handle || m["code"] != "ok" {
			t.Errorf("line of %s: %v; want type %s, session %s, code ok", id, m, typ, handle)
		}
	}
	if m := lines["call-1"]; m != nil && m["trace_id"] != callerTrace {
		t.Errorf("traced request's line has trace_id %v, want %s", m["trace_id"], callerTrace)
	}
	if strings.Contains(buf.String(), pipe.Session().ID()) || strings.Contains(buf.String(), aeptest.Token) {
		t.Error("the log holds the transport session id or the token")
	}
}

// TestMetricsLintAndSeries: the host's /metrics passes promlint (the
// checks of `promtool check metrics`) and carries the runtime, process,
// build-info, store and snapshot series; handshakes and pings are
// counted. The number of series at idle is logged.
func TestMetricsLintAndSeries(t *testing.T) {
	ctx := aeptest.Context(t)
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithStore(st))
	fams, err := h.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	idle := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				idle += len(m.GetHistogram().GetBucket()) + 3 // +Inf, _sum, _count
			case m.GetSummary() != nil:
				idle += len(m.GetSummary().GetQuantile()) + 2
			default:
				idle++
			}
		}
	}
	t.Logf("series at idle: %d", idle)
	c := aeptest.Connect(t, h, "tools")
	if _, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request(ctx, &msg.Ping{}); err != nil {
		t.Fatal(err)
	}
	fams, err = h.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	names := map[string]bool{}
	values := map[string]float64{}
	for _, f := range fams {
		names[f.GetName()] = true
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			values[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	for _, n := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds", "process_resident_memory_bytes",
		"process_open_fds", "aep_build_info", "aep_snapshot_age_seconds", "aep_snapshots_total", "aep_sessions_without_snapshot",
		"aep_drain_duration_seconds", "aep_drain_sessions_not_saved", "aep_store_operation_duration_seconds"} {
		if !names[n] {
			t.Errorf("no series %s", n)
		}
	}
	if v := values["aep_messages_total{code=ok,type=handshake/req}"]; v < 1 {
		t.Errorf("handshakes counted %v, want 1", v)
	}
	if v := values["aep_messages_total{code=ok,type=ping}"]; v < 1 {
		t.Errorf("pings counted %v, want 1", v)
	}
	if idle > 1881 {
		t.Errorf("%d series at idle: more than 1.5× the 1,254 before microsecond buckets", idle)
	}
}
