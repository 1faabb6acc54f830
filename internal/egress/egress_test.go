package egress_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aephost/aep/internal/egress"
)

// fakeDNS answers names from a table; each lookup of a name may answer
// differently (the answers of successive lookups), as a name whose owner
// rebinds it between a check and a dial would.
type fakeDNS struct {
	answers map[string][][]string
	lookups atomic.Int32
}

func (f *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	n := int(f.lookups.Add(1)) - 1
	seq, ok := f.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	ans := seq[min(n, len(seq)-1)]
	out := make([]netip.Addr, len(ans))
	for i, a := range ans {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		ok      bool
	}{
		{"db.internal:5432", true},
		{"*.db.internal:5432", true},
		{"10.0.0.0/8:5432", true},
		{"10.0.0.5:*", true},
		{"[fd00::5]:5432", true},
		{"[fd00::/64]:5432", true},
		{"db.internal", false},       // no port
		{"db.internal:0", false},     // port out of range
		{"db.internal:70000", false}, // port out of range
		{"db internal:5432", false},  // not a name
		{"10.0.0.0/33:5432", false},  // not a network
		{"fd00::5:5432", false},      // an IPv6 address needs brackets
		{"*.:5432", false},           // no suffix
		{"user@db.internal:5432", false},
	} {
		_, err := egress.ParseEndpoints([]string{tc.pattern})
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.pattern, err, tc.ok)
		}
	}
}

// TestResolve checks what each kind of pattern admits, the bypasses an
// agent would try (another port, a longer name, a name that resolves into
// an allowed network, an address spelled another way), and that every
// refusal is the same error.
func TestResolve(t *testing.T) {
	dns := &fakeDNS{answers: map[string][][]string{
		"db.internal":       {{"10.9.9.9"}},
		"a.db.internal":     {{"10.9.9.10"}},
		"evil.example":      {{"127.0.0.1"}},
		"inside.example":    {{"10.20.0.7", "192.168.1.1"}},
		"db.internal.evil":  {{"10.9.9.9"}},
		"loopback.internal": {{"127.0.0.1"}},
	}}
	e, err := egress.ParseEndpoints([]string{"db.internal:5432", "*.db.internal:5432", "10.20.0.0/16:5432", "127.0.0.1:6543", "[::1]:6543"})
	if err != nil {
		t.Fatal(err)
	}
	e.Resolver = dns
	for _, tc := range []struct {
		name string
		host string
		port int
		want string // the admitted addresses, or "" for a refusal
	}{
		{"a listed name", "db.internal", 5432, "10.9.9.9"},
		{"a listed name, upper case and a trailing dot", "DB.Internal.", 5432, "10.9.9.9"},
		{"a listed name on another port", "db.internal", 5433, ""},
		{"a name below a wildcard", "a.db.internal", 5432, "10.9.9.10"},
		{"the wildcard's own suffix", "internal", 5432, ""},
		{"a name that ends like a listed one", "xdb.internal", 5432, ""},
		{"a listed name inside another", "db.internal.evil", 5432, ""},
		{"a name resolving into a listed network", "inside.example", 5432, "10.20.0.7"},
		{"a name resolving to loopback", "evil.example", 5432, ""},
		{"an address in a listed network", "10.20.3.4", 5432, "10.20.3.4"},
		{"an address outside it", "10.21.0.1", 5432, ""},
		{"a listed address", "127.0.0.1", 6543, "127.0.0.1"},
		{"a listed address on another port", "127.0.0.1", 5432, ""},
		{"a listed IPv6 address in brackets", "[::1]", 6543, "::1"},
		{"an IPv4-mapped IPv6 address", "::ffff:127.0.0.1", 6543, "127.0.0.1"},
		{"a name that does not resolve", "nosuch.example", 5432, ""},
		{"not a name", "db.internal/x", 5432, ""},
		{"port zero", "db.internal", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Resolve(context.Background(), tc.host, tc.port)
			if tc.want == "" {
				if !errors.Is(err, egress.ErrNotAllowed) || err.Error() != egress.ErrNotAllowed.Error() {
					t.Fatalf("admitted %v (err %v)", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, a := range got {
				s = append(s, a.String())
			}
			if strings.Join(s, ",") != tc.want {
				t.Fatalf("got %v, want %s", s, tc.want)
			}
		})
	}
	var empty *egress.Endpoints
	if _, err := empty.Resolve(context.Background(), "127.0.0.1", 5432); !errors.Is(err, egress.ErrNotAllowed) {
		t.Fatal("an empty list admitted an endpoint")
	}
}

// TestDialerDialsTheCheckedAddress: the dialer resolves a name once and
// connects to an address that passed the check, so a name rebound between
// the check and the dial (the second lookup answering loopback) cannot
// move the connection; a refused endpoint is never dialled.
func TestDialerDialsTheCheckedAddress(t *testing.T) {
	dns := &fakeDNS{answers: map[string][][]string{
		"rebind.example": {{"10.20.0.7"}, {"127.0.0.1"}},
	}}
	e, _ := egress.ParseEndpoints([]string{"10.20.0.0/16:5432"})
	e.Resolver = dns
	var dialled []string
	d := &egress.Dialer{Endpoints: e, Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return nil, errors.New("test dial")
	}}
	d.DialContext(context.Background(), "tcp", "rebind.example:5432")
	if len(dialled) != 1 || dialled[0] != "10.20.0.7:5432" || dns.lookups.Load() != 1 {
		t.Fatalf("dialled %v after %d lookups", dialled, dns.lookups.Load())
	}
	dialled = nil
	if _, err := d.DialContext(context.Background(), "tcp", "127.0.0.1:5432"); !errors.Is(err, egress.ErrNotAllowed) || len(dialled) != 0 {
		t.Fatalf("a refused endpoint: err %v, dialled %v", err, dialled)
	}
}

// TestURLPrefixMatch is the MCP bridge's allowlist check (its run-time
// registrations, capabilities/mcp TestAllowLists): a prefix admits itself
// and what continues it after '/' or '?', never a longer port, host or
// path segment.
func TestURLPrefixMatch(t *testing.T) {
	const prefix = "http://127.0.0.1:9000/mcp"
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{prefix, true},
		{prefix + "/", true},
		{prefix + "/x", true},
		{prefix + "?a=1", true},
		{prefix + "x", false},
		{"http://127.0.0.1:90001/mcp", false},
		{"http://127.0.0.1:9000/other", false},
		{"http://127.0.0.1:9000.evil/mcp", false},
		{"https://127.0.0.1:9000/mcp", false},
	} {
		if got := egress.URLPrefixMatch(prefix, tc.url); got != tc.ok {
			t.Errorf("%s: %v, want %v", tc.url, got, tc.ok)
		}
	}
}
