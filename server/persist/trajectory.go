package persist

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
// kernel knows for the session (Keeper.secrets) and the values of
// auth_token, session_id and session_ids fields (bearer secrets) are
// replaced. Records go to the host's store in batches (TrajectoryRecord in
// ent/schema), keyed by the session's owner key (stored.go), so they
// survive a restart; session/trajectory/export and `aep export
// trajectories` read them back in the format of
// schemas/records/trajectory.json, or as chat samples (trajexport.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/trajectoryrecord"
	"github.com/aephost/aep/wire"
)

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

// Recorder returns the recorder of session s, which handshook asking
// (asked) or not for its trajectory to be recorded, or nil when it is not
// recorded: no store, server.trajectories.record off, or opt_in and not
// asked.
func (p *Keeper) Recorder(s Session, asked bool) *Recorder {
	if p.store == nil {
		return nil
	}
	switch p.set.Trajectories.Record {
	case "off":
		return nil
	case "all":
	default:
		if !asked {
			return nil
		}
	}
	return &Recorder{p: p, s: s, groups: map[string]*trajGroup{}, skip: map[string]bool{}}
}

// Recorder records one session's trajectory. The kernel hands it what the
// session receives ([Recorder.Agent]) and sends ([Recorder.Host]), and
// closes it when the session ends.
type Recorder struct {
	p      *Keeper
	s      Session
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

// Agent records a message the agent sent, of kind request or
// notification; a request waits for its reply.
func (r *Recorder) Agent(kind string, env *wire.Envelope, m wire.Message) {
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
	pd := trajPending{dir: "agent", kind: kind, typ: typ, line: line, at: now}
	if kind != "request" || env.ID == "" {
		r.flushLocked([]trajPending{pd})
		return
	}
	if _, dup := r.groups[env.ID]; dup {
		r.flushLocked([]trajPending{pd}) // refused as a duplicate id
		return
	}
	r.groups[env.ID] = &trajGroup{start: now, recs: []trajPending{pd}}
}

// Host records a message the host sends; a reply completes its request's group.
func (r *Recorder) Host(pk *wire.Packet) {
	now := time.Now()
	typ := pk.Type
	if typ == "" && pk.Msg != nil {
		typ = pk.Msg.MessageType()
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
	if r.skip[pk.ReqID] {
		if kind != "event" {
			delete(r.skip, pk.ReqID)
		}
		return
	}
	line, err := wire.Encode(&pk.Envelope, pk.Msg)
	if err != nil {
		return
	}
	rec := trajPending{dir: "host", kind: kind, typ: typ, line: line, at: now}
	g := r.groups[pk.ReqID]
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
		delete(r.groups, pk.ReqID)
		r.flushLocked(g.recs)
	}
}

// Close writes the groups of requests that were never answered (the
// session ended under them). The kernel calls it before it forgets the
// session's secrets: they redact the records.
func (r *Recorder) Close() {
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
func (r *Recorder) flushLocked(recs []trajPending) {
	p := r.p
	max := p.set.Trajectories.MaxRecordsPerSession
	if max == 0 {
		max = DefaultMaxTrajectoryRecords
	}
	secrets := p.secrets(r.s)
	secrets = append(secrets, Secret{"the session id", r.s.ID()})
	owner := ownerKey(r.s.ID())
	rows := make([]trajRow, 0, len(recs))
	for _, pd := range recs {
		if r.seq >= int64(max) {
			if !r.full {
				r.full = true
				p.log.Warn("trajectory: the session reached server.trajectories.max_records_per_session; later records are dropped", "session", r.s.Handle(), "max", max)
			}
			return
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(pd.line))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			continue
		}
		redact(m, secrets)
		rec := TrajectoryRecord{Session: r.s.Handle(), Seq: r.seq, Dir: pd.dir, Kind: pd.kind, Type: pd.typ,
			TS: float64(pd.at.UnixMicro()) / 1e6, DurationMS: pd.dur, Message: m}
		data, err := json.Marshal(rec)
		if err != nil {
			continue
		}
		r.seq++
		rows = append(rows, trajRow{owner: owner, handle: r.s.Handle(), tenant: r.s.Tenant(), seq: rec.Seq, data: data, at: pd.at})
	}
	p.traj.add(rows)
}

// redact replaces, in place, the values of bearer fields and every
// occurrence of a secret in any string of v.
func redact(v any, secrets []Secret) any {
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
			if s.Value != "" && strings.Contains(x, s.Value) {
				x = strings.ReplaceAll(x, s.Value, redactedValue)
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
	owner, handle, tenant string
	seq                   int64
	data                  []byte
	at                    time.Time
}

// trajWriter writes records to the store in batches from one goroutine,
// off the session's path; close writes what is queued.
type trajWriter struct {
	p *Keeper
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

func (p *Keeper) startTrajectories() {
	w := &trajWriter{p: p, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	p.traj = w
	if p.store == nil {
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
		client := w.p.store.Client
		bulk := make([]*ent.TrajectoryRecordCreate, len(rows))
		for i, r := range rows {
			bulk[i] = client.TrajectoryRecord.Create().SetOwner(r.owner).SetHandle(r.handle).
				SetSeq(r.seq).SetData(r.data).SetCreatedAt(r.at).SetTenant(r.tenant)
		}
		if err := client.TrajectoryRecord.CreateBulk(bulk...).Exec(ctx); err != nil {
			w.p.log.Error("trajectory: writing records failed; they are lost", "records", len(rows), "err", err)
		}
		cancel()
	}
}

// retain drops records older than server.trajectories.max_age.
func (w *trajWriter) retain() {
	age := w.p.set.Trajectories.MaxAge
	if age <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := w.p.store.Client.TrajectoryRecord.Delete().Where(trajectoryrecord.CreatedAtLT(time.Now().Add(-age))).Exec(ctx)
	if err != nil {
		w.p.log.Warn("trajectory: retention failed", "err", err)
		return
	}
	if n > 0 {
		w.p.log.Info("trajectory: records past server.trajectories.max_age dropped", "records", n)
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
