package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/server/httpapi"
)

// BenchmarkExchangeHandler is the server's side of a single exchange
// without the network: POST /send handed to the handler in the process, its
// answer written to a discarding ResponseWriter, beside the floor's handler
// (the POST's body as its answer). With the connection's reading and
// writing out of the figure, what is left over the floor is aep's own work
// per request, steadier to compare than round trips (docs/PERFORMANCE.md).
func BenchmarkExchangeHandler(b *testing.B) {
	run := func(b *testing.B, hd http.Handler, sid string) {
		w := &discardWriter{h: http.Header{}}
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			id := "r" + strconv.Itoa(i)
			line := benchLine(id)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/send", strings.NewReader(line))
			req.Header = http.Header{"X-Session-Id": {sid}, "Content-Type": {"text/plain"}, "Accept": {"application/json"}}
			req.Host = "127.0.0.1:8765"
			clear(w.h)
			w.status, w.n, w.last = 0, 0, w.last[:0]
			hd.ServeHTTP(w, req)
			if w.status != http.StatusOK || !bytes.Contains(w.last, []byte(id)) {
				b.Fatalf("send: %d %s", w.status, w.last)
			}
		}
	}
	b.Run("impl=exchange-floor", func(b *testing.B) {
		run(b, exchangeFloor, "floor")
	})
	b.Run("impl=exchange-aep", func(b *testing.B) {
		hd := httpapi.Handler(newHost(b, nil), httpapi.Options{})
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://127.0.0.1/session", nil))
		_, after, _ := bytes.Cut(rec.Body.Bytes(), []byte(`"session_id":"`))
		sid, _, _ := bytes.Cut(after, []byte(`"`))
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/send", strings.NewReader(handshakeLine("h")))
		req.Header.Set("X-Session-Id", string(sid))
		req.Header.Set("Accept", "application/json")
		rec = httptest.NewRecorder()
		hd.ServeHTTP(rec, req)
		if !bytes.Contains(rec.Body.Bytes(), []byte(`"ok":true`)) {
			b.Fatalf("handshake: %s", rec.Body.Bytes())
		}
		run(b, hd, string(sid))
	})
}

// discardWriter is a ResponseWriter that keeps only the status and the last
// write, without a connection under it.
type discardWriter struct {
	h      http.Header
	status int
	n      int
	last   []byte
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	if len(p) > 1 {
		w.last = append(w.last[:0], p...)
	}
	return len(p), nil
}

// The deadlines a connection takes, so that the transport's own calls of
// them are measured as on a real connection (without a timer under them).
func (w *discardWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }
