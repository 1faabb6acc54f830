package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
)

// TestCloseEndsTheSession: closing a client ends its session on the host
// at once, over every transport — not when it idles out (HTTP, single
// exchange) or when a WebSocket's re-attach grace passes — so abandoned
// sessions do not pile up for a drain to save.
func TestCloseEndsTheSession(t *testing.T) {
	r := startRigHost(t, "aep-c", "sqlite://"+filepath.Join(t.TempDir(), "c.db"))
	base := "http://" + r.addr
	for _, d := range []struct {
		name string
		open func(ctx context.Context) (*client.Client, error)
	}{
		{"websocket", func(ctx context.Context) (*client.Client, error) {
			conn, err := client.DialWebSocket(ctx, "ws://"+r.addr+"/ws", client.WSOptions{})
			if err != nil {
				return nil, err
			}
			return client.New(client.Lines(conn, moveReg)), nil
		}},
		{"single-exchange", func(ctx context.Context) (*client.Client, error) {
			x, err := client.DialExchange(ctx, base, nil, moveReg)
			if err != nil {
				return nil, err
			}
			return client.New(x), nil
		}},
		{"http-sse", func(ctx context.Context) (*client.Client, error) {
			conn, err := client.DialHTTP(ctx, base, nil)
			if err != nil {
				return nil, err
			}
			return client.New(client.Lines(conn, moveReg)), nil
		}},
		{"moving", func(ctx context.Context) (*client.Client, error) {
			return client.Moving(ctx, client.ExchangeDialer(base, nil, moveReg), nil)
		}},
		{"in-process", func(ctx context.Context) (*client.Client, error) {
			return client.InProcess(r.h, client.JSON, moveReg)
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := d.open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Handshake(ctx, "a", moveToken, "memory", "session"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.SessionInfo(ctx, &msg.SessionInfoReq{}); err != nil {
				t.Fatal(err)
			}
			sid := c.SessionID()
			if _, ok := r.h.Session(sid); !ok {
				t.Fatal("the session is not on the host")
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			for {
				if _, ok := r.h.Session(sid); !ok {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatal("the session outlived its closed client")
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
}

// lastWordConn answers the one request written to it with a pong and then
// ends, as a host does that answers a request and closes the session; its
// write returns only once the client has ended, so the request finds its
// reply and the client's end both there when it starts to wait.
type lastWordConn struct {
	sent  chan []byte
	ended func() <-chan struct{}
}

func (c lastWordConn) WriteLine(_ context.Context, line []byte) error {
	c.sent <- append([]byte(nil), line...)
	<-c.ended()
	return nil
}

func (c lastWordConn) ReadLine(ctx context.Context) ([]byte, error) {
	select {
	case line, ok := <-c.sent:
		if !ok {
			return nil, io.EOF
		}
		close(c.sent)
		var env struct{ ID string }
		if err := json.Unmarshal(line, &env); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, `{"type":"pong","id":"r","req_id":%q,"proto":"1.0","ts":1,"uptime_seconds":1}`, env.ID), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (lastWordConn) Close() error { return nil }

// TestReplyBeforeTheEnd: a reply that came in just before the transport
// ended is the request's answer, never the client's end.
func TestReplyBeforeTheEnd(t *testing.T) {
	for i := range 200 {
		var c *client.Client
		conn := lastWordConn{sent: make(chan []byte, 1), ended: func() <-chan struct{} { return c.Done() }}
		c = client.New(client.Lines(conn, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := c.Request(ctx, &msg.Ping{})
		cancel()
		if _, ok := m.(*msg.Pong); !ok || err != nil {
			t.Fatalf("round %d: %T %v, want the pong", i, m, err)
		}
		c.Close()
	}
}
