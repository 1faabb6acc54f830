package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Conn is one session's raw line exchange with a host under test: the
// conformance kit sees the exact bytes, never a decoded value.
type Conn interface {
	// Send writes one line (without its newline) to the host.
	Send(ctx context.Context, line []byte) error
	// Recv returns the next line the host sent, or an error when ctx ends
	// or the host closed the session.
	Recv(ctx context.Context) ([]byte, error)
	Close() error
}

// Dialer opens a new session with the host under test. Every check of the
// kit runs in sessions of its own.
type Dialer func(ctx context.Context) (Conn, error)

// Attacher reaches a session the host created for someone else to use — a
// subagent's child session, a fork — by its transport id
// (docs/DECISIONS.md, Transports: X-Session-Id on HTTP and WebSocket).
type Attacher func(ctx context.Context, sessionID string) (Conn, error)

// Target is a host under test as the kit reaches it: how to open a
// session, how to reach one by id, and, for the HTTP transports, the base
// URL whose edge rules (Origin, Host, sizes; openapi.yaml) the kit checks.
// The Stdio, HTTP, Exchange and WebSocket constructors build one per
// transport; a test may wrap Dial and Attach (conformance/mutate does).
type Target struct {
	// Name says which transport, for reports: stdio, http, exchange,
	// websocket.
	Name string
	Dial Dialer
	// Attach is nil where the transport cannot reach a session by id:
	// stdio serves one session per process. Checks that need it skip.
	Attach Attacher
	// HTTP is the base URL of the host's HTTP transport (no trailing
	// slash), empty when the kit does not reach the host over HTTP; the
	// http.* checks skip without it.
	HTTP string
	// Client makes the http.* checks' requests; nil is a default client.
	Client *http.Client
}

// StdioTarget runs command once per session (see [StdioDialer]).
func StdioTarget(command string, stderr io.Writer) Target {
	return Target{Name: "stdio", Dial: StdioDialer(command, stderr)}
}

// HTTPTarget is the HTTP+SSE transport at base (see [HTTPDialer]); a
// session is reached by id with GET /stream and POST /send carrying its
// X-Session-Id.
func HTTPTarget(base string, client *http.Client) Target {
	base = strings.TrimSuffix(base, "/")
	if client == nil {
		client = &http.Client{}
	}
	return Target{Name: "http", Dial: HTTPDialer(base, client), HTTP: base, Client: client,
		Attach: func(ctx context.Context, sid string) (Conn, error) { return openStream(ctx, base, client, sid) }}
}

// ExchangeTarget is the single-exchange mode of the HTTP transport at base
// (see [ExchangeDialer]).
func ExchangeTarget(base string, client *http.Client) Target {
	base = strings.TrimSuffix(base, "/")
	if client == nil {
		client = &http.Client{}
	}
	return Target{Name: "exchange", Dial: ExchangeDialer(base, client), HTTP: base, Client: client,
		Attach: func(ctx context.Context, sid string) (Conn, error) { return newExchangeConn(base, client, sid), nil }}
}

// WebSocketTarget is the WebSocket transport at url (ws://host/ws, see
// [WebSocketDialer]); a session is reached by id with the X-Session-Id
// header of the upgrade. The HTTP base for the edge checks is url's
// origin (ws → http, wss → https).
func WebSocketTarget(url string, header http.Header) Target {
	base := ""
	if rest, ok := strings.CutPrefix(url, "ws://"); ok {
		base = "http://" + rest
	} else if rest, ok := strings.CutPrefix(url, "wss://"); ok {
		base = "https://" + rest
	}
	if i := strings.Index(base, "://"); i >= 0 {
		if j := strings.IndexByte(base[i+3:], '/'); j >= 0 {
			base = base[:i+3+j]
		}
	}
	return Target{Name: "websocket", Dial: WebSocketDialer(url, header), HTTP: base, Client: &http.Client{},
		Attach: func(ctx context.Context, sid string) (Conn, error) {
			h := header.Clone()
			if h == nil {
				h = http.Header{}
			}
			h.Set("X-Session-Id", sid)
			return WebSocketDialer(url, h)(ctx)
		}}
}

// errClosed is returned by Recv once the host closed the session.
var errClosed = errors.New("conformance: the host closed the session")

// lines turns a reader of host output into a channel of lines, so Recv can
// wait on it with a context.
type lines struct {
	ch   chan []byte
	done chan struct{}
	err  error
}

func newLines(r io.Reader, split func(*bufio.Scanner, chan<- []byte)) *lines {
	l := &lines{ch: make(chan []byte, 1024), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 64<<20)
		split(sc, l.ch)
		l.err = sc.Err()
	}()
	return l
}

func (l *lines) recv(ctx context.Context) ([]byte, error) {
	select {
	case b := <-l.ch:
		return b, nil
	default:
	}
	select {
	case b := <-l.ch:
		return b, nil
	case <-l.done:
		select {
		case b := <-l.ch:
			return b, nil
		default:
		}
		if l.err != nil {
			return nil, fmt.Errorf("%w: %w", errClosed, l.err)
		}
		return nil, errClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func ndjson(sc *bufio.Scanner, out chan<- []byte) {
	for sc.Scan() {
		out <- append([]byte(nil), sc.Bytes()...)
	}
}

// StdioDialer runs command (through `sh -c`) once per session and speaks
// NDJSON on its stdin and stdout (docs/DECISIONS.md, Transports); its
// stderr goes to stderr, when given.
func StdioDialer(command string, stderr io.Writer) Dialer {
	return func(ctx context.Context) (Conn, error) {
		cmd := exec.Command("sh", "-c", command)
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("conformance: start %q: %w", command, err)
		}
		return &stdioConn{cmd: cmd, in: in, lines: newLines(out, ndjson)}, nil
	}
}

type stdioConn struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *lines
	mu    sync.Mutex
}

func (c *stdioConn) Send(_ context.Context, line []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.in.Write(append(append([]byte(nil), line...), '\n'))
	return err
}

func (c *stdioConn) Recv(ctx context.Context) ([]byte, error) { return c.lines.recv(ctx) }

// Close ends stdin, which ends a stdio host's one session, and waits a
// moment for the process before killing it.
func (c *stdioConn) Close() error {
	_ = c.in.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	return nil
}

// HTTPDialer creates a session with POST {base}/session and exchanges
// messages through POST {base}/send and GET {base}/stream (openapi.yaml).
func HTTPDialer(base string, client *http.Client) Dialer {
	base = strings.TrimSuffix(base, "/")
	if client == nil {
		client = &http.Client{}
	}
	return func(ctx context.Context) (Conn, error) {
		sid, err := createSession(ctx, base, client)
		if err != nil {
			return nil, err
		}
		return openStream(ctx, base, client, sid)
	}
}

// openStream reads the session sid's GET /stream.
func openStream(_ context.Context, base string, client *http.Client, sid string) (Conn, error) {
	sctx, cancel := context.WithCancel(context.Background())
	sreq, err := http.NewRequestWithContext(sctx, http.MethodGet, base+"/stream", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	sreq.Header.Set("X-Session-Id", sid)
	sreq.Header.Set("Accept", "text/event-stream")
	sresp, err := client.Do(sreq)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("conformance: GET /stream: %w", err)
	}
	if sresp.StatusCode != http.StatusOK {
		sresp.Body.Close()
		cancel()
		return nil, fmt.Errorf("conformance: GET /stream: status %d", sresp.StatusCode)
	}
	return &httpConn{base: base, client: client, session: sid, cancel: cancel,
		body: sresp.Body, lines: newLines(sresp.Body, sse)}, nil
}

// sse yields the data of each server-sent event; comments (heartbeats),
// ids and other fields are not messages.
func sse(sc *bufio.Scanner, out chan<- []byte) {
	var data [][]byte
	for sc.Scan() {
		l := sc.Bytes()
		switch {
		case len(l) == 0:
			if data != nil {
				out <- bytes.Join(data, []byte("\n"))
				data = nil
			}
		case bytes.HasPrefix(l, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(l, []byte("data:")), []byte(" "))
			data = append(data, append([]byte(nil), d...))
		}
	}
}

type httpConn struct {
	base, session string
	client        *http.Client
	cancel        context.CancelFunc
	body          io.Closer
	lines         *lines
}

func (c *httpConn) Send(ctx context.Context, line []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/send", bytes.NewReader(line))
	if err != nil {
		return err
	}
	req.Header.Set("X-Session-Id", c.session)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("conformance: POST /send: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("conformance: POST /send: status %d", resp.StatusCode)
	}
	return nil
}

func (c *httpConn) Recv(ctx context.Context) ([]byte, error) { return c.lines.recv(ctx) }

func (c *httpConn) Close() error {
	c.cancel()
	return c.body.Close()
}

// ExchangeDialer is [HTTPDialer] in single-exchange mode: each line is a
// POST {base}/send with Accept: text/event-stream, answered in its own
// response by the request's events and then its reply (docs/transports.md).
// GET /stream is never read, as a single-exchange client does not read it:
// a reply that went there instead is missing, and the kit says so.
func ExchangeDialer(base string, client *http.Client) Dialer {
	base = strings.TrimSuffix(base, "/")
	if client == nil {
		client = &http.Client{}
	}
	return func(ctx context.Context) (Conn, error) {
		sid, err := createSession(ctx, base, client)
		if err != nil {
			return nil, err
		}
		return newExchangeConn(base, client, sid), nil
	}
}

func newExchangeConn(base string, client *http.Client, sid string) *exchangeConn {
	sctx, cancel := context.WithCancel(context.Background())
	l := &lines{ch: make(chan []byte, 1024), done: make(chan struct{})}
	return &exchangeConn{httpConn: &httpConn{base: base, client: client, session: sid, cancel: cancel, body: io.NopCloser(nil), lines: l},
		client: client, ctx: sctx}
}

// createSession is POST {base}/session.
func createSession(ctx context.Context, base string, client *http.Client) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/session", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("conformance: POST /session: %w", err)
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || created.SessionID == "" {
		return "", fmt.Errorf("conformance: POST /session: status %d, %v", resp.StatusCode, err)
	}
	return created.SessionID, nil
}

type exchangeConn struct {
	*httpConn
	client *http.Client
	ctx    context.Context

	mu  sync.Mutex
	err error // the first exchange that failed at the transport
}

// Send starts the exchange and returns: the reply may take long (the kit
// cancels slow requests from another line), so the response is read in
// the background into the session's lines.
func (c *exchangeConn) Send(ctx context.Context, line []byte) error {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.base+"/send", bytes.NewReader(bytes.Clone(line)))
	if err != nil {
		return err
	}
	req.Header.Set("X-Session-Id", c.session)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Accept", "text/event-stream")
	go func() {
		resp, err := c.client.Do(req)
		if err != nil {
			c.fail(fmt.Errorf("conformance: POST /send: %w", err))
			return
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			sse(bufio.NewScanner(resp.Body), c.lines.ch)
		case http.StatusAccepted: // a notification
			_, _ = io.Copy(io.Discard, resp.Body)
		default:
			c.fail(fmt.Errorf("conformance: POST /send: status %d", resp.StatusCode))
		}
	}()
	return nil
}

func (c *exchangeConn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// Recv names a failed exchange when no line came, rather than a bare
// timeout.
func (c *exchangeConn) Recv(ctx context.Context) ([]byte, error) {
	b, err := c.lines.recv(ctx)
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			return nil, fmt.Errorf("%w (after: %w)", err, c.err)
		}
	}
	return b, err
}

// WebSocketDialer opens a session per connection to the host's GET /ws at
// url (ws:// or wss://), one message per text frame. It speaks the
// transport directly (github.com/coder/websocket) rather than through aep's
// Go client, which imports the host: the kit is linked into the host by
// the aepconformance build.
func WebSocketDialer(url string, header http.Header) Dialer {
	return func(ctx context.Context) (Conn, error) {
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
		if err != nil {
			return nil, fmt.Errorf("conformance: GET /ws: %w", err)
		}
		c.SetReadLimit(64 << 20)
		rctx, cancel := context.WithCancel(context.Background())
		l := &lines{ch: make(chan []byte, 1024), done: make(chan struct{})}
		go func() {
			defer close(l.done)
			for {
				typ, b, err := c.Read(rctx)
				if err != nil {
					if websocket.CloseStatus(err) == -1 && rctx.Err() == nil {
						l.err = err
					}
					return
				}
				if typ == websocket.MessageText {
					l.ch <- b
				}
			}
		}()
		return &wsConn{c: c, cancel: cancel, lines: l}, nil
	}
}

type wsConn struct {
	c      *websocket.Conn
	cancel context.CancelFunc
	lines  *lines
}

func (w *wsConn) Send(ctx context.Context, line []byte) error {
	return w.c.Write(ctx, websocket.MessageText, line)
}

func (w *wsConn) Recv(ctx context.Context) ([]byte, error) { return w.lines.recv(ctx) }

func (w *wsConn) Close() error {
	err := w.c.Close(websocket.StatusNormalClosure, "")
	w.cancel()
	return err
}
