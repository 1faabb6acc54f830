package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// TestMovingClientStopsWhenTerminated: a session the operator terminated
// (the admin API) is not moved: its next request is answered runtime_error
// reason terminated, and the client ends there instead of opening a new
// session and restoring the old one somewhere else — over every transport.
func TestMovingClientStopsWhenTerminated(t *testing.T) {
	r := startRigHost(t, "aep-t", "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	base := "http://" + r.addr
	for _, d := range []struct {
		name string
		dial client.Dialer
	}{
		{"websocket", client.WebSocketDialer("ws://"+r.addr+"/ws", nil)},
		{"single-exchange", client.ExchangeDialer(base, nil, moveReg)},
		{"http-sse", client.HTTPDialer(base, nil, moveReg)},
	} {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := client.Moving(ctx, d.dial, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Handshake(ctx, "a", moveToken, "memory", "session"); err != nil {
				t.Fatal(err)
			}
			info, err := c.SessionInfo(ctx, &msg.SessionInfoReq{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.h.Operator().Snapshot(ctx, info.Handle, "sql"); err != nil {
				t.Fatal(err) // a snapshot a move could restore, were it to move
			}
			if _, err := r.h.Operator().Terminate(info.Handle); err != nil {
				t.Fatal(err)
			}
			_, err = c.Ping(ctx, &msg.Ping{})
			if d.name != "single-exchange" && d.name != "http-sse" {
				var we *wire.Error
				if !errors.As(err, &we) || wire.ReasonOf(we.Detail) != "terminated" {
					t.Fatalf("the next request: %v", err)
				}
			} else if err == nil {
				t.Fatal("the terminated session answered")
			}
			if _, err := c.Ping(ctx, &msg.Ping{}); !errors.Is(err, client.ErrClosed) {
				t.Fatalf("a request after the termination: %v, want the client ended", err)
			}
			if ms := c.Moves(); len(ms) != 0 {
				t.Fatalf("the client moved a terminated session: %+v", ms)
			}
		})
	}
}

// TestTerminatedCloseEndsMovingClient: a WebSocket closed with
// client.CloseTerminated (a terminated session whose client sent nothing
// meanwhile) ends a moving client; it dials no new session.
func TestTerminatedCloseEndsMovingClient(t *testing.T) {
	var dials atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dials.Add(1)
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ctx := r.Context()
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		id := "hs"
		if strings.Contains(string(b), `"id":"`) {
			id = strings.SplitN(strings.SplitN(string(b), `"id":"`, 2)[1], `"`, 2)[0]
		}
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"handshake/resp","id":"x","proto":"1.0","ts":1,"req_id":"`+id+
			`","ok":true,"session_id":"s-x-00000000000000000000000000000000","accepted_caps":[],"max_parallel":4}`))
		// The next request is not answered: the session is terminated
		// meanwhile and its connection closes as the host closes it.
		if _, _, err := c.Read(ctx); err != nil {
			return
		}
		_ = c.Close(client.CloseTerminated, "session terminated by the operator")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Moving(ctx, client.WebSocketDialer("ws"+strings.TrimPrefix(srv.URL, "http"), nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Handshake(ctx, "a", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(ctx, &msg.Ping{}); !client.Terminated(err) {
		t.Fatalf("the request in flight at the close: %v", err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the client did not end on the terminated close")
	}
	if _, err := c.Ping(ctx, &msg.Ping{}); !errors.Is(err, client.ErrClosed) || !client.Terminated(err) {
		t.Fatalf("a request after the close: %v", err)
	}
	if n := dials.Load(); n != 1 || len(c.Moves()) != 0 {
		t.Fatalf("%d dials, moves %+v", n, c.Moves())
	}
}
