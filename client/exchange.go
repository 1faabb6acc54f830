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
	"strings"
	"sync"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// ExchangeConn is a [Transport] over the single-exchange mode of aep's HTTP
// transport: each request is one POST /send whose response carries its
// reply (Accept: application/json) or, when the request's context has an
// events callback ([WithEvents]), its events and then its reply as SSE.
// There is no event stream to keep open; a request whose context ends
// drops its POST, which cancels it on the host (docs/DECISIONS.md, HTTP
// transport).
type ExchangeConn struct {
	base string
	hc   *http.Client
	sid  string
	reg  *wire.Registry

	mu      sync.Mutex
	deliver func(*wire.Packet)
	ended   func(error)
	closed  bool
}

// SingleExchange connects a [Client] to the host at baseURL (e.g.
// "http://127.0.0.1:8765") in single-exchange mode. reg decodes replies
// (msg.Registry() when nil); hc may be nil.
func SingleExchange(ctx context.Context, baseURL string, hc *http.Client, reg *wire.Registry) (*Client, error) {
	t, err := DialExchange(ctx, baseURL, hc, reg)
	if err != nil {
		return nil, err
	}
	return New(t), nil
}

// DialExchange creates a session on the host at baseURL for single exchanges.
func DialExchange(ctx context.Context, baseURL string, hc *http.Client, reg *wire.Registry) (*ExchangeConn, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	if reg == nil {
		reg = msg.Registry()
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
	return &ExchangeConn{base: base, hc: hc, sid: created.SessionID, reg: reg}, nil
}

// SessionID returns the session's id.
func (x *ExchangeConn) SessionID() string { return x.sid }

// Deliver implements the client's deliverer: each answer is handed over on
// the goroutine that read it, the one that sent the request.
func (x *ExchangeConn) Deliver(deliver func(*wire.Packet), ended func(error)) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deliver, x.ended = deliver, ended
	return true
}

// Send posts one message and delivers its answer before returning.
func (x *ExchangeConn) Send(ctx context.Context, env *wire.Envelope, m wire.Message) error {
	line, err := wire.Encode(env, m)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.base+"/send", bytes.NewReader(line))
	if err != nil {
		return err
	}
	req.Header.Set("X-Session-Id", x.sid)
	req.Header.Set("Content-Type", "text/plain")
	if _, ok := ctx.Value(eventKey{}).(func(Event)); ok {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := x.hc.Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted: // a notification
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	case http.StatusOK:
	default:
		return statusErr("send", resp)
	}
	x.mu.Lock()
	deliver := x.deliver
	x.mu.Unlock()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r := bufio.NewReader(resp.Body)
		for {
			l, err := r.ReadSlice('\n')
			if d, ok := bytes.CutPrefix(l, []byte("data: ")); ok {
				if err := x.hand(deliver, bytes.TrimRight(d, "\n")); err != nil {
					return err
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("send: read answer: %w", err)
			}
		}
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("send: read answer: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		// The host gave up on the request (it is closing, and cancelled
		// what was running) without a reply.
		return errors.New("send: the host answered without a reply")
	}
	return x.hand(deliver, bytes.TrimRight(body, "\n"))
}

func (x *ExchangeConn) hand(deliver func(*wire.Packet), line []byte) error {
	p, err := DecodeHostLine(x.reg, line)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	deliver(p)
	return nil
}

// probe asks whether the session still answers a ping.
func (x *ExchangeConn) probe(ctx context.Context) error {
	return probeSend(ctx, x.hc, x.base, x.sid, "application/json")
}

// Recv is never called: answers are delivered through Deliver.
func (x *ExchangeConn) Recv(ctx context.Context) (*wire.Packet, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Close ends the client; the session on the host expires when idle, or
// ends at once after Shutdown.
func (x *ExchangeConn) Close() error {
	x.mu.Lock()
	ended := x.ended
	done := x.closed
	x.closed = true
	x.mu.Unlock()
	if ended != nil && !done {
		ended(ErrClosed)
	}
	return nil
}

var _ Transport = (*ExchangeConn)(nil)
