package persist

// The export of recorded trajectories (trajectory.go): to the session
// that asks (session/trajectory/export) and to the operator (`aep export
// trajectories`), as records or as chat samples.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
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
	prefix := string(req.Prefix)
	if prefix == "" {
		prefix = PrefixRepeat
	}
	q := trajSource{client: p.store.Client, tenant: s.Tenant()}
	var resp *msg.SessionTrajectoryExportResp
	err := p.storeCall(ctx, "trajectory export", p.storeWait(), func(ctx context.Context) (err error) {
		sel := selection{descendants: req.Descendants, prefix: prefix}
		if req.Group != nil {
			sel.group = *req.Group
		}
		if len(req.SessionIds) == 0 {
			sel.handles = []string{s.Handle()}
			sel.roots = []string{p.lineageOfSession(s).Root}
		} else {
			if sel.handles, err = q.handles(ctx, trajectoryrecord.OwnerIn(owners...)); err != nil {
				return err
			}
			// A presented session that recorded nothing is still its
			// forks' parent: its handle is in their records.
			forks, err := q.handles(ctx, trajectoryrecord.ParentOwnerIn(owners...))
			if err != nil {
				return err
			}
			for _, f := range forks {
				hd, err := q.head(ctx, f)
				if err != nil {
					return err
				}
				if hd != nil && hd.Parent != "" && !slices.Contains(sel.handles, hd.Parent) {
					sel.handles = append(sel.handles, hd.Parent)
					sel.roots = append(sel.roots, hd.Root)
				}
			}
		}
		sel.readers = slices.Clone(sel.handles)
		resp, err = exportSelection(ctx, q, sel, owners, req.After, limit, format)
		return err
	})
	if errors.Is(err, ErrStoreUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("trajectory export: %w", err)
	}
	return resp, nil
}

// exportSelection exports sel: the records of the sessions with owner
// keys owners as they were recorded, paged by row id, when no lineage is
// involved (no group, no descendants, no fork among them, or prefix
// none); else whole episodes, paged by episode.
func exportSelection(ctx context.Context, q trajSource, sel selection, owners []string, after, limit int, format string) (*msg.SessionTrajectoryExportResp, error) {
	resp := &msg.SessionTrajectoryExportResp{Format: msg.SessionTrajectoryExportRespFormat(format), Lines: []msg.SessionTrajectoryExportRespLinesElem{}}
	pl := &planner{q: q, heads: map[string]*TrajectoryRecord{}}
	lineageWide := sel.group != "" || sel.descendants
	if !lineageWide && sel.prefix != PrefixNone {
		for _, h := range sel.handles {
			hd, err := pl.head(ctx, h)
			if err != nil {
				return nil, err
			}
			if hd != nil && hd.Parent != "" {
				lineageWide = true
			}
		}
	}
	if !lineageWide {
		return exportRows(ctx, q, owners, after, limit, format)
	}
	eps, err := pl.episodes(ctx, sel)
	if err != nil {
		return nil, err
	}
	pg, err := renderEpisodes(ctx, q, eps, after, limit, format, sel.prefix)
	if err != nil {
		return nil, err
	}
	for _, l := range pg.lines {
		resp.Lines = append(resp.Lines, l)
	}
	resp.Records = pg.records
	if pg.next > 0 {
		next := pg.next
		resp.Next = &next
	}
	notePrefix(resp, eps, pg.missing)
	return resp, nil
}

// notePrefix says in resp whether the exported episodes' prefixes are
// all there: a missing prefix is a field of the export, not an error.
func notePrefix(resp *msg.SessionTrajectoryExportResp, eps []episode, missing []string) {
	hasPrefix := len(missing) > 0
	for _, ep := range eps {
		hasPrefix = hasPrefix || ep.head.Parent != ""
	}
	if !hasPrefix {
		return
	}
	v := msg.SessionTrajectoryExportRespPrefixComplete
	if len(missing) > 0 {
		v = msg.SessionTrajectoryExportRespPrefixMissing
		resp.PrefixMissing = missing
	}
	resp.Prefix = &v
}

// exportRows is the export of sessions' own records by row id.
func exportRows(ctx context.Context, q trajSource, owners []string, after, limit int, format string) (*msg.SessionTrajectoryExportResp, error) {
	if len(owners) == 0 {
		return &msg.SessionTrajectoryExportResp{Format: msg.SessionTrajectoryExportRespFormat(format), Lines: []msg.SessionTrajectoryExportRespLinesElem{}}, nil
	}
	rows, err := q.client.TrajectoryRecord.Query().
		Where(q.where(trajectoryrecord.OwnerIn(owners...), trajectoryrecord.IDGT(after))...).
		Order(ent.Asc(trajectoryrecord.FieldID)).Limit(limit + 1).All(ctx)
	if err != nil {
		return nil, err
	}
	resp := &msg.SessionTrajectoryExportResp{Format: msg.SessionTrajectoryExportRespFormat(format), Lines: []msg.SessionTrajectoryExportRespLinesElem{}}
	if len(rows) > limit {
		rows = rows[:limit]
		next := rows[len(rows)-1].ID
		resp.Next = &next
	}
	recs := make([]TrajectoryRecord, 0, len(rows))
	for _, row := range rows {
		rec, err := decodeRecord(row)
		if err != nil {
			return nil, err
		}
		recs = append(recs, *rec)
	}
	resp.Records = len(recs)
	if format == "chat" {
		for _, sample := range ChatSamples(recs) {
			resp.Lines = append(resp.Lines, sample)
		}
		return resp, nil
	}
	for _, rec := range recs {
		line, err := recordLine(rec)
		if err != nil {
			return nil, err
		}
		resp.Lines = append(resp.Lines, line)
	}
	return resp, nil
}

// ExportOptions selects the operator's export (`aep export trajectories`).
type ExportOptions struct {
	// Handle is the session to export (with Descendants, its descendants
	// too); Group, when set, exports a sibling group instead.
	Handle, Group string
	Descendants   bool
	// Prefix is repeat (default), once or none; Format jsonl or chat.
	Prefix, Format string
}

// ExportResult is what an operator's export wrote.
type ExportResult struct {
	// Records counts the records exported.
	Records int
	// PrefixMissing names the episodes whose prefix is not recorded.
	PrefixMissing []string
}

// ExportTrajectories writes recorded trajectories from the store to w, of
// any tenant (the operator's export, which needs no session), one JSON
// line each (WriteLine): exactly the lines session/trajectory/export
// gives an agent that may read them, every page together.
func ExportTrajectories(ctx context.Context, st *store.Store, o ExportOptions, w io.Writer) (ExportResult, error) {
	if o.Format == "" {
		o.Format = "jsonl"
	}
	if o.Prefix == "" {
		o.Prefix = PrefixRepeat
	}
	if o.Format != "jsonl" && o.Format != "chat" {
		return ExportResult{}, fmt.Errorf("format %q: want jsonl or chat", o.Format)
	}
	if o.Prefix != PrefixRepeat && o.Prefix != PrefixOnce && o.Prefix != PrefixNone {
		return ExportResult{}, fmt.Errorf("prefix %q: want repeat, once or none", o.Prefix)
	}
	q := trajSource{client: st.Client, all: true}
	sel := selection{group: o.Group, descendants: o.Descendants, prefix: o.Prefix}
	if o.Handle != "" {
		sel.handles = []string{o.Handle}
	}
	owners, err := q.client.TrajectoryRecord.Query().Where(trajectoryrecord.Handle(o.Handle)).
		GroupBy(trajectoryrecord.FieldOwner).Strings(ctx)
	if err != nil {
		return ExportResult{}, fmt.Errorf("trajectory export: %w", err)
	}
	var res ExportResult
	for after := 0; ; {
		// One page: a chat sample is never split.
		resp, err := exportSelection(ctx, q, sel, owners, after, math.MaxInt32-1, o.Format)
		if err != nil {
			return res, fmt.Errorf("trajectory export: %w", err)
		}
		for _, l := range resp.Lines {
			if err := WriteLine(w, l); err != nil {
				return res, err
			}
		}
		res.Records += resp.Records
		res.PrefixMissing = append(res.PrefixMissing, resp.PrefixMissing...)
		if resp.Next == nil {
			return res, nil
		}
		after = *resp.Next
	}
}

// WriteLine writes v as one line of an export ([wire.WriteLine]).
func WriteLine(w io.Writer, v any) error { return wire.WriteLine(w, v) }

// chatSkipped are the types a chat sample leaves out: the session's
// plumbing, not the agent's actions, and feedback, which becomes rewards.
var chatSkipped = map[string]bool{"handshake/req": true, "handshake/resp": true, "ping": true, "pong": true, "shutdown": true, "cancel": true,
	"learn/feedback/req": true, "learn/feedback/resp": true}

// ChatSamples converts records, grouped by session in order of first
// appearance, to one chat sample each (chatSample), named by its
// session and lineage.
func ChatSamples(recs []TrajectoryRecord) []map[string]any {
	var order []string
	bySession := map[string][]TrajectoryRecord{}
	for _, r := range recs {
		if _, ok := bySession[r.Session]; !ok {
			order = append(order, r.Session)
		}
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	out := make([]map[string]any, 0, len(order))
	for _, h := range order {
		rs := bySession[h]
		s := chatSample(rs, 0)
		setLineage(s, &rs[0])
		out = append(out, s)
	}
	return out
}

// The default feedback rewards (docs/trajectories.md): a feedback's score
// when it gives one, else by its type. CORRECTIVE is learn's default
// (capabilities/learn), so a rating weighs the same in the bandit and in
// the export.
var feedbackReward = map[string]float64{"POSITIVE": 1, "NEGATIVE": -1, "NEUTRAL": 0, "CORRECTIVE": -0.5}

// feedback is one rating a session's learn/feedback/req gave and the
// host accepted (answered learn/feedback/resp).
type feedback struct {
	session, correlation, typ, correction string
	score                                 float64
}

// acceptedFeedback returns the ratings recs hold, in order.
func acceptedFeedback(recs []TrajectoryRecord) []feedback {
	pending := map[string][]any{}
	var out []feedback
	for _, r := range recs {
		switch r.Type {
		case "learn/feedback/req":
			id, _ := r.Message["id"].(string)
			fbs, _ := r.Message["feedbacks"].([]any)
			pending[r.Session+"\x00"+id] = fbs
		case "learn/feedback/resp":
			reqID, _ := r.Message["req_id"].(string)
			key := r.Session + "\x00" + reqID
			for _, f := range pending[key] {
				m, ok := f.(map[string]any)
				if !ok {
					continue
				}
				fb := feedback{session: r.Session}
				fb.typ, _ = m["type"].(string)
				fb.correlation, _ = m["correlation_id"].(string)
				fb.correction, _ = m["correction"].(string)
				fb.score = feedbackReward[fb.typ]
				if sc, ok := toFloat(m["score"]); ok {
					fb.score = sc
				}
				out = append(out, fb)
			}
			delete(pending, key)
		}
	}
	return out
}

// chatSample converts records, in order, to one chat sample in the shape
// TRL and verl read for multi-turn rollouts with tools
// (docs/trajectories.md):
//
//	{"messages": [...], "rewards": [...], "env_rewards": [...],
//	 "feedback_rewards": [...], "episode_rewards": [...], "total_reward": r}
//
// Each request of the agent becomes an assistant message with one tool
// call (tool/call/req: the tool's own name and arguments; any other: the
// type without "/req", "/" → "_", with the message's body as arguments),
// and its reply or error a tool message answering that call by id, its
// content the body as JSON. Events, the session's plumbing (handshake,
// ping, shutdown, cancel) and feedback are left out. Each env/step has
// its env reward and the rewards of the feedback naming it by
// correlation_id, added in `rewards`; feedback naming no step of its
// session rates the episode. A CORRECTIVE feedback's correction is listed
// in `corrections` beside the message it corrects. The first prefixRecs
// records are the episode's prefix: `prefix_messages` counts their
// messages.
func chatSample(recs []TrajectoryRecord, prefixRecs int) map[string]any {
	messages := []any{}
	envRewards, fbRewards := []any{}, []any{}
	names := map[string]string{}  // session, request id → call name
	msgAt := map[string]int{}     // session, request id or correlation_id → message index
	callID := map[string]string{} // the same keys → request id
	stepAt := map[string]int{}    // session, env/step request id → step index
	prefixMessages := 0
	for i, r := range recs {
		if i == prefixRecs {
			prefixMessages = len(messages)
		}
		if chatSkipped[r.Type] || r.Kind == "event" {
			continue
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
			key := r.Session + "\x00" + id
			names[key] = name
			msgAt[key], callID[key] = len(messages), id
			if c, ok := body["correlation_id"].(string); ok && c != "" {
				msgAt[r.Session+"\x00"+c], callID[r.Session+"\x00"+c] = len(messages), id
			}
			argJSON, _ := json.Marshal(args)
			messages = append(messages, map[string]any{
				"role": "assistant", "content": "",
				"tool_calls": []any{map[string]any{"id": id, "type": "function",
					"function": map[string]any{"name": name, "arguments": string(argJSON)}}},
			})
		case reqID != "":
			key := r.Session + "\x00" + reqID
			name, ok := names[key]
			if !ok {
				continue // the answer to a request the records do not hold
			}
			content := any(body)
			if r.Type == "tool/call/resp" {
				if res, ok := body["result"]; ok {
					content = res
				}
			}
			c, _ := json.Marshal(content)
			messages = append(messages, map[string]any{
				"role": "tool", "tool_call_id": reqID, "name": name, "content": string(c)})
			if r.Type == "env/step/resp" {
				if rw, ok := toFloat(body["reward"]); ok {
					stepAt[key] = len(envRewards)
					envRewards = append(envRewards, rw)
					fbRewards = append(fbRewards, 0.0)
				}
			}
		}
	}
	if prefixRecs >= len(recs) {
		prefixMessages = len(messages)
	}
	episodeRewards, corrections := []any{}, []any{}
	for _, fb := range acceptedFeedback(recs) {
		key := fb.session + "\x00" + fb.correlation
		at, named := msgAt[key]
		step, isStep := stepAt[fb.session+"\x00"+callID[key]]
		switch {
		case fb.correlation != "" && named && isStep:
			fbRewards[step] = fbRewards[step].(float64) + fb.score
		default:
			episodeRewards = append(episodeRewards, fb.score)
		}
		if fb.typ == "CORRECTIVE" && fb.correction != "" {
			c := map[string]any{"preferred": fb.correction, "message_index": len(messages)}
			if fb.correlation != "" && named {
				c["message_index"], c["tool_call_id"] = at, callID[key]
			}
			corrections = append(corrections, c)
		}
	}
	rewards := make([]any, len(envRewards))
	total := 0.0
	for i := range envRewards {
		rw := envRewards[i].(float64) + fbRewards[i].(float64)
		rewards[i] = rw
		total += rw
	}
	for _, rw := range episodeRewards {
		total += rw.(float64)
	}
	s := map[string]any{"messages": messages, "rewards": rewards, "env_rewards": envRewards,
		"feedback_rewards": fbRewards, "episode_rewards": episodeRewards, "total_reward": total}
	if prefixRecs > 0 {
		s["prefix_messages"] = prefixMessages
	}
	if len(corrections) > 0 {
		s["corrections"] = corrections
	}
	return s
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
