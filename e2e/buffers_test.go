package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// sessionBuffer is server.limits.session_buffer_bytes by default.
const sessionBuffer = 4 << 20

// TestStuckReaderCostsAtMostItsBuffer runs 90 commands of 1.5 MB output
// each (a capped reply of ~1 MiB apiece) in a session whose reader opened
// GET /stream and never reads, and the same in a session whose reader reads
// everything, each on a fresh host with the default configuration: the
// stuck reader costs the host at most the session buffer more than the
// reading one, though it was sent 90 MiB; its stream is then closed by the
// per-write deadline, and a new reader is told on the stream that messages
// were dropped, and why (docs/SECURITY.md, The edge).
//
// Both hosts' peaks grow by some 75 MiB of transient work (four commands'
// output collected and encoded at once), which varies by ±10 MiB between
// runs on a loaded machine: the comparison allows that noise
// (peakNoise), and is decisive because a host holding the replies for the
// stuck reader would grow by 90 MiB more, not by the 4 MiB buffer. And the
// peak stays where the first 30 calls took it: the session's memory does
// not grow with its history.
func TestStuckReaderCostsAtMostItsBuffer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	growth := map[bool]int64{}
	t.Run("group", func(t *testing.T) {
		for _, stuck := range []bool{false, true} {
			t.Run(fmt.Sprint("stuck=", stuck), func(t *testing.T) {
				t.Parallel()
				g := stuckReader(t, stuck)
				mu.Lock()
				growth[stuck] = g
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	if extra := growth[true] - growth[false]; extra > sessionBuffer+peakNoise {
		t.Fatalf("a stuck reader cost %.1f MiB more than a reading one; the session buffer is %d MiB",
			float64(extra)/mib, sessionBuffer/mib)
	}
}

// peakNoise is how far two hosts' peak RSS growth for the same work may
// differ: up to 17 MiB seen under CI's load, ±5 MiB on an idle machine.
const peakNoise = 32 * mib

// stuckReader runs the workload of TestStuckReaderCostsAtMostItsBuffer and
// returns the host's peak RSS growth.
func stuckReader(t *testing.T, stuck bool) int64 {
	const calls = 90
	h := startHost(t, "")
	c := newClient()
	sid, st := h.agent(t, c)
	var conn net.Conn
	if stuck {
		st.close()
		var err error
		conn, err = net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The stuck reader: a request sent, no byte read, ever.
		fmt.Fprintf(conn, "GET /stream HTTP/1.1\r\nHost: %s\r\nX-Session-Id: %s\r\n\r\n", h.addr, sid)
	} else {
		go func() {
			for {
				if _, err := st.br.ReadBytes('\n'); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	base := h.settle(t)
	// Sent in rounds of 30, each handled before the next is sent: /send
	// answers once a request is queued, and more than the session's queue
	// (queue_size) waiting at once would be refused as overloaded.
	const round = 30
	var afterFirst int64
	for sent := 0; sent < calls; sent += round {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := h.trySend(c, sid, toolCall(fmt.Sprint("c", i), false, "run_command", outputCommand(1_500_000))); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		for i := sent; i < sent+round; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		h.waitAudited(t, "tool/call/req", sent+round)
		if sent == 0 {
			afterFirst = h.peak(t)
		}
	}
	grew := h.peak(t) - base
	later := h.peak(t) - afterFirst
	t.Logf("%d replies of ~1 MiB, stuck reader %v: host peak RSS +%.1f MiB, +%.1f MiB of it after the first %d",
		calls, stuck, float64(grew)/mib, float64(later)/mib, round)
	// The same work again costs the session nothing more: what it holds
	// does not grow with its history. (A ring whose slots kept every large
	// frame's memory grew the peak by 100 MiB over the later rounds.)
	if later > peakNoise {
		t.Errorf("the later %d calls grew the host's peak by %.1f MiB more than the first %d",
			calls-round, float64(later)/mib, round)
	}
	if !stuck {
		return grew
	}
	// The stuck stream is cut by its per-write deadline (write_timeout,
	// 15 s by default). Once that has passed, draining the connection ends
	// in EOF; a stream still open would send heartbeats and never end.
	time.Sleep(16 * time.Second)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("the stuck stream was not closed by the host: %v", err)
	}
	// A new reader from the start learns that messages were dropped.
	req, _ := http.NewRequest(http.MethodGet, h.base+"/stream", nil)
	req.Header.Set("X-Session-Id", sid)
	req.Header.Set("Last-Event-ID", "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := 0; ; i++ {
		line, err := br.ReadString('\n')
		if err != nil || i > 10 {
			t.Fatalf("no notice of dropped messages: %q %v", line, err)
		}
		if strings.HasPrefix(line, ": dropped ") && strings.Contains(line, "fell behind") {
			break
		}
	}
	return grew
}

// TestPendingSessionsHoldLittle opens 100 sessions that never handshake
// and sends each 5 MB of bad lines (1 MB ids and types): the host's memory
// grows by less than 100 MB, because errors echo at most a few hundred
// bytes and a pending session's buffer is small (docs/SECURITY.md, The
// edge).
func TestPendingSessionsHoldLittle(t *testing.T) {
	t.Parallel()
	h := startHost(t, "")
	c := newClient()
	base := h.settle(t)
	big := strings.Repeat("x", 1000_000)
	lines := []string{
		`{"type":"` + big + `","id":"1"}`,
		`{"type":"ping","id":"` + big + `"}`,
		`{"type":"handshake/req","id":"` + big + `","proto":"` + big[:1000] + `","agent_id":"a","agent_caps":[],"auth_token":"x"}`,
		`{"type":"x","id":"2","` + big + `":1}`,
		`{"type":"` + big[:500_000] + `","id":"` + big[:500_000] + `"}`,
	}
	sids := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sid := range sids {
				for _, l := range lines {
					if err := h.trySend(c, sid, l); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var first string
	for i := range 100 {
		sid := h.newSession(t, c)
		if i == 0 {
			first = sid
		}
		sids <- sid
	}
	close(sids)
	wg.Wait()
	grew := h.peak(t) - base
	t.Logf("100 pending sessions x 5 MB of bad lines: host peak RSS +%.1f MiB", float64(grew)/mib)
	if grew >= 100*mib {
		t.Fatalf("pending sessions grew the host by %.1f MiB", float64(grew)/mib)
	}
	// What they were answered is small.
	st := h.openStream(t, c, first)
	for range len(lines) {
		if _, n := st.message(t, "", 10*time.Second); n > 1024 {
			t.Fatalf("a reply of %d bytes to a pending session", n)
		}
	}
}
