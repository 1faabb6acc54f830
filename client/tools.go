package client

import (
	"context"
	"sort"

	"github.com/aephost/aep/gen/msg"
)

// ListTools returns one page of tools across every tool-serving plugin of
// the host, sorted by name, with next_cursor set when more follow.
//
// Each plugin answers tool/list with its own page of at most `limit` tools
// after `cursor`, and the kernel concatenates the pages (DESIGN Dispatch:
// list replies are merged generically). ListTools asks each plugin for one
// tool more than the page, sorts the union and cuts it: the union holds the
// first `limit` matches of the whole host, and it is longer than `limit`
// exactly when more follow (docs/DECISIONS.md, tools).
func (c *Client) ListTools(ctx context.Context, req *msg.ToolListReq) (*msg.ToolListResp, error) {
	r := *req
	limit := 0
	if req.Limit != nil && *req.Limit > 0 {
		limit = *req.Limit
		more := limit + 1
		r.Limit = &more
	}
	resp, err := c.ToolList(ctx, &r)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(resp.Tools, func(i, j int) bool { return resp.Tools[i].Name < resp.Tools[j].Name })
	resp.NextCursor = nil
	if limit > 0 && len(resp.Tools) > limit {
		resp.Tools = resp.Tools[:limit]
		last := resp.Tools[limit-1].Name
		resp.NextCursor = &last
	}
	return resp, nil
}

// CallTool calls a tool and returns its result (SPEC 2.6); a tool's failure
// is a result with Success false, not an error.
func (c *Client) CallTool(ctx context.Context, req *msg.ToolCallReq) (*msg.ToolResult, error) {
	resp, err := c.ToolCall(ctx, req)
	if err != nil {
		return nil, err
	}
	return &resp.Result, nil
}
