package server

import (
	"context"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
)

// BenchmarkRequestMetrics is what metrics add to one request on the hot
// path: the pre-resolved type lookup, the outcome counter and the latency
// observation (run in server/session.go), plus one tool-call count.
func BenchmarkRequestMetrics(b *testing.B) {
	cfg := Defaults()
	cfg.Server.AuthToken = "secret"
	h, err := New(context.Background(), cfg, WithRegistry(msg.Registry()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t0 := time.Now()
			tm := h.met.forType("tool/call/req")
			tm.latency.Observe(since(t0).Seconds())
			tm.count("")
			h.met.tool("list_dir", "")
		}
	})
}
