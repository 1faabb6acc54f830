package mcpface

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// ServeStdio serves one MCP session on in and out (newline-delimited
// JSON-RPC, as MCP clients that spawn a server expect) until in ends or ctx
// does. token is the shared token, which `aep mcp --stdio` reads from the
// environment: the kernel checks it in the handshake of the one aep session
// behind the MCP session, so a wrong token ends the command before any MCP
// message is read.
func (f *Face) ServeStdio(ctx context.Context, token string, in io.Reader, out io.Writer) error {
	b, err := f.open(ctx, token, netip.Addr{})
	if err != nil {
		return err
	}
	defer b.close()
	s := mcpserver.NewStdioServer(b.srv)
	err = s.Listen(ctx, in, out)
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("mcp stdio: %w", err)
}
