package persist

// The export of recorded trajectories (trajectory.go): to the session
// that asks (session/trajectory/export) and to the operator (`aep export
// trajectories`), as records or as chat samples.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/trajectoryrecord"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// exportTrajectory answers session/trajectory/export for session s.
func (p *Keeper) exportTrajectory(ctx context.Context, s Session, req *msg.SessionTrajectoryExportReq) (*msg.SessionTrajectoryExportResp, error) {
	if p.store == nil {
		return nil, wire.Reason("trajectory_store_unavailable", errors.New("trajectories are kept in the host's store; this host has none"))
	}
	// What the session and others recorded so far is in the store first.
	if w := p.traj; w != nil && !w.isClosed() {
		w.flush()
	}
	owners := []string{ownerKey(s.ID())}
	if len(req.SessionIds) > 0 {
		owners = owners[:0]
		for _, id := range req.SessionIds {
			owners = append(owners, ownerKey(id))
		}
	}
	limit := req.Limit
	if limit == 0 {
		limit = 1000
	}
	format := string(req.Format)
	if format == "" {
		format = "jsonl"
	}
	var rows []*ent.TrajectoryRecord
	err := p.storeCall(ctx, "trajectory export", p.storeWait(), func(ctx context.Context) (err error) {
		rows, err = p.store.Client.TrajectoryRecord.Query().
			Where(trajectoryrecord.Tenant(s.Tenant()), trajectoryrecord.OwnerIn(owners...), trajectoryrecord.IDGT(req.After)).
			Order(ent.Asc(trajectoryrecord.FieldID)).Limit(limit + 1).All(ctx)
		return err
	})
	if errors.Is(err, ErrStoreUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("trajectory export: %w", err)
	}
	resp := &msg.SessionTrajectoryExportResp{Format: msg.SessionTrajectoryExportRespFormat(format), Lines: []msg.SessionTrajectoryExportRespLinesElem{}}
	if len(rows) > limit {
		rows = rows[:limit]
		next := rows[len(rows)-1].ID
		resp.Next = &next
	}
	recs := make([]TrajectoryRecord, 0, len(rows))
	for _, row := range rows {
		var rec TrajectoryRecord
		if err := json.Unmarshal(row.Data, &rec); err != nil {
			return nil, fmt.Errorf("trajectory export: record %d: %w", row.ID, err)
		}
		recs = append(recs, rec)
	}
	resp.Records = len(recs)
	if format == "chat" {
		for _, sample := range ChatSamples(recs) {
			resp.Lines = append(resp.Lines, sample)
		}
		return resp, nil
	}
	for _, row := range rows {
		var m map[string]any
		if err := json.Unmarshal(row.Data, &m); err != nil {
			return nil, fmt.Errorf("trajectory export: record %d: %w", row.ID, err)
		}
		resp.Lines = append(resp.Lines, m)
	}
	return resp, nil
}

// ExportTrajectories writes the recorded trajectory of the session with
// public handle handle from the store to w, one JSON line per record
// (format "jsonl") or one chat sample (format "chat"): the operator's
// export (`aep export trajectories`), which needs no session.
func ExportTrajectories(ctx context.Context, st *store.Store, handle, format string, w io.Writer) (int, error) {
	if format != "jsonl" && format != "chat" {
		return 0, fmt.Errorf("format %q: want jsonl or chat", format)
	}
	rows, err := st.Client.TrajectoryRecord.Query().Where(trajectoryrecord.Handle(handle)).
		Order(ent.Asc(trajectoryrecord.FieldSeq), ent.Asc(trajectoryrecord.FieldID)).All(ctx)
	if err != nil {
		return 0, fmt.Errorf("trajectory export: %w", err)
	}
	if format == "jsonl" {
		for _, row := range rows {
			if _, err := w.Write(append(bytes.TrimSpace(row.Data), '\n')); err != nil {
				return 0, err
			}
		}
		return len(rows), nil
	}
	recs := make([]TrajectoryRecord, 0, len(rows))
	for _, row := range rows {
		var rec TrajectoryRecord
		if err := json.Unmarshal(row.Data, &rec); err != nil {
			return 0, fmt.Errorf("trajectory export: record %d: %w", row.ID, err)
		}
		recs = append(recs, rec)
	}
	enc := json.NewEncoder(w)
	for _, sample := range ChatSamples(recs) {
		if err := enc.Encode(sample); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// chatSkipped are the types a chat sample leaves out: the session's
// plumbing, not the agent's actions.
var chatSkipped = map[string]bool{"handshake/req": true, "handshake/resp": true, "ping": true, "pong": true, "shutdown": true, "cancel": true}

// ChatSamples converts records, grouped by session in order of first
// appearance, to chat samples in the shape TRL and verl read for
// multi-turn rollouts with tools (docs/trajectories.md):
//
//	{"session": h, "messages": [...], "rewards": [...], "total_reward": r}
//
// Each request of the agent becomes an assistant message with one tool
// call (tool/call/req: the tool's own name and arguments; any other: the
// type without "/req", "/" → "_", with the message's body as arguments),
// and its reply or error a tool message answering that call by id, its
// content the body as JSON. Events and the session's plumbing (handshake,
// ping, shutdown, cancel) are left out; env/step rewards are listed in
// order.
func ChatSamples(recs []TrajectoryRecord) []map[string]any {
	var order []string
	bySession := map[string]map[string]any{}
	names := map[string]string{} // request id → call name
	for _, r := range recs {
		if chatSkipped[r.Type] || r.Kind == "event" {
			continue
		}
		sample := bySession[r.Session]
		if sample == nil {
			sample = map[string]any{"session": r.Session, "messages": []any{}, "rewards": []any{}, "total_reward": 0.0}
			bySession[r.Session] = sample
			order = append(order, r.Session)
		}
		body := map[string]any{}
		for k, v := range r.Message {
			switch k {
			case "type", "id", "proto", "ts", "req_id":
			default:
				body[k] = v
			}
		}
		id, _ := r.Message["id"].(string)
		reqID, _ := r.Message["req_id"].(string)
		switch {
		case r.Dir == "agent":
			name := strings.ReplaceAll(strings.TrimSuffix(r.Type, "/req"), "/", "_")
			args := any(body)
			if r.Type == "tool/call/req" {
				if n, ok := body["tool_name"].(string); ok {
					name = n
				}
				args = body["arguments"]
				if args == nil {
					args = map[string]any{}
				}
			}
			names[id] = name
			argJSON, _ := json.Marshal(args)
			sample["messages"] = append(sample["messages"].([]any), map[string]any{
				"role": "assistant", "content": "",
				"tool_calls": []any{map[string]any{"id": id, "type": "function",
					"function": map[string]any{"name": name, "arguments": string(argJSON)}}},
			})
		case reqID != "":
			name, ok := names[reqID]
			if !ok {
				continue // the answer to a request the page does not hold
			}
			content := any(body)
			if r.Type == "tool/call/resp" {
				if res, ok := body["result"]; ok {
					content = res
				}
			}
			c, _ := json.Marshal(content)
			sample["messages"] = append(sample["messages"].([]any), map[string]any{
				"role": "tool", "tool_call_id": reqID, "name": name, "content": string(c)})
			if r.Type == "env/step/resp" {
				if rw, ok := toFloat(body["reward"]); ok {
					sample["rewards"] = append(sample["rewards"].([]any), rw)
					sample["total_reward"] = sample["total_reward"].(float64) + rw
				}
			}
		}
	}
	out := make([]map[string]any, 0, len(order))
	for _, s := range order {
		out = append(out, bySession[s])
	}
	return out
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}
