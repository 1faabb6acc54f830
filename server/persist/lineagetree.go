package persist

// A lineage as a tree, for the operator's inspector (docs/inspector.md,
// Lineage): every recorded session of the lineage a session belongs to,
// with its parent, fork point and sibling group, and the rewards of its
// steps, read from the records the store holds (trajectory.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/trajectoryrecord"
	"github.com/aephost/aep/server/store"
)

// LineageNode is one recorded session of a lineage.
type LineageNode struct {
	Handle string
	// Parent, ForkPoint and Group are a fork's (ForkPoint nil when its
	// prefix is missing).
	Parent    string
	ForkPoint *int64
	Group     string
	// Records counts its own records; Steps its env/step replies and
	// Return the sum of their rewards.
	Records, Steps int
	Return         float64
	// EpisodeReturn adds the rewards of its prefix: its ancestors'
	// steps before each fork point.
	EpisodeReturn float64
}

// MaxLineageRecords bounds the records one lineage tree reads.
const MaxLineageRecords = 200000

// LineageTree returns the recorded sessions of the lineage handle belongs
// to, of any tenant (the operator's view), the root first and then in
// the order they first recorded; truncated says the lineage has more
// records than MaxLineageRecords and the tree counts only the first.
func LineageTree(ctx context.Context, st *store.Store, handle string) (nodes []LineageNode, truncated bool, err error) {
	first, err := st.Client.TrajectoryRecord.Query().Where(trajectoryrecord.Handle(handle)).
		Order(ent.Asc(trajectoryrecord.FieldSeq)).First(ctx)
	if ent.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("lineage of %s: %w", handle, err)
	}
	root := first.Root
	if root == "" {
		root = handle
	}
	recs, err := st.Client.TrajectoryRecord.Query().Where(trajectoryrecord.Root(root)).
		Order(ent.Asc(trajectoryrecord.FieldID)).Limit(MaxLineageRecords + 1).All(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("lineage of %s: %w", handle, err)
	}
	if len(recs) > MaxLineageRecords {
		recs, truncated = recs[:MaxLineageRecords], true
	}
	type step struct {
		seq    int64
		reward float64
	}
	byHandle := map[string]*LineageNode{}
	steps := map[string][]step{}
	var order []string
	for _, r := range recs {
		n := byHandle[r.Handle]
		var rec struct {
			Parent    string                    `json:"parent"`
			ForkPoint *int64                    `json:"fork_point"`
			Group     string                    `json:"group"`
			Type      string                    `json:"type"`
			Dir       string                    `json:"dir"`
			Message   struct{ Reward *float64 } `json:"message"`
		}
		if json.Unmarshal(r.Data, &rec) != nil {
			continue
		}
		if n == nil {
			n = &LineageNode{Handle: r.Handle, Parent: rec.Parent, ForkPoint: rec.ForkPoint, Group: rec.Group}
			byHandle[r.Handle] = n
			order = append(order, r.Handle)
		}
		n.Records++
		if rec.Type == "env/step/resp" && rec.Message.Reward != nil {
			n.Steps++
			n.Return += *rec.Message.Reward
			steps[r.Handle] = append(steps[r.Handle], step{r.Seq, *rec.Message.Reward})
		}
	}
	// prefix is the return of a session's episode up to seq: its own
	// steps before it and its ancestors' before their fork points.
	var prefix func(h string, seq int64, depth int) float64
	prefix = func(h string, seq int64, depth int) float64 {
		n := byHandle[h]
		if n == nil || depth > 1000 {
			return 0
		}
		sum := 0.0
		for _, s := range steps[h] {
			if s.seq < seq {
				sum += s.reward
			}
		}
		if n.Parent != "" && n.ForkPoint != nil {
			sum += prefix(n.Parent, *n.ForkPoint, depth+1)
		}
		return sum
	}
	for _, h := range order {
		n := byHandle[h]
		n.EpisodeReturn = n.Return
		if n.Parent != "" && n.ForkPoint != nil {
			n.EpisodeReturn += prefix(n.Parent, *n.ForkPoint, 0)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i] == root && order[j] != root })
	for _, h := range order {
		nodes = append(nodes, *byHandle[h])
	}
	return nodes, truncated, nil
}
