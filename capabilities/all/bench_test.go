package all_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/capabilities/toolkits"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/toolrun"
)

type benchIn struct {
	Text string `json:"text"`
}

type benchOut struct {
	Text string `json:"text"`
}

// BenchmarkToolCallAmongToolPlugins is tool/call of a typed echo tool in
// process (direct codec, audit on) on a host whose tool-serving plugins
// are those of the default configuration: tools, toolkits and mcp. The
// call goes to the tool's owner alone; the floor is the same call on a
// host with the tools plugin only.
func BenchmarkToolCallAmongToolPlugins(b *testing.B) {
	reg := toolrun.NewRegistry()
	if err := toolrun.Register(reg, "echo", "Echo.", func(ctx context.Context, in benchIn) (benchOut, error) {
		return benchOut(in), nil
	}); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		others bool
	}{{"floor-tools-only", false}, {"tools+toolkits+mcp", true}} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			audit := server.NewFileAuditor(filepath.Join(dir, "audit.jsonl"), 10, 5, nil)
			cfg := server.Defaults()
			cfg.Server.AuthToken = "tok"
			opts := []server.Option{server.WithAuditor(audit), server.WithDataDir(dir),
				server.WithPlugin(server.PluginSpec{Name: "tools", Type: "tools", Impl: tools.NewPlugin(reg)})}
			if bc.others {
				opts = append(opts,
					server.WithPlugin(server.PluginSpec{Name: "toolkits", Type: "toolkits", Impl: &toolkits.Plugin{}}),
					server.WithPlugin(server.PluginSpec{Name: "mcp", Type: "mcp", Impl: &mcp.Plugin{}}))
			}
			h, err := server.New(context.Background(), cfg, opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { h.Close(context.Background()) })
			c, err := client.InProcess(h, client.Direct, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			ctx := context.Background()
			if _, err := c.Handshake(ctx, "bench", "tok", "tools"); err != nil {
				b.Fatal(err)
			}
			req := &msg.ToolCallReq{ToolName: "echo", Arguments: benchIn{Text: "hello"}}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				r, err := c.ToolCall(ctx, req)
				if err != nil || !r.Result.Success {
					b.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
}
