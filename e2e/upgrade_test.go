//go:build aepupgrade

package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to drop the schema
)

// TestRollingUpgrade runs the parent commit's aep (AEP_PREVIOUS_BIN, which
// .ci/run builds from a git worktree of HEAD^) and this one on one store,
// as a rolling upgrade does, on SQLite and PostgreSQL
// (docs/DECISIONS.md, A declared crash-loss window):
//
//   - the old host migrates an empty store and snapshots a session; the
//     new host migrates the same store while the old one runs; the old
//     host snapshots again after that migration (its inserts name only
//     the columns it knows), and the new host restores both snapshots;
//   - the new host keeps a session in its automatic snapshot (the crash
//     window) and is killed with SIGKILL; on the old host a session
//     restores it from_session: either it restores what was written, or
//     it refuses it whole, cleanly (runtime_error, reason
//     corrupt_snapshot, nothing restored); either way the old host goes
//     on answering, and lists and takes its own snapshots.
func TestRollingUpgrade(t *testing.T) {
	prev := os.Getenv("AEP_PREVIOUS_BIN")
	if prev == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AEP_PREVIOUS_BIN is unset: .ci/run builds the parent commit's aep for this test")
		}
		t.Skip("AEP_PREVIOUS_BIN is unset (CI unset): no previous aep to upgrade from")
	}
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "shared.db") }},
		{"postgres", freshSchema},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			c := newClient()
			old := startHostOf(t, prev, fmt.Sprintf("server:\n  host_id: aep-old\nstore:\n  dsn: %q\n", dsn))
			a := newProxied(t, old.base, c, `["memory"]`)
			mid := memInit(t, a, "upgrade")
			memPut(t, a, mid, "k", "old-1")
			s1 := sqlSnapshot(t, a)

			// The new host migrates the store under the running old one.
			nw := startHost(t, fmt.Sprintf("server:\n  host_id: aep-new\n  snapshots:\n    crash_window: 500ms\nstore:\n  dsn: %q\n", dsn))
			memPut(t, a, mid, "k", "old-2")
			s2 := sqlSnapshot(t, a)
			for snap, want := range map[string]string{s1: "old-1", s2: "old-2"} {
				b := newProxied(t, nw.base, c, `["memory"]`)
				m := b.ask(t, fmt.Sprintf(`{"type":"session/restore/req","id":%q,"proto":"1.0","ts":1,"snapshot_id":%q}`, b.next(), snap))
				if m["type"] != "session/restore/resp" {
					t.Fatalf("the new host restoring the old host's %s: %v\n%s", snap, m, tail(nw.stderr.String(), 3000))
				}
				if got := memGet(t, b, mid, "k"); !strings.Contains(got, want) {
					t.Fatalf("the new host restored %s: k is %s, want %s", snap, got, want)
				}
			}

			// The new host's automatic snapshot, its host killed.
			n := newProxied(t, nw.base, c, `["memory"]`)
			nmid := memInit(t, n, "upgrade-new")
			memPut(t, n, nmid, "k", "new-1")
			written := float64(time.Now().UnixMicro()) / 1e6
			waitAutoSnapshot(t, n, written)
			if err := nw.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = nw.cmd.Wait()

			o := newProxied(t, old.base, c, `["memory"]`)
			m := o.ask(t, fmt.Sprintf(`{"type":"session/restore/req","id":%q,"proto":"1.0","ts":1,"from_session":%q}`, o.next(), n.sid))
			switch {
			case m["type"] == "session/restore/resp":
				if got := memGet(t, o, nmid, "k"); !strings.Contains(got, "new-1") {
					t.Fatalf("the old host restored the new host's snapshot: k is %s, want new-1", got)
				}
				t.Log("the old host restored the new host's automatic snapshot")
			case m["type"] == "error" && m["code"] == "runtime_error" && reasonOf(m) == "corrupt_snapshot":
				t.Logf("the old host refused the new host's snapshot cleanly: %v", m["message"])
				if got := memGet(t, o, nmid, "k"); got != "" {
					t.Fatalf("a refused restore changed the session: k is %s", got)
				}
			default:
				t.Fatalf("the old host on the new host's snapshot: %v\n%s", m, tail(old.stderr.String(), 3000))
			}
			// The old host goes on: its own sessions, listings, snapshots.
			m = o.ask(t, fmt.Sprintf(`{"type":"session/snapshot/list/req","id":%q,"proto":"1.0","ts":1,"session_ids":[%q]}`, o.next(), n.sid))
			if m["type"] != "session/snapshot/list/resp" {
				t.Fatalf("the old host listing the new host's snapshots: %v", m)
			}
			memPut(t, a, mid, "k", "old-3")
			sqlSnapshot(t, a)
		})
	}
}

func memInit(t *testing.T, a *proxied, ns string) string {
	t.Helper()
	m := a.ask(t, fmt.Sprintf(`{"type":"memory/init/req","id":%q,"proto":"1.0","ts":1,"namespace":%q}`, a.next(), ns))
	id, _ := m["memory_id"].(string)
	if id == "" {
		t.Fatalf("memory/init: %v", m)
	}
	return id
}

func memPut(t *testing.T, a *proxied, mid, key, value string) {
	t.Helper()
	m := a.ask(t, fmt.Sprintf(`{"type":"memory/store/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"entries":[{"key":%q,"content":%q,"tier":"working"}]}`, a.next(), mid, key, value))
	if m["type"] != "memory/store/resp" {
		t.Fatalf("memory/store: %v", m)
	}
}

// memGet is the working-memory entry key as text, "" when there is none.
func memGet(t *testing.T, a *proxied, mid, key string) string {
	t.Helper()
	m := a.ask(t, fmt.Sprintf(`{"type":"memory/retrieve/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"keys":[%q],"tier":"working"}`, a.next(), mid, key))
	if m["type"] != "memory/retrieve/resp" {
		return ""
	}
	entries, _ := m["entries"].([]any)
	if len(entries) == 0 {
		return ""
	}
	return fmt.Sprint(entries)
}

func sqlSnapshot(t *testing.T, a *proxied) string {
	t.Helper()
	m := a.ask(t, fmt.Sprintf(`{"type":"session/snapshot/req","id":%q,"proto":"1.0","ts":1,"target":"sql"}`, a.next()))
	id, _ := m["snapshot_id"].(string)
	if id == "" {
		t.Fatalf("session/snapshot: %v", m)
	}
	return id
}

// waitAutoSnapshot waits for an automatic snapshot of a's session taken
// after written (Unix seconds).
func waitAutoSnapshot(t *testing.T, a *proxied, written float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := a.ask(t, fmt.Sprintf(`{"type":"session/snapshot/list/req","id":%q,"proto":"1.0","ts":1,"target":"sql"}`, a.next()))
		snaps, _ := m["snapshots"].([]any)
		for _, s := range snaps {
			s, _ := s.(map[string]any)
			if created, _ := s["created"].(float64); s["kind"] == "auto" && created > written {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic snapshot after the write: %v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func reasonOf(m map[string]any) string {
	d, _ := m["detail"].(map[string]any)
	r, _ := d["reason"].(string)
	return r
}

// freshSchema is a PostgreSQL DSN of a schema of its own, empty, dropped
// when the test ends: the old host must be the one that migrates it.
func freshSchema(t *testing.T) string {
	name := fmt.Sprintf("aep_e2e_upgrade_%d", time.Now().UnixNano())
	dsn := pgtest.DSN(t, name)
	t.Cleanup(func() {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP SCHEMA " + name + " CASCADE")
	})
	return dsn
}

// startHostOf is startHost with the aep binary at path (another build).
func startHostOf(t testing.TB, path, config string) *host {
	t.Helper()
	return startHostOn(t, path, config, "")
}
