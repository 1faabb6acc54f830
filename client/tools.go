package client

import (
	"context"

	"github.com/aephost/aep/gen/msg"
)

// ListTools returns one page of tools across every tool-serving plugin of
// the host, sorted by name, with next_cursor set when more follow. The
// kernel makes the page exact (x-aep-merge on tool/list), so this is
// ToolList under a friendlier name.
func (c *Client) ListTools(ctx context.Context, req *msg.ToolListReq) (*msg.ToolListResp, error) {
	return c.ToolList(ctx, req)
}

// CallTool calls a tool and returns its result (spec §2.6); a tool's failure
// is a result with Success false, not an error.
func (c *Client) CallTool(ctx context.Context, req *msg.ToolCallReq) (*msg.ToolResult, error) {
	resp, err := c.ToolCall(ctx, req)
	if err != nil {
		return nil, err
	}
	return &resp.Result, nil
}
