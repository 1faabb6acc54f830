package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	_ "github.com/aephost/aep/capabilities/all" // registers the built-in plugin modules
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

// Example runs a host in process with the built-in tools and drives it with
// the Go client: handshake, then typed requests. README.md shows this code.
func Example() {
	ctx := context.Background()
	dataDir, _ := os.MkdirTemp("", "aep-example-")
	defer os.RemoveAll(dataDir)

	cfg := server.Defaults()
	cfg.Server.AuthToken = "s3cret"
	cfg.Plugins = []server.PluginConfig{{Name: "tools", Type: "tools", Cls: "aep.tools.builtin"}}
	h, err := server.New(ctx, cfg, server.WithDataDir(dataDir))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)

	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	hs, err := c.Handshake(ctx, "my-agent", "s3cret", "tools", "chains")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted:", hs.AcceptedCaps)

	_, err = c.ToolCall(ctx, &msg.ToolCallReq{ToolName: "write_file",
		Arguments: map[string]any{"path": "notes.txt", "content": "hello"}})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := c.ToolCall(ctx, &msg.ToolCallReq{ToolName: "read_file",
		Arguments: map[string]any{"path": "notes.txt"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read_file:", resp.Result.Success, resp.Result.Data.(map[string]any)["content"])
	// Output:
	// accepted: [{true tools} {false chains}]
	// read_file: true hello
}
