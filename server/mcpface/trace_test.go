package mcpface_test

import (
	"context"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// TestTraceparentOverMCP: an MCP client's traceparent header reaches the
// aep request its tools/call makes, whose span joins the client's trace
// as a child of the client's span, on every revision.
func TestTraceparentOverMCP(t *testing.T) {
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	r := newRig(t, nil, server.WithTracerProvider(tp))
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) {
			exp.Reset()
			c, err := r.connectWith(t, rev, map[string]string{"Authorization": "Bearer " + aeptest.Token,
				"Traceparent": "00-" + traceID + "-" + spanID + "-01"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := aeptest.Context(t)
			req := mcp.CallToolRequest{}
			req.Params.Name = "echo"
			req.Params.Arguments = map[string]any{"text": "hi"}
			if _, err := c.CallTool(ctx, req); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				for _, s := range exp.GetSpans() {
					if s.Name == "tool/call/req" && s.SpanContext.TraceID().String() == traceID && s.Parent.SpanID().String() == spanID {
						return
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("no tool/call/req span in the MCP client's trace among %d spans", len(exp.GetSpans()))
				}
			}
		})
	}
}
