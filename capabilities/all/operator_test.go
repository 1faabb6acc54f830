package all_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aephost/aep/capabilities/chains"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/wire"
)

// scrape GETs /metrics from the operator handler over real HTTP.
func scrape(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestMetricsAfterScriptedSession drives one session through tool calls,
// an echo and a burst that overflows its admission queue, then scrapes
// /metrics and checks the session's message, tool-call and overloaded
// counters, and that no label carries the session id.
func TestMetricsAfterScriptedSession(t *testing.T) {
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.MaxParallel = 1
		c.Server.Limits.QueueSize = 1
	})
	echo := &echoplug.Plugin{Name: "echo", Started: make(chan string, 4)}
	h := aeptest.NewHost(t, cfg, []server.PluginSpec{
		aeptest.Plugin("echo", echo),
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithRegistry(msg.Registry().Union(testproto.Registry())))
	c := aeptest.ConnectWith(t, h, client.JSON, msg.Registry().Union(testproto.Registry()), "tools", "echo")
	ctx := aeptest.Context(t)

	for _, name := range []string{"list_dir", "list_dir", "no_such_tool"} {
		if _, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: name, Arguments: map[string]any{}}); err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
	}
	if _, err := c.Request(ctx, &testproto.EchoSayReq{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	// One running, one queued, the third is refused.
	// The second is sent once the first runs: sent together, both could
	// reach the queue (of one) before the worker takes the first, and the
	// second would be the one refused.
	gate := "g"
	errs := make(chan error, 2)
	wait := func() {
		_, err := c.Request(ctx, &testproto.EchoWaitReq{Gate: &gate})
		errs <- err
	}
	go wait()
	<-echo.Started
	go wait()
	ops := httptest.NewServer(httpapi.OperatorHandler(h, httpapi.OperatorOptions{Token: "op-token"}))
	defer ops.Close()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(scrape(t, ops.URL, "op-token"), "\naep_queue_depth 2\n"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second echo/wait never queued")
		}
	}
	_, err := c.Request(ctx, &testproto.EchoWaitReq{Gate: &gate})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "overloaded")
	echo.Release(gate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// The token guards the endpoint.
	resp, err := http.Get(ops.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token: %d, want 401", resp.StatusCode)
	}

	wants := []string{
		`aep_messages_total{code="ok",type="tool/call/req"} 3`,
		`aep_messages_total{code="ok",type="echo/say/req"} 1`,
		`aep_messages_total{code="ok",type="echo/wait/req"} 2`,
		`aep_messages_total{code="overloaded",type="echo/wait/req"} 1`,
		`aep_overloaded_total 1`,
		`aep_tool_calls_total{error_code="ok",tool="list_dir"} 2`,
		`aep_tool_calls_total{error_code="UNKNOWN_TOOL",tool="unknown"} 1`,
		`aep_request_duration_seconds_count{type="tool/call/req"} 3`,
		`aep_sessions{state="live"} 1`,
		`aep_sessions_by_transport{transport="inprocess"} 1`,
		"\naep_queue_depth 0\n",
	}
	// A request is counted, and leaves the queue, just after its reply is
	// sent: the client may see the reply first, so scrape until it settles.
	var m string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m = scrape(t, ops.URL, "op-token")
		missing := 0
		for _, want := range wants {
			if !strings.Contains(m, want) {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	info, err := c.Request(ctx, &msg.SessionInfoReq{})
	if err != nil {
		t.Fatal(err)
	}
	if sid := info.(*msg.SessionInfoResp).SessionID; strings.Contains(m, sid) {
		t.Errorf("/metrics names the session id %s", sid)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", m)
	}
}

// TestToolLabelsBounded: 10,000 distinct tool names (each an unknown
// tool, answered by the kernel's fallback) are all counted under the one
// label "unknown" — an agent's inventions take no label of a real tool,
// which keeps its own — and every call is counted.
func TestToolLabelsBounded(t *testing.T) {
	const max, calls = 50, 10000
	cfg := aeptest.Config(func(c *server.Config) { c.Operator.MaxToolLabels = max })
	h := aeptest.NewHost(t, cfg, []server.PluginSpec{
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	})
	c := aeptest.Connect(t, h, "tools")
	ctx := aeptest.Context(t)
	for i := range calls {
		if _, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: fmt.Sprintf("tool_%05d", i), Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	fams, err := h.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "aep_tool_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" {
					labels[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(labels) != 2 || labels["unknown"] != calls || labels["list_dir"] != 1 {
		t.Errorf("tool labels %v, want %d under unknown and list_dir once", labels, calls)
	}
}

// TestChainTraceNested: with an in-memory exporter, a chain that calls a
// tool gives one trace: the chain/run request, the chains plugin's
// invocation under it, the internal tool/call under that, and the tools
// plugin's invocation under the tool call; spans carry the session's
// public handle, never its transport id.
func TestChainTraceNested(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		aeptest.Plugin("chains", &chains.Plugin{}),
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithTracerProvider(tp))
	c := aeptest.Connect(t, h, "chains", "tools")
	ctx := aeptest.Context(t)
	req := &msg.ChainRunReq{MaxConcurrency: 4, Timeout: 300}
	js := `{"chain":{"nodes":[{"id":"t","kind":"action","request":{"type":"tool/call/req","body":{"tool_name":"list_dir","arguments":{}}}}]}}`
	if err := wire.Unmarshal([]byte(js), req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request(ctx, req); err != nil {
		t.Fatal(err)
	}
	info, err := c.Request(ctx, &msg.SessionInfoReq{})
	if err != nil {
		t.Fatal(err)
	}
	sid := info.(*msg.SessionInfoResp).SessionID

	// A request's span ends just after its reply is sent: wait for it.
	spans := exp.GetSpans()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		done := false
		for _, s := range spans {
			done = done || s.Name == "chain/run/req"
		}
		if done {
			break
		}
		spans = exp.GetSpans()
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if _, dup := byName[s.Name]; !dup {
			byName[s.Name] = s
		}
		for _, a := range s.Attributes {
			if a.Value.AsString() == sid {
				t.Errorf("span %s carries the transport session id in %s", s.Name, a.Key)
			}
		}
	}
	run, chainPlug, call, toolPlug := byName["chain/run/req"], byName["plugin chains"], byName["tool/call/req"], byName["plugin builtin"]
	for name, s := range map[string]tracetest.SpanStub{"chain/run/req": run, "plugin chains": chainPlug, "tool/call/req": call, "plugin builtin": toolPlug} {
		if !s.SpanContext.IsValid() {
			t.Fatalf("no span %q among %d spans", name, len(spans))
		}
		if s.SpanContext.TraceID() != run.SpanContext.TraceID() {
			t.Errorf("span %q is in another trace", name)
		}
	}
	if run.Parent.IsValid() {
		t.Errorf("chain/run/req has a parent; want the trace's root")
	}
	for _, link := range []struct{ child, parent tracetest.SpanStub }{{chainPlug, run}, {call, chainPlug}, {toolPlug, call}} {
		if link.child.Parent.SpanID() != link.parent.SpanContext.SpanID() {
			t.Errorf("span %q's parent is not %q", link.child.Name, link.parent.Name)
		}
	}
	handle := ""
	for _, a := range run.Attributes {
		if a.Key == "aep.session" {
			handle = a.Value.AsString()
		}
	}
	if !strings.HasPrefix(handle, "h-") {
		t.Errorf("chain/run/req aep.session = %q, want the public handle", handle)
	}
}
