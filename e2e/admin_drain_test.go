//go:build aepfleet

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
)

// The admin API in the fleet's heavy suite (build tag aepfleet, .ci/run's
// "fleet end to end" step; docs/DECISIONS.md, Admin API).

// fleetOpToken is the operator token of the hosts of this suite.
const fleetOpToken = "e2e-operator-token-9c1f04"

// startAdminFleet starts three hosts, aep-1..aep-3, on one PostgreSQL
// schema, each with its operator listener on a loopback port of its own
// and snapshots on drain; it returns the hosts and their operator
// addresses.
func startAdminFleet(t *testing.T, schema string) ([]*host, []string) {
	t.Helper()
	dsn := pgtest.DSN(t, schema)
	hosts, ops := make([]*host, 3), make([]string, 3)
	for i := range hosts {
		ops[i] = freeAddr(t)
		hosts[i] = startHost(t, fmt.Sprintf("server:\n  host_id: aep-%d\nstore:\n  dsn: %q\noperator:\n  listen: %s\n  token: %s\n  snapshot_on_drain: true\n  drain_timeout: 10s\n",
			i+1, dsn, ops[i], fleetOpToken))
		hosts[i].id = fmt.Sprintf("aep-%d", i+1)
	}
	return hosts, ops
}

// adminCLI runs `aep admin args… --json` against one host's operator
// listener and decodes its answer into v.
func adminCLI(ctx context.Context, t *testing.T, opAddr string, v any, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"admin"}, args...), "--json")...)
	cmd.Env = append(os.Environ(), "AEP_OPERATOR_ADDR="+opAddr, "AEP_OPERATOR_TOKEN="+fleetOpToken)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("aep admin %v: %v\n%s", args, err, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		t.Fatalf("aep admin %v: %v\n%s", args, err, out.String())
	}
}

// TestFleetAdminDrain drains one host of a fleet of three on one
// PostgreSQL, behind HAProxy, with `aep admin drain` while 30 agents write
// working memory and step env episodes over WebSocket, single exchanges
// and HTTP+SSE (client.Moving): every session of the drained host is
// snapshotted and ended, its agent moves to another host and restores it,
// and nothing acknowledged is lost (drainMidRun's checks, as for SIGTERM).
// The drained host keeps running, answers /readyz 503 and takes no new
// session; `aep admin undrain` makes it ready again.
func TestFleetAdminDrain(t *testing.T) {
	k := proxies[0] // HAProxy: its health checks follow /readyz
	findBinary(t, k.bin)
	hosts, ops := startAdminFleet(t, "aep_e2e_admin_drain")
	base := startProxy(t, k, hosts)
	opOf := map[*host]string{}
	for i, h := range hosts {
		opOf[h] = ops[i]
	}
	var drainedHost *host
	drainMidRun(t, k, base, hosts, func(ctx context.Context, t *testing.T, h *host, id string, sessions int) {
		drainedHost = h
		var res struct {
			Draining  bool `json:"draining"`
			Snapshot  bool `json:"snapshot"`
			Ended     int  `json:"ended"`
			NotSaved  int  `json:"not_saved"`
			Snapshots []struct {
				Handle     string `json:"handle"`
				SnapshotID string `json:"snapshot_id"`
			} `json:"snapshots"`
			Error *string `json:"error"`
		}
		adminCLI(ctx, t, opOf[h], &res, "drain")
		if !res.Draining || !res.Snapshot || res.Ended != sessions || len(res.Snapshots) != sessions || res.NotSaved != 0 || res.Error != nil {
			t.Errorf("aep admin drain of %s (holding %d sessions): %+v", id, sessions, res)
		}
		if h.cmd.ProcessState != nil {
			t.Fatalf("%s exited on aep admin drain", id)
		}
		if got := h.readyz(); got != http.StatusServiceUnavailable {
			t.Errorf("%s's /readyz after aep admin drain: %d", id, got)
		}
	})
	// Drained, it holds no session and takes none.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var l struct {
		Draining bool `json:"draining"`
		Total    int  `json:"total"`
	}
	adminCLI(ctx, t, opOf[drainedHost], &l, "list")
	if !l.Draining || l.Total != 0 {
		t.Errorf("the drained host's sessions: %+v", l)
	}
	resp, err := http.Post(drainedHost.base+"/session", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("POST /session on the drained host: %d", resp.StatusCode)
	}
	var u struct {
		WasDraining bool `json:"was_draining"`
	}
	adminCLI(ctx, t, opOf[drainedHost], &u, "undrain")
	if !u.WasDraining || drainedHost.readyz() != http.StatusOK {
		t.Errorf("undrain: %+v, /readyz %d", u, drainedHost.readyz())
	}
}
