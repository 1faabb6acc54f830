package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/aephost/aep/capabilities/all" // memory and env
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

const moveToken = "move-token"

var moveReg = msg.Registry().Union(testproto.Registry())

// rigHost is one host of the test fleet, served over real HTTP on
// loopback, on the fleet's shared SQLite file.
type rigHost struct {
	id    string
	addr  string
	h     *server.Host
	st    *store.Store
	echo  *echoplug.Plugin
	stop  context.CancelFunc
	ended chan struct{}
	once  sync.Once
}

func startRigHost(t *testing.T, id, db string) *rigHost {
	t.Helper()
	ctx := context.Background()
	cfg := server.Defaults()
	cfg.Server.AuthToken = moveToken
	cfg.Server.HostID = id
	cfg.Plugins = []server.PluginConfig{
		{Name: "memory", Type: "memory", Cls: "aep.memory.builtin"},
		{Name: "env", Type: "env", Cls: "aep.env.builtin"},
	}
	dir := t.TempDir()
	st, err := store.Open(ctx, db, dir)
	if err != nil {
		t.Fatal(err)
	}
	echo := &echoplug.Plugin{Name: id, Started: make(chan string, 8)}
	h, err := server.New(ctx, cfg, server.WithRegistry(moveReg), server.WithDataDir(dir), server.WithStore(st),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: echo}))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	r := &rigHost{id: id, addr: ln.Addr().String(), h: h, st: st, echo: echo, stop: stop, ended: make(chan struct{})}
	go func() {
		defer close(r.ended)
		_ = httpapi.ServeListener(sctx, h, ln, httpapi.Options{})
	}()
	t.Cleanup(r.shut)
	return r
}

// drain does what `aep serve` does on SIGTERM with
// operator.snapshot_on_drain (docs/operating.md, Drain): no new sessions,
// requests in flight answered, live sessions snapshotted to the store;
// then the transports close and the host ends.
func (r *rigHost) drain(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.h.Drain(ctx, true)
	if err != nil || len(res.Snapshots) == 0 {
		t.Fatalf("drain of %s: %+v %v", r.id, res, err)
	}
	r.shut()
}

func (r *rigHost) shut() {
	r.once.Do(func() {
		r.stop()
		<-r.ended
		_ = r.h.Close(context.Background())
		_ = r.st.Close()
	})
}

// fleetProxy is a reverse proxy in front of the rig's hosts, routing as
// deploy/ configures HAProxy and nginx: a request with X-Session-Id goes to
// the host its id names, any other to the first host that is ready. A host
// marked down refuses connections; a request for it then gets what the
// proxy of that kind answers: HAProxy sends it to a live host (404, unknown
// session), nginx answers 502.
type fleetProxy struct {
	hosts    []*rigHost
	fallback bool // HAProxy's way
	url      string

	mu    sync.Mutex
	down  map[string]bool
	conns map[string][]*muteConn
}

// muteConn is the proxy's connection to a host. Muted, it is what a
// proxy's connection to a host that just died is before the proxy has
// noticed: nothing more comes from it, and the next bytes the proxy
// forwards are lost as the connection resets.
type muteConn struct {
	net.Conn
	mute, gone chan struct{}
	once       sync.Once
}

func (c *muteConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		select {
		case <-c.mute:
			<-c.gone
			return 0, syscall.ECONNRESET
		default:
		}
	}
	return n, err
}

func (c *muteConn) Write(b []byte) (int, error) {
	select {
	case <-c.mute:
		c.once.Do(func() {
			close(c.gone)
			_ = c.Conn.Close()
		})
		return len(b), nil
	default:
		return c.Conn.Write(b)
	}
}

var sidHost = regexp.MustCompile(`^s-(.+)-[0-9a-f]{32}$`)

func hostOf(sid string) string {
	if m := sidHost.FindStringSubmatch(sid); m != nil {
		return m[1]
	}
	return ""
}

func newFleet(t *testing.T, fallback bool, ids ...string) *fleetProxy {
	t.Helper()
	db := filepath.Join(t.TempDir(), "shared.db")
	p := &fleetProxy{fallback: fallback, down: map[string]bool{}, conns: map[string][]*muteConn{}}
	for _, id := range ids {
		p.hosts = append(p.hosts, startRigHost(t, id, db))
	}
	var d net.Dialer
	tr := &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			id := strings.TrimSuffix(addr, ":80")
			p.mu.Lock()
			down := p.down[id]
			p.mu.Unlock()
			if down {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			conn, err := d.DialContext(ctx, "tcp", p.host(id).addr)
			if err != nil {
				return nil, err
			}
			mc := &muteConn{Conn: conn, mute: make(chan struct{}), gone: make(chan struct{})}
			p.mu.Lock()
			p.conns[id] = append(p.conns[id], mc)
			p.mu.Unlock()
			return mc, nil
		}}
	rp := &httputil.ReverseProxy{Transport: tr, ErrorLog: log.New(io.Discard, "", 0), Rewrite: func(pr *httputil.ProxyRequest) {
		id := hostOf(pr.In.Header.Get("X-Session-Id"))
		p.mu.Lock()
		if id == "" || (p.down[id] && p.fallback) {
			id = ""
			for _, h := range p.hosts {
				if !p.down[h.id] && h.h.Ready(context.Background()) == nil {
					id = h.id
					break
				}
			}
		}
		p.mu.Unlock()
		if id == "" {
			id = p.hosts[0].id
		}
		pr.SetURL(&url.URL{Scheme: "http", Host: id})
		pr.Out.Host = "localhost" // aep allows loopback names
	}}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

func (p *fleetProxy) host(id string) *rigHost {
	for _, h := range p.hosts {
		if h.id == id {
			return h
		}
	}
	return nil
}

// kill makes a host unreachable at once, as if its machine died: every
// connection to it drops, new ones are refused. The host itself runs on.
func (p *fleetProxy) kill(id string) {
	for _, c := range p.takeDown(id) {
		_ = c.Close()
	}
}

// takeDown marks a host down, so new connections to it are refused, and
// returns the proxy's connections to it, forgotten.
func (p *fleetProxy) takeDown(id string) []*muteConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down[id] = true
	conns := p.conns[id]
	p.conns[id] = nil
	return conns
}

// killUnnoticed makes a host unreachable as kill does, but the proxy has
// not noticed yet: its clients' connections stay open until they next
// send something, which is lost as the proxy finds the host gone.
func (p *fleetProxy) killUnnoticed(id string) {
	for _, c := range p.takeDown(id) {
		close(c.mute)
		_ = c.SetReadDeadline(time.Now())
	}
}

// drain drains a host and then takes it out, as its process exiting would.
func (p *fleetProxy) drain(t *testing.T, id string) {
	t.Helper()
	p.host(id).drain(t)
	p.kill(id)
}

var moveDialers = []struct {
	name    string
	streams bool // replies come on a connection that stays open
	dial    func(base string) client.Dialer
}{
	{"websocket", true, func(base string) client.Dialer {
		return client.WebSocketDialer("ws"+strings.TrimPrefix(base, "http")+"/ws", &client.WSOptions{Registry: moveReg})
	}},
	{"single-exchange", false, func(base string) client.Dialer { return client.ExchangeDialer(base, nil, moveReg) }},
	{"http-sse", true, func(base string) client.Dialer { return client.HTTPDialer(base, nil, moveReg) }},
}

// agent is a client that moves, with its working memory and an episode.
type agent struct {
	*client.Client
	mid, ep string
	// lastSeen is the client's point a test noted before its host went.
	lastSeen uint64
	moves    chan client.Move
}

func newAgent(t *testing.T, ctx context.Context, dial client.Dialer, opts client.MoveOptions) *agent {
	t.Helper()
	a := &agent{moves: make(chan client.Move, 8)}
	opts.OnMove = func(m client.Move) { a.moves <- m }
	c, err := client.Moving(ctx, dial, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a.Client = c
	if _, err := c.Handshake(ctx, "mover", moveToken, "memory", "env", "echo"); err != nil {
		t.Fatal(err)
	}
	mi, err := c.MemoryInit(ctx, &msg.MemoryInitReq{Namespace: "move"})
	if err != nil {
		t.Fatal(err)
	}
	a.mid = mi.MemoryID
	opt := json.RawMessage(`{"high":1000,"max_steps":1000}`)
	seed := 7
	er, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed, Options: &opt})
	if err != nil {
		t.Fatal(err)
	}
	a.ep = er.EpisodeID
	return a
}

func (a *agent) store(t *testing.T, ctx context.Context, key string, v int) {
	t.Helper()
	if _, err := a.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: a.mid, Entries: []msg.MemoryEntry{{Key: key, Content: json.RawMessage(fmt.Sprint(v)), Tier: "working"}}}); err != nil {
		t.Fatalf("store %s: %v", key, err)
	}
}

// recall returns the working memory's values of keys, missing ones absent.
func (a *agent) recall(t *testing.T, ctx context.Context, keys ...string) map[string]string {
	t.Helper()
	tier := msg.MemoryRetrieveReqTierWorking
	r, err := a.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: a.mid, Keys: keys, Tier: &tier})
	if err != nil {
		t.Fatalf("retrieve: %v", err)
	}
	out := map[string]string{}
	for _, e := range r.Entries {
		out[e.Key] = string(e.Content)
	}
	return out
}

// step guesses too high (the secret is below 1000): the episode never ends.
func (a *agent) step(t *testing.T, ctx context.Context) int {
	t.Helper()
	r, err := a.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: a.ep, Action: json.RawMessage(`1000`)})
	if err != nil {
		t.Fatalf("env/step: %v", err)
	}
	var obs struct{ Guesses int }
	if err := json.Unmarshal(r.Observation, &obs); err != nil || obs.Guesses != r.Step {
		t.Fatalf("env/step observation %s at step %d: %v", r.Observation, r.Step, err)
	}
	return r.Step
}

func (a *agent) move(t *testing.T) client.Move {
	t.Helper()
	select {
	case m := <-a.moves:
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no move reported")
	}
	return client.Move{}
}

// TestMoveAfterDrain: a client on a host that drains moves to another host
// of the fleet (through the same URL), restores the drained session's
// snapshot, and carries on: working memory and the episode's step count
// continue. A second drain moves it again, restoring from the session of
// the first move. No request is interrupted: the drain answers what is in
// flight, and a request the host refused (404 after it left) is sent again
// in the new session.
func TestMoveAfterDrain(t *testing.T) {
	for _, d := range moveDialers {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := newFleet(t, true, "ha", "hb", "hc")
			a := newAgent(t, ctx, d.dial(p.url), client.MoveOptions{})
			first := a.SessionID()
			if hostOf(first) != "ha" {
				t.Fatalf("first session %q is not on ha", first)
			}
			a.store(t, ctx, "k1", 1)
			for want := 1; want <= 3; want++ {
				if got := a.step(t, ctx); got != want {
					t.Fatalf("step %d answered %d", want, got)
				}
			}

			p.drain(t, "ha")
			// A streaming transport sees its connection end and moves on
			// its own; a request racing that end could have been written
			// to the dying connection (and would be interrupted), so wait.
			// The single exchange finds out on its next request (404),
			// which it sends again in the new session.
			var m1 client.Move
			if d.streams {
				m1 = a.move(t)
			}
			if got := a.recall(t, ctx, "k1"); got["k1"] != "1" {
				t.Fatalf("working memory after the move: %v", got)
			}
			if !d.streams {
				m1 = a.move(t)
			}
			second := a.SessionID()
			if m1.Err != nil || m1.From != first || m1.To != second || m1.SnapshotID == "" || m1.Fresh || hostOf(second) != "hb" {
				t.Fatalf("first move %+v, now on %q", m1, hostOf(second))
			}
			if got := a.step(t, ctx); got != 4 {
				t.Fatalf("first step after the move answered step %d, want 4", got)
			}
			a.store(t, ctx, "k2", 2)

			p.drain(t, "hb")
			var m2 client.Move
			if d.streams {
				m2 = a.move(t)
			}
			if got := a.recall(t, ctx, "k1", "k2"); got["k1"] != "1" || got["k2"] != "2" {
				t.Fatalf("working memory after the second move: %v", got)
			}
			if !d.streams {
				m2 = a.move(t)
			}
			if m2.Err != nil || m2.From != second || m2.To != a.SessionID() || hostOf(m2.To) != "hc" || m2.SnapshotID == m1.SnapshotID {
				t.Fatalf("second move %+v", m2)
			}
			if got := a.step(t, ctx); got != 5 {
				t.Fatalf("first step after the second move answered step %d, want 5", got)
			}
			if ms := a.Moves(); len(ms) != 2 || ms[0].To != ms[1].From {
				t.Fatalf("Moves() = %+v", ms)
			}
		})
	}
}

// TestMoveInterruptsInFlight: a request in flight when the host becomes
// unreachable (its machine died; nginx answers 502 for it) fails with
// ErrInterrupted and is not sent again; the client moves, restores the
// snapshot the agent took — older than what the client saw acknowledged,
// which it accepted (MoveOptions.AcceptGap) and the move reports (Gap) —
// and the next request is answered by the new session.
func TestMoveInterruptsInFlight(t *testing.T) {
	for _, d := range moveDialers {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := newFleet(t, false, "ha", "hb")
			a := newAgent(t, ctx, d.dial(p.url), client.MoveOptions{AcceptGap: true, SnapshotWait: 300 * time.Millisecond})
			first := a.SessionID()
			a.store(t, ctx, "k", 42)
			a.step(t, ctx)
			if _, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetSQL}); err != nil {
				t.Fatal(err)
			}
			a.store(t, ctx, "after", 1) // not in the snapshot

			errc := make(chan error, 1)
			go func() {
				gate := "hold"
				_, err := a.Request(ctx, &testproto.EchoWaitReq{Gate: &gate})
				errc <- err
			}()
			select {
			case <-p.host("ha").echo.Started:
			case <-ctx.Done():
				t.Fatal("echo/wait never started")
			}
			p.kill("ha")
			err := <-errc
			if !errors.Is(err, client.ErrInterrupted) {
				t.Fatalf("request in flight when the host died: %v, want ErrInterrupted", err)
			}
			if got := a.recall(t, ctx, "k", "after"); got["k"] != "42" || got["after"] != "" {
				t.Fatalf("working memory after the move: %v (want k from the snapshot, not what came after it)", got)
			}
			m := a.move(t)
			if m.Err != nil || m.From != first || hostOf(m.To) != "hb" || m.Cause == nil {
				t.Fatalf("move %+v", m)
			}
			// memory/init, memory/store, env/reset, env/step, memory/store:
			// the snapshot covers 4 of the 5 acknowledged.
			if m.Gap == nil || m.Gap.Lost != 1 || m.LastPoint != 5 || m.Point != 4 || a.Point() != 4 {
				t.Fatalf("move lost what the client saw without saying so: %+v (gap %+v), client point %d", m, m.Gap, a.Point())
			}
			if got := a.step(t, ctx); got != 2 {
				t.Fatalf("step after the move: %d, want 2", got)
			}
			// The held request never reached the new session: nothing waits there.
			select {
			case g := <-p.host("hb").echo.Started:
				t.Fatalf("echo/wait %q was sent again to the new host", g)
			default:
			}
		})
	}
}

// TestMoveIdleWebSocketHostGone: a WebSocket agent idle while its host
// died sends its next request before the proxy has noticed. The idle
// check's ping finds the connection dead first, so the request is known
// never to have reached a host: the client moves and sends it in the new
// session, where it runs once. With the check turned off the request is
// written into the dead connection, and whether it ran is unknown: it
// fails with ErrInterrupted and is not sent again.
func TestMoveIdleWebSocketHostGone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		idleCheck time.Duration
		resent    bool
	}{
		{"idle check", 100 * time.Millisecond, true},
		{"no idle check", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := newFleet(t, true, "ha", "hb")
			dial := client.WebSocketDialer("ws"+strings.TrimPrefix(p.url, "http")+"/ws", &client.WSOptions{Registry: moveReg, IdleCheck: tc.idleCheck})
			a := newAgent(t, ctx, dial, client.MoveOptions{SnapshotWait: 300 * time.Millisecond})
			a.store(t, ctx, "k", 1)
			if _, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetSQL}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // idle past the check
			p.killUnnoticed("ha")
			_, err := a.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: a.mid, Entries: []msg.MemoryEntry{{Key: "after", Content: json.RawMessage(`2`), Tier: "working"}}})
			m := a.move(t)
			if m.Err != nil || hostOf(m.To) != "hb" {
				t.Fatalf("move %+v", m)
			}
			if !tc.resent {
				if !errors.Is(err, client.ErrInterrupted) {
					t.Fatalf("request written into the dead connection: %v, want ErrInterrupted", err)
				}
				if got := a.recall(t, ctx, "k", "after"); got["k"] != "1" || got["after"] != "" {
					t.Fatalf("working memory after the move: %v (want the snapshot's, the interrupted request not sent again)", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("request sent after the host died, while the client was idle: %v, want it answered in the new session", err)
			}
			if got := a.recall(t, ctx, "k", "after"); got["k"] != "1" || got["after"] != "2" {
				t.Fatalf("working memory after the move: %v (want the snapshot's k and the request sent again)", got)
			}
			if ms := a.Moves(); len(ms) != 1 {
				t.Fatalf("moves %+v, want one", ms)
			}
		})
	}
}

// TestMoveWithoutSnapshot: a session that left no snapshot (its host died
// without draining) cannot be restored. By default the move fails and the
// client ends with ErrNoSnapshot; with MoveOptions.Fresh it carries on in
// an empty session and reports the move as Fresh.
func TestMoveWithoutSnapshot(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("fresh=%v", fresh), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := newFleet(t, true, "ha", "hb")
			a := newAgent(t, ctx, moveDialers[0].dial(p.url), client.MoveOptions{Fresh: fresh, SnapshotWait: 300 * time.Millisecond})
			a.store(t, ctx, "k", 1)
			p.kill("ha")
			m := a.move(t)
			if !fresh {
				if !errors.Is(m.Err, client.ErrNoSnapshot) {
					t.Fatalf("move without a snapshot: %+v", m)
				}
				<-a.Done()
				_, err := a.MemoryStats(ctx, &msg.MemoryStatsReq{MemoryID: a.mid})
				if !errors.Is(err, client.ErrMoveFailed) || !errors.Is(err, client.ErrNoSnapshot) {
					t.Fatalf("request after the failed move: %v", err)
				}
				return
			}
			if m.Err != nil || !m.Fresh || m.SnapshotID != "" || hostOf(a.SessionID()) != "hb" {
				t.Fatalf("fresh move %+v", m)
			}
			// The new session is empty: the memory id is unknown there.
			_, err := a.MemoryStats(ctx, &msg.MemoryStatsReq{MemoryID: a.mid})
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("memory of the lost session after a fresh move: %v", err)
			}
		})
	}
}

// TestMoveNeverRollsBackSilently: a host dies after the agent's snapshot
// and before what came after it was saved. The moving client never
// resumes from that earlier point as if nothing was lost: the move fails
// with ErrPointGap, whose detail names the gap, and the client ends.
func TestMoveNeverRollsBackSilently(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newFleet(t, false, "ha", "hb")
	a := newAgent(t, ctx, moveDialers[0].dial(p.url), client.MoveOptions{SnapshotWait: 300 * time.Millisecond})
	a.store(t, ctx, "k", 1)
	if _, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetSQL}); err != nil {
		t.Fatal(err)
	}
	a.store(t, ctx, "after", 2) // acknowledged, in no snapshot
	a.lastSeen = a.Point()
	p.kill("ha")
	m := a.move(t)
	var we *wire.Error
	if !errors.Is(m.Err, client.ErrPointGap) || !errors.As(m.Err, &we) || wire.ReasonOf(we.Detail) != "point_gap" {
		t.Fatalf("move onto an older snapshot: %+v, want ErrPointGap", m)
	}
	if d := we.Detail.(map[string]any); d["lost"] != float64(1) || d["last_point"] != float64(a.lastSeen) {
		t.Errorf("gap detail %v, want 1 lost below the last seen point %d", d, a.lastSeen)
	}
	<-a.Done()
	if _, err := a.MemoryStats(ctx, &msg.MemoryStatsReq{MemoryID: a.mid}); !errors.Is(err, client.ErrPointGap) {
		t.Fatalf("request after the refused move: %v", err)
	}
}

// TestMoveClosedClientDoesNotMove: the end of a session the caller closed
// is not a loss; the client ends without moving.
func TestMoveClosedClientDoesNotMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newFleet(t, true, "ha", "hb")
	a := newAgent(t, ctx, moveDialers[0].dial(p.url), client.MoveOptions{})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	if _, err := a.MemoryStats(ctx, &msg.MemoryStatsReq{MemoryID: a.mid}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("request after Close: %v", err)
	}
	if ms := a.Moves(); len(ms) != 0 {
		t.Fatalf("a closed client moved: %+v", ms)
	}
}

// TestMoveConcurrent: requests from many goroutines at once while the
// host drains and the client moves. Each is answered or interrupted (those
// the host cut off when it closed); none fails otherwise, and the client
// goes on in the new session.
func TestMoveConcurrent(t *testing.T) {
	for _, d := range moveDialers {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			p := newFleet(t, true, "ha", "hb")
			a := newAgent(t, ctx, d.dial(p.url), client.MoveOptions{})
			const workers = 8
			var answered, interrupted sync.Map
			errc := make(chan error, workers)
			stop := make(chan struct{})
			// answers counts the requests answered so far; progress
			// wakes the test at each, which waits for answers, not for
			// time, before the drain and after the move.
			var answers atomic.Int64
			progress := make(chan struct{}, 1)
			waitAnswers := func(n int64, when string) {
				t.Helper()
				for answers.Load() < n {
					select {
					case <-progress:
					case <-ctx.Done():
						t.Fatalf("%s: %d requests answered, waiting for %d", when, answers.Load(), n)
					}
				}
			}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							errc <- nil
							return
						default:
						}
						id := fmt.Sprintf("w%d-%d", w, i)
						_, err := a.Request(ctx, &testproto.EchoSayReq{Text: id})
						switch {
						case err == nil:
							answered.Store(id, true)
							answers.Add(1)
							select {
							case progress <- struct{}{}:
							default:
							}
						case errors.Is(err, client.ErrInterrupted):
							interrupted.Store(id, true)
						default:
							errc <- fmt.Errorf("%s: %w", id, err)
							return
						}
					}
				}()
			}
			// Requests flow before the drain, and again after the move:
			// as many answers as workers each time.
			waitAnswers(workers, "before the drain")
			p.drain(t, "ha")
			a.move(t)
			waitAnswers(answers.Load()+workers, "after the move")
			close(stop)
			wg.Wait()
			for range workers {
				if err := <-errc; err != nil {
					t.Error(err)
				}
			}
			na, ni := 0, 0
			answered.Range(func(_, _ any) bool { na++; return true })
			interrupted.Range(func(_, _ any) bool { ni++; return true })
			if hostOf(a.SessionID()) != "hb" || na == 0 {
				t.Fatalf("after the move: session on %q, %d answered", hostOf(a.SessionID()), na)
			}
			t.Logf("%d answered, %d interrupted", na, ni)
		})
	}
}
