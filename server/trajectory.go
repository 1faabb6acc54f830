package server

// Trajectories (docs/DECISIONS.md, Trajectories). A session whose handshake
// asks for it (record_trajectory), or every session when the operator sets
// server.trajectories.record to "all", has every message it exchanges
// recorded with its body: requests, replies, events and errors, with the
// time the host received or sent each and, on a reply, how long its request
// took. Env observations, actions and rewards, tool calls and results are
// the bodies of those messages. A request is held in memory with its
// events until its reply is sent and then written as a group, so that a
// secret a handler declares while it runs (a toolkit password) is known
// before its request is written; every string is cut of every secret the
// kernel knows for the session (snapshot.go, secrets) and the values of
// auth_token, session_id and session_ids fields (bearer secrets) are
// replaced. Records go to the host's store in batches (TrajectoryRecord in
// ent/schema), keyed by the session's owner key (snapshotlist.go), so they
// survive a restart; session/trajectory/export and `aep export
// trajectories` read them back in the format of
// schemas/records/trajectory.json, or as chat samples.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/trajectoryrecord"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// DefaultMaxTrajectoryRecords is server.trajectories.max_records_per_session's default.
const DefaultMaxTrajectoryRecords = 100000

func (c TrajectoryConfig) check() []error {
	var probs []error
	switch c.Record {
	case "", "opt_in", "all", "off":
	default:
		probs = append(probs, configcheck.At("server.trajectories.record", "%q: want opt_in, all or off", c.Record))
	}
	if c.MaxAge < 0 {
		probs = append(probs, configcheck.At("server.trajectories.max_age", "must not be negative"))
	}
	if c.MaxRecordsPerSession < 0 {
		probs = append(probs, configcheck.At("server.trajectories.max_records_per_session", "must not be negative"))
	}
	return probs
}

// redactedValue replaces a secret in a recorded message.
const redactedValue = "[redacted]"

// bearerFields are the fields whose values are bearer secrets wherever
// they appear in a message: transport ids and tokens.
var bearerFields = map[string]bool{"auth_token": true, "session_id": true, "session_ids": true}

// TrajectoryRecord is one record of a trajectory, the form of
// schemas/records/trajectory.json.
type TrajectoryRecord struct {
	// Session is the public handle of the session that exchanged it.
	Session string `json:"session"`
	// Seq numbers the session's records from 0 in the order written.
	Seq int64 `json:"seq"`
	// Dir is agent (the agent sent it) or host.
	Dir string `json:"dir"`
	// Kind is request, notification, reply, event or error.
	Kind string `json:"kind"`
	Type string `json:"type"`
	// TS is when the host received or sent it, Unix epoch seconds.
	TS float64 `json:"ts"`
	// DurationMS is, on a reply or error answering a request, the time
	// since the request was received.
	DurationMS *float64 `json:"duration_ms,omitempty"`
	// Message is the whole wire message, redacted.
	Message map[string]any `json:"message"`
}

// recording reports whether a session that handshakes with req is recorded.
func (h *Host) recording(req *msg.HandshakeReq) bool {
	if h.store == nil {
		return false
	}
	switch h.cfg.Server.Trajectories.Record {
	case "off":
		return false
	case "all":
		return true
	}
	return req.RecordTrajectory != nil && *req.RecordTrajectory
}

// trajRec records one session's trajectory.
type trajRec struct {
	s      *Session
	mu     sync.Mutex
	seq    int64
	groups map[string]*trajGroup // by request id, until the reply
	skip   map[string]bool       // requests not recorded (exports)
	full   bool
}

type trajGroup struct {
	start time.Time
	recs  []trajPending
}

type trajPending struct {
	dir, kind, typ string
	line           []byte
	at             time.Time
	dur            *float64
}

func newTrajRec(s *Session) *trajRec {
	return &trajRec{s: s, groups: map[string]*trajGroup{}, skip: map[string]bool{}}
}

// agent records a message the agent sent; a request waits for its reply.
func (r *trajRec) agent(kind string, env *wire.Envelope, m wire.Message) {
	now := time.Now()
	typ := env.Type
	if typ == "" {
		typ = m.MessageType()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(typ, "session/trajectory/") {
		// An export's reply holds records: recording it would copy the
		// trajectory into itself.
		r.skip[env.ID] = true
		return
	}
	line, err := wire.Encode(env, m)
	if err != nil {
		return
	}
	p := trajPending{dir: "agent", kind: kind, typ: typ, line: line, at: now}
	if kind != "request" || env.ID == "" {
		r.flushLocked([]trajPending{p})
		return
	}
	if _, dup := r.groups[env.ID]; dup {
		r.flushLocked([]trajPending{p}) // refused as a duplicate id
		return
	}
	r.groups[env.ID] = &trajGroup{start: now, recs: []trajPending{p}}
}

// host records a message the host sends; a reply completes its request's group.
func (r *trajRec) host(p *wire.Packet) {
	now := time.Now()
	typ := p.Type
	if typ == "" && p.Msg != nil {
		typ = p.Msg.MessageType()
	}
	kind := "reply"
	switch {
	case typ == "error":
		kind = "error"
	case strings.HasSuffix(typ, "/event"):
		kind = "event"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.skip[p.ReqID] {
		if kind != "event" {
			delete(r.skip, p.ReqID)
		}
		return
	}
	line, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		return
	}
	rec := trajPending{dir: "host", kind: kind, typ: typ, line: line, at: now}
	g := r.groups[p.ReqID]
	if g == nil {
		r.flushLocked([]trajPending{rec})
		return
	}
	if kind != "event" {
		ms := float64(now.Sub(g.start).Microseconds()) / 1000
		rec.dur = &ms
	}
	g.recs = append(g.recs, rec)
	if kind != "event" {
		delete(r.groups, p.ReqID)
		r.flushLocked(g.recs)
	}
}

// close writes the groups of requests that were never answered (the
// session ended under them).
func (r *trajRec) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.groups))
	for id := range r.groups {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return r.groups[ids[i]].start.Before(r.groups[ids[j]].start) })
	for _, id := range ids {
		r.flushLocked(r.groups[id].recs)
	}
	r.groups = map[string]*trajGroup{}
}

// flushLocked redacts recs and queues them for the store.
func (r *trajRec) flushLocked(recs []trajPending) {
	h := r.s.h
	max := h.cfg.Server.Trajectories.MaxRecordsPerSession
	if max == 0 {
		max = DefaultMaxTrajectoryRecords
	}
	secrets := h.secrets(r.s)
	secrets = append(secrets, namedSecret{"the session id", r.s.id})
	owner := ownerKey(r.s.id)
	rows := make([]trajRow, 0, len(recs))
	for _, p := range recs {
		if r.seq >= int64(max) {
			if !r.full {
				r.full = true
				h.log.Warn("trajectory: the session reached server.trajectories.max_records_per_session; later records are dropped", "session", r.s.handle, "max", max)
			}
			return
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(p.line))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			continue
		}
		redact(m, secrets)
		rec := TrajectoryRecord{Session: r.s.handle, Seq: r.seq, Dir: p.dir, Kind: p.kind, Type: p.typ,
			TS: float64(p.at.UnixMicro()) / 1e6, DurationMS: p.dur, Message: m}
		data, err := json.Marshal(rec)
		if err != nil {
			continue
		}
		r.seq++
		rows = append(rows, trajRow{owner: owner, handle: r.s.handle, seq: rec.Seq, data: data, at: p.at})
	}
	h.traj.add(rows)
}

// redact replaces, in place, the values of bearer fields and every
// occurrence of a secret in any string of v.
func redact(v any, secrets []namedSecret) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if bearerFields[k] {
				x[k] = redactBearer(val)
				continue
			}
			x[k] = redact(val, secrets)
		}
		return x
	case []any:
		for i := range x {
			x[i] = redact(x[i], secrets)
		}
		return x
	case string:
		for _, s := range secrets {
			if s.value != "" && strings.Contains(x, s.value) {
				x = strings.ReplaceAll(x, s.value, redactedValue)
			}
		}
		return x
	}
	return v
}

func redactBearer(v any) any {
	switch x := v.(type) {
	case string:
		if x == "" {
			return x
		}
		return redactedValue
	case []any:
		for i := range x {
			x[i] = redactBearer(x[i])
		}
		return x
	}
	return v
}

// trajRow is one record on its way to the store.
type trajRow struct {
	owner, handle string
	seq           int64
	data          []byte
	at            time.Time
}

// trajWriter writes records to the store in batches from one goroutine,
// off the session's path; Close writes what is queued.
type trajWriter struct {
	h *Host
	// flushMu makes a flush wait for one under way, so that an export
	// that flushes first sees every record queued before it.
	flushMu sync.Mutex
	mu      sync.Mutex
	queue   []trajRow
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  bool
}

func (h *Host) startTrajectories() {
	w := &trajWriter{h: h, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	h.traj = w
	if h.store == nil {
		close(w.done)
		w.closed = true
		return
	}
	go w.run()
}

func (w *trajWriter) add(rows []trajRow) {
	if w == nil || len(rows) == 0 {
		return
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.queue = append(w.queue, rows...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// trajBatch bounds one insert (SQLite allows 32766 variables; 5 per row).
const trajBatch = 1000

func (w *trajWriter) run() {
	defer close(w.done)
	retention := time.NewTicker(time.Hour)
	defer retention.Stop()
	w.retain()
	for {
		select {
		case <-w.wake:
			w.flush()
		case <-retention.C:
			w.retain()
		case <-w.stop:
			w.flush()
			return
		}
	}
}

func (w *trajWriter) flush() {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	for {
		w.mu.Lock()
		rows := w.queue
		if len(rows) > trajBatch {
			rows = rows[:trajBatch]
		}
		w.queue = w.queue[len(rows):]
		w.mu.Unlock()
		if len(rows) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		bulk := make([]*ent.TrajectoryRecordCreate, len(rows))
		for i, r := range rows {
			bulk[i] = w.h.store.Client.TrajectoryRecord.Create().SetOwner(r.owner).SetHandle(r.handle).
				SetSeq(r.seq).SetData(r.data).SetCreatedAt(r.at)
		}
		if err := w.h.store.Client.TrajectoryRecord.CreateBulk(bulk...).Exec(ctx); err != nil {
			w.h.log.Error("trajectory: writing records failed; they are lost", "records", len(rows), "err", err)
		}
		cancel()
	}
}

// retain drops records older than server.trajectories.max_age.
func (w *trajWriter) retain() {
	age := time.Duration(w.h.cfg.Server.Trajectories.MaxAge)
	if age <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := w.h.store.Client.TrajectoryRecord.Delete().Where(trajectoryrecord.CreatedAtLT(time.Now().Add(-age))).Exec(ctx)
	if err != nil {
		w.h.log.Warn("trajectory: retention failed", "err", err)
		return
	}
	if n > 0 {
		w.h.log.Info("trajectory: records past server.trajectories.max_age dropped", "records", n)
	}
}

func (w *trajWriter) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close stops the writer after writing what is queued.
func (w *trajWriter) close(ctx context.Context) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("trajectory writer: %w", ctx.Err())
	}
}

// exportTrajectory answers session/trajectory/export for session s.
func (h *Host) exportTrajectory(ctx context.Context, s *Session, req *msg.SessionTrajectoryExportReq) (*msg.SessionTrajectoryExportResp, error) {
	if h.store == nil {
		return nil, wire.Reason("trajectory_store_unavailable", errors.New("trajectories are kept in the host's store; this host has none"))
	}
	// What the session and others recorded so far is in the store first.
	if w := h.traj; w != nil && !w.isClosed() {
		w.flush()
	}
	owners := []string{ownerKey(s.id)}
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
	rows, err := h.store.Client.TrajectoryRecord.Query().
		Where(trajectoryrecord.OwnerIn(owners...), trajectoryrecord.IDGT(req.After)).
		Order(ent.Asc(trajectoryrecord.FieldID)).Limit(limit + 1).All(ctx)
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
