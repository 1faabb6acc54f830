package e2e

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
)

// TestWebSocketFloodLocksNoAgentOut opens 1,000 WebSocket connections that
// never handshake against a host with the default configuration (a pending
// pool of 256): an agent handshaken over WebSocket before the flood goes on
// working, a new one connects and works, the oldest flooders are closed
// (evicted), and the host's memory grows by little, since WebSocket
// sessions wait in the same pending pool as HTTP ones (docs/SECURITY.md,
// The edge).
func TestWebSocketFloodLocksNoAgentOut(t *testing.T) {
	t.Parallel()
	h := startHost(t, "")
	base := h.settle(t)
	url := "ws" + strings.TrimPrefix(h.base, "http") + "/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent := func() *client.Client {
		t.Helper()
		c, err := client.WebSocket(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, "e2e", token, "tools"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	works := func(c *client.Client, who string) {
		t.Helper()
		r, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{}})
		if err != nil || !r.Success {
			t.Fatalf("%s: list_dir: %+v %v", who, r, err)
		}
	}
	before := agent()
	works(before, "an agent handshaken before the flood")

	const flood = 1000
	conns := make([]*websocket.Conn, flood)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var dialErrs int
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < flood; i += 8 {
				c, _, err := websocket.Dial(ctx, url, nil)
				if err != nil {
					mu.Lock()
					dialErrs++
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
	})
	if dialErrs > 0 {
		t.Fatalf("%d of %d WebSocket upgrades refused", dialErrs, flood)
	}
	works(before, "the agent handshaken before the flood")
	works(agent(), "an agent connected after the flood")
	// The first flooders were evicted from the pending pool: the host closed
	// their connections.
	closed := 0
	for _, c := range conns[:64] {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, err := c.Read(rctx)
		rcancel()
		if err != nil && websocket.CloseStatus(err) != -1 {
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("no connection of the flood's first 64 was closed by the host")
	}
	grew := h.peak(t) - base
	t.Logf("%d pending WebSocket sessions: host peak RSS +%.1f MiB; %d of the first 64 closed", flood, float64(grew)/mib, closed)
	if grew >= 100*mib {
		t.Fatalf("pending WebSocket sessions grew the host by %.1f MiB", float64(grew)/mib)
	}
}

// TestWebSocketNeverReadsCostsItsBuffer: over WebSocket, with the default
// configuration, an agent asks for 100 MiB of replies (read_file of a
// 512 KiB file, 200 times) and never reads them: the host closes the
// connection at the session's buffer cap and its memory grows by far less
// than what was asked for (docs/SECURITY.md, The edge).
func TestWebSocketNeverReadsCostsItsBuffer(t *testing.T) {
	t.Parallel()
	h := startHost(t, "")
	base := h.settle(t)
	url := "ws" + strings.TrimPrefix(h.base, "http") + "/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(8 << 20)
	roundTrip := func(line, id string) {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
			t.Fatal(err)
		}
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"req_id":"`+id+`"`) {
				return
			}
		}
	}
	roundTrip(handshakeLine("hs", token), "hs")
	roundTrip(toolCall("w", false, "write_file", map[string]any{"path": "big.txt", "content": strings.Repeat("z", 512<<10)}), "w")
	const calls = 200
	for i := range calls {
		line := toolCall("r"+strconv.Itoa(i), false, "read_file", map[string]any{"path": "big.txt"})
		if err := c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
			break // the host closed the connection: it stopped reading ours too
		}
	}
	// The host closes the session once it holds the cap for this reader.
	closed := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(h.stderr.String(), "websocket reader over the buffer cap") {
			closed = true
			break
		}
	}
	grew := h.peak(t) - base
	t.Logf("%d replies of 512 KiB never read: host peak RSS +%.1f MiB", calls, float64(grew)/mib)
	if !closed {
		t.Fatal("the host did not close a connection that never reads")
	}
	if grew >= sessionBuffer+64*mib { // transient encoding of replies in flight, not their backlog
		t.Fatalf("a reader that never reads grew the host by %.1f MiB; the session buffer is %d MiB", float64(grew)/mib, sessionBuffer/mib)
	}
}
