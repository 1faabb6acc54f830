package mcpface

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/propagation"
)

// httpSession is one MCP session of the 2025-11-25 (and older) revisions:
// minted by initialize, named by Mcp-Session-Id, backed by one aep session.
type httpSession struct {
	id string
	b  *backend
	t  *mcpserver.StreamableHTTPServer
}

// idManager gives mcp-go the one id of its session and answers for the
// face's map, so a DELETE or the aep session's end forgets it everywhere.
type idManager struct {
	f  *Face
	id string
}

func (m *idManager) Generate() string { return m.id }

func (m *idManager) Validate(id string) (bool, error) {
	m.f.mu.Lock()
	_, ok := m.f.sessions[id]
	m.f.mu.Unlock()
	if !ok || id != m.id {
		return false, errors.New("unknown MCP session")
	}
	return false, nil
}

func (m *idManager) Terminate(id string) (bool, error) {
	m.f.drop(id)
	return false, nil
}

// ServeHTTP is the streamable HTTP endpoint (mounted at /mcp by `aep
// serve`, behind the HTTP transport's Origin, Host and body-size checks).
//
// The shared token is the bearer token of every request. A request with
// Mcp-Session-Id goes to that session if the token is the one it was opened
// with (else 404, as for an unknown id: nothing tells a guesser that the id
// exists). An initialize opens a new session. A request of the stateless
// 2026-07-28 revision, which has no sessions, is served by an aep session
// of its own that ends with the request.
func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.h.Tracing() && r.Header.Get("Traceparent") != "" {
		// The MCP client's trace: the aep requests this MCP request makes
		// carry it (the Go client sets their traceparent from the context),
		// so their spans join it (docs/operating.md, Traces).
		r = r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	}
	token, ok := bearer(r)
	if !ok {
		unauthorized(w, "no token: send the host's shared token (server.auth_token or AEP_AUTH_TOKEN) as Authorization: Bearer <token>; this server does not use OAuth")
		return
	}
	if r.Method == http.MethodGet {
		// No standalone stream: mcp-go hands a session's notifications to
		// whichever of its open streams reads them first, so with a GET
		// stream open a call's progress could travel beside its POST and
		// arrive after the result, when clients drop it. aep sends nothing
		// outside a request (spec §6), so every notification has a POST
		// stream to go on. MCP allows a server to answer 405 here.
		w.Header().Set("Allow", "POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "no standalone event stream: notifications come on each request's own stream")
		return
	}
	if id := r.Header.Get(mcpserver.HeaderKeySessionID); id != "" {
		f.mu.Lock()
		s := f.sessions[id]
		f.mu.Unlock()
		if s == nil || !s.b.tokenMatches(token) {
			writeError(w, http.StatusNotFound, "not_found", "no such MCP session; initialize a new one")
			return
		}
		s.t.ServeHTTP(s.b.delivery.writer(w, r), r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "without Mcp-Session-Id only POST is served")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "the body could not be read")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var peek struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(body, &peek)
	modern := mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion))
	addr := remoteAddr(r)
	if peek.Method == string(mcp.MethodInitialize) && !modern {
		s, err := f.openSession(r.Context(), token, addr)
		if err != nil {
			f.refuse(w, err)
			return
		}
		s.t.ServeHTTP(s.b.delivery.writer(w, r), r)
		return
	}
	b, err := f.open(r.Context(), token, addr)
	if err != nil {
		f.refuse(w, err)
		return
	}
	defer b.close()
	f.transport(b, nil).ServeHTTP(b.delivery.writer(w, r), r)
}

// transport is mcp-go's streamable HTTP server over b. mcp-go's own DNS
// rebinding check stays on; aep's Origin and Host allow-list runs before it.
func (f *Face) transport(b *backend, ids mcpserver.SessionIdManager) *mcpserver.StreamableHTTPServer {
	opts := []mcpserver.StreamableHTTPOption{mcpserver.WithStreamableHTTPLogger(f.log)}
	if ids != nil {
		opts = append(opts, mcpserver.WithSessionIdManager(ids))
	}
	return mcpserver.NewStreamableHTTPServer(b.srv, opts...)
}

// openSession opens a legacy session and registers it under a fresh id.
// The session is forgotten when its aep session ends (idle expiry, host
// shutdown), so the client's next request gets 404 and reinitializes.
func (f *Face) openSession(ctx context.Context, token string, addr netip.Addr) (*httpSession, error) {
	b, err := f.open(ctx, token, addr)
	if err != nil {
		return nil, err
	}
	s := &httpSession{id: rand.Text(), b: b}
	s.t = f.transport(b, &idManager{f: f, id: s.id})
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		b.close()
		return nil, errors.New("mcp face closed")
	}
	f.sessions[s.id] = s
	f.mu.Unlock()
	go func() {
		<-b.c.Done()
		f.drop(s.id)
	}()
	return s, nil
}

// drop forgets a legacy session and ends its aep session.
func (f *Face) drop(id string) {
	f.mu.Lock()
	s := f.sessions[id]
	delete(f.sessions, id)
	f.mu.Unlock()
	if s != nil {
		s.b.close()
	}
}

// Close ends every MCP session of the face and refuses new ones.
func (f *Face) Close() {
	f.mu.Lock()
	f.closed = true
	ids := make([]string, 0, len(f.sessions))
	for id := range f.sessions {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	for _, id := range ids {
		f.drop(id)
	}
}

// refuse answers a request whose aep session could not be opened: 401 for
// a token the kernel refused, 503 otherwise (host closing or full).
func (f *Face) refuse(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrUnauthorized) {
		unauthorized(w, "the bearer token is wrong: it must be the host's shared token (server.auth_token or AEP_AUTH_TOKEN); this server does not use OAuth")
		return
	}
	f.log.Warn("mcp face: no session", "err", err)
	writeError(w, http.StatusServiceUnavailable, "unavailable", "no aep session could be opened")
}

// unauthorized answers 401 with the reason in the body. The challenge names
// no resource_metadata and the host serves no /.well-known/oauth-* document:
// the shared token is not an OAuth token, and an MCP client that found
// OAuth metadata would start an authorization flow no one can finish
// instead of showing why it was refused (docs/mcp.md).
func unauthorized(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="aep", error="invalid_token"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", message)
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	t := strings.TrimSpace(h[len(p):])
	return t, t != ""
}

// remoteAddr is the peer's address. Behind trusted proxies the HTTP
// transport's guard has decided the client's address already; the face
// sees only the peer, which still bounds failed handshakes per peer.
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(map[string]any{"ok": false, "error": code, "message": message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
