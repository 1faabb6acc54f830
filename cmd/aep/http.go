package main

import (
	"context"
	"net/http"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/mcpface"
)

// The HTTP+SSE transport (docs/DECISIONS.md, Transports); serve uses it
// unless --stdio. The MCP face is mounted at /mcp unless mcp_face.enabled
// is false (docs/mcp.md).
func init() {
	serveHTTP = serveHTTPWithMCP
	serveOperator = func(ctx context.Context, h *server.Host, listen string, o operatorOptions) error {
		return httpapi.ServeOperator(ctx, h, listen, httpapi.OperatorOptions{Token: o.token, Reload: o.reload, Stopping: o.stopping, Logger: o.log})
	}
}

func serveHTTPWithMCP(ctx context.Context, h *server.Host, listen string) error {
	var opts httpapi.Options
	if h.Config().MCPFace.IsEnabled() {
		face := mcpface.New(h)
		defer face.Close()
		opts.Mount = map[string]http.Handler{"/mcp": face}
	}
	return httpapi.ServeWith(ctx, h, listen, opts)
}
