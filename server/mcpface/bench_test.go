package mcpface_test

import (
	"context"
	"net/http/httptest"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/aephost/aep/internal/aeptest"
)

// BenchmarkToolCall compares MCP tools/call round trips through aep's face
// with mcp-go's own server serving the same echo tool, both over streamable
// HTTP on loopback with mcp-go's client and a 2025-11-25 session
// (docs/PERFORMANCE.md, MCP face).
func BenchmarkToolCall(b *testing.B) {
	own := mcpserver.NewMCPServer("own", "1")
	own.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		out := map[string]any{"echo": req.GetString("text", "")}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(`{"echo":"` + out["echo"].(string) + `"}`)}, StructuredContent: out}, nil
	})
	ownSrv := httptest.NewServer(mcpserver.NewStreamableHTTPServer(own))
	b.Cleanup(ownSrv.Close)
	r := newRig(b, nil)
	for _, tc := range []struct{ name, url string }{{"mcp-go", ownSrv.URL + "/mcp"}, {"aep", r.url}} {
		b.Run(tc.name, func(b *testing.B) {
			tr, err := transport.NewStreamableHTTP(tc.url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + aeptest.Token}))
			if err != nil {
				b.Fatal(err)
			}
			c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(mcp.ProtocolVersion20251125))
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			init := mcp.InitializeRequest{}
			init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
			if _, err := c.Initialize(ctx, init); err != nil {
				b.Fatal(err)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "echo", map[string]any{"text": "hi"}
			b.ResetTimer()
			for b.Loop() {
				res, err := c.CallTool(ctx, req)
				if err != nil || res.IsError {
					b.Fatalf("%v %+v", err, res)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
