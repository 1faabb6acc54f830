package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
)

// TestBackupRestore follows docs/operating.md (Backup and restore) for
// each store: a host's store is backed up while four agents write
// working memory and take snapshots, the backup is restored into a fresh
// store, and a fresh host on it restores each agent's session from its
// snapshots: the newest snapshot the backup holds, at least as new as the
// last one answered before the backup began, with the working memory and
// the files that snapshot recorded.
func TestBackupRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		// store gives the DSN of a new store, backup copies the store of
		// dsn into a new file, restore makes a new store of that file and
		// gives its DSN.
		store   func(t *testing.T) string
		backup  func(t *testing.T, dsn, file string)
		restore func(t *testing.T, file string) string
	}{
		{
			name:  "sqlite",
			store: func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "aep.db") },
			// The online backup API through the sqlite3 shell: a
			// consistent copy while the host writes.
			backup: func(t *testing.T, dsn, file string) {
				sqlite3 := findBinary(t, "sqlite3")
				src := strings.TrimPrefix(dsn, "sqlite://")
				runTool(t, sqlite3, src, ".backup '"+file+"'")
				if out := runTool(t, sqlite3, file, "PRAGMA integrity_check"); strings.TrimSpace(out) != "ok" {
					t.Fatalf("integrity_check of the backup: %s", out)
				}
			},
			// Restoring is putting the file where the store's path is,
			// the host stopped.
			restore: func(t *testing.T, file string) string {
				dst := filepath.Join(t.TempDir(), "aep.db")
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return "sqlite://" + dst
			},
		},
		{
			name:  "postgres",
			store: func(t *testing.T) string { return pgtest.Database(t, "aep_e2e_backup") },
			// pg_dump reads one consistent snapshot of the database
			// while the host writes.
			backup: func(t *testing.T, dsn, file string) {
				runTool(t, findBinary(t, "pg_dump"), "--format=custom", "--file="+file, "--dbname="+dsn)
			},
			restore: func(t *testing.T, file string) string {
				dsn := pgtest.Database(t, "aep_e2e_restored")
				runTool(t, findBinary(t, "pg_restore"), "--no-owner", "--exit-on-error", "--dbname="+dsn, file)
				return dsn
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.store(t)
			a := startHost(t, fmt.Sprintf("server:\n  host_id: aep-a\nstore:\n  dsn: %q\n", dsn))
			c := newClient()
			agents := make([]*backupAgent, 4)
			for i := range agents {
				p := newProxied(t, a.base, c, `["memory","tools"]`)
				m := p.ask(t, fmt.Sprintf(`{"type":"memory/init/req","id":%q,"proto":"1.0","ts":1,"namespace":"backup-%d"}`, p.next(), i))
				mid, _ := m["memory_id"].(string)
				if mid == "" {
					t.Fatalf("memory/init: %v", m)
				}
				m = p.ask(t, toolCallLine(p.next(), "write_file", map[string]any{"path": "notes.txt", "content": fmt.Sprintf("agent %d before the backup", i)}))
				if !strings.Contains(fmt.Sprint(m), "success:true") {
					t.Fatalf("write_file: %v", m)
				}
				agents[i] = &backupAgent{p: p, mid: mid, snaps: map[string]int{}}
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, ag := range agents {
				wg.Add(1)
				go func() { defer wg.Done(); ag.run(stop) }()
			}
			// Writes and snapshots under way, then the backup, with the
			// writes going on through it and after it.
			time.Sleep(time.Second)
			floor := make([]int, len(agents))
			for i, ag := range agents {
				floor[i] = ag.lastSnapshot()
			}
			file := filepath.Join(t.TempDir(), "aep.backup")
			began := time.Now()
			tc.backup(t, dsn, file)
			took := time.Since(began)
			time.Sleep(500 * time.Millisecond)
			close(stop)
			wg.Wait()
			for i, ag := range agents {
				if ag.err != nil {
					t.Fatalf("agent %d: %v", i, ag.err)
				}
				if floor[i] == 0 {
					t.Fatalf("agent %d took no snapshot before the backup", i)
				}
			}
			fi, _ := os.Stat(file)
			t.Logf("backup of %s under writes: %d bytes in %v", tc.name, fi.Size(), took.Round(time.Millisecond))

			restored := tc.restore(t, file)
			b := startHost(t, fmt.Sprintf("server:\n  host_id: aep-b\nstore:\n  dsn: %q\n", restored))
			for i, ag := range agents {
				moved := newProxied(t, b.base, c, `["memory","tools"]`)
				m := moved.ask(t, fmt.Sprintf(`{"type":"session/restore/req","id":%q,"proto":"1.0","ts":1,"from_session":%q}`, moved.next(), ag.p.sid))
				if m["type"] != "session/restore/resp" {
					t.Fatalf("agent %d: restore on the restored store: %v\n%s", i, m, tail(b.stderr.String(), 3000))
				}
				id, _ := m["snapshot_id"].(string)
				ag.mu.Lock()
				n, ok := ag.snaps[id]
				ag.mu.Unlock()
				if !ok {
					t.Fatalf("agent %d: restored snapshot %s, which it never took", i, id)
				}
				if n < floor[i] {
					t.Errorf("agent %d: restored the snapshot at write %d, older than the one answered before the backup (%d)", i, n, floor[i])
				}
				if files, _ := m["files"].(map[string]any); files["state"] != "restored" {
					t.Errorf("agent %d: files %v, want restored", i, m["files"])
				}
				m = moved.ask(t, fmt.Sprintf(`{"type":"memory/retrieve/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"keys":["n"],"tier":"working"}`, moved.next(), ag.mid))
				if want := fmt.Sprintf("write-%06d", n); !strings.Contains(fmt.Sprint(m), want) {
					t.Errorf("agent %d: working memory %v, want %s (its snapshot's)", i, m, want)
				}
				m = moved.ask(t, toolCallLine(moved.next(), "read_file", map[string]any{"path": "notes.txt"}))
				if want := fmt.Sprintf("agent %d before the backup", i); !strings.Contains(fmt.Sprint(m), want) {
					t.Errorf("agent %d: notes.txt %v, want %q", i, m, want)
				}
				t.Logf("agent %d: restored the snapshot at write %d (last answered before the backup: %d, last taken: %d)", i, n, floor[i], ag.lastSnapshot())
			}
		})
	}
}

// backupAgent writes its working memory's key n and takes a sql
// snapshot every fifth write, recording what each snapshot holds.
type backupAgent struct {
	p   *proxied
	mid string
	err error

	mu    sync.Mutex
	snaps map[string]int // snapshot id → the write it holds
	last  int            // the write of the newest snapshot answered
}

func (a *backupAgent) lastSnapshot() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

func (a *backupAgent) run(stop <-chan struct{}) {
	for n := 1; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		m, err := a.p.tryAsk(fmt.Sprintf(`{"type":"memory/store/req","id":%q,"proto":"1.0","ts":1,"memory_id":%q,"entries":[{"key":"n","content":"write-%06d","tier":"working"}]}`, a.p.next(), a.mid, n))
		if err == nil && m["type"] != "memory/store/resp" {
			err = fmt.Errorf("memory/store: %v", m)
		}
		if err != nil {
			a.err = err
			return
		}
		if n%5 != 0 {
			continue
		}
		m, err = a.p.tryAsk(fmt.Sprintf(`{"type":"session/snapshot/req","id":%q,"proto":"1.0","ts":1,"target":"sql"}`, a.p.next()))
		id, _ := m["snapshot_id"].(string)
		if err == nil && id == "" {
			err = fmt.Errorf("session/snapshot: %v", m)
		}
		if err != nil {
			a.err = err
			return
		}
		a.mu.Lock()
		a.snaps[id] = n
		a.last = n
		a.mu.Unlock()
	}
}

// runTool runs a command and returns its standard output, failing the test
// with its output when it fails.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
