package mcpface

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// deliveryWait bounds how long a tool call's result waits for its progress
// and log notifications to reach the wire.
const deliveryWait = 2 * time.Second

// progressLedger makes a call's progress and log notifications reach the
// HTTP response before its result does.
//
// mcp-go's streamable HTTP server hands notifications to a forwarder
// goroutine and, once the handler returns, closes the request's stream; a
// notification the forwarder has taken off its channel but not yet written
// when that happens is dropped. So the face counts the progress
// notifications it queued and those written to any of the session's HTTP
// responses, and a tool call returns only when the two agree (or after
// deliveryWait, or when the client has gone). Over stdio, where mcp-go
// writes notifications in order on the one stream, there is nothing to wait
// for and the ledger is off.
type progressLedger struct {
	on      atomic.Bool
	sent    atomic.Int64
	written atomic.Int64
	wrote   chan struct{} // a token after each write, so a waiter wakes
}

func newProgressLedger() *progressLedger {
	return &progressLedger{wrote: make(chan struct{}, 1)}
}

// queued records one notification handed to mcp-go.
func (l *progressLedger) queued() {
	if l.on.Load() {
		l.sent.Add(1)
	}
}

// settle waits until every queued notification has been written.
func (l *progressLedger) settle(ctx context.Context) {
	if !l.on.Load() || l.written.Load() >= l.sent.Load() {
		return
	}
	timer := time.NewTimer(deliveryWait)
	defer timer.Stop()
	for l.written.Load() < l.sent.Load() {
		select {
		case <-l.wrote:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// writer wraps w so that progress and log notifications written to it are
// counted.
// A request whose client does not accept an event stream gets no
// notifications from mcp-go, so it is not counted and turns nothing on.
func (l *progressLedger) writer(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return w
	}
	l.on.Store(true)
	return &countingWriter{ResponseWriter: w, l: l}
}

var (
	progressMethod = []byte(`"method":"notifications/progress"`)
	logMethod      = []byte(`"method":"notifications/message"`)
)

// countingWriter counts the SSE events of progress and log notifications:
// mcp-go writes each event with one Write, starting "event: message\ndata: ".
type countingWriter struct {
	http.ResponseWriter
	l *progressLedger
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if err == nil && bytes.HasPrefix(p, []byte("event: ")) && (bytes.Contains(p, progressMethod) || bytes.Contains(p, logMethod)) {
		w.l.written.Add(1)
		select {
		case w.l.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
