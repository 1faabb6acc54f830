package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// The proxies of deploy/ in front of three `aep serve` hosts on one
// PostgreSQL store (docs/deploy.md): each configuration is used as
// shipped, only its addresses rewritten to the ports of this run.

// proxyKind is how to run one proxy of deploy/.
type proxyKind struct {
	name   string
	bin    string // looked up in PATH and /usr/sbin
	config string // the shipped file, relative to the repository
	args   func(dir, cfg string) []string
	// ws reports whether WebSocket sessions are routed too.
	ws bool
}

var proxies = []proxyKind{
	{name: "haproxy", bin: "haproxy", config: "deploy/haproxy/haproxy.cfg", ws: true,
		args: func(_, cfg string) []string { return []string{"-db", "-f", cfg} }},
	{name: "nginx", bin: "nginx", config: "deploy/nginx/nginx.conf", ws: true,
		args: func(dir, cfg string) []string { return []string{"-p", dir, "-c", cfg, "-g", "daemon off;"} }},
}

// findBinary returns the path of a proxy binary, skipping the test when
// it is absent unless CI is set (.ci/run installs both from Debian).
func findBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); fileExists(p) {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (.ci/run installs it)", name)
	}
	t.Skipf("%s is not installed (CI unset)", name)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProxy runs the shipped configuration of k with the hosts' real
// addresses in place of 127.0.0.1:8701..8703 and a free port in place of
// 127.0.0.1:8700, and returns its base URL once it answers /healthz.
func startProxy(t testing.TB, k proxyKind, hosts []*host) string {
	t.Helper()
	bin := findBinary(t, k.bin)
	b, err := os.ReadFile(filepath.Join("..", k.config))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	addr := freeAddr(t)
	repl := map[string]string{"127.0.0.1:8700": addr}
	for i, h := range hosts {
		repl[fmt.Sprintf("127.0.0.1:%d", 8701+i)] = h.addr
	}
	for from, to := range repl {
		if !strings.Contains(cfg, from) {
			t.Fatalf("%s has no %s to rewrite", k.config, from)
		}
		cfg = strings.ReplaceAll(cfg, from, to)
	}
	dir := t.TempDir()
	// nginx's workers run as nobody and keep temporary files under -p.
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	_ = os.Chmod(filepath.Join(dir, "tmp"), 0o777)
	path := filepath.Join(dir, "proxy.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, k.args(dir, path)...)
	cmd.Dir = dir
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s output, summed up:\n%s", k.name, proxyLogSummary(out.String(), 40))
			t.Logf("%s output (tail):\n%s", k.name, tail(out.String(), 4000))
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up: %v\n%s", k.name, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startFleet starts three hosts, aep-1..aep-3, on one PostgreSQL schema
// (hosts starting at once on one schema are server/store's test).
func startFleet(t testing.TB, schema string) []*host {
	t.Helper()
	return startFleetWith(t, schema, "")
}

// startFleetWith is startFleet with more YAML under `operator:`.
func startFleetWith(t testing.TB, schema, operator string) []*host {
	t.Helper()
	return startFleetOn(t, pgtest.DSN(t, schema), "", operator)
}

// startFleetOn starts three hosts, aep-1..aep-3, on the store of dsn, as
// the fleet examples configure them: the proxies of deploy/ run on this
// machine, so 127.0.0.1 is trusted for the client's address. server and
// operator are more YAML under those keys, indented by two spaces.
func startFleetOn(t testing.TB, dsn, server, operator string) []*host {
	t.Helper()
	hosts := make([]*host, 3)
	for i := range hosts {
		hosts[i] = startHost(t, fmt.Sprintf("server:\n  host_id: aep-%d\n  trusted_proxies: [\"127.0.0.1/32\"]\n%sstore:\n  dsn: %q\noperator:\n  snapshot_on_drain: true\n%s", i+1, server, dsn, operator))
		hosts[i].id = fmt.Sprintf("aep-%d", i+1)
	}
	return hosts
}

var sessionIDPattern = regexp.MustCompile(`^s-(.+)-[0-9a-f]{32}$`)

// hostOf is the host id a session id names.
func hostOf(t testing.TB, sid string) string {
	t.Helper()
	m := sessionIDPattern.FindStringSubmatch(sid)
	if m == nil {
		t.Fatalf("session id %q is not s-<host>-<32 hex>", sid)
	}
	return m[1]
}

// hostByID is the host of hosts whose server.host_id is id.
func hostByID(t testing.TB, hosts []*host, id string) *host {
	t.Helper()
	for _, h := range hosts {
		if h.id == id {
			return h
		}
	}
	t.Fatalf("no host has the id %q", id)
	return nil
}

// proxied is an agent speaking HTTP through a proxy: each request is
// POST /send with Accept: application/json, which carries its reply.
type proxied struct {
	base string
	c    *http.Client
	sid  string
	n    int
}

func newProxied(t testing.TB, base string, c *http.Client, caps string) *proxied {
	t.Helper()
	resp, err := c.Post(base+"/session", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		SessionID string `json:"session_id"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
		t.Fatalf("POST /session through the proxy: %d %s", resp.StatusCode, b)
	}
	a := &proxied{base: base, c: c, sid: r.SessionID}
	m := a.ask(t, fmt.Sprintf(`{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"scale","agent_caps":%s,"auth_token":%q}`, caps, token))
	if m["ok"] != true {
		t.Fatalf("handshake through the proxy: %v", m)
	}
	return a
}

// ask sends one message and returns its reply.
func (a *proxied) ask(t testing.TB, line string) map[string]any {
	t.Helper()
	m, err := a.tryAsk(line)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (a *proxied) tryAsk(line string) (map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, a.base+"/send", strings.NewReader(line))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Session-Id", a.sid)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Accept", "application/json")
	resp, err := a.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST /send of session on %s: %d %s", sessionIDPattern.FindStringSubmatch(a.sid)[1], resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reply %s: %w", b, err)
	}
	return m, nil
}

func (a *proxied) next() string { a.n++; return fmt.Sprintf("r%d", a.n) }

// TestProxiedFleet runs three aep hosts on one PostgreSQL behind each
// proxy of deploy/: semantic memory written through one host is recalled
// through another; 30 agents are spread over all three, each request of
// each reaching its session's host; a WebSocket session opened through
// the proxy re-attaches through it by X-Session-Id.
func TestProxiedFleet(t *testing.T) {
	for _, k := range proxies {
		t.Run(k.name, func(t *testing.T) {
			findBinary(t, k.bin)
			hosts := startFleet(t, "aep_e2e_fleet_"+k.name)
			base := startProxy(t, k, hosts)
			proxiedFleet(t, base, hosts, k.ws)
		})
	}
}

// proxiedFleet is TestProxiedFleet's run through the proxy at base in
// front of hosts (which WebSocket sessions reach when ws is set).
func proxiedFleet(t *testing.T, base string, hosts []*host, ws bool) {
	c := newClient()
	run := server.GenerateToken()

	t.Run("semantic memory across hosts", func(t *testing.T) {
		// New sessions land where the proxy balances them; open
		// some until two are on different hosts.
		var writer, reader *proxied
		for range 12 {
			a := newProxied(t, base, c, `["memory"]`)
			switch {
			case writer == nil:
				writer = a
			case hostOf(t, a.sid) != hostOf(t, writer.sid):
				reader = a
			}
			if reader != nil {
				break
			}
		}
		if reader == nil {
			t.Fatal("twelve sessions through the proxy all landed on one host")
		}
		ns := "fleet-" + run
		init := func(a *proxied) string {
			m := a.ask(t, fmt.Sprintf(`{"type":"memory/init/req","id":%q,"proto":"1.0","ts":1,"namespace":%q}`, a.next(), ns))
			id, _ := m["memory_id"].(string)
			if id == "" {
				t.Fatalf("memory/init: %v", m)
			}
			return id
		}
		wid := init(writer)
		m := writer.ask(t, fmt.Sprintf(`{"type":"memory/store/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"entries":[{"key":"dragon","content":"dragons guard the northern pass %s","tier":"semantic"}]}`, writer.next(), wid, run))
		if m["type"] != "memory/store/resp" {
			t.Fatalf("memory/store through %s: %v", hostOf(t, writer.sid), m)
		}
		rid := init(reader)
		m = reader.ask(t, fmt.Sprintf(`{"type":"memory/recall/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"query":"dragon northern"}`, reader.next(), rid))
		hits, _ := m["hits"].([]any)
		if len(hits) != 1 || !strings.Contains(fmt.Sprint(hits[0]), run) {
			t.Fatalf("recall through %s of what %s stored: %v", hostOf(t, reader.sid), hostOf(t, writer.sid), m)
		}
		t.Logf("stored through %s, recalled through %s", hostOf(t, writer.sid), hostOf(t, reader.sid))
	})

	t.Run("30 agents spread", func(t *testing.T) {
		const agents, rounds = 30, 5
		spread := map[string]int{}
		as := make([]*proxied, agents)
		for i := range as {
			as[i] = newProxied(t, base, c, `["tools"]`)
			spread[hostOf(t, as[i].sid)]++
		}
		t.Logf("sessions per host: %v", spread)
		for i := range hosts {
			if got := spread[hosts[i].id]; got < agents/len(hosts)/2 {
				t.Errorf("%s holds %d of %d sessions, want at least %d: %v", hosts[i].id, got, agents, agents/len(hosts)/2, spread)
			}
		}
		// Every agent at once: each request reaches its session's
		// host (elsewhere it would be 404) and is answered once.
		var wg sync.WaitGroup
		errs := make(chan error, agents*rounds)
		for _, a := range as {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					id := a.next()
					m, err := a.tryAsk(fmt.Sprintf(`{"type":"session/info/req","id":%q,"proto":"1.0","ts":1}`, id))
					if err != nil {
						errs <- err
						return
					}
					if m["req_id"] != id || m["session_id"] != a.sid {
						errs <- fmt.Errorf("session/info %s of %s: %v", id, a.sid[:12], m)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	if ws {
		t.Run("websocket re-attach by header", func(t *testing.T) {
			wsProxied(t, base)
		})
	}
}

// wsProxied opens a WebSocket session through the proxy (any host), then
// drops it and re-attaches with X-Session-Id, which the proxy routes to
// the session's host: the re-attached connection is served by it.
func wsProxied(t *testing.T, base string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	for i := range 6 {
		conn, resp, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		sid := resp.Header.Get("X-Session-Id")
		hostOf(t, sid)
		if err := conn.Write(ctx, websocket.MessageText, []byte(handshakeLine("hs", token))); err != nil {
			t.Fatal(err)
		}
		wsWant(ctx, t, conn, "hs")
		conn.CloseNow()

		hdr := http.Header{}
		hdr.Set("X-Session-Id", sid)
		again, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			t.Fatalf("re-attach %d through the proxy to %s: %v", i, hostOf(t, sid), err)
		}
		id := fmt.Sprintf("info%d", i)
		if err := again.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"type":"session/info/req","id":%q,"proto":"1.0","ts":1}`, id))); err != nil {
			t.Fatal(err)
		}
		if m := wsWant(ctx, t, again, id); m["session_id"] != sid {
			t.Fatalf("re-attached session/info: %v", m)
		}
		again.Close(websocket.StatusNormalClosure, "")
	}
}

// wsWant reads frames until the reply to reqID.
func wsWant(ctx context.Context, t *testing.T, conn *websocket.Conn, reqID string) map[string]any {
	t.Helper()
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", reqID, err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m["req_id"] == reqID || (reqID == "hs" && m["type"] == "handshake/resp") {
			if m["type"] == "handshake/resp" && m["ok"] != true {
				t.Fatalf("handshake: %v", m)
			}
			return m
		}
	}
}

// TestSessionMovesAfterDrain drains the host of a session behind HAProxy
// (SIGTERM, with operator.snapshot_on_drain): the agent's next request
// through the proxy finds the session gone; a new session, which the
// proxy puts on a live host, lists the drained session's snapshot in the
// shared store by presenting the old id (a bearer secret), restores it,
// and reads the working memory written on the drained host.
func TestSessionMovesAfterDrain(t *testing.T) {
	k := proxies[0]
	findBinary(t, k.bin)
	hosts := startFleet(t, "aep_e2e_move")
	base := startProxy(t, k, hosts)
	c := newClient()
	old := newProxied(t, base, c, `["memory"]`)
	m := old.ask(t, fmt.Sprintf(`{"type":"memory/init/req","id":%q,"proto":"1.0","ts":1,"namespace":"move"}`, old.next()))
	mid, _ := m["memory_id"].(string)
	m = old.ask(t, fmt.Sprintf(`{"type":"memory/store/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"entries":[{"key":"step","content":41,"tier":"working"}]}`, old.next(), mid))
	if m["type"] != "memory/store/resp" {
		t.Fatalf("store: %v", m)
	}
	from := hostOf(t, old.sid)
	var drained *host
	for i, h := range hosts {
		if fmt.Sprintf("aep-%d", i+1) == from {
			drained = h
		}
	}
	if err := drained.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := drained.cmd.Wait(); err != nil {
		t.Fatalf("%s after SIGTERM: %v\n%s", from, err, drained.stderr.String())
	}
	if !strings.Contains(drained.stderr.String(), "snapshots=1") {
		t.Fatalf("%s drained without snapshotting its session:\n%s", from, drained.stderr.String())
	}
	if _, err := old.tryAsk(fmt.Sprintf(`{"type":"ping","id":%q,"proto":"1.0","ts":1}`, old.next())); err == nil {
		t.Fatal("the drained host's session still answers")
	}

	var moved *proxied
	deadline := time.Now().Add(30 * time.Second)
	for moved == nil {
		// Until HAProxy's check has seen the host go, a new session may
		// still be sent to it and refused.
		resp, err := c.Post(base+"/session", "application/json", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				moved = newProxied(t, base, c, `["memory"]`)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new session through the proxy: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if hostOf(t, moved.sid) == from {
		t.Fatalf("a new session landed on the drained host %s", from)
	}
	m = moved.ask(t, fmt.Sprintf(`{"type":"session/snapshot/list/req","id":%q,"proto":"1.0","ts":1,"target":"sql","session_ids":[%q]}`, moved.next(), old.sid))
	snaps, _ := m["snapshots"].([]any)
	if len(snaps) != 1 {
		t.Fatalf("snapshots of the drained session: %v", m)
	}
	sid, _ := snaps[0].(map[string]any)["snapshot_id"].(string)
	m = moved.ask(t, fmt.Sprintf(`{"type":"session/restore/req","id":%q,"proto":"1.0","ts":1,"snapshot_id":%q}`, moved.next(), sid))
	if m["type"] != "session/restore/resp" {
		t.Fatalf("restore on %s: %v", hostOf(t, moved.sid), m)
	}
	m = moved.ask(t, fmt.Sprintf(`{"type":"memory/retrieve/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"keys":["step"],"tier":"working"}`, moved.next(), mid))
	if !strings.Contains(fmt.Sprint(m), "41") {
		t.Fatalf("working memory after the move from %s to %s: %v", from, hostOf(t, moved.sid), m)
	}
	t.Logf("session moved from %s to %s", from, hostOf(t, moved.sid))
}

// TestDrainMidRun runs 30 agents spread over three aep hosts behind each
// proxy of deploy/, each in a loop of working-memory writes and steps of
// an env episode, over the Go client's WebSocket, single-exchange and
// HTTP+SSE transports with moving on (client.Moving). One host is drained
// by SIGTERM mid-run: its agents move through the proxy to the other
// hosts and restore their sessions' drain snapshots. Every request an
// agent issues ends exactly once, answered or reported interrupted
// (client.ErrInterrupted); none is answered twice (an episode's step
// counter never skips); what was answered before the drain began is in
// the restored working memory and episode, and both carry on from there.
func TestDrainMidRun(t *testing.T) {
	for _, k := range proxies {
		t.Run(k.name, func(t *testing.T) {
			findBinary(t, k.bin)
			hosts := startFleetWith(t, "aep_e2e_drainrun_"+k.name, "  drain_timeout: 10s\n")
			base := startProxy(t, k, hosts)
			drainMidRun(t, k, base, hosts, sigtermDrain)
		})
	}
}

// runner is one agent of TestDrainMidRun. Its fields are its own
// goroutine's until the run ends; after tells the test how far it got.
type runner struct {
	i       int
	c       *client.Client
	mid, ep string
	first   string // the first session's id

	issued, answered, interrupted int
	errs                          []string

	step   int  // the episode's step as last known
	unsure int  // steps interrupted since step was known
	resync bool // step must be read back before the next one
	moves  int
	// written holds the rounds whose key is in working memory; before,
	// those answered before the drain began.
	written, before map[int]bool

	after  atomic.Int32 // rounds done since the move
	rounds atomic.Int32 // rounds done
}

func (r *runner) failf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf("agent %d: ", r.i)+fmt.Sprintf(format, args...))
}

// call issues one request and files its outcome: answered (a reply, an
// error reply included) or interrupted. Anything else is a request lost.
func (r *runner) call(what string, f func() error) (ok, interrupted bool) {
	r.issued++
	err := f()
	var we *wire.Error
	switch {
	case err == nil:
		r.answered++
		return true, false
	case errors.Is(err, client.ErrInterrupted):
		r.interrupted++
		return false, true
	case errors.As(err, &we):
		r.answered++
		r.failf("%s answered with an error: %v", what, err)
	default:
		r.failf("%s neither answered nor interrupted: %v", what, err)
	}
	return false, false
}

// sync reads the episode back after a move or an interrupted step and
// checks it against what the agent knows: the step must lie between the
// last one answered and that plus those interrupted, and working memory
// must hold every key whose write was answered — a move included (which
// the agent learns only once the read is answered: a request waits for a
// move under way), since a drain seals its host before snapshotting
// (server/drain.go): nothing answered is missing from the snapshot.
func (r *runner) sync(ctx context.Context, memory bool) {
	var obs *msg.EnvObserveResp
	if ok, _ := r.call("env/observe", func() (err error) { obs, err = r.c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: r.ep}); return }); !ok {
		return
	}
	moved := false
	if n := len(r.c.Moves()); n != r.moves {
		r.moves, moved = n, true
	}
	lo, hi := r.step, r.step+r.unsure
	if obs.Step < lo || obs.Step > hi {
		r.failf("episode at step %d (moved: %v), want %d..%d", obs.Step, moved, lo, hi)
	}
	if g := guesses(obs.Observation); g != obs.Step {
		r.failf("observation %s at step %d", obs.Observation, obs.Step)
	}
	r.step, r.unsure, r.resync = obs.Step, 0, false
	if !memory && !moved {
		return
	}
	keys := make([]string, 0, len(r.written))
	for k := range r.written {
		keys = append(keys, fmt.Sprintf("r%d", k))
	}
	tier := msg.MemoryRetrieveReqTierWorking
	var got *msg.MemoryRetrieveResp
	if ok, _ := r.call("memory/retrieve", func() (err error) {
		got, err = r.c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: r.mid, Keys: keys, Tier: &tier})
		return
	}); !ok {
		return
	}
	have := map[string]string{}
	for _, e := range got.Entries {
		have[e.Key] = string(e.Content)
	}
	for k := range r.written {
		if have[fmt.Sprintf("r%d", k)] == fmt.Sprint(k) {
			continue
		}
		r.failf("working memory lost r%d (moved: %v, written before the drain: %v)", k, moved, r.before[k])
		delete(r.written, k)
	}
}

func guesses(obs json.RawMessage) int {
	var o struct{ Guesses int }
	if json.Unmarshal(obs, &o) != nil {
		return -1
	}
	return o.Guesses
}

// run is the agent's loop: a working-memory write and an env step a
// round, until stop closes.
func (r *runner) run(ctx context.Context, stop <-chan struct{}, draining *atomic.Bool) {
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if len(r.errs) > 10 {
			return // broken: more would only repeat it
		}
		if r.resync || len(r.c.Moves()) != r.moves {
			r.sync(ctx, false)
		}
		// A move that finishes from here on may take this round's
		// requests to the new session.
		m0 := r.moves
		if r.resync {
			continue // the read back was interrupted; try again
		}
		if ok, _ := r.call("memory/store", func() error {
			_, err := r.c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: r.mid, Entries: []msg.MemoryEntry{{Key: fmt.Sprintf("r%d", round), Content: json.RawMessage(fmt.Sprint(round)), Tier: "working"}}})
			return err
		}); ok {
			r.written[round] = true
			if !draining.Load() {
				r.before[round] = true
			}
		}
		var st *msg.EnvStepResp
		ok, interrupted := r.call("env/step", func() (err error) {
			st, err = r.c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.ep, Action: json.RawMessage(`1000`)})
			return
		})
		switch {
		case ok && len(r.c.Moves()) != m0:
			// A move finished while it ran: which session answered
			// is unknown, so the step is read back after the move.
			r.unsure++
			r.resync = true
		case ok:
			if st.Step != r.step+1 || guesses(st.Observation) != st.Step {
				r.failf("step answered as %d (observation %s) after step %d: a step ran twice or went missing", st.Step, st.Observation, r.step)
			}
			r.step = st.Step
		case interrupted:
			r.unsure++
			r.resync = true
		}
		if r.moves > 0 {
			r.after.Add(1)
		}
		r.rounds.Add(1)
	}
}

// drainer drains host h (named id), which holds sessions sessions, while
// the agents run, and returns once it is drained: its sessions saved and
// ended, so their clients move.
type drainer func(ctx context.Context, t *testing.T, h *host, id string, sessions int)

// sigtermDrain drains a host as an orchestrator does: SIGTERM, and the
// host exits once its sessions are snapshotted.
func sigtermDrain(ctx context.Context, t *testing.T, h *host, id string, sessions int) {
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- h.cmd.Wait() }()
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-ctx.Done():
		t.Fatalf("%s did not exit after SIGTERM", id)
	}
	if exitErr != nil {
		t.Fatalf("%s after SIGTERM: %v", id, exitErr)
	}
	if want := fmt.Sprintf("snapshots=%d", sessions); !strings.Contains(h.stderr.String(), want) {
		t.Errorf("%s did not log %s:\n%s", id, want, tail(h.stderr.String(), 2000))
	}
}

func drainMidRun(t *testing.T, k proxyKind, base string, hosts []*host, drain drainer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const agents = 30
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	dialers := []struct {
		name string
		dial client.Dialer
	}{
		{"websocket", client.WebSocketDialer(wsURL, nil)},
		{"single-exchange", client.ExchangeDialer(base, nil, nil)},
		{"http-sse", client.HTTPDialer(base, nil, nil)},
	}
	rs := make([]*runner, agents)
	spread := map[string]int{}
	for i := range rs {
		d := dialers[i%len(dialers)]
		c, err := client.Moving(ctx, d.dial, nil)
		if err != nil {
			t.Fatalf("agent %d over %s: %v", i, d.name, err)
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
		opts := json.RawMessage(`{"high":1000,"max_steps":100000}`)
		er, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed, Options: &opts})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = &runner{i: i, c: c, mid: mi.MemoryID, ep: er.EpisodeID, first: c.SessionID(), written: map[int]bool{}, before: map[int]bool{}}
		spread[hostOf(t, c.SessionID())]++
	}
	t.Logf("sessions per host: %v", spread)
	// Every host takes part. Not an even spread: a third of the agents
	// (single exchange) hold no connection for least_conn to count, and
	// each nginx worker counts only its own, so one host may get as few as
	// 4 of 30 (seen 4–9 for the same host in repeated runs).
	for _, h := range hosts {
		if got := spread[h.id]; got < agents/len(hosts)/3 {
			t.Fatalf("%s holds %d of %d sessions, want at least %d: %v", h.id, got, agents, agents/len(hosts)/3, spread)
		}
	}
	// Drain the host holding the most sessions.
	drainedID := hosts[0].id
	for id, n := range spread {
		if n > spread[drainedID] {
			drainedID = id
		}
	}
	drained := hostByID(t, hosts, drainedID)

	stop := make(chan struct{})
	var draining atomic.Bool
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() { defer wg.Done(); r.run(ctx, stop, &draining) }()
	}
	time.Sleep(time.Second) // a few dozen rounds each before the drain
	draining.Store(true)
	// Run on until the host is drained and every agent it held has done
	// some rounds in its new session.
	drain(ctx, t, drained, drainedID, spread[drainedID])
	for _, r := range rs {
		if hostOf(t, r.first) != drainedID {
			continue
		}
		for r.after.Load() < 5 {
			select {
			case <-ctx.Done():
				close(stop)
				wg.Wait()
				t.Fatalf("agent %d has not carried on after the drain of %s: %d moves %+v, errors %v", r.i, drainedID, len(r.c.Moves()), r.c.Moves(), r.errs)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // the others too, a few more rounds
	close(stop)
	wg.Wait()

	var issued, answered, interrupted, moved int
	for _, r := range rs {
		for _, e := range r.errs {
			t.Error(e)
		}
		if r.issued != r.answered+r.interrupted {
			t.Errorf("agent %d issued %d requests: %d answered, %d interrupted, %d lost", r.i, r.issued, r.answered, r.interrupted, r.issued-r.answered-r.interrupted)
		}
		issued, answered, interrupted = issued+r.issued, answered+r.answered, interrupted+r.interrupted
		// The episode and every key the loop kept are there at the end.
		n := len(r.errs)
		r.sync(ctx, true)
		for _, e := range r.errs[n:] {
			t.Error(e)
		}
		ms := r.c.Moves()
		if hostOf(t, r.first) != drainedID {
			if len(ms) != 0 {
				t.Errorf("agent %d on %s moved: %+v", r.i, hostOf(t, r.first), ms)
			}
			continue
		}
		moved++
		if len(ms) != 1 || ms[0].Err != nil || ms[0].From != r.first || ms[0].SnapshotID == "" || ms[0].Fresh || hostOf(t, ms[0].To) == drainedID || ms[0].To != r.c.SessionID() {
			t.Errorf("agent %d: moves %+v", r.i, ms)
		}
	}
	t.Logf("through %s: %d agents moved off %s; %d requests: %d answered, %d interrupted",
		k.name, moved, drainedID, issued, answered, interrupted)
}

// proxyNoise is what varies between two log lines of the same event:
// nginx's and HAProxy's timestamps, process and connection numbers, and
// a client's port (an upstream's stays: it names the host).
var proxyNoise = regexp.MustCompile(`^\S+ \S+ |\d+#\d+: \*\d+ |( 127\.0\.0\.\d+):\d+`)

// proxyLogSummary sums a proxy's log up by event, for a failed run whose
// log is too long to print: each distinct line (its noise cut) with how
// often it came and the first and last time, at most max of them.
func proxyLogSummary(log string, max int) string {
	type seen struct {
		n           int
		first, last string
	}
	var order []string
	by := map[string]*seen{}
	for line := range strings.Lines(log) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		when := ""
		if f := strings.Fields(line); len(f) > 1 {
			when = f[1]
		}
		key := proxyNoise.ReplaceAllString(line, "$1")
		e := by[key]
		if e == nil {
			e = &seen{first: when}
			by[key] = e
			order = append(order, key)
		}
		e.n++
		e.last = when
	}
	var b strings.Builder
	for i, key := range order {
		if i == max {
			fmt.Fprintf(&b, "… and %d more distinct lines\n", len(order)-max)
			break
		}
		e := by[key]
		fmt.Fprintf(&b, "%6d× %s–%s %s\n", e.n, e.first, e.last, key)
	}
	return b.String()
}
