package main

import (
	"context"
	"net/http"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/mcpface"
	"github.com/aephost/aep/server/openenv"
)

// The HTTP+SSE transport (docs/DECISIONS.md, Transports); serve uses it
// unless --stdio. The MCP face is mounted at /mcp unless mcp_face.enabled
// is false (docs/mcp.md), the OpenEnv face at /openenv/ unless
// openenv_face.enabled is false (docs/openenv.md).
func init() {
	serveHTTP = serveHTTPWithFaces
	serveOperator = func(ctx context.Context, h *server.Host, listen string, o operatorOptions) error {
		return httpapi.ServeOperator(ctx, h, listen, httpapi.OperatorOptions{Token: o.token, Reload: o.reload, Stopping: o.stopping, Logger: o.log, Listening: o.listening, Store: o.store})
	}
}

func serveHTTPWithFaces(ctx context.Context, h *server.Host, listen string) error {
	var opts httpapi.Options
	if h.Config().MCPFace.IsEnabled() {
		face := mcpface.New(h)
		defer face.Close()
		opts.Mount = map[string]http.Handler{"/mcp": face}
	}
	if h.Config().OpenEnvFace.IsEnabled() {
		face := openenv.New(h, openenv.Options{})
		opts.Faces = append(opts.Faces, httpapi.Face{Prefix: openenv.Prefix, Handler: face, Upgrade: face.Upgrade})
	}
	return httpapi.ServeWith(ctx, h, listen, opts)
}
