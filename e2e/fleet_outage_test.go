//go:build aepfleet

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/wire"
)

// The fleet's heavy suite (build tag aepfleet, its own step of .ci/run):
// three `aep serve` hosts on PostgreSQL behind each proxy of deploy/ as
// shipped, agents at work, and the store or a host taken away under them.

// storeLink is a TCP relay between the hosts and PostgreSQL that the test
// cuts and restores: a store outage without touching the shared cluster.
type storeLink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

func startStoreLink(t testing.TB, target string) *storeLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &storeLink{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); l.setCut(true) })
	go l.serve()
	return l
}

func (l *storeLink) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go l.relay(c)
	}
}

func (l *storeLink) relay(c net.Conn) {
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		c.Close() // as a store that is down: the connection ends at once
		return
	}
	l.conns[c] = true
	l.mu.Unlock()
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		c.Close()
		return
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	l.conns[up] = true
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

// setCut cuts the store off (every open connection closed, new ones
// ended at once) or lets it through again.
func (l *storeLink) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for c := range l.conns {
			c.Close()
		}
	}
}

// dsn is dsn with its host and port replaced by the link's.
func (l *storeLink) dsn(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = l.ln.Addr().String()
	return u.String()
}

// clientEnded reports whether c has ended (its session lost for good).
func clientEnded(c *client.Client) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// readyz is a host's GET /readyz status code (0 when it does not answer).
func (h *host) readyz() int {
	resp, err := http.Get(h.base + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestFleetStoreOutage cuts the store off for 10 s under 12 agents
// writing working memory and stepping episodes through each proxy, with
// automatic snapshots on: the hosts cannot take new sessions meanwhile
// (/readyz 503), but no session is routed away from its live host, so no
// client ends and none moves onto an older snapshot; every write
// answered is kept, and writes go on after the store is back. A snapshot
// asked for early in the outage waits store_wait (3 s) and fails with a
// retryable store_unavailable; one asked late waits for the store and is
// taken.
func TestFleetStoreOutage(t *testing.T) {
	for _, k := range proxies {
		t.Run(k.name, func(t *testing.T) {
			findBinary(t, k.bin)
			link := startStoreLink(t, "127.0.0.1:5432")
			dsn := link.dsn(t, pgtest.DSN(t, "aep_e2e_outage_"+k.name))
			hosts := startFleetOn(t, dsn, "  snapshots:\n    auto_interval: 2s\n    store_wait: 3s\n", "")
			base := startProxy(t, k, hosts)
			storeOutage(t, base, hosts, link)
		})
	}
}

// agentsOn opens n moving agents through the proxy at base, spread over
// its three transports, each with a memory namespace and a long episode.
func agentsOn(t *testing.T, ctx context.Context, base string, n int, opts *client.MoveOptions) []*runner {
	t.Helper()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	dialers := []client.Dialer{client.WebSocketDialer(wsURL, nil), client.ExchangeDialer(base, nil, nil), client.HTTPDialer(base, nil, nil)}
	rs := make([]*runner, n)
	for i := range rs {
		c, err := client.Moving(ctx, dialers[i%len(dialers)], opts)
		if err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, fmt.Sprintf("agent-%d", i), token, "memory", "env"); err != nil {
			t.Fatal(err)
		}
		mi, err := c.MemoryInit(ctx, &msg.MemoryInitReq{Namespace: fmt.Sprintf("run-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		seed := i
		o := json.RawMessage(`{"high":1000,"max_steps":100000}`)
		er, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed, Options: &o})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = &runner{i: i, c: c, mid: mi.MemoryID, ep: er.EpisodeID, first: c.SessionID(), written: map[int]bool{}, before: map[int]bool{}}
	}
	return rs
}

// waitRounds waits until every runner has done at least n more rounds
// than in from.
func waitRounds(t *testing.T, ctx context.Context, rs []*runner, from []int32, n int32) {
	t.Helper()
	for i, r := range rs {
		for r.rounds.Load() < from[i]+n {
			select {
			case <-ctx.Done():
				t.Fatalf("agent %d did %d rounds, want %d: errors %v", r.i, r.rounds.Load()-from[i], n, r.errs)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func roundsOf(rs []*runner) []int32 {
	out := make([]int32, len(rs))
	for i, r := range rs {
		out[i] = r.rounds.Load()
	}
	return out
}

func storeOutage(t *testing.T, base string, hosts []*host, link *storeLink) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs := agentsOn(t, ctx, base, 12, nil)
	probe := agentsOn(t, ctx, base, 1, nil)[0].c
	snapshot := func() (time.Duration, error) {
		t0 := time.Now()
		_, err := probe.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetSQL})
		return time.Since(t0), err
	}
	stop := make(chan struct{})
	var never atomic.Bool
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() { defer wg.Done(); r.run(ctx, stop, &never) }()
	}
	waitRounds(t, ctx, rs, make([]int32, len(rs)), 20)

	link.setCut(true)
	cutAt := time.Now()
	// The outage is real: the hosts say they cannot take new sessions.
	for _, h := range hosts {
		for h.readyz() != http.StatusServiceUnavailable {
			if time.Since(cutAt) > 8*time.Second {
				t.Fatalf("%s still ready with its store cut off", h.addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	during := roundsOf(rs)
	took, err := snapshot()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeRuntimeError || wire.ReasonOf(we.Detail) != "store_unavailable" || !we.Retryable() {
		t.Errorf("a snapshot in the outage: %v after %v, want runtime_error store_unavailable, retryable", err, took)
	} else if took < 2500*time.Millisecond {
		t.Errorf("a snapshot in the outage failed after %v, without waiting store_wait", took)
	}
	time.Sleep(8*time.Second - time.Since(cutAt))
	late := make(chan error, 1)
	go func() { _, err := snapshot(); late <- err }()
	time.Sleep(10*time.Second - time.Since(cutAt))
	// Sessions went on serving through it (working memory, episodes).
	waitRounds(t, ctx, rs, during, 10)
	link.setCut(false)
	restored := time.Now()
	for _, h := range hosts {
		for h.readyz() != http.StatusOK {
			if time.Since(restored) > 30*time.Second {
				t.Fatalf("%s not ready 30 s after the store came back", h.addr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := <-late; err != nil {
		t.Errorf("a snapshot asked 2 s before the store came back did not wait for it: %v", err)
	}
	waitRounds(t, ctx, rs, roundsOf(rs), 20)
	close(stop)
	wg.Wait()

	var ended, moved, issued int
	for _, r := range rs {
		for _, e := range r.errs {
			t.Error(e)
		}
		if r.issued != r.answered+r.interrupted {
			t.Errorf("agent %d issued %d requests: %d answered, %d interrupted", r.i, r.issued, r.answered, r.interrupted)
		}
		if r.interrupted > 0 {
			t.Errorf("agent %d had %d requests interrupted", r.i, r.interrupted)
		}
		if clientEnded(r.c) {
			ended++
			t.Errorf("agent %d ended", r.i)
		}
		if ms := r.c.Moves(); len(ms) > 0 {
			moved++
			t.Errorf("agent %d moved off its live host: %+v", r.i, ms)
		}
		n := len(r.errs)
		r.sync(ctx, true) // every write answered is there
		for _, e := range r.errs[n:] {
			t.Error(e)
		}
		issued += r.issued
	}
	t.Logf("%d agents, %d requests, store cut off %.1f s: %d ended, %d moved", len(rs), issued, restored.Sub(cutAt).Seconds(), ended, moved)
}

// TestFleetThrottlePerClient: behind each proxy as shipped, with the
// hosts trusting it for the client's address, a client on 127.0.0.2
// sending wrong tokens is throttled, and an honest client on 127.0.0.3
// through the same proxy is not (Linux routes all of 127/8 to loopback).
func TestFleetThrottlePerClient(t *testing.T) {
	for _, k := range proxies {
		t.Run(k.name, func(t *testing.T) {
			findBinary(t, k.bin)
			hosts := startFleetOn(t, pgtest.DSN(t, "aep_e2e_throttle_"+k.name), "", "")
			base := startProxy(t, k, hosts)
			from := func(ip string) *http.Client {
				d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
				return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
			}
			handshake := func(c *http.Client, tok string) (map[string]any, error) {
				resp, err := c.Post(base+"/session", "application/json", nil)
				if err != nil {
					return nil, err
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var r struct {
					SessionID string `json:"session_id"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
					return nil, fmt.Errorf("POST /session: %d %s", resp.StatusCode, b)
				}
				a := &proxied{base: base, c: c, sid: r.SessionID}
				return a.tryAsk(fmt.Sprintf(`{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"x","agent_caps":[],"auth_token":%q}`, tok))
			}
			attacker, honest := from("127.0.0.2"), from("127.0.0.3")
			throttled := 0
			for i := 0; i < 40; i++ {
				m, err := handshake(attacker, "wrong-token-"+fmt.Sprint(i))
				if err != nil {
					t.Fatal(err)
				}
				if m["ok"] == true {
					t.Fatalf("a wrong token was accepted: %v", m)
				}
				if strings.Contains(fmt.Sprint(m), "throttled") {
					throttled++
				}
			}
			if throttled == 0 {
				t.Fatal("40 wrong tokens from one client were never throttled: the hosts do not see the client's address")
			}
			// Enough handshakes to meet every host of the pool.
			for i := 0; i < 6; i++ {
				m, err := handshake(honest, token)
				if err != nil {
					t.Fatal(err)
				}
				if m["ok"] != true {
					t.Fatalf("the honest client on 127.0.0.3 was refused after 127.0.0.2's wrong tokens: %v", m)
				}
			}
			t.Logf("through %s: %d of 40 wrong-token handshakes from 127.0.0.2 throttled; 127.0.0.3 accepted", k.name, throttled)
		})
	}
}

// TestFleetHostKilled kills the host holding most of 12 agents with
// SIGKILL under load, automatic snapshots on. Each of its agents moves
// through the proxy to a live host: every request it made is answered or
// reported interrupted (it was in flight), none fails with a transport
// error, and it goes on in the new session; the others never move. The
// time from the kill to each moved agent's first answer is logged
// (docs/deploy.md). What the automatic snapshot did not hold is lost
// here, and never silently: the agents accept gaps
// (client.MoveOptions.AcceptGap), and each move whose snapshot covers
// less than the agent saw says so (Move.Gap); the crash-loss window is
// its own test.
func TestFleetHostKilled(t *testing.T) {
	for _, k := range proxies {
		t.Run(k.name, func(t *testing.T) {
			findBinary(t, k.bin)
			hosts := startFleetOn(t, pgtest.DSN(t, "aep_e2e_kill_"+k.name), "  snapshots:\n    auto_interval: 1s\n", "")
			base := startProxy(t, k, hosts)
			hostKilled(t, base, hosts)
		})
	}
}

// killAgent is one agent of TestFleetHostKilled: a working-memory write
// and a ping a round, counting how each request ended.
type killAgent struct {
	c     *client.Client
	first string

	answered, interrupted atomic.Int64
	// late counts requests begun after the kill (killedAt) that were
	// reported interrupted: they never reached the dead host, so the
	// proxy must bring them to one that answers.
	late       atomic.Int64
	killedAt   *atomic.Int64
	other      []string
	firstAfter atomic.Int64 // unix nanos of the first answer in a moved session
	rounds     atomic.Int64
}

func (a *killAgent) run(ctx context.Context, stop <-chan struct{}, mid string) {
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
		for _, f := range []func() error{
			func() error {
				_, err := a.c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mid, Entries: []msg.MemoryEntry{{Key: "k", Content: json.RawMessage(fmt.Sprint(round)), Tier: "working"}}})
				return err
			},
			func() error { _, err := a.c.Request(ctx, &msg.Ping{}); return err },
		} {
			began := time.Now().UnixNano()
			err := f()
			var we *wire.Error
			switch {
			case err == nil:
				a.answered.Add(1)
				if len(a.c.Moves()) > 0 && a.firstAfter.Load() == 0 {
					a.firstAfter.Store(time.Now().UnixNano())
				}
			case errors.Is(err, client.ErrInterrupted):
				a.interrupted.Add(1)
				if k := a.killedAt.Load(); k != 0 && began > k+int64(50*time.Millisecond) {
					a.late.Add(1)
				}
			case errors.As(err, &we) && len(a.c.Moves()) > 0:
				// The memory_id of the lost session may be unknown in a
				// session restored from a snapshot older than its init.
				a.answered.Add(1)
			default:
				if len(a.other) < 5 {
					a.other = append(a.other, err.Error())
				}
			}
		}
		a.rounds.Add(1)
	}
}

func hostKilled(t *testing.T, base string, hosts []*host) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	dialers := []client.Dialer{client.WebSocketDialer(wsURL, nil), client.ExchangeDialer(base, nil, nil), client.HTTPDialer(base, nil, nil)}
	agents := make([]*killAgent, 12)
	mids := make([]string, len(agents))
	var killedAt atomic.Int64
	// A killed host writes no newer snapshot: a short wait, then the gap.
	moveOpts := &client.MoveOptions{SnapshotWait: time.Second, AcceptGap: true}
	for i := range agents {
		c, err := client.Moving(ctx, dialers[i%len(dialers)], moveOpts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, fmt.Sprintf("agent-%d", i), token, "memory"); err != nil {
			t.Fatal(err)
		}
		mi, err := c.MemoryInit(ctx, &msg.MemoryInitReq{})
		if err != nil {
			t.Fatal(err)
		}
		agents[i], mids[i] = &killAgent{c: c, first: c.SessionID(), killedAt: &killedAt}, mi.MemoryID
	}
	// One idle agent of each transport on the victim: each sends its next
	// request only once the host is gone, so that request surely never
	// reached it. Idle agents are opened until one host holds all three.
	type idleAgent struct {
		name string
		c    *client.Client
		mid  string
	}
	names := []string{"websocket", "single-exchange", "http-sse"}
	byHost := map[string]map[string]idleAgent{}
	victimID := ""
	for try := 0; victimID == ""; try++ {
		if try == 30 {
			t.Fatalf("no host holds an idle session of each transport after 30 rounds: %v", byHost)
		}
		for i, d := range dialers {
			c, err := client.Moving(ctx, d, moveOpts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := c.Handshake(ctx, "idle", token, "memory"); err != nil {
				t.Fatal(err)
			}
			mi, err := c.MemoryInit(ctx, &msg.MemoryInitReq{})
			if err != nil {
				t.Fatal(err)
			}
			h := hostOf(t, c.SessionID())
			if byHost[h] == nil {
				byHost[h] = map[string]idleAgent{}
			}
			if _, ok := byHost[h][names[i]]; !ok {
				byHost[h][names[i]] = idleAgent{names[i], c, mi.MemoryID}
			}
			if len(byHost[h]) == len(names) {
				victimID = h
				break
			}
		}
	}
	var idle []idleAgent
	for _, a := range byHost[victimID] {
		idle = append(idle, a)
	}
	victim := hostByID(t, hosts, victimID)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.run(ctx, stop, mids[i]) }()
	}
	// Past two automatic rounds, so every session has a snapshot.
	time.Sleep(2500 * time.Millisecond)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	killedAt.Store(killed.UnixNano())
	_ = victim.cmd.Wait()
	for _, a := range idle {
		_, err := a.c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: a.mid, Entries: []msg.MemoryEntry{{Key: "k", Content: json.RawMessage(`1`), Tier: "working"}}})
		if err != nil {
			t.Errorf("%s: a request sent after %s was gone was not brought to a live host: %v", a.name, victimID, err)
		} else if ms := a.c.Moves(); len(ms) != 1 || ms[0].Err != nil {
			t.Errorf("%s: moves %+v", a.name, ms)
		}
	}
	var recovery []time.Duration
	for _, a := range agents {
		if hostOf(t, a.first) != victimID {
			continue
		}
		for a.firstAfter.Load() == 0 {
			if ctx.Err() != nil || clientEnded(a.c) {
				close(stop)
				wg.Wait()
				t.Fatalf("an agent of %s did not carry on: ended %v, moves %+v, errors %v", victimID, clientEnded(a.c), a.c.Moves(), a.other)
			}
			time.Sleep(20 * time.Millisecond)
		}
		recovery = append(recovery, time.Duration(a.firstAfter.Load()-killed.UnixNano()))
	}
	after := make([]int64, len(agents))
	for i, a := range agents {
		after[i] = a.rounds.Load()
	}
	for i, a := range agents {
		for a.rounds.Load() < after[i]+5 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	for i, a := range agents {
		if len(a.other) > 0 {
			t.Errorf("agent %d: requests neither answered nor interrupted: %v", i, a.other)
		}
		if n := a.late.Load(); n > 0 {
			t.Errorf("agent %d: %d requests begun after the kill were reported interrupted instead of reaching a live host", i, n)
		}
		ms := a.c.Moves()
		t.Logf("agent %d (%s): %d answered, %d interrupted, %d of them begun after the kill; moves %d", i, []string{"websocket", "single-exchange", "http-sse"}[i%3],
			a.answered.Load(), a.interrupted.Load(), a.late.Load(), len(ms))
		if hostOf(t, a.first) != victimID {
			if len(ms) != 0 {
				t.Errorf("agent %d on a live host moved: %+v", i, ms)
			}
			continue
		}
		if len(ms) != 1 || ms[0].Err != nil || ms[0].SnapshotID == "" || hostOf(t, ms[0].To) == victimID {
			t.Errorf("agent %d of the killed host: moves %+v", i, ms)
			continue
		}
		// Never a silent rollback: a move onto a snapshot below the
		// agent's last point says what was lost.
		m := ms[0]
		if silent := m.Point < m.LastPoint && (m.Gap == nil || m.Gap.Lost != int(m.LastPoint-m.Point)); silent || (m.Point >= m.LastPoint && m.Gap != nil) {
			t.Errorf("agent %d moved from point %d to %d with gap %+v", i, m.LastPoint, m.Point, m.Gap)
		}
	}
	slices.Sort(recovery)
	if len(recovery) > 0 {
		t.Logf("%d agents of %s carried on after its SIGKILL; kill to first answer: min %v, median %v, max %v",
			len(recovery), victimID, recovery[0].Round(time.Millisecond), recovery[len(recovery)/2].Round(time.Millisecond), recovery[len(recovery)-1].Round(time.Millisecond))
	}
}
