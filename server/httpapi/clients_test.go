package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/wire"
)

// TestGoClientTransports drives the Go client over the WebSocket transport
// and the single-exchange mode on real loopback: typed requests, events
// through WithEvents, error replies, and a cancelled request.
func TestGoClientTransports(t *testing.T) {
	reg := msg.Registry().Union(testproto.Registry())
	h, plug := newPlugHost(t, nil)
	base := newServer(t, h, httpapi.Options{})
	dial := map[string]func(ctx context.Context) (*client.Client, error){
		"websocket": func(ctx context.Context) (*client.Client, error) {
			return client.WebSocket(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &client.WSOptions{Registry: reg})
		},
		"single-exchange": func(ctx context.Context) (*client.Client, error) {
			return client.SingleExchange(ctx, base, nil, reg)
		},
	}
	for name, open := range dial {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c, err := open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Handshake(ctx, "a", token, "echo"); err != nil {
				t.Fatal(err)
			}
			resp, err := c.Request(ctx, &testproto.EchoSayReq{Text: "hi"})
			if err != nil || resp.(*testproto.EchoSayResp).Text != "hi" {
				t.Fatalf("echo/say: %v %+v", err, resp)
			}
			var mu sync.Mutex
			var seqs []int
			ectx := client.WithEvents(ctx, func(ev client.Event) {
				mu.Lock()
				seqs = append(seqs, ev.Seq)
				mu.Unlock()
			})
			n := 3
			if _, err := c.Request(ectx, &testproto.EchoWaitReq{Events: &n}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if len(seqs) != 3 || seqs[0] != 0 || seqs[2] != 2 {
				t.Errorf("events %v, want seq 0..2 before the reply", seqs)
			}
			mu.Unlock()
			panicking := true
			_, err = c.Request(ctx, &testproto.EchoWaitReq{Panic: &panicking})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeRuntimeError {
				t.Fatalf("a handler panic: %v, want runtime_error", err)
			}
			gate := "g-" + name
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := c.Request(cctx, &testproto.EchoWaitReq{Gate: &gate})
				done <- err
			}()
			waitGate(t, plug.Started, gate)
			cancel()
			waitGate(t, plug.CtxDone, gate)
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled request: %v", err)
			}
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			defer scancel()
			if err := c.Shutdown(sctx, 1); err != nil {
				t.Fatal(err)
			}
		})
	}
}
