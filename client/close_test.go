package client_test

import (
	"context"
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
