package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/aephost/aep/server"
)

// The network edge of the transport (docs/SECURITY.md, The edge): who the
// client is (its address, for the handshake throttle), and how long a
// connection may take over each part of a request.

// clientAddrKey is the request context key of the client's address, set
// by the guard on the routes that open sessions (POST /session, GET /ws).
type clientAddrKey struct{}

// proxyConnKey is the connection context key of a *proxyConn.
type proxyConnKey struct{}

// clientAddr decides the client's address of r. The peer's own address
// counts, unless the peer is a trusted proxy (server.trusted_proxies): then
// the address its PROXY protocol header gave (server.proxy_protocol), or
// else the nearest address in X-Forwarded-For that is not itself a trusted
// proxy. Nobody else's word is taken, so a client cannot choose its own
// throttle budget by sending a header.
func clientAddr(r *http.Request, trusted server.TrustedProxies) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	addr := peer.Addr().Unmap()
	if !trusted.Contains(addr) {
		return addr
	}
	if pc, ok := r.Context().Value(proxyConnKey{}).(*proxyConn); ok {
		if a := pc.source(); a.IsValid() {
			return a
		}
		return addr
	}
	// The rightmost entries were appended by our own proxies; the first
	// one from the right that is not a trusted proxy is the client.
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return addr // a garbled chain: trust none of it
			}
			a = a.Unmap()
			if !trusted.Contains(a) {
				return a
			}
			addr = a
		}
	}
	return addr
}

// SessionOptions passes the client's address of a request to the session
// it opens, for the handshake throttle: the address the guard decided
// (server.trusted_proxies) for the routes that open sessions, a [Face]'s
// included.
func SessionOptions(ctx context.Context) []server.SessionOption {
	if addr, ok := ctx.Value(clientAddrKey{}).(netip.Addr); ok && addr.IsValid() {
		return []server.SessionOption{server.WithRemoteAddr(addr)}
	}
	return nil
}

// deadlines applies the per-route deadlines of server.transport.http on a
// request: a body must arrive within read_body_timeout, and every write of
// an answer is given write_timeout (respWriter). No route has a deadline
// for its answer as a whole: a stream (GET /stream, POST /send in
// single-exchange mode) is as long as its session or request, so a reader
// that stops reading is dropped while a long answer that is read lives on.
// GET /ws gets none here: its connection is hijacked, where a deadline set
// now would outlive the request, and the WebSocket layer pings its peer
// instead (ws.go).
func (g *guard) deadlines(w *respWriter, r *http.Request) {
	if r.URL.Path == "/ws" {
		return
	}
	c := g.a.httpCfg
	// Held in w, which every request has anyway: no allocation of its own.
	w.rc, w.perWrite = *http.NewResponseController(w.ResponseWriter), time.Duration(c.WriteTimeout)
	// One reading of the clock for both deadlines. The first write's is
	// set now rather than at that write: it is moved there when less
	// than nine tenths of it is left (respWriter.extend), as before.
	now := time.Now()
	if w.perWrite > 0 {
		w.deadline = now.Add(w.perWrite)
		_ = w.rc.SetWriteDeadline(w.deadline)
	}
	if r.Method == http.MethodPost && r.Body != nil {
		// Errors mean the connection cannot take deadlines (a test
		// conn); the server-wide idle and header timeouts still hold.
		if w.rc.SetReadDeadline(now.Add(time.Duration(c.ReadBodyTimeout))) == nil {
			w.body = bodyDeadline{ReadCloser: r.Body, rc: &w.rc}
			r.Body = &w.body
		}
	}
}

// bodyDeadline lifts the body's read deadline once the body is read: the
// server then reads the connection in the background to notice a client
// that went away, and a deadline passing there would cancel a request that
// is still waiting for its answer (single-exchange POST /send).
type bodyDeadline struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// proxyListener reads the PROXY protocol header (v1 or v2) of connections
// from trusted proxies (server.proxy_protocol). The header is read by the
// connection's first Read, on the server's goroutine for that connection
// and under its header deadline, never in Accept.
type proxyListener struct {
	net.Listener
	trusted server.TrustedProxies
}

func (l *proxyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	peer, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil || !l.trusted.Contains(peer.Addr()) {
		return c, nil
	}
	return &proxyConn{Conn: c, br: bufio.NewReaderSize(c, 256)}, nil
}

// proxyConn is a connection from a trusted proxy; its first bytes must be a
// PROXY protocol header, else the connection is refused.
type proxyConn struct {
	net.Conn
	br   *bufio.Reader
	once sync.Once
	err  error

	mu  sync.Mutex
	src netip.Addr
}

func (c *proxyConn) Read(p []byte) (int, error) {
	c.once.Do(func() {
		src, err := readProxyHeader(c.br)
		if err != nil {
			c.err = fmt.Errorf("PROXY protocol header from trusted proxy %s: %w", c.Conn.RemoteAddr(), err)
			return
		}
		c.mu.Lock()
		c.src = src
		c.mu.Unlock()
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.br.Read(p)
}

// source returns the client address the header named (invalid for a LOCAL
// header, a health check of the proxy itself).
func (c *proxyConn) source() netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.src
}

var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// errNoProxyHeader is a trusted proxy's connection that began otherwise.
var errNoProxyHeader = errors.New("missing or malformed header")

// readProxyHeader reads a PROXY protocol header, version 1 (text) or 2
// (binary), and returns the source address it names.
func readProxyHeader(br *bufio.Reader) (netip.Addr, error) {
	head, err := br.Peek(12)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoProxyHeader, err)
	}
	if bytes.Equal(head, proxyV2Sig) {
		return readProxyV2(br)
	}
	if !bytes.HasPrefix(head, []byte("PROXY ")) {
		return netip.Addr{}, errNoProxyHeader
	}
	// v1: "PROXY TCP4 src dst sport dport\r\n", at most 107 bytes.
	line, err := br.ReadSlice('\n')
	if err != nil || len(line) > 107 || !bytes.HasSuffix(line, []byte("\r\n")) {
		return netip.Addr{}, errNoProxyHeader
	}
	f := strings.Fields(string(line[:len(line)-2]))
	if len(f) >= 2 && f[1] == "UNKNOWN" {
		return netip.Addr{}, nil
	}
	if len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6") {
		return netip.Addr{}, errNoProxyHeader
	}
	a, err := netip.ParseAddr(f[2])
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoProxyHeader, err)
	}
	return a.Unmap(), nil
}

func readProxyV2(br *bufio.Reader) (netip.Addr, error) {
	var h [16]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoProxyHeader, err)
	}
	n := int(binary.BigEndian.Uint16(h[14:16]))
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoProxyHeader, err)
	}
	if h[12]>>4 != 2 {
		return netip.Addr{}, errNoProxyHeader
	}
	if h[12]&0xf == 0 { // LOCAL: the proxy speaking for itself
		return netip.Addr{}, nil
	}
	switch h[13] >> 4 {
	case 1: // AF_INET
		if n < 12 {
			return netip.Addr{}, errNoProxyHeader
		}
		return netip.AddrFrom4([4]byte(body[:4])), nil
	case 2: // AF_INET6
		if n < 36 {
			return netip.Addr{}, errNoProxyHeader
		}
		return netip.AddrFrom16([16]byte(body[:16])).Unmap(), nil
	}
	return netip.Addr{}, nil // AF_UNSPEC or AF_UNIX: no address to use
}

// connContext hands a proxyConn to the requests it carries.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*proxyConn); ok {
		return context.WithValue(ctx, proxyConnKey{}, pc)
	}
	return ctx
}
