package aepbin_test

import (
	"encoding/json"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// No network in any sandbox tier unless granted (docs/SECURITY.md,
// Network): with the real binary, as root (namespaces), as uid 65534
// (bwrap) and in the supervised tier forced as uid 65534 without
// capabilities, a command tries every way to the network the test
// listens on; a command of a capability the operator granted network
// connects.

// netProbe tries each way out and prints one JSON object: what each gave.
const netProbe = `
import ctypes, json, os, socket, sys
port = int(sys.argv[1])
out = {}
def attempt(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = "refused:" + os.strerror(e.errno)
def tcp4():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(2); s.connect(("127.0.0.1", port))
def tcp6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(2); s.connect(("::1", port))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", port))
def netlink():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
def unix():
    a, b = socket.socketpair(socket.AF_UNIX)
libc = ctypes.CDLL(None, use_errno=True)
def sys_call(nr, *args):
    r = libc.syscall(nr, *args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def io_uring():
    params = ctypes.create_string_buffer(120)
    fd = sys_call(425, 8, params)  # io_uring_setup
    os.close(fd)
def clone3_userns():
    args = (ctypes.c_uint64 * 11)()
    args[0] = 0x10000000  # CLONE_NEWUSER
    args[4] = 17          # exit_signal SIGCHLD
    pid = sys_call(435, args, ctypes.sizeof(args))
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
def unshare_userns():
    sys_call(272, 0x10000000)
def i386_socket():
    # socket(AF_INET, SOCK_STREAM) through the 32-bit ABI (int 0x80,
    # i386 socket = 359): another architecture's table.
    import mmap
    code = bytes.fromhex("b867010000" "bb02000000" "b901000000" "31d2" "cd80" "c3")
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    r = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
    if r < 0:
        raise OSError(-r, os.strerror(-r))
for name, f in [("tcp4", tcp4), ("tcp6", tcp6), ("udp", udp), ("netlink", netlink), ("unix", unix),
                ("io_uring", io_uring), ("clone3_userns", clone3_userns), ("unshare_userns", unshare_userns),
                ("i386_socket", i386_socket)]:
    attempt(name, f)
print(json.dumps(out))
`

// listeners counts every connection and datagram to one port of the
// loopback, IPv4 and IPv6.
type listeners struct {
	port int
	seen atomic.Int32
}

func listen(t *testing.T) *listeners {
	t.Helper()
	l := &listeners{}
	tcp4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.port = tcp4.Addr().(*net.TCPAddr).Port
	accept := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.seen.Add(1)
			c.Close()
		}
	}
	go accept(tcp4)
	t.Cleanup(func() { tcp4.Close() })
	if tcp6, err := net.Listen("tcp6", "[::1]:"+jsonInt(l.port)); err == nil {
		go accept(tcp6)
		t.Cleanup(func() { tcp6.Close() })
	}
	if udp, err := net.ListenPacket("udp4", "127.0.0.1:"+jsonInt(l.port)); err == nil {
		go func() {
			buf := make([]byte, 64)
			for {
				if _, _, err := udp.ReadFrom(buf); err != nil {
					return
				}
				l.seen.Add(1)
			}
		}()
		t.Cleanup(func() { udp.Close() })
	}
	return l
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

func writeProbe(t *testing.T, c *client.Client) {
	t.Helper()
	res, err := c.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "probe.py", "content": netProbe}})
	if err != nil || !res.Success {
		t.Fatalf("write_file: %+v %v", res, err)
	}
}

// probeResult decodes the probe's line out of a command's output.
func probeResult(t *testing.T, out string) map[string]string {
	t.Helper()
	i := strings.Index(out, "{")
	j := strings.LastIndex(out, "}")
	var m map[string]string
	if i < 0 || j < i || json.Unmarshal([]byte(out[i:j+1]), &m) != nil {
		t.Fatalf("the probe printed no result: %s", out)
	}
	return m
}

func TestNoNetworkUnlessGranted(t *testing.T) {
	const config = `plugins:
  - {name: tools, type: tools, cls: aep.tools.builtin}
  - {name: proc, type: proc, cls: aep.proc.builtin, config: {network: true}}
`
	modes := []struct {
		name, tier string
		opts       aepbin.Options
	}{
		{"namespaces", "namespaces", aepbin.Options{Config: config}},
		{"bwrap-uid65534", "namespaces", aepbin.Options{Nobody: true, Config: config}},
		{"supervised-uid65534", "supervised", aepbin.Options{Nobody: true, Config: config + "server:\n  isolation:\n    sandbox: supervised\n"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := listen(t)
			o := m.opts
			o.Caps = []string{"tools", "proc"}
			h := aepbin.Start(t, o)
			if got := h.Tier(); got != m.tier {
				t.Fatalf("tier %q, want %q", got, m.tier)
			}
			writeProbe(t, h.Client)
			got := probeResult(t, runCommand(t, h.Client, "python3 probe.py "+jsonInt(l.port)))
			for _, way := range []string{"tcp4", "tcp6", "udp", "netlink", "io_uring", "clone3_userns", "unshare_userns", "i386_socket"} {
				if !strings.HasPrefix(got[way], "refused") {
					t.Errorf("run_command %s: %q", way, got[way])
				}
			}
			if got["unix"] != "ok" {
				t.Errorf("a unix socket pair: %q", got["unix"])
			}
			time.Sleep(200 * time.Millisecond) // a datagram in flight lands
			if n := l.seen.Load(); n != 0 {
				t.Fatalf("the test's listener saw %d connections from commands without network", n)
			}
			// proc is granted network by the operator: its commands connect.
			granted := probeResult(t, output(t, h.Client, spawn(t, h.Client, "python3", "probe.py", jsonInt(l.port)).ProcID))
			if granted["tcp4"] != "ok" {
				t.Fatalf("a command granted network: %v", granted)
			}
			if granted["clone3_userns"] == "ok" || granted["io_uring"] == "ok" {
				t.Fatalf("network does not grant io_uring or user namespaces: %v", granted)
			}
			if l.seen.Load() == 0 {
				t.Fatal("the granted connection never reached the listener")
			}
		})
	}
}

// TestCommandInheritsOnlyItsStreams: a host that inherited descriptors
// from its parent without close-on-exec passes none of them on; a
// sandboxed command holds its standard streams only.
func TestCommandInheritsOnlyItsStreams(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, m := range hostModes {
		t.Run(m.name, func(t *testing.T) {
			o := m.opts
			// Twelve (fds 3 to 14): the lowest are taken over by the
			// sandbox's own protocol in the child, the rest would leak.
			for i := 0; i < 6; i++ {
				o.Inherit = append(o.Inherit, w, r)
			}
			h := aepbin.Start(t, o)
			// The shell tries to duplicate every descriptor: /proc is not
			// readable in every tier.
			out := runCommand(t, h.Client, `i=0; while [ $i -lt 1024 ]; do if { true >&$i; } 2>/dev/null; then echo "fd=$i"; fi; i=$((i+1)); done`)
			var fds []string
			for _, m := range regexp.MustCompile(`fd=(\d+)`).FindAllStringSubmatch(out, -1) {
				fds = append(fds, m[1])
			}
			sort.Strings(fds)
			if strings.Join(fds, ",") != "0,1,2" {
				t.Fatalf("the command's descriptors: %v (%s)", fds, out)
			}
		})
	}
}
