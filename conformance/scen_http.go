package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The HTTP transport's edge (openapi.yaml): a foreign Origin or Host is
// 403 on every route, an oversized body 413 before any session sees it,
// a missing or unknown session 400 or 404.

func (k *kit) transportScenarios() []scenario {
	return []scenario{
		{[]string{CheckHTTPOrigin, CheckHTTPHost, CheckHTTPSize, CheckHTTPSession}, k.httpEdge},
	}
}

// foreignOrigin and foreignHost name a site no host allows: the .invalid
// top-level domain is reserved (RFC 2606).
const (
	foreignOrigin = "http://aep-conformance.invalid"
	foreignHost   = "aep-conformance.invalid"
)

func (k *kit) httpEdge(ctx context.Context) error {
	checks := []string{CheckHTTPOrigin, CheckHTTPHost, CheckHTTPSize, CheckHTTPSession}
	if k.target.HTTP == "" {
		k.skip("needs "+needHTTP, checks...)
		return nil
	}
	k.transportBranch(k.target.Name)
	base := k.target.HTTP
	client := k.target.Client
	if client == nil {
		client = &http.Client{}
	}
	do := func(method, path, sid string, body []byte, edit func(*http.Request)) (int, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		if sid != "" {
			req.Header.Set("X-Session-Id", sid)
		}
		if body != nil {
			req.Header.Set("Content-Type", "text/plain")
		}
		if edit != nil {
			edit(req)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusSwitchingProtocols || resp.StatusCode < 300 && path == "/stream" {
			return resp.StatusCode, nil // a stream or a WebSocket that opened: do not read it
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, nil
	}
	status := func(check, what string, want int, code int, err error) {
		if err != nil {
			k.fail(check, "%s: %v", what, err)
			return
		}
		k.expect(check, code == want, "%s: status %d, want %d", what, code, want)
	}
	newSession := func(check string) string {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sid, err := createSession(ctx, base, client)
		if err != nil {
			k.fail(check, "%v", err)
		}
		return sid
	}
	ping := []byte(`{"type":"ping","id":"aep-conformance-edge","proto":"1.0","ts":1}`)

	// Origin: on every route.
	origin := func(r *http.Request) { r.Header.Set("Origin", foreignOrigin) }
	code, err := do(http.MethodPost, "/session", "", nil, origin)
	status(CheckHTTPOrigin, "POST /session with Origin "+foreignOrigin, http.StatusForbidden, code, err)
	if sid := newSession(CheckHTTPOrigin); sid != "" {
		code, err = do(http.MethodPost, "/send", sid, ping, origin)
		status(CheckHTTPOrigin, "POST /send with Origin "+foreignOrigin, http.StatusForbidden, code, err)
		code, err = do(http.MethodGet, "/stream", sid, nil, func(r *http.Request) { origin(r); r.Header.Set("Accept", "text/event-stream") })
		status(CheckHTTPOrigin, "GET /stream with Origin "+foreignOrigin, http.StatusForbidden, code, err)
	}
	code, err = do(http.MethodGet, "/ws", "", nil, func(r *http.Request) {
		origin(r)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "ZGVmaW5pdGVseSByYW5kb20=")
	})
	status(CheckHTTPOrigin, "GET /ws (upgrade) with Origin "+foreignOrigin, http.StatusForbidden, code, err)

	// Host.
	code, err = do(http.MethodPost, "/session", "", nil, func(r *http.Request) { r.Host = foreignHost })
	status(CheckHTTPHost, "POST /session with Host "+foreignHost, http.StatusForbidden, code, err)

	// Session header.
	code, err = do(http.MethodPost, "/send", "", ping, nil)
	status(CheckHTTPSession, "POST /send without X-Session-Id", http.StatusBadRequest, code, err)
	code, err = do(http.MethodPost, "/send", "aep-conformance-no-such-session", ping, nil)
	status(CheckHTTPSession, "POST /send with an unknown X-Session-Id", http.StatusNotFound, code, err)

	// Size: over the limit is 413, and the session that sent it goes on.
	limit := k.maxMessage()
	big := fmt.Appendf(nil, `{"type":"ping","id":"aep-conformance-big","proto":"1.0","ts":1,"pad":%q}`, bytes.Repeat([]byte("x"), int(limit)))
	if k.target.Name == "websocket" {
		if sid := newSession(CheckHTTPSize); sid != "" {
			code, err = do(http.MethodPost, "/send", sid, big, nil)
			status(CheckHTTPSize, fmt.Sprintf("POST /send of %d bytes (the limit is %d)", len(big), limit), http.StatusRequestEntityTooLarge, code, err)
		}
		return nil
	}
	s := k.sessionFor(ctx, CheckHTTPSize, "size", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	code, err = do(http.MethodPost, "/send", s.id, big, nil)
	status(CheckHTTPSize, fmt.Sprintf("POST /send of %d bytes (the limit is %d)", len(big), limit), http.StatusRequestEntityTooLarge, code, err)
	k.expect(CheckHTTPSize, s.call(ctx, "ping", nil).is("pong"), "the session does not go on after a body over the limit")
	return nil
}
