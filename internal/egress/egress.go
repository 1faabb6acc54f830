// Package egress decides which network endpoints work an agent chooses may
// reach from the host, outside any sandbox: the sql toolkit's PostgreSQL
// connections (an endpoint list) and the MCP bridge's run-time
// registrations (URL prefixes). Both lists are the operator's, empty by
// default, and both refuse with a text that says nothing of the network.
//
// An endpoint list is checked where it matters, on the address that is
// dialled: a name is resolved once, each of its addresses checked against
// the list, and the connection made to an address that passed — never to
// the answer of a second lookup, which a name's owner could change between
// the check and the dial.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrNotAllowed is the cause of every refusal: the same text whatever the
// endpoint, so a refusal tells the agent nothing about what listens where.
var ErrNotAllowed = errors.New("endpoint not allowed by the host's configuration")

// Endpoints is an operator's list of host:port patterns. A pattern's host
// is a name ("db.internal"), a wildcard name ("*.db.internal": one or more
// labels before the suffix), an address ("10.0.0.5", "[fd00::5]") or a
// network ("10.0.0.0/8", "[fd00::/64]"); its port is a number or "*".
// A name pattern admits that name, whatever it resolves to (the name is
// the operator's); an address or network pattern admits the addresses in
// it, whatever name the agent gave.
type Endpoints struct {
	entries []endpoint
	// Resolver resolves names (nil: net.DefaultResolver); tests replace it.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

type endpoint struct {
	name     string       // lower case; "" for an address pattern
	wildcard bool         // name is a suffix: "*.x" admits "a.x", "a.b.x"
	prefix   netip.Prefix // valid for an address or network pattern
	port     int          // 0: any port
}

// ParseEndpoints parses patterns; a malformed one is an error naming it.
func ParseEndpoints(patterns []string) (*Endpoints, error) {
	e := &Endpoints{}
	for _, p := range patterns {
		ep, err := parseEndpoint(p)
		if err != nil {
			return nil, fmt.Errorf("endpoint pattern %q: %w", p, err)
		}
		e.entries = append(e.entries, ep)
	}
	return e, nil
}

func parseEndpoint(p string) (endpoint, error) {
	host, port, err := splitHostPort(p)
	if err != nil {
		return endpoint{}, err
	}
	var ep endpoint
	switch port {
	case "*":
	default:
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return endpoint{}, errors.New("the port must be 1-65535 or *")
		}
		ep.port = n
	}
	if strings.Contains(host, "/") {
		pre, err := netip.ParsePrefix(host)
		if err != nil {
			return endpoint{}, fmt.Errorf("network: %w", err)
		}
		ep.prefix = pre.Masked()
		return ep, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		ep.prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return ep, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		ep.wildcard, name = true, rest
	}
	if !validName(name) {
		return endpoint{}, errors.New("the host must be a name, *.name, an address or a network")
	}
	ep.name = name
	return ep, nil
}

// splitHostPort splits "host:port", "[v6]:port" and "[v6/len]:port".
func splitHostPort(p string) (host, port string, err error) {
	if strings.HasPrefix(p, "[") {
		end := strings.Index(p, "]:")
		if end < 0 {
			return "", "", errors.New("want [address]:port")
		}
		return p[1:end], p[end+2:], nil
	}
	i := strings.LastIndexByte(p, ':')
	if i <= 0 || strings.Count(p, ":") > 1 {
		return "", "", errors.New("want host:port")
	}
	return p[:i], p[i+1:], nil
}

// validName accepts DNS names of letters, digits, '-' and '.'.
func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// Empty reports whether nothing is allowed.
func (e *Endpoints) Empty() bool { return e == nil || len(e.entries) == 0 }

// Resolve decides host:port. It returns the addresses a connection may be
// made to: every address of an admitted name, or those of the name's (or
// literal's) addresses that an address pattern admits. Any refusal,
// including a name that does not resolve, is ErrNotAllowed.
func (e *Endpoints) Resolve(ctx context.Context, host string, port int) ([]netip.Addr, error) {
	if e.Empty() || port < 1 || port > 65535 {
		return nil, ErrNotAllowed
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	literal, litErr := netip.ParseAddr(host)
	isLiteral := litErr == nil
	if !isLiteral && !validName(host) {
		return nil, ErrNotAllowed
	}
	byName := false
	if !isLiteral {
		for _, ep := range e.entries {
			if ep.name != "" && (ep.port == 0 || ep.port == port) && nameMatches(ep, host) {
				byName = true
				break
			}
		}
	}
	var addrs []netip.Addr
	if isLiteral {
		addrs = []netip.Addr{literal.Unmap()}
	} else {
		var r interface {
			LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
		} = net.DefaultResolver
		if e.Resolver != nil {
			r = e.Resolver
		}
		found, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, ErrNotAllowed
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap())
		}
	}
	if byName {
		return addrs, nil
	}
	var ok []netip.Addr
	for _, a := range addrs {
		for _, ep := range e.entries {
			if ep.prefix.IsValid() && (ep.port == 0 || ep.port == port) && ep.prefix.Contains(a) {
				ok = append(ok, a)
				break
			}
		}
	}
	if len(ok) == 0 {
		return nil, ErrNotAllowed
	}
	return ok, nil
}

func nameMatches(ep endpoint, host string) bool {
	if !ep.wildcard {
		return host == ep.name
	}
	return strings.HasSuffix(host, "."+ep.name)
}

// Dialer dials only endpoints e admits, to the addresses Resolve returned.
type Dialer struct {
	Endpoints *Endpoints
	// Dial makes the connection to a checked address (nil: a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DialContext resolves and checks addr, then dials its admitted addresses
// in order until one answers. A refusal is ErrNotAllowed and dials nothing.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, ErrNotAllowed
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, ErrNotAllowed
	}
	addrs, err := d.Endpoints.Resolve(ctx, host, port)
	if err != nil {
		return nil, err
	}
	dial := d.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var last error
	for _, a := range addrs {
		c, err := dial(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// URLPrefixMatch reports whether raw is admitted by prefix: equal to it,
// or continuing it after a '/' or a '?', so "http://h:80" never admits
// "http://h:8080" and "/mcp" never admits "/mcpx". The MCP bridge's
// run-time registrations are checked this way (capabilities/mcp).
func URLPrefixMatch(prefix, raw string) bool {
	pre := strings.TrimSuffix(prefix, "/")
	return raw == prefix || raw == pre || strings.HasPrefix(raw, pre+"/") || strings.HasPrefix(raw, pre+"?")
}
