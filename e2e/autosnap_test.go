package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
)

// TestSessionSurvivesHostDeath: two `aep serve` hosts share one store (a
// SQLite file, and PostgreSQL when there is one); host A takes automatic
// snapshots (server.snapshots.auto_interval) and is killed with SIGKILL,
// so it never drains. A session on host B restores from_session the
// session it had on A and finds the working memory and the files it had
// written before A's last automatic snapshot.
func TestSessionSurvivesHostDeath(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "shared.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t, "aep_e2e_autosnap") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			a := startHost(t, fmt.Sprintf("server:\n  host_id: aep-a\n  snapshots:\n    auto_interval: 1s\nstore:\n  dsn: %q\n", dsn))
			b := startHost(t, fmt.Sprintf("server:\n  host_id: aep-b\nstore:\n  dsn: %q\n", dsn))
			c := newClient()
			old := newProxied(t, a.base, c, `["memory","tools"]`)
			m := old.ask(t, fmt.Sprintf(`{"type":"memory/init/req","id":%q,"proto":"1.0","ts":1,"namespace":"death"}`, old.next()))
			mid, _ := m["memory_id"].(string)
			m = old.ask(t, fmt.Sprintf(`{"type":"memory/store/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"entries":[{"key":"step","content":"step-41","tier":"working"}]}`, old.next(), mid))
			if m["type"] != "memory/store/resp" {
				t.Fatalf("store: %v", m)
			}
			m = old.ask(t, toolCallLine(old.next(), "write_file", map[string]any{"path": "notes/progress.txt", "content": "written on host A"}))
			if !strings.Contains(fmt.Sprint(m), "success:true") {
				t.Fatalf("write_file: %v", m)
			}
			written := float64(time.Now().UnixMicro()) / 1e6

			// Wait for an automatic snapshot taken after the writes.
			var snapID string
			deadline := time.Now().Add(30 * time.Second)
			for snapID == "" {
				m = old.ask(t, fmt.Sprintf(`{"type":"session/snapshot/list/req","id":%q,"proto":"1.0","ts":1,"target":"sql"}`, old.next()))
				snaps, _ := m["snapshots"].([]any)
				for _, s := range snaps {
					s, _ := s.(map[string]any)
					if created, _ := s["created"].(float64); s["kind"] == "auto" && created > written {
						snapID, _ = s["snapshot_id"].(string)
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("no automatic snapshot after the writes: %v\n%s", m, tail(a.stderr.String(), 3000))
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err := a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = a.cmd.Wait()
			if _, err := old.tryAsk(fmt.Sprintf(`{"type":"ping","id":%q,"proto":"1.0","ts":1}`, old.next())); err == nil {
				t.Fatal("the killed host's session still answers")
			}

			moved := newProxied(t, b.base, c, `["memory","tools"]`)
			m = moved.ask(t, fmt.Sprintf(`{"type":"session/restore/req","id":%q,"proto":"1.0","ts":1,"from_session":%q}`, moved.next(), old.sid))
			if m["type"] != "session/restore/resp" {
				t.Fatalf("restore from_session on host B: %v\n%s", m, tail(b.stderr.String(), 3000))
			}
			// Another automatic snapshot may have replaced the one seen
			// before the kill: the newest is restored, with its files.
			files, _ := m["files"].(map[string]any)
			if files["state"] != "restored" {
				t.Fatalf("restored %v (the snapshot seen was %s): want its files", m, snapID)
			}
			m = moved.ask(t, fmt.Sprintf(`{"type":"memory/retrieve/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"keys":["step"],"tier":"working"}`, moved.next(), mid))
			if !strings.Contains(fmt.Sprint(m), "step-41") {
				t.Fatalf("working memory after the host's death: %v", m)
			}
			m = moved.ask(t, toolCallLine(moved.next(), "read_file", map[string]any{"path": "notes/progress.txt"}))
			if !strings.Contains(fmt.Sprint(m), "written on host A") {
				t.Fatalf("files after the host's death: %v", m)
			}
		})
	}
}

// toolCallLine is a tool/call/req without streaming.
func toolCallLine(id, tool string, args map[string]any) string {
	return toolCall(id, false, tool, args)
}
