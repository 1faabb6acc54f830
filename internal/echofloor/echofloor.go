// Package echofloor serves the floors aep's transport benchmarks are
// measured beside: a bare WebSocket server that echoes each text frame,
// and a bare HTTP server that answers each POST with its body (the shape
// of a single exchange). They do no protocol work at all, so a client's
// round trip against them is the least its language, its WebSocket or HTTP
// library and the loopback allow; aep over the same transport is held to a
// ratio of it (docs/PERFORMANCE.md). The server benchmarks
// (server/httpapi) and the SDKs' benchmarks (sdk/python, sdk/typescript)
// share these floors, so their ratios are measured against the same thing.
package echofloor

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// WebSocket echoes every frame of a connection back as it came, with the
// same library and options as aep's GET /ws (coder/websocket, no
// compression, no read limit).
func WebSocket() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(-1)
		for {
			typ, d, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, d); err != nil {
				return
			}
		}
	})
}

// Exchange answers every request with 200 and its body plus a newline, as
// application/json: a single exchange (POST /send with Accept:
// application/json) without the protocol.
func Exchange() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(body, '\n'))
	})
}

// WebSocketURL serves [WebSocket] on a loopback port until tb ends and
// returns its ws:// URL.
func WebSocketURL(tb testing.TB) string {
	return "ws" + strings.TrimPrefix(serve(tb, WebSocket()), "http")
}

// ExchangeURL serves [Exchange] on a loopback port until tb ends and
// returns its http:// base URL (any path answers, /send included).
func ExchangeURL(tb testing.TB) string {
	return serve(tb, Exchange())
}

func serve(tb testing.TB, h http.Handler) string {
	ts := httptest.NewServer(h)
	tb.Cleanup(ts.Close)
	return ts.URL
}
