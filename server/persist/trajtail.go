package persist

// The newest records of a recorded trajectory, for the operator's web
// inspector (server/inspect, Host.Recorded): what a session exchanged
// before a page began to follow it, as far as the store recorded it.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/trajectoryrecord"
)

// tailWait bounds how long a tail waits for a store that is down: a page
// asking is a person waiting, not a move that must succeed.
const tailWait = 2 * time.Second

// RecordedTail returns the newest records, at most limit, of the
// trajectory the store holds for the session with public handle handle,
// oldest first, each as schemas/records/trajectory.json has it (redacted
// when recorded); more says older ones were left out. The records still
// queued are written first. Without a store it returns none.
func (p *Keeper) RecordedTail(ctx context.Context, handle string, limit int) (recs []json.RawMessage, more bool, err error) {
	if p.store == nil || limit <= 0 {
		return nil, false, nil
	}
	if w := p.traj; w != nil && !w.isClosed() {
		w.flush()
	}
	var rows []*ent.TrajectoryRecord
	err = p.storeCall(ctx, "trajectory tail", min(tailWait, p.storeWait()), func(ctx context.Context) (err error) {
		rows, err = p.store.Client.TrajectoryRecord.Query().Where(trajectoryrecord.Handle(handle)).
			Order(ent.Desc(trajectoryrecord.FieldSeq), ent.Desc(trajectoryrecord.FieldID)).Limit(limit + 1).All(ctx)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("trajectory tail: %w", err)
	}
	if len(rows) > limit {
		rows, more = rows[:limit], true
	}
	recs = make([]json.RawMessage, len(rows))
	for i, row := range rows {
		recs[len(rows)-1-i] = json.RawMessage(row.Data)
	}
	return recs, more, nil
}
