package client

import (
	"context"
	"io"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// TrajectoryExport is what [Client.ExportTrajectories] wrote.
type TrajectoryExport struct {
	// Records counts the records exported, Lines the lines written.
	Records, Lines int
	// Prefix is the last page's `prefix` (complete or missing; empty
	// when no exported episode has a prefix), PrefixMissing every page's
	// episodes whose prefix is missing.
	Prefix        string
	PrefixMissing []string
}

// ExportTrajectories sends session/trajectory/export/req as req asks,
// page after page from req.After, and writes every line to w as
// [wire.WriteLine] does: the same bytes as `aep export trajectories`
// and the SDKs' exports of the same records (docs/trajectories.md).
func (c *Client) ExportTrajectories(ctx context.Context, req msg.SessionTrajectoryExportReq, w io.Writer) (TrajectoryExport, error) {
	var out TrajectoryExport
	for {
		page, err := c.SessionTrajectoryExport(ctx, &req)
		if err != nil {
			return out, err
		}
		for _, l := range page.Lines {
			if err := wire.WriteLine(w, map[string]any(l)); err != nil {
				return out, err
			}
		}
		out.Records += page.Records
		out.Lines += len(page.Lines)
		if page.Prefix != nil && out.Prefix != string(msg.SessionTrajectoryExportRespPrefixMissing) {
			out.Prefix = string(*page.Prefix)
		}
		out.PrefixMissing = append(out.PrefixMissing, page.PrefixMissing...)
		if page.Next == nil {
			return out, nil
		}
		req.After = *page.Next
	}
}
