package configcheck

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/aephost/aep/server/store"
)

// formats are the checks x-aep-format names: what a string setting must
// be beyond what a JSON Schema pattern can say, each with the reason a
// value is refused. An empty value is never checked here: it means the
// default (or off) wherever these formats are used.
var formats = map[string]func(string) error{
	// listen: an address to listen on, host:port with a port number.
	"listen": func(v string) error {
		_, err := hostPort(v)
		return err
	},
	// endpoint: a collector to send to, host:port or an http(s) URL.
	"endpoint": func(v string) error {
		if strings.Contains(v, "://") {
			return httpURL(v)
		}
		_, err := hostPort(v)
		return err
	},
	// origin: "*", an origin (https://app.example) or a host name.
	"origin": func(v string) error {
		switch {
		case v == "*":
			return nil
		case strings.Contains(v, "://"):
			return httpURL(v)
		case strings.ContainsAny(v, "/ \t@?#"):
			return errors.New("want an origin such as https://app.example, a host name, or *")
		}
		return nil
	},
	// cidr: a CIDR (10.0.0.0/8) or a single address.
	"cidr": func(v string) error {
		if strings.Contains(v, "/") {
			if _, err := netip.ParsePrefix(v); err != nil {
				return errors.New("not a CIDR such as 10.0.0.0/8 or fd00::/8")
			}
			return nil
		}
		if _, err := netip.ParseAddr(v); err != nil {
			return errors.New("neither a CIDR such as 10.0.0.0/8 nor an address")
		}
		return nil
	},
	// glob: a path.Match pattern; a malformed one would never match, so
	// a deny list holding it would deny nothing.
	"glob": func(v string) error {
		if _, err := path.Match(v, ""); err != nil {
			return errors.New("not a valid pattern (path.Match syntax: *, ?, [a-z], \\ escapes); it would never match")
		}
		return nil
	},
	// dsn: a store DSN (server/store.ParseDSN).
	"dsn": func(v string) error {
		_, err := store.ParseDSN(v)
		return err
	},
}

// hostPort checks host:port and returns the host.
func hostPort(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", errors.New("want host:port, such as 127.0.0.1:8765 or [::1]:8765")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return host, nil
}

func httpURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return errors.New("want an http:// or https:// URL with a host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n > 65535 {
			return fmt.Errorf("port %q: want a number from 0 to 65535", p)
		}
	}
	return nil
}

// Loopback reports whether a listen address binds loopback only: an IP
// address that is loopback, or the name localhost. An empty host binds
// every interface.
func Loopback(listen string) bool {
	host, err := hostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
