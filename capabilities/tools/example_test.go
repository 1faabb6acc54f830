package tools_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/toolrun"
)

// AddIn is the typed input of the example tool: its json tags name the
// arguments, fields without omitempty are required, `desc` documents them.
type AddIn struct {
	A int `json:"a" desc:"first addend"`
	B int `json:"b" desc:"second addend"`
}

// AddOut becomes the result's data.
type AddOut struct {
	Sum int `json:"sum"`
}

// Example shows a tool author's whole path: register a typed Go function,
// serve it from a host, call it through the protocol, with an event emitted
// from inside the tool.
func Example() {
	ctx := context.Background()
	reg := toolrun.NewRegistry()
	err := toolrun.Register(reg, "add", "Adds two integers.", func(ctx context.Context, in AddIn) (AddOut, error) {
		_ = toolrun.Progress(ctx, 100, "added")
		return AddOut{Sum: in.A + in.B}, nil
	}, toolrun.Tags("math"))
	if err != nil {
		log.Fatal(err)
	}

	cfg := server.Defaults()
	cfg.Server.AuthToken = "s3cret"
	h, err := server.New(ctx, cfg, server.WithPlugin(server.PluginSpec{Name: "math", Type: "tools", Impl: tools.NewPlugin(reg)}))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Handshake(ctx, "example", "s3cret", "tools"); err != nil {
		log.Fatal(err)
	}

	list, _ := c.ListTools(ctx, &msg.ToolListReq{Tags: []string{"math"}})
	for _, p := range list.Tools[0].InputParameters {
		fmt.Printf("parameter %s %s required=%v\n", p.Name, p.Type, p.Required != nil && *p.Required)
	}
	res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "add", Arguments: map[string]any{"a": 2, "b": 40}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Success, res.Data, res.Events[0].Kind)

	bad, _ := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "add", Arguments: map[string]any{"a": "two", "b": 40}})
	fmt.Println(bad.Success, *bad.ErrorCode)
	// Output:
	// parameter a integer required=true
	// parameter b integer required=true
	// true map[sum:42] progress
	// false TOOL_ERROR
}
