package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkProxiedFleet measures ping round trips of 96 concurrent
// sessions sent directly to one aep host and through each proxy of
// deploy/ to 1, 2 and 3 hosts sharing one PostgreSQL store, over the
// single-exchange mode (POST /send with Accept: application/json) and over
// WebSocket, all in one run (docs/PERFORMANCE.md, Fleet behind a proxy).
// Beside ops/s it reports the CPU time per round trip of the aep hosts,
// the proxy, this process (the client) and the PostgreSQL backends serving
// the hosts' connections, read from /proc before and after.
//
// A proxy configured for fewer hosts keeps the shipped file: its unused
// servers point at a listener that closes every connection, so health
// checks (HAProxy) and failed attempts (nginx) take them out of the pool.
func BenchmarkProxiedFleet(b *testing.B) {
	const sessions = 96
	findBinary(b, "haproxy")
	fleet := startFleet(b, "aep_e2e_bench")
	dead := closingHost(b)
	pg := newPGBackends(fleet)

	type target struct {
		name    string
		base    string
		hosts   []*host // the hosts that take sessions
		proxies []int   // the proxy's processes
	}
	targets := []target{{name: "direct", base: fleet[0].base, hosts: fleet[:1]}}
	for _, k := range proxies {
		if k.name == "nginx" && !haveBinary(k.bin) {
			b.Logf("nginx is not installed: its rows are left out")
			continue
		}
		for n := 1; n <= len(fleet); n++ {
			use := append([]*host{}, fleet[:n]...)
			for len(use) < len(fleet) {
				use = append(use, dead)
			}
			base := startProxy(b, k, use)
			pids := listeners(b, strings.TrimPrefix(base, "http://"))
			targets = append(targets, target{name: fmt.Sprintf("%s/hosts=%d", k.name, n), base: base, hosts: fleet[:n], proxies: pids})
		}
	}

	// Sessions are opened once per target and kept across the runs of
	// its sub-benchmark (each run's cleanups end with it).
	var mu sync.Mutex
	var conns []*websocket.Conn
	b.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.CloseNow()
		}
	})
	type opened struct {
		single []*proxied
		ws     []*wsAgent
	}
	cache := map[string]*opened{}
	c := benchClient(sessions)

	for _, tr := range []string{"single-exchange", "websocket"} {
		for _, tg := range targets {
			b.Run(tr+"/"+tg.name, func(b *testing.B) {
				key := tr + "/" + tg.name
				o := cache[key]
				if o == nil {
					o = &opened{}
					spread := map[string]int{}
					for range sessions {
						var sid string
						if tr == "websocket" {
							w := dialWSAgent(b, tg.base)
							mu.Lock()
							conns = append(conns, w.c)
							mu.Unlock()
							o.ws, sid = append(o.ws, w), w.sid
						} else {
							a := newProxied(b, tg.base, c, `["tools"]`)
							o.single, sid = append(o.single, a), a.sid
						}
						spread[hostOf(b, sid)]++
					}
					for i := range tg.hosts {
						if spread[fmt.Sprintf("aep-%d", i+1)] == 0 {
							b.Fatalf("no session on aep-%d: %v", i+1, spread)
						}
					}
					if len(spread) != len(tg.hosts) {
						b.Fatalf("sessions on unexpected hosts: %v", spread)
					}
					b.Logf("sessions per host: %v", spread)
					cache[key] = o
				}
				var do []func(int) error
				for _, a := range o.single {
					do = append(do, a.ping)
				}
				for _, w := range o.ws {
					do = append(do, w.ping)
				}
				pids := make([]int, len(tg.hosts))
				for i, h := range tg.hosts {
					pids[i] = h.cmd.Process.Pid
				}
				runLoad(b, do, pids, tg.proxies, pg)
			})
		}
	}
}

// runLoad shares b.N round trips among one goroutine per session and
// reports the rate and the CPU time per round trip of each party.
func runLoad(b *testing.B, do []func(int) error, hosts, proxy []int, pg *pgBackends) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	hostCPU, proxyCPU, selfCPU, pgCPU := procsCPU(b, hosts), procsCPU(b, proxy), selfCPUTime(), pg.cpu()
	b.ResetTimer()
	start := time.Now()
	for _, f := range do {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) || failed.Load() != nil {
					return
				}
				if err := f(int(i)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(per(procsCPU(b, hosts)-hostCPU), "aep-cpu-ns/op")
	if len(proxy) > 0 {
		b.ReportMetric(per(procsCPU(b, proxy)-proxyCPU), "proxy-cpu-ns/op")
	}
	b.ReportMetric(per(selfCPUTime()-selfCPU), "client-cpu-ns/op")
	b.ReportMetric(per(pg.cpu()-pgCPU), "pg-cpu-ns/op")
}

func pingLine(i int) (string, string) {
	id := "p" + strconv.Itoa(i)
	return id, `{"type":"ping","id":"` + id + `","proto":"1.0","ts":1}`
}

// ping is one single-exchange round trip: POST /send answered with pong.
func (a *proxied) ping(i int) error {
	id, line := pingLine(i)
	m, err := a.tryAsk(line)
	if err != nil {
		return err
	}
	if m["type"] != "pong" || m["req_id"] != id {
		return fmt.Errorf("reply to ping %s: %v", id, m)
	}
	return nil
}

// wsAgent is a handshaken WebSocket session.
type wsAgent struct {
	c   *websocket.Conn
	sid string
}

func dialWSAgent(b *testing.B, base string) *wsAgent {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &wsAgent{c: c, sid: resp.Header.Get("X-Session-Id")}
	if err := c.Write(ctx, websocket.MessageText, []byte(handshakeLine("hs", token))); err != nil {
		b.Fatal(err)
	}
	for {
		_, d, err := c.Read(ctx)
		if err != nil {
			b.Fatalf("handshake over WebSocket: %v", err)
		}
		if bytes.Contains(d, []byte(`"handshake/resp"`)) {
			if !bytes.Contains(d, []byte(`"ok":true`)) {
				b.Fatalf("handshake: %s", d)
			}
			return w
		}
	}
}

// ping is one WebSocket round trip: a ping frame, then frames until its
// pong.
func (w *wsAgent) ping(i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, line := pingLine(i)
	if err := w.c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
		return err
	}
	want := []byte(`"req_id":"` + id + `"`)
	for {
		_, d, err := w.c.Read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the pong of %s: %w", id, err)
		}
		if bytes.Contains(d, want) {
			if !bytes.Contains(d, []byte(`"type":"pong"`)) {
				return fmt.Errorf("reply to ping %s: %s", id, d)
			}
			return nil
		}
	}
}

// benchClient keeps a connection per session, where newClient's pool of
// 16 would close and reopen connections under 96 concurrent requests.
func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxIdleConns: 4 * conns}, Timeout: time.Minute}
}

func haveBinary(name string) bool {
	if _, err := exec.LookPath(name); err == nil {
		return true
	}
	return fileExists(filepath.Join("/usr/sbin", name))
}

// closingHost stands for a host that is down: its address accepts
// connections and closes them at once, and stays reserved for the run.
func closingHost(b *testing.B) *host {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return &host{addr: ln.Addr().String(), base: "http://" + ln.Addr().String()}
}

// procCPU is the user and system CPU time of a process, all its threads,
// from /proc/<pid>/stat (in clock ticks of 10 ms).
func procCPU(pid int) (time.Duration, error) {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces.
	f := strings.Fields(string(s[bytes.LastIndexByte(s, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(u+k) * 10 * time.Millisecond, nil
}

func procsCPU(b *testing.B, pids []int) time.Duration {
	var sum time.Duration
	for _, p := range pids {
		d, err := procCPU(p)
		if err != nil {
			b.Fatal(err)
		}
		sum += d
	}
	return sum
}

func selfCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tcpSocket is a line of /proc/net/tcp: the local and remote ports of a
// socket and whether it listens.
type tcpSocket struct {
	lport, rport int
	listen       bool
}

// tcpSockets reads /proc/net/tcp (IPv4: every address here is
// 127.0.0.1), by socket inode.

func tcpSockets() map[string]tcpSocket {
	out := map[string]tcpSocket{}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		port := func(a string) int {
			_, p, _ := strings.Cut(a, ":")
			n, _ := strconv.ParseInt(p, 16, 32)
			return int(n)
		}
		out[f[9]] = tcpSocket{lport: port(f[1]), rport: port(f[2]), listen: f[3] == "0A"}
	}
	return out
}

// socketInodes is the inodes of the sockets a process holds open.
func socketInodes(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"))
		}
	}
	return out
}

func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// listeners is the processes holding the listening socket of addr: the
// proxy (nginx: its master and workers, which share the socket).
func listeners(b *testing.B, addr string) []int {
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	var inode string
	for ino, s := range tcpSockets() {
		if s.listen && s.lport == port {
			inode = ino
		}
	}
	if inode == "" {
		b.Fatalf("nothing listens on %s", addr)
	}
	var out []int
	for _, pid := range allPids() {
		for _, ino := range socketInodes(pid) {
			if ino == inode {
				out = append(out, pid)
				break
			}
		}
	}
	if len(out) == 0 {
		b.Fatalf("no process holds the socket listening on %s", addr)
	}
	return out
}

// pgBackends finds the PostgreSQL backends serving the hosts' connections
// (a backend's title names its client as "127.0.0.1(<port>)"), so the
// store's share of a round trip is measured, not assumed.
type pgBackends struct{ hosts []*host }

func newPGBackends(hosts []*host) *pgBackends { return &pgBackends{hosts: hosts} }

// cpu is the CPU time of the backends now connected to the hosts. A
// backend that ended between two readings is missed; one that started
// counts its whole life.
func (p *pgBackends) cpu() time.Duration {
	socks := tcpSockets()
	clients := map[string]bool{}
	for _, h := range p.hosts {
		for _, ino := range socketInodes(h.cmd.Process.Pid) {
			// 5432: internal/pgtest's server (AEP_TEST_POSTGRES_DSN elsewhere
			// is not followed: its backends would not be counted).
			if s, ok := socks[ino]; ok && !s.listen && s.rport == 5432 {
				clients["127.0.0.1("+strconv.Itoa(s.lport)+")"] = true
			}
		}
	}
	var sum time.Duration
	for _, pid := range allPids() {
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.HasPrefix(cl, []byte("postgres:")) {
			continue
		}
		for c := range clients {
			if bytes.Contains(cl, []byte(c)) {
				if d, err := procCPU(pid); err == nil {
					sum += d
				}
				break
			}
		}
	}
	return sum
}
