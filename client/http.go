package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// HTTPConn is a [LineConn] over aep's HTTP transport (docs/DECISIONS.md, Transports):
// lines go out as POST /send, lines come in as the events of GET /stream. A
// broken stream is reopened with Last-Event-ID, so no message is lost or
// repeated while the session's replay buffer holds it.
type HTTPConn struct {
	base string
	hc   *http.Client
	sid  string

	lines chan []byte
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	sent atomic.Uint64 // lines written, for Idempotency-Key

	mu     sync.Mutex
	err    error  // why the stream ended
	lastID string // id of the last event read
}

// DialHTTP creates a session on the host at baseURL (e.g.
// "http://127.0.0.1:8765") and opens its event stream. hc may be nil for
// a client without timeouts (a stream lives long).
func DialHTTP(ctx context.Context, baseURL string, hc *http.Client) (*HTTPConn, error) {
	if hc == nil {
		hc = &http.Client{}
	}
	base := strings.TrimRight(baseURL, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/session", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusErr("create session", resp)
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || created.SessionID == "" {
		return nil, fmt.Errorf("create session: bad response: %v", err)
	}
	return AttachHTTP(ctx, baseURL, created.SessionID, hc)
}

// AttachHTTP opens the event stream of an existing session, such as a child
// session the host created, and returns its connection.
func AttachHTTP(ctx context.Context, baseURL, sessionID string, hc *http.Client) (*HTTPConn, error) {
	if hc == nil {
		hc = &http.Client{}
	}
	c := &HTTPConn{base: strings.TrimRight(baseURL, "/"), hc: hc, sid: sessionID,
		lines: make(chan []byte, 64), done: make(chan struct{})}
	c.ctx, c.stop = context.WithCancel(context.Background())
	body, err := c.open(ctx)
	if err != nil {
		c.stop()
		return nil, err
	}
	go c.pump(body)
	return c, nil
}

// SessionID returns the session's id.
func (c *HTTPConn) SessionID() string { return c.sid }

// WriteLine sends one message.
func (c *HTTPConn) WriteLine(ctx context.Context, line []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/send", bytes.NewReader(line))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("X-Session-Id", c.sid)
	// The key makes net/http resend the line on a fresh connection when a
	// pooled one turns out to be dead (the host restarted or dropped idle
	// connections) instead of failing the request. The host ignores it.
	req.Header.Set("Idempotency-Key", c.sid+"-"+strconv.FormatUint(c.sent.Add(1), 10))
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return statusErr("send", resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // lets the connection be reused
	return nil
}

// ReadLine returns the next message the host sent.
func (c *HTTPConn) ReadLine(ctx context.Context) ([]byte, error) {
	select {
	case l, ok := <-c.lines:
		if ok {
			return l, nil
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return nil, c.err
}

// Close ends the stream. The session lives on on the host until it is shut
// down or expires; send `shutdown` first to end it.
func (c *HTTPConn) Close() error {
	c.stop()
	<-c.done
	return nil
}

func (c *HTTPConn) open(ctx context.Context) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.base+"/stream", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Session-Id", c.sid)
	c.mu.Lock()
	if c.lastID != "" {
		req.Header.Set("Last-Event-ID", c.lastID)
	}
	c.mu.Unlock()
	// ctx bounds the wait for the response head; the stream itself lives
	// until Close.
	stop := context.AfterFunc(ctx, c.stop)
	resp, err := c.hc.Do(req)
	stop()
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, statusErr("open stream", resp)
	}
	return resp.Body, nil
}

// errStreamEnded marks a stream the host ended (the session closed).
var errStreamEnded = errors.New("stream ended")

// pump reads events into c.lines, reopening a broken stream with
// Last-Event-ID a few times before it gives up.
func (c *HTTPConn) pump(body io.ReadCloser) {
	defer close(c.done)
	defer close(c.lines)
	for attempt := 0; ; {
		err := c.readEvents(body)
		body.Close()
		if c.ctx.Err() != nil {
			c.setErr(fmt.Errorf("%w: connection closed", ErrClosed))
			return
		}
		if errors.Is(err, errStreamEnded) {
			// An orderly end: the session is over unless a reopen finds it.
			attempt = max(attempt, 2)
		}
		for {
			attempt++
			if attempt > 3 {
				c.setErr(fmt.Errorf("%w: %v", ErrClosed, err))
				return
			}
			select {
			case <-time.After(time.Duration(attempt*attempt) * 50 * time.Millisecond):
			case <-c.ctx.Done():
				c.setErr(fmt.Errorf("%w: connection closed", ErrClosed))
				return
			}
			var oerr error
			body, oerr = c.open(c.ctx)
			if oerr == nil {
				break
			}
			err = oerr
		}
		attempt = 0
	}
}

func (c *HTTPConn) setErr(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// readEvents parses server-sent events (the WHATWG event-stream format) and
// delivers the data of each as one line.
func (c *HTTPConn) readEvents(body io.Reader) error {
	r := bufio.NewReaderSize(body, 64<<10)
	var data []byte
	var id string
	hasData := false
	for {
		raw, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			full := append([]byte(nil), raw...)
			for errors.Is(err, bufio.ErrBufferFull) {
				raw, err = r.ReadSlice('\n')
				full = append(full, raw...)
			}
			raw = full
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errStreamEnded
			}
			return err
		}
		line := bytes.TrimRight(raw, "\r\n")
		if len(line) == 0 { // end of an event
			if id != "" {
				c.mu.Lock()
				c.lastID = id
				c.mu.Unlock()
			}
			if hasData {
				select {
				case c.lines <- data:
				case <-c.ctx.Done():
					return c.ctx.Err()
				}
			}
			data, id, hasData = nil, "", false
			continue
		}
		if line[0] == ':' {
			continue // a comment: heartbeat or note
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "id":
			id = string(value)
		}
	}
}

// statusError is an HTTP status other than the one expected, from the
// host or a proxy in front of it.
type statusError struct {
	op     string
	status int
	body   string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.op, e.status, e.body)
}

func statusErr(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return &statusError{op: op, status: resp.StatusCode, body: strings.TrimSpace(string(b))}
}

// probe asks whether the session still answers: a ping it accepts (202;
// the pong comes on the stream, where no request waits for it).
func (c *HTTPConn) probe(ctx context.Context) error {
	return probeSend(ctx, c.hc, c.base, c.sid, "")
}

// probeSend posts a ping to the session sid; with accept set, the answer
// must be the pong itself.
func probeSend(ctx context.Context, hc *http.Client, base, sid, accept string) error {
	line, err := wire.Encode(&wire.Envelope{Type: "ping", ID: wire.NewID(), Proto: wire.ProtoVersion, TS: wire.Now()}, &msg.Ping{})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/send", bytes.NewReader(line))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("X-Session-Id", sid)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case accept == "" && resp.StatusCode == http.StatusAccepted:
	case accept != "" && resp.StatusCode == http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if !bytes.Contains(b, []byte(`"type":"pong"`)) {
			return fmt.Errorf("probe: the session answered %s", bytes.TrimSpace(b))
		}
		return nil
	default:
		return statusErr("probe", resp)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
