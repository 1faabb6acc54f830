package mcp

import (
	"context"
	"errors"
	"log/slog"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
)

// mcpClient is mcp-go's client; the alias keeps its import in this package's
// connection code.
type mcpClient = mcpclient.Client

// isTransport reports a failure of the connection rather than an answer of
// the server (a JSON-RPC error).
func isTransport(err error) bool {
	var te *transport.Error
	return errors.As(err, &te)
}

// debugHandler passes records on at debug level, with their own level kept
// as an attribute. mcp-go's HTTP transport logs every retry of its standing
// stream at error level, once a second while a server is down; the bridge's
// own warnings (connect failed, connection lost) already say that once.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugHandler) Handle(ctx context.Context, r slog.Record) error {
	own := r.Level
	r = r.Clone()
	r.Level = slog.LevelDebug
	r.AddAttrs(slog.String("mcp_level", own.String()))
	return h.Handler.Handle(ctx, r)
}

func (h debugHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugHandler{h.Handler.WithAttrs(as)}
}

func (h debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{h.Handler.WithGroup(name)}
}
