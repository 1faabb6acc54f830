package server_test

import (
	"context"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
)

// BenchmarkEchoDirectTraced is BenchmarkEchoDirect's serial case with
// tracing on: every request and plugin invocation makes a sampled span
// (an SDK provider without exporter, so the number is the spans' own
// cost, not an exporter's). Metrics are on in both; BenchmarkRequestMetrics
// isolates their cost (docs/PERFORMANCE.md, Operator surface).
func BenchmarkEchoDirectTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	audit := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	cfg := server.Defaults()
	cfg.Server.AuthToken = "secret"
	h, err := server.New(context.Background(), cfg,
		server.WithRegistry(testRegistry()), server.WithAuditor(audit), server.WithTracerProvider(tp),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: &echoplug.Plugin{Name: "e1"}}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	ec := benchClient(b, h, client.Direct)
	ctx := context.Background()
	req := &testproto.EchoSayReq{Text: "hello", Mode: "plain"}
	b.ReportAllocs()
	b.ResetTimer()
	stop := cpuMeter(b)
	for range b.N {
		if _, err := ec.EchoSay(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	stop()
	reportOps(b)
}
