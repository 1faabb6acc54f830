package mcp

import (
	"errors"
	"io"
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

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
