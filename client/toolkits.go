package client

import (
	"context"
	"fmt"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// GetToolkit looks one toolkit up by name in toolkit/list (spec §4.2 Toolkit
// configure: the client's get convenience). An unknown name is an error
// wrapping wire.ErrNotFound.
func (c *Client) GetToolkit(ctx context.Context, name string) (*msg.ToolkitDefinition, error) {
	resp, err := c.ToolkitList(ctx, &msg.ToolkitListReq{})
	if err != nil {
		return nil, err
	}
	for i := range resp.Toolkits {
		if resp.Toolkits[i].Name == name {
			return &resp.Toolkits[i], nil
		}
	}
	return nil, fmt.Errorf("toolkit %q: %w", name, wire.ErrNotFound)
}

// EnsureToolkit configures a toolkit only when it is not yet configured in
// this session (spec §4.2: the ensure convenience). It returns the configure
// reply, or nil when the toolkit was already configured; a reply with
// status error is returned as is, with a nil error.
func (c *Client) EnsureToolkit(ctx context.Context, name string, config map[string]any) (*msg.ToolkitConfigureResp, error) {
	def, err := c.GetToolkit(ctx, name)
	if err != nil {
		return nil, err
	}
	if def.Configured {
		return nil, nil
	}
	return c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: name, Config: config})
}
