//go:build aepfleet

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/internal/proxyconf"
)

// The routing proxy that sends a session to the address its id names
// (deploy/haproxy/haproxy-by-ip.cfg.tmpl, docs/deploy.md), rendered with
// the fleet's values (internal/proxyconf.Fleet): the file Kubernetes runs
// (deploy/kubernetes/proxy-config.yaml) but for the network and the pool,
// which internal/proxyconf's tests compare. Three hosts listen on
// 127.0.0.2-127.0.0.4 port 8765, each with its address as its host id.

// startByIPFleet starts a host on each of proxyconf.FleetHosts, on the
// store of dsn, with its address as server.host_id.
func startByIPFleet(t *testing.T, dsn, server string) []*host {
	t.Helper()
	hosts := make([]*host, len(proxyconf.FleetHosts))
	for i, ip := range proxyconf.FleetHosts {
		addr := net.JoinHostPort(ip, fmt.Sprint(proxyconf.HostPort))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is taken (another run of this suite?): %v", addr, err)
		}
		ln.Close()
		hosts[i] = startHostAt(t, fmt.Sprintf("server:\n  host_id: %s\n  trusted_proxies: [\"127.0.0.1/32\"]\n%sstore:\n  dsn: %q\noperator:\n  snapshot_on_drain: true\n", ip, server, dsn), addr)
		hosts[i].id = ip
	}
	return hosts
}

// startByIPProxy runs HAProxy with the template rendered with the
// fleet's values, byte for byte, listening where AEP_PROXY_BIND says (the
// file's own default is :8700), and returns its base URL once it answers.
func startByIPProxy(t *testing.T) string {
	t.Helper()
	bin := findBinary(t, "haproxy")
	tmpl, err := os.ReadFile(filepath.Join("..", proxyconf.TemplatePath))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := proxyconf.Render(string(tmpl), proxyconf.Fleet)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Env = append(os.Environ(), "AEP_PROXY_BIND="+addr)
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("haproxy output (tail):\n%s", tail(out.String(), 4000))
		}
	})
	base := "http://" + addr
	waitNewSessions(t, base)
	return base
}

// waitNewSessions waits until the proxy at base opens new sessions on
// each of hosts (all of them when hosts is nil, any one): its pool's
// checks have seen them ready (rise 2, inter 2s).
func waitNewSessions(t *testing.T, base string, hosts ...*host) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Post(base+"/session", "application/json", nil)
		if err == nil {
			var r struct {
				SessionID string `json:"session_id"`
			}
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&r) == nil {
				seen[hostOf(t, r.SessionID)] = true
			}
			resp.Body.Close()
		}
		done := len(seen) > 0
		for _, h := range hosts {
			done = done && seen[h.id]
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy opens new sessions on %v only, after 20 s: %v", seen, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFleetByIP runs the fleet behind the routing proxy by address:
// sessions reach the host their id names (every request of 30 agents
// over three hosts, a WebSocket re-attached); an id naming an address
// outside the configured network is refused by the proxy with no
// connection attempted; the store cut off for 10 s moves no session
// (TestFleetStoreOutage's run); a host killed with -9 sends its agents
// to live hosts, where they move (TestFleetHostKilled's run).
func TestFleetByIP(t *testing.T) {
	findBinary(t, "haproxy")
	link := startStoreLink(t, "127.0.0.1:5432")
	hosts := startByIPFleet(t, link.dsn(t, pgtest.DSN(t, "aep_e2e_byip")), "  snapshots:\n    auto_interval: 1s\n    store_wait: 3s\n")
	base := startByIPProxy(t)

	t.Run("sessions reach their host by address", func(t *testing.T) {
		proxiedFleet(t, base, hosts, true)
	})
	t.Run("an address outside the network is never connected", func(t *testing.T) {
		outsideNetwork(t, base)
	})
	t.Run("store outage", func(t *testing.T) {
		storeOutage(t, base, hosts, link)
	})
	// The proxy's checks take a few seconds to see the hosts ready again.
	waitNewSessions(t, base, hosts...)
	t.Run("host killed", func(t *testing.T) {
		hostKilled(t, base, hosts)
	})
}

// countingListener listens on addr and counts the connections it
// accepts, answering each request 418.
type countingListener struct {
	ln       net.Listener
	srv      *http.Server
	accepted atomic.Int64
}

// close stops listening and ends the connections already accepted, which
// a proxy would otherwise reuse.
func (l *countingListener) close() { _ = l.srv.Close() }

func listenCounting(t *testing.T, addr string) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	l := &countingListener{ln: ln}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "not an aep host", http.StatusTeapot)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				l.accepted.Add(1)
			}
		},
	}
	l.srv = srv
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return l
}

// outsideNetwork sends requests naming addresses outside the fleet's
// network (127.0.0.2-127.0.0.5) to the proxy: each is answered 404
// not_found by the proxy itself and the listeners on those addresses
// accept nothing. A listener inside the network but with no host shows
// that the proxy does connect where the network allows.
func outsideNetwork(t *testing.T, base string) {
	const hex = "0123456789abcdef0123456789abcdef"
	// The proxy's own answer (the template's), not a host's "no session …".
	const refused = `{"ok":false,"error":"not_found","message":"no such session: its id names no host of this proxy"}`
	port := fmt.Sprint(proxyconf.HostPort)
	outside := []*countingListener{
		listenCounting(t, net.JoinHostPort("127.0.0.6", port)),
		listenCounting(t, net.JoinHostPort("127.0.0.9", port)),
	}
	inside := listenCounting(t, net.JoinHostPort("127.0.0.5", port))

	c := &http.Client{Timeout: 10 * time.Second}
	send := func(method, path string, ids ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"type":"ping","id":"p","proto":"1.0","ts":1}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			req.Header.Add("X-Session-Id", id)
		}
		if path == "/ws" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s with %v: %v", method, path, ids, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}

	// The control: an id naming 127.0.0.5, inside the network, is sent
	// there.
	if code, body := send(http.MethodPost, "/send", "s-127.0.0.5-"+hex); code != http.StatusTeapot || inside.accepted.Load() == 0 {
		t.Fatalf("an id naming 127.0.0.5 (inside the network): %d %q, %d connections there; want the listener's 418", code, body, inside.accepted.Load())
	}

	for _, tc := range []struct {
		name   string
		method string
		path   string
		ids    []string
		code   int
		want   string
	}{
		{"send to 127.0.0.6", http.MethodPost, "/send", []string{"s-127.0.0.6-" + hex}, 404, refused},
		{"stream from 127.0.0.9", http.MethodGet, "/stream", []string{"s-127.0.0.9-" + hex}, 404, refused},
		{"websocket re-attach to 127.0.0.6", http.MethodGet, "/ws", []string{"s-127.0.0.6-" + hex}, 404, refused},
		{"the proxy's own address", http.MethodPost, "/send", []string{"s-127.0.0.1-" + hex}, 404, refused},
		{"an address of another network", http.MethodPost, "/send", []string{"s-10.1.2.3-" + hex}, 404, refused},
		{"not an address", http.MethodPost, "/send", []string{"s-127.0.0.999-" + hex}, 404, refused},
		{"a name, not an address", http.MethodPost, "/send", []string{"s-aep-1-" + hex}, 404, refused},
		{"a port smuggled in", http.MethodPost, "/send", []string{"s-127.0.0.6:22-" + hex}, 404, refused},
		{"a short random part", http.MethodPost, "/send", []string{"s-127.0.0.6-0123"}, 404, refused},
		{"two ids, the last inside", http.MethodPost, "/send", []string{"s-127.0.0.6-" + hex, "s-127.0.0.2-" + hex}, 400, `"error":"bad_request"`},
		{"two ids, the first inside", http.MethodPost, "/send", []string{"s-127.0.0.2-" + hex, "s-127.0.0.6-" + hex}, 400, `"error":"bad_request"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(tc.method, tc.path, tc.ids...)
			if code != tc.code || (tc.code == 404 && body != tc.want) || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s with %v: %d %q, want %d with %s", tc.method, tc.path, tc.ids, code, body, tc.code, tc.want)
			}
		})
	}
	for _, l := range outside {
		if n := l.accepted.Load(); n != 0 {
			t.Errorf("the proxy connected to %s %d times for ids outside its network", l.ln.Addr(), n)
		}
	}

	// An id naming 127.0.0.5 with nothing listening there: the host is
	// dead, the request goes to a live host, which answers 404 (the
	// client moves), and nothing ran.
	// The server too: a connection HAProxy opened to it earlier would
	// otherwise stay, and be reused for this request.
	inside.close()
	time.Sleep(100 * time.Millisecond)
	if code, body := send(http.MethodPost, "/send", "s-127.0.0.5-"+hex); code != http.StatusNotFound || !strings.Contains(body, `"message":"no session `) {
		t.Errorf("an id naming 127.0.0.5 with no host there: %d %q, want a live host's 404", code, body)
	}
}

// TestFleetByIPDrain drains the host holding most of 30 agents by
// SIGTERM mid-run behind the routing proxy by address: its agents move
// through the proxy to the other hosts and nothing answered is lost
// (TestDrainMidRun's run). Without automatic snapshots, as
// TestDrainMidRun runs.
func TestFleetByIPDrain(t *testing.T) {
	findBinary(t, "haproxy")
	hosts := startByIPFleet(t, pgtest.DSN(t, "aep_e2e_byip_drain"), "")
	base := startByIPProxy(t)
	waitNewSessions(t, base, hosts...)
	drainMidRun(t, proxyKind{name: "haproxy by address"}, base, hosts, sigtermDrain)
}
