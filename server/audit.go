package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/aephost/aep/wire"
)

// AuditRecord is one handler invocation (spec §1.7; docs/DECISIONS.md, Wire: fields of the
// audit line). It holds sizes and codes, never message bodies, so secrets
// cannot reach the audit log through it. Every field but declined is written
// on every line, empty or not, so each line has the same documented shape.
type AuditRecord struct {
	TS        time.Time `json:"ts"`
	SessionID string    `json:"session_id"`
	// Tenant is the session's tenant (server.tenants; "default" for
	// server.auth_token's), never its secret.
	Tenant        string  `json:"tenant"`
	ReqID         string  `json:"req_id"`
	CorrelationID string  `json:"correlation_id"`
	Type          string  `json:"type"`
	Capability    string  `json:"capability"`
	Plugin        string  `json:"plugin"`
	Success       bool    `json:"success"`
	Declined      bool    `json:"declined,omitempty"`
	ErrorCode     string  `json:"error_code"`
	DurationMS    float64 `json:"duration_ms"`
	InputBytes    int     `json:"input_bytes"`
	OutputBytes   int     `json:"output_bytes"`

	// Target is what the request acts on, for types whose schema names it
	// (x-aep-audit-target: tool/call's tool_name); written only when set.
	Target string `json:"target,omitempty"`

	// Actor is who acted when it was not an agent with its tenant's
	// secret: "operator" for an admin API action (type admin/…) and for
	// every request of a session the operator opened (admin.go); written
	// only when set.
	Actor string `json:"actor,omitempty"`
}

// Auditor receives audit records. Record must not block and must not fail
// the request: auditing is best-effort (spec §1.7).
type Auditor interface {
	Record(r AuditRecord)
}

type nopAuditor struct{}

func (nopAuditor) Record(AuditRecord) {}

// record hands r to the auditor and to in-process subscribers.
func (h *Host) record(r AuditRecord) {
	h.auditor.Record(r)
	h.notify(r)
}

// notify hands r to the in-process subscribers.
func (h *Host) notify(r AuditRecord) {
	h.subsMu.RLock()
	for _, f := range h.subs {
		f(r)
	}
	h.subsMu.RUnlock()
}

// SubscribeAudit calls f for every audit record, in process (the learn
// capability's stats use it instead of re-reading files). f must be fast and
// must not block. The returned function unsubscribes.
//
// The record of the plugin that answered a request reaches f before the
// reply is sent, so a request the agent sends after reading the reply (a
// learn/feedback naming the call) finds it; its OutputBytes is therefore 0
// here (the audit file has the reply's size).
func (h *Host) SubscribeAudit(f func(AuditRecord)) (unsubscribe func()) {
	h.subsMu.Lock()
	h.subSeq++
	id := h.subSeq
	h.subs[id] = f
	h.subsMu.Unlock()
	return func() {
		h.subsMu.Lock()
		delete(h.subs, id)
		h.subsMu.Unlock()
	}
}

// FileAuditor writes audit records as JSON lines, asynchronously and in
// batches, to a file rotated by lumberjack (spec §8: 10 MB, 5 backups).
type FileAuditor struct {
	ch       chan AuditRecord
	w        io.WriteCloser
	log      *slog.Logger
	dropped  atomic.Int64
	written  atomic.Int64
	failures atomic.Int64
	warnOnce sync.Once
	done     chan struct{}
	closing  sync.Once
	// closeMu orders Record against Close: a session worker may still
	// record its last call while the host closes, and a send on the closed
	// channel would panic.
	closeMu sync.RWMutex
	closed  bool
	// pressure wakes the writer early when the queue is half full; quit
	// tells it the queue is closed.
	pressure chan struct{}
	quit     chan struct{}
}

// auditFlushEvery is how often the writer drains the queue. The writer does
// not park on the queue itself: a parked receiver would be woken by every
// record, a futex wake on the request's path; a buffered send without a
// waiting receiver wakes no one.
const auditFlushEvery = 20 * time.Millisecond

// NewFileAuditor starts an auditor writing to path.
func NewFileAuditor(path string, maxSizeMB, maxBackups int, log *slog.Logger) *FileAuditor {
	return newAuditor(&wholeLines{Logger: &lumberjack.Logger{Filename: path, MaxSize: maxSizeMB, MaxBackups: maxBackups}, path: path}, log)
}

// wholeLines writes a batch of lines whole or not at all: a write cut
// short (a full disk) leaves part of a line at the end of the file, which
// is taken back, so a reader never meets a torn line. The bytes a write
// added are at the file's end whatever lumberjack did before it (a
// rotation starts the new file empty), so the file is cut by that many,
// and closed: lumberjack writes a file it created without O_APPEND, so the
// next write must reopen it (in append mode) rather than write at the old
// offset and leave a hole of zero bytes.
type wholeLines struct {
	*lumberjack.Logger
	path string
}

func (w *wholeLines) Write(b []byte) (int, error) {
	n, err := w.Logger.Write(b)
	if err != nil && n > 0 && n < len(b) {
		if fi, serr := os.Stat(w.path); serr == nil && fi.Size() >= int64(n) {
			if terr := os.Truncate(w.path, fi.Size()-int64(n)); terr == nil {
				_ = w.Logger.Close()
				return 0, err
			}
		}
	}
	return n, err
}

// newAuditor starts an auditor writing JSON lines to w.
func newAuditor(w io.WriteCloser, log *slog.Logger) *FileAuditor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &FileAuditor{ch: make(chan AuditRecord, 8192), w: w, log: log, done: make(chan struct{}),
		pressure: make(chan struct{}, 1), quit: make(chan struct{})}
	go a.loop()
	return a
}

// Record queues r; when the queue is full the record is dropped and counted,
// so a slow disk never slows a request.
func (a *FileAuditor) Record(r AuditRecord) {
	a.closeMu.RLock()
	defer a.closeMu.RUnlock()
	if a.closed {
		a.dropped.Add(1)
		return
	}
	select {
	case a.ch <- r:
		if len(a.ch) > cap(a.ch)/2 {
			select {
			case a.pressure <- struct{}{}:
			default:
			}
		}
	default:
		a.dropped.Add(1)
	}
}

// Dropped returns how many records were dropped because the queue was full.
func (a *FileAuditor) Dropped() int64 { return a.dropped.Load() }

// Written returns how many records reached the log.
func (a *FileAuditor) Written() int64 { return a.written.Load() }

// Failures returns how many batches failed to be written.
func (a *FileAuditor) Failures() int64 { return a.failures.Load() }

func (a *FileAuditor) loop() {
	defer close(a.done)
	t := time.NewTicker(auditFlushEvery)
	defer t.Stop()
	buf := make([]byte, 0, 64<<10)
	for {
		quit := false
		select {
		case <-t.C:
		case <-a.pressure:
		case <-a.quit:
			quit = true
		}
		a.drain(&buf)
		if quit {
			return
		}
	}
}

// drain writes every queued record, in batches of about 60 KiB.
func (a *FileAuditor) drain(buf *[]byte) {
	for {
		b := (*buf)[:0]
		n := int64(0)
	batch:
		for len(b) < 60<<10 {
			select {
			case r, ok := <-a.ch:
				if !ok {
					break batch
				}
				b = appendRecord(b, r)
				n++
			default:
				break batch
			}
		}
		*buf = b
		if len(b) == 0 {
			return
		}
		if _, err := a.w.Write(b); err != nil {
			a.failures.Add(1)
			a.warnOnce.Do(func() { a.log.Warn("audit write failed; further failures are counted, not logged", "err", err) })
		} else {
			a.written.Add(n)
		}
	}
}

// appendRecord writes r as one JSON line, field for field what
// encoding/json would write for AuditRecord's tags, without reflection: the
// audit writer runs beside every request (TestAppendRecordMatchesJSON).
func appendRecord(buf []byte, r AuditRecord) []byte {
	buf = append(buf, `{"ts":"`...)
	buf = r.TS.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","session_id":`...)
	buf = wire.AppendString(buf, r.SessionID)
	buf = append(buf, `,"tenant":`...)
	buf = wire.AppendString(buf, r.Tenant)
	buf = append(buf, `,"req_id":`...)
	buf = wire.AppendString(buf, r.ReqID)
	buf = append(buf, `,"correlation_id":`...)
	buf = wire.AppendString(buf, r.CorrelationID)
	buf = append(buf, `,"type":`...)
	buf = wire.AppendString(buf, r.Type)
	buf = append(buf, `,"capability":`...)
	buf = wire.AppendString(buf, r.Capability)
	buf = append(buf, `,"plugin":`...)
	buf = wire.AppendString(buf, r.Plugin)
	buf = append(buf, `,"success":`...)
	buf = strconv.AppendBool(buf, r.Success)
	if r.Declined {
		buf = append(buf, `,"declined":true`...)
	}
	buf = append(buf, `,"error_code":`...)
	buf = wire.AppendString(buf, r.ErrorCode)
	buf = append(buf, `,"duration_ms":`...)
	buf = strconv.AppendFloat(buf, r.DurationMS, 'f', -1, 64)
	buf = append(buf, `,"input_bytes":`...)
	buf = strconv.AppendInt(buf, int64(r.InputBytes), 10)
	buf = append(buf, `,"output_bytes":`...)
	buf = strconv.AppendInt(buf, int64(r.OutputBytes), 10)
	if r.Target != "" {
		buf = append(buf, `,"target":`...)
		buf = wire.AppendString(buf, r.Target)
	}
	if r.Actor != "" {
		buf = append(buf, `,"actor":`...)
		buf = wire.AppendString(buf, r.Actor)
	}
	return append(buf, "}\n"...)
}

// Close writes what is queued and closes the file.
func (a *FileAuditor) Close(ctx context.Context) error {
	a.closing.Do(func() {
		a.closeMu.Lock()
		a.closed = true
		close(a.ch)
		a.closeMu.Unlock()
		close(a.quit)
	})
	select {
	case <-a.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return a.w.Close()
}
