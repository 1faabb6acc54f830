package httpapi

import (
	"bufio"
	"context"
	"encoding/binary"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/aephost/aep/server"
)

// TestClientAddr checks whose word on the client's address is taken
// (server.trusted_proxies, docs/SECURITY.md, The edge): the peer's, unless
// the peer is a trusted proxy; then the nearest untrusted X-Forwarded-For
// entry, or the PROXY protocol header's source.
func TestClientAddr(t *testing.T) {
	trusted, err := server.ParseTrustedProxies([]string{"10.0.0.0/8", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, peer string
		xff        []string
		proxied    string // source of a PROXY header, if any
		want       string
	}{
		{"untrusted peer ignores the header", "203.0.113.9:1", []string{"198.51.100.1"}, "", "203.0.113.9"},
		{"trusted peer, no header", "127.0.0.1:1", nil, "", "127.0.0.1"},
		{"trusted peer, one hop", "127.0.0.1:1", []string{"198.51.100.1"}, "", "198.51.100.1"},
		{"client-forged entries left of ours", "127.0.0.1:1", []string{"1.2.3.4, 198.51.100.1", "10.1.1.1"}, "", "198.51.100.1"},
		{"garbled chain", "127.0.0.1:1", []string{"nonsense"}, "", "127.0.0.1"},
		{"IPv4-mapped", "[::ffff:127.0.0.1]:1", []string{"::ffff:198.51.100.2"}, "", "198.51.100.2"},
		{"PROXY header wins", "127.0.0.1:1", []string{"1.2.3.4"}, "198.51.100.3", "198.51.100.3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPost, "/session", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if c.proxied != "" {
				pc := &proxyConn{src: netip.MustParseAddr(c.proxied)}
				r = r.WithContext(context.WithValue(r.Context(), proxyConnKey{}, pc))
			}
			if got := clientAddr(r, trusted); got.String() != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}

// TestReadProxyHeader parses PROXY protocol headers of both versions, and
// refuses a connection from a trusted proxy that does not begin with one.
func TestReadProxyHeader(t *testing.T) {
	v2 := func(cmd, fam byte, addr []byte) string {
		b := append([]byte{}, proxyV2Sig...)
		b = append(b, 0x20|cmd, fam, 0, 0)
		binary.BigEndian.PutUint16(b[14:], uint16(len(addr)))
		return string(append(b, addr...))
	}
	v4 := []byte{198, 51, 100, 4, 127, 0, 0, 1, 0x12, 0x34, 0, 80}
	v6 := append(netip.MustParseAddr("2001:db8::5").AsSlice(), make([]byte, 20)...)
	for _, c := range []struct {
		name, in, want string
		err            bool
	}{
		{"v1 TCP4", "PROXY TCP4 198.51.100.1 127.0.0.1 5678 80\r\nGET /", "198.51.100.1", false},
		{"v1 TCP6", "PROXY TCP6 2001:db8::1 ::1 5678 80\r\nGET /", "2001:db8::1", false},
		{"v1 UNKNOWN", "PROXY UNKNOWN\r\nGET /", "invalid IP", false},
		{"v1 garbled", "PROXY TCP4 x y\r\nGET /", "", true},
		{"v2 TCP4", v2(1, 0x11, v4) + "GET /", "198.51.100.4", false},
		{"v2 TCP6", v2(1, 0x21, v6) + "GET /", "2001:db8::5", false},
		{"v2 LOCAL", v2(0, 0, nil) + "GET /", "invalid IP", false},
		{"no header", "GET / HTTP/1.1\r\n\r\n", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(c.in))
			a, err := readProxyHeader(br)
			if (err != nil) != c.err {
				t.Fatalf("error %v, want error %v", err, c.err)
			}
			if c.err {
				return
			}
			if a.String() != c.want {
				t.Fatalf("got %s, want %s", a, c.want)
			}
			if rest, _ := br.ReadString('/'); rest != "GET /" {
				t.Fatalf("the request after the header: %q", rest)
			}
		})
	}
}
