package server

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// parseTrustedProxy parses one entry of server.trusted_proxies: a CIDR
// ("10.0.0.0/8") or a single address, which means that address alone.
func parseTrustedProxy(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR: %w", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR nor an address: %w", s, err)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// TrustedProxies is the parsed server.trusted_proxies.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies parses every entry; the config check has already
// refused bad ones, so an error here means an unchecked config.
func ParseTrustedProxies(entries []string) (TrustedProxies, error) {
	out := make(TrustedProxies, 0, len(entries))
	for _, e := range entries {
		p, err := parseTrustedProxy(e)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Contains reports whether a is the address of a trusted proxy.
func (t TrustedProxies) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// TrustedProxies returns the host's parsed server.trusted_proxies.
func (h *Host) TrustedProxies() TrustedProxies { return h.proxies }

// Per-session budget of failed handshakes, refilled at the per-address
// interval: a new session is cheap, so this only slows a single session
// down; the per-address budget is what bounds a client.
const sessionHandshakeBurst = 5

// maxThrottled bounds the addresses the throttle remembers. Past it, idle
// entries (a full budget: nothing to remember) are swept, then arbitrary
// ones dropped, so a flood of addresses costs bounded memory; a dropped
// address starts again with a full budget.
const maxThrottled = 16384

// handshakeThrottle limits failed handshakes per client address (IPv6 by
// its /64, which one host usually holds whole) with token buckets: each
// failure takes a token; while none is left, handshakes from the address
// are refused without looking at their token, so guessing runs at the
// refill rate at best.
type handshakeThrottle struct {
	every rate.Limit
	burst int

	mu    sync.Mutex
	addrs map[netip.Prefix]*rate.Limiter
}

func newHandshakeThrottle(burst int, interval time.Duration) *handshakeThrottle {
	return &handshakeThrottle{every: rate.Every(interval), burst: burst, addrs: map[netip.Prefix]*rate.Limiter{}}
}

// throttleKey groups addresses that one client is likely to hold.
func throttleKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := a.BitLen()
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

func (t *handshakeThrottle) limiter(a netip.Addr) *rate.Limiter {
	k := throttleKey(a)
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.addrs[k]
	if ok {
		return l
	}
	if len(t.addrs) >= maxThrottled {
		now := time.Now()
		for k, l := range t.addrs {
			if l.TokensAt(now) >= float64(t.burst) {
				delete(t.addrs, k)
			}
		}
		for k := range t.addrs {
			if len(t.addrs) < maxThrottled*3/4 {
				break
			}
			delete(t.addrs, k)
		}
	}
	l = rate.NewLimiter(t.every, t.burst)
	t.addrs[k] = l
	return l
}

// attempt is one handshake's claim on the budgets of its session and of its
// address. Begin takes a token from each before the token is checked, so
// concurrent guesses cannot all pass a check made before any failed; a
// handshake that does not fail for its token gives them back.
type attempt struct {
	res []*rate.Reservation
}

// begin reserves one failure from each limiter; ok is false, with the wait
// until one is free, when any has none to give.
func beginAttempt(now time.Time, ls ...*rate.Limiter) (attempt, time.Duration, bool) {
	var a attempt
	var wait time.Duration
	for _, l := range ls {
		if l == nil {
			continue
		}
		r := l.ReserveN(now, 1)
		if !r.OK() {
			wait = max(wait, time.Second)
			continue
		}
		if d := r.DelayFrom(now); d > 0 {
			wait = max(wait, d)
			r.CancelAt(now)
			continue
		}
		a.res = append(a.res, r)
	}
	if wait > 0 {
		a.refund(now)
		return attempt{}, wait, false
	}
	return a, 0, true
}

// refund gives the reserved tokens back: the handshake did not fail for its
// token (it succeeded, or failed for its version or shape).
func (a attempt) refund(now time.Time) {
	for _, r := range a.res {
		r.CancelAt(now)
	}
}
