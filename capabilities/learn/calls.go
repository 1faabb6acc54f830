package learn

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// callQueue is the capacity of the audit ingest queue; a record that finds
// it full is dropped and counted, since an audit subscriber must never
// block a request (server.Host.SubscribeAudit).
const callQueue = 8192

// ingest keeps the audited calls of components (records whose request names
// a target, such as tool/call's tool name) in the store. The audit callback
// only queues; one goroutine writes batches.
type ingest struct {
	db      *ent.Client
	log     *slog.Logger
	ch      chan server.AuditRecord
	flushes chan chan struct{}
	done    chan struct{}
	dropped atomic.Int64

	closeMu sync.RWMutex
	closed  bool
}

func newIngest(db *ent.Client, log *slog.Logger) *ingest {
	in := &ingest{db: db, log: log, ch: make(chan server.AuditRecord, callQueue), flushes: make(chan chan struct{}), done: make(chan struct{})}
	go in.loop()
	return in
}

// componentOf maps an audit record to the component it called: the kind is
// the namespace of the request type (tool/call/req → tool), the name its
// target. Records without a target (learn/*, env/*), declines and the
// kernel's fallback answer (no plugin ran: an unknown tool's UNKNOWN_TOOL)
// are no call of a component (docs/learn.md, Stats).
func componentOf(r server.AuditRecord) (kind, name string, ok bool) {
	if r.Target == "" || r.Declined || r.Plugin == "" {
		return "", "", false
	}
	return wire.NamespaceOf(r.Type), r.Target, true
}

// record is the audit subscriber: it must be fast and never block.
func (in *ingest) record(r server.AuditRecord) {
	if _, _, ok := componentOf(r); !ok {
		return
	}
	in.closeMu.RLock()
	defer in.closeMu.RUnlock()
	if in.closed {
		return
	}
	select {
	case in.ch <- r:
	default:
		in.dropped.Add(1)
	}
}

func (in *ingest) loop() {
	defer close(in.done)
	var batch []server.AuditRecord
	write := func() {
		if len(batch) == 0 {
			return
		}
		bulk := make([]*ent.LearnCallCreate, len(batch))
		for i, r := range batch {
			kind, name, _ := componentOf(r)
			bulk[i] = in.db.LearnCall.Create().SetTs(r.TS).SetSessionID(r.SessionID).SetReqID(r.ReqID).
				SetCorrelationID(r.CorrelationID).SetType(r.Type).SetKind(kind).SetName(name).
				SetSuccess(r.Success).SetErrorCode(r.ErrorCode).SetDurationMs(r.DurationMS).SetTenant(server.StorageTenant(r.Tenant))
		}
		// A background context: the write must finish even while the host
		// shuts down, or the last calls would be lost.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := in.db.LearnCall.CreateBulk(bulk...).Exec(ctx); err != nil {
			in.log.Warn("learn: storing audited calls failed", "calls", len(batch), "err", err)
		}
		batch = batch[:0]
	}
	drain := func() {
		for {
			select {
			case r, ok := <-in.ch:
				if !ok {
					return
				}
				batch = append(batch, r)
				if len(batch) >= 500 {
					write()
				}
			default:
				return
			}
		}
	}
	for {
		select {
		case r, ok := <-in.ch:
			if !ok {
				write()
				return
			}
			batch = append(batch, r)
			drain()
			write()
		case ack := <-in.flushes:
			drain()
			write()
			close(ack)
		}
	}
}

// flush returns once every record queued before the call is stored, so a
// stats request sees every call the subscriber has received.
func (in *ingest) flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case in.flushes <- ack:
	case <-in.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stores what is queued and stops the writer.
func (in *ingest) close() {
	in.closeMu.Lock()
	if !in.closed {
		in.closed = true
		close(in.ch)
	}
	in.closeMu.Unlock()
	<-in.done
}
