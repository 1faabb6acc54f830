package tools_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/toolrun"
)

func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func benchHost(b *testing.B, reg *toolrun.Registry) *server.Host {
	audit := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	return aeptest.NewHost(b, aeptest.Config(nil), []server.PluginSpec{{Name: "custom", Type: "tools", Impl: tools.NewPlugin(reg)}}, server.WithAuditor(audit))
}

func benchClient(b *testing.B, h *server.Host, codec client.Codec) *client.Client {
	return aeptest.ConnectWith(b, h, codec, nil, "tools")
}

// BenchmarkToolCallTypedEchoDirect is tool/call of a typed echo tool in
// process with the direct codec, audit on: serially, and from several
// sessions at once (the host's throughput; target ≥ 200,000/s in docs/PERFORMANCE.md).
func BenchmarkToolCallTypedEchoDirect(b *testing.B) {
	reg := toolrun.NewRegistry()
	if err := toolrun.Register(reg, "echo", "Echo.", echo); err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		c := benchClient(b, benchHost(b, reg), client.Direct)
		req := &msg.ToolCallReq{ToolName: "echo", Arguments: echoIn{Text: "hello"}}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			r, err := c.ToolCall(ctx, req)
			if err != nil || !r.Result.Success {
				b.Fatal(err, r)
			}
		}
		reportOps(b)
	})
	b.Run("sessions", func(b *testing.B) {
		h := benchHost(b, reg)
		clients := make(chan *client.Client, 64)
		for range cap(clients) {
			clients <- benchClient(b, h, client.Direct)
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			c := <-clients
			req := &msg.ToolCallReq{ToolName: "echo", Arguments: echoIn{Text: "hello"}}
			for pb.Next() {
				r, err := c.ToolCall(ctx, req)
				if err != nil || !r.Result.Success {
					b.Error(err, r)
					return
				}
			}
		})
		reportOps(b)
	})
}

// BenchmarkToolListQuery10k is Registry.List with a query over 10,000
// registered tools (target ≤ 1 ms), and the same through the kernel
// with the direct codec.
func BenchmarkToolListQuery10k(b *testing.B) {
	reg := toolrun.NewRegistry()
	for i := range 10000 {
		if err := toolrun.Register(reg, fmt.Sprintf("tool_%05d", i), fmt.Sprintf("Tool number %d does something useful with files and text.", i), echo, toolrun.Tags("bench", fmt.Sprintf("group%d", i%50))); err != nil {
			b.Fatal(err)
		}
	}
	q := "NUMBER 123" // matches tool 123 and 1230–1239
	b.Run("registry", func(b *testing.B) {
		req := &msg.ToolListReq{Query: &q}
		b.ReportAllocs()
		for range b.N {
			if r := reg.List(req, toolrun.Options{}); len(r.Tools) != 11 {
				b.Fatal(len(r.Tools))
			}
		}
	})
	b.Run("kernel", func(b *testing.B) {
		c := benchClient(b, benchHost(b, reg), client.Direct)
		req := &msg.ToolListReq{Query: &q}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if r, err := c.ToolList(ctx, req); err != nil || len(r.Tools) != 11 {
				b.Fatal(err)
			}
		}
	})
}
