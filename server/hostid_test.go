package server_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// TestHostID checks server.host_id's validation: what passes is what the
// proxy configurations in deploy/ can match without escaping.
func TestHostID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"aep-1", true},
		{"aep-7d9f8c-x2kq9", true},
		{"host.example.org", true},
		{"a", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"-aep", false},
		{"aep-", false},
		{"aep_1", false},
		{"aep 1", false},
		{"aep/1", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			_, err := server.ParseConfig([]byte("server:\n  host_id: \"" + tc.id + "\"\n"))
			if (err == nil) != tc.ok {
				t.Fatalf("host_id %q: err = %v, want ok %v", tc.id, err, tc.ok)
			}
		})
	}
	cfg, err := server.ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.HostID == "" {
		t.Fatal("host_id has no default")
	}
}

// TestSessionIDCarriesHostID checks the id format the proxies route by:
// "s-<host_id>-<32 hex>", the host part found by cutting at the last dash.
func TestSessionIDCarriesHostID(t *testing.T) {
	h := aeptest.NewHost(t, aeptest.Config(func(c *server.Config) { c.Server.HostID = "aep-2.zone-b" }), nil)
	re := regexp.MustCompile(`^s-(.+)-([0-9a-f]{32})$`)
	seen := map[string]bool{}
	for range 50 {
		c := aeptest.Connect(t, h)
		id := c.SessionID()
		m := re.FindStringSubmatch(id)
		if m == nil || m[1] != "aep-2.zone-b" {
			t.Fatalf("session id %q: want s-aep-2.zone-b-<32 hex>", id)
		}
		if seen[m[2]] {
			t.Fatalf("random part %s repeated", m[2])
		}
		seen[m[2]] = true
		c.Close()
	}
}
