package mcp_test

import (
	"context"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	aepmcp "github.com/aephost/aep/capabilities/mcp"
	"github.com/aephost/aep/gen/msg"
)

// BenchmarkProxiedCall measures the cost the bridge adds to an MCP tool call:
// for each transport, impl=direct calls the server's echo tool with mcp-go's
// own client, and impl=proxied calls the same tool on the same kind of server
// as tool/call through the host (in-process JSON transport, dispatch, audit
// off, server/toolrun, the bridge). The difference is the bridge's cost.
func BenchmarkProxiedCall(b *testing.B) {
	ctx := context.Background()
	args := map[string]any{"message": "hello"}
	for _, tc := range []struct {
		name    string
		version string
	}{{"http-2026-07-28", mcp.ProtocolVersion20260728}, {"http-2025-11-25", mcp.ProtocolVersion20251125}, {"stdio-2025-11-25", mcp.ProtocolVersion20251125}} {
		var (
			direct transport.Interface
			p      *aepmcp.Plugin
		)
		if tc.name[:4] == "http" {
			hs := startHTTP(b, "s", mcpserver.WithStreamableHTTPProtocolVersions(tc.version))
			tr, err := transport.NewStreamableHTTP(hs.url())
			if err != nil {
				b.Fatal(err)
			}
			direct = tr
			p = &aepmcp.Plugin{Settings: aepmcp.Settings{AllowURLs: []aepmcp.AllowURL{{Prefix: hs.url()}}, Servers: []aepmcp.ServerConfig{{ID: "s", URL: hs.url()}}}}
		} else {
			sc := stdioServer("s", tc.version)
			direct = transport.NewStdioWithOptions(sc.Command, []string{"AEP_MCP_TEST_SERVER=s", "AEP_MCP_TEST_VERSIONS=" + tc.version}, sc.Args)
			p = &aepmcp.Plugin{Settings: aepmcp.Settings{Servers: []aepmcp.ServerConfig{sc}}}
		}
		for _, progress := range []bool{false, true} {
			name := "direct"
			if progress {
				// The bridge asks every call for progress; this is the same
				// request made directly, the floor the proxied call compares to.
				name = "direct-with-progress-token"
			}
			b.Run("transport="+tc.name+"/impl="+name, func(b *testing.B) {
				cli := mcpclient.NewClient(direct)
				if err := cli.Start(ctx); err != nil {
					b.Fatal(err)
				}
				init := mcp.InitializeRequest{}
				init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
				if _, err := cli.Initialize(ctx, init); err != nil {
					b.Fatal(err)
				}
				req := mcp.CallToolRequest{}
				req.Params.Name, req.Params.Arguments = "echo", args
				if progress {
					req.Params.Meta = &mcp.Meta{ProgressToken: "bench"}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					res, err := cli.CallTool(ctx, req)
					if err != nil || res.IsError {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run("transport="+tc.name+"/impl=proxied", func(b *testing.B) {
			e := newEnv(b, p)
			req := &msg.ToolCallReq{ToolName: "s__echo", Arguments: args}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r, err := e.c.CallTool(ctx, req)
				if err != nil || !r.Success {
					b.Fatal(err, r)
				}
			}
		})
	}
}
