package mutate

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
)

// Proxy serves a reverse proxy to the HTTP transport at upstream (a base
// URL such as http://127.0.0.1:8765) on a loopback port, with its handler
// wrapped by mu.HTTP when set: the host as a client would meet it behind a
// broken edge. Server-sent events are flushed as they come and WebSocket
// upgrades pass through, so every HTTP transport works through it; wrap
// the target built on the returned base with [Wrap] for message bugs as
// well. stop closes the proxy.
func Proxy(upstream string, mu Mutant) (base string, stop func(), err error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", nil, fmt.Errorf("mutate: upstream %q: %w", upstream, err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = nil
	var h http.Handler = rp
	if mu.HTTP != nil {
		h = mu.HTTP(h)
	}
	srv := httptest.NewServer(h)
	return srv.URL, srv.Close, nil
}

// Discard answers a request itself with status and drops its body, as a
// host that never looked at it would.
func Discard(w http.ResponseWriter, r *http.Request, status int) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"ok":true}`)
}
