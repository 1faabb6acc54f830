package aepbin_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// The sql toolkit contained (docs/SECURITY.md, Host-side operations): with
// the real binary, in every host mode (the default configuration as root,
// as uid 65534, and the supervised tier forced as uid 65534), no statement
// an agent sends reaches the host's store or any file outside its session
// directory, sessions never share a database, and the postgres driver
// connects nowhere the operator did not list.

var sqlCaps = []string{"tools", "toolkits", "memory", "session"}

// configureSQL configures c's sql toolkit on database name.
func configureSQL(t *testing.T, c *client.Client, cfg map[string]any) *msg.ToolkitConfigureResp {
	t.Helper()
	r, err := c.ToolkitConfigure(ctx(t), &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sqlite(name string) map[string]any {
	return map[string]any{"driver": "sqlite", "database": name, "mode": "read_write"}
}

// sqlQuery runs a statement and returns the result.
func sqlQuery(t *testing.T, c *client.Client, q string) *msg.ToolResult {
	t.Helper()
	res, err := c.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "sql_query", Arguments: map[string]any{"sql": q}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// hostFiles lists every path below the data dir that is not in a session
// directory, with its size: the host's own files.
func hostFiles(t *testing.T, dataDir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dataDir, p)
		if rel == "sessions" && d.IsDir() {
			return filepath.SkipDir
		}
		if info, err := d.Info(); err == nil {
			out[rel] = info.Size()
		}
		return nil
	})
	return out
}

// newHostFiles are the paths of after that before did not have, but for
// the files the host itself writes as it serves (its store's journal, the
// audit log, snapshots).
func newHostFiles(before, after map[string]int64) []string {
	var out []string
	for p := range after {
		if _, ok := before[p]; ok {
			continue
		}
		base := filepath.Base(p)
		if strings.HasPrefix(base, "aep.db") || strings.HasPrefix(base, "audit") || strings.HasPrefix(p, "snapshots") {
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// trap is a directory of the test's, writable by anyone, that no agent
// may create a file in.
func trap(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "aep-sql-trap-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestSQLToolkitContainment(t *testing.T) {
	forModesHTTP(t, sqlCaps, func(t *testing.T, h *aepbin.Host) {
		victim := h.Client
		attacker := h.Connect(t, "", aepbin.Token, sqlCaps...)
		// The victim's memory, in the host's store.
		mem, err := victim.MemoryInit(ctx(t), &msg.MemoryInitReq{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal("victim-secret-memory-5d1e")
		if _, err := victim.MemoryStore(ctx(t), &msg.MemoryStoreReq{MemoryID: mem.MemoryID,
			Entries: []msg.MemoryEntry{{Key: "k", Tier: "semantic", Content: raw}}}); err != nil {
			t.Fatal(err)
		}
		store := filepath.Join(h.DataDir, "aep.db")
		if _, err := os.Stat(store); err != nil {
			t.Fatalf("the host's store: %v", err)
		}
		dir := trap(t)
		before := hostFiles(t, h.DataDir)

		if r := configureSQL(t, attacker, sqlite("notes.db")); r.Status != "ok" {
			t.Fatalf("configure: %+v", r)
		}
		refused := []struct{ name, sql string }{
			{"attach the host's store", fmt.Sprintf("ATTACH DATABASE '%s' AS h", store)},
			{"attach a new file anywhere", fmt.Sprintf("ATTACH DATABASE '%s/new.db' AS x", dir)},
			{"attach relative to the session", "ATTACH DATABASE '../../aep.db' AS h"},
			{"attach a file URI with vfs", fmt.Sprintf("ATTACH DATABASE 'file:%s?vfs=unix-none' AS h", store)},
			{"attach a file URI read-only", fmt.Sprintf("ATTACH DATABASE 'file:%s?mode=ro' AS h", store)},
			{"attach a file URI immutable", fmt.Sprintf("ATTACH DATABASE 'file:%s?immutable=1' AS h", store)},
			{"attach in memory", "ATTACH DATABASE ':memory:' AS m"},
			{"vacuum into a file anywhere", fmt.Sprintf("VACUUM INTO '%s/copy.db'", dir)},
			{"read the host's store through an attachment", "SELECT content FROM h.memory_semantic"},
			{"load an extension", "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libsqlite3.so.0')"},
		}
		for _, tc := range refused {
			if res := sqlQuery(t, attacker, tc.sql); res.Success {
				t.Errorf("%s: ran: %+v", tc.name, res)
			}
		}
		// Temporary files go where the sandbox lets them, never to the
		// trap: a sort spilled to a file with the temp directory moved.
		for _, q := range []string{
			fmt.Sprintf("PRAGMA temp_store_directory = '%s'", dir),
			"PRAGMA temp_store = FILE",
			"CREATE TABLE big AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r LIMIT 20000) SELECT i, hex(randomblob(64)) AS b FROM r",
			"SELECT count(*) FROM (SELECT b FROM big ORDER BY b)",
		} {
			sqlQuery(t, attacker, q) // refused or contained; what counts is below
		}
		// A database file that is a link to the host's store, planted by a
		// command: the worker resolves it in the sandbox's view.
		if out := runCommand(t, attacker, "ln -s "+store+" link.db && ln -s "+dir+"/planted.db dangling.db && echo ok"); !strings.Contains(out, "ok") {
			t.Fatalf("ln: %s", out)
		}
		for _, name := range []string{"link.db", "dangling.db"} {
			for _, mode := range []string{"read_only", "read_write"} {
				r := configureSQL(t, attacker, map[string]any{"driver": "sqlite", "database": name, "mode": mode})
				if r.Status != "ok" {
					continue
				}
				if res := sqlQuery(t, attacker, "SELECT name FROM sqlite_master"); res.Success && strings.Contains(toolText(res), "memory") {
					t.Fatalf("%s (%s) opened the host's store: %s", name, mode, toolText(res))
				}
				sqlQuery(t, attacker, "CREATE TABLE t (a)")
			}
		}
		// Two sessions naming the same file have a file each.
		if r := configureSQL(t, victim, sqlite("notes.db")); r.Status != "ok" {
			t.Fatalf("victim configure: %+v", r)
		}
		if res := sqlQuery(t, victim, "CREATE TABLE mine (v TEXT)"); !res.Success {
			t.Fatalf("victim create: %+v", res)
		}
		if res := sqlQuery(t, victim, "INSERT INTO mine VALUES ('victim-row-77a0')"); !res.Success {
			t.Fatalf("victim insert: %+v", res)
		}
		if r := configureSQL(t, attacker, sqlite("notes.db")); r.Status != "ok" {
			t.Fatalf("attacker configure: %+v", r)
		}
		if res := sqlQuery(t, attacker, "SELECT v FROM mine"); res.Success {
			t.Fatalf("B read A's rows: %s", toolText(res))
		}
		if res := sqlQuery(t, attacker, "DELETE FROM mine"); res.Success {
			t.Fatalf("B deleted A's rows")
		}
		if res := sqlQuery(t, victim, "SELECT v FROM mine"); !res.Success || !strings.Contains(toolText(res), "victim-row-77a0") {
			t.Fatalf("A's rows after B: %+v", res)
		}
		// The victim's memory is intact and still answers.
		got, err := victim.MemoryRetrieve(ctx(t), &msg.MemoryRetrieveReq{MemoryID: mem.MemoryID, Keys: []string{"k"}})
		if err != nil || len(got.Entries) != 1 || !strings.Contains(string(got.Entries[0].Content), "victim-secret-memory-5d1e") {
			t.Fatalf("victim's memory: %+v %v", got, err)
		}
		// Nothing was created outside the session directories.
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("files created in the trap: %v", ents)
		}
		if added := newHostFiles(before, hostFiles(t, h.DataDir)); len(added) > 0 {
			t.Errorf("files created in the data dir outside the sessions: %v", added)
		}
	})
}

// TestSQLPostgresEndpointRefused: with the default configuration (no
// postgres_endpoints) the postgres driver connects nowhere: a listener
// the agent names sees no connection, and an open port and a closed one
// get the same answer.
func TestSQLPostgresEndpointRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	open := ln.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	h := aepbin.Start(t, aepbin.Options{Caps: sqlCaps})
	var messages []string
	for _, port := range []int{open, closedPort} {
		r := configureSQL(t, h.Client, map[string]any{"driver": "postgres", "database": "x", "mode": "read_only", "host": "127.0.0.1", "port": port})
		if r.Status != "error" {
			t.Fatalf("port %d: %+v", port, r)
		}
		messages = append(messages, strings.ReplaceAll(r.Message, strconv.Itoa(port), "PORT"))
	}
	time.Sleep(100 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the host connected %d times to the agent's endpoint", n)
	}
	if messages[0] != messages[1] {
		t.Fatalf("an open port and a closed one answered differently: %q / %q", messages[0], messages[1])
	}
}

// rssBytes is a process's resident set size.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestSQLToolkitBounds: small bounds (32 MiB of worker memory, values of
// at most 4 MiB, 2 s per statement) exceeded five times: each statement is
// refused or cut with a clear tool error, the host's memory does not grow
// by the statement's, and the session's next statement runs.
func TestSQLToolkitBounds(t *testing.T) {
	const config = `plugins:
  - name: toolkits
    type: toolkits
    cls: aep.toolkits.builtin
    config:
      sqlite_memory_bytes: 33554432
      max_value_bytes: 4194304
      query_timeout: 2
`
	modes := []struct {
		name string
		opts aepbin.Options
	}{
		{"default", aepbin.Options{Config: config}},
		{"supervised-uid65534", aepbin.Options{Nobody: true, Config: config + "server:\n  isolation:\n    sandbox: supervised\n"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			o := m.opts
			o.Caps = []string{"tools", "toolkits"}
			h := aepbin.Start(t, o)
			c := h.Client
			if r := configureSQL(t, c, sqlite("bounds.db")); r.Status != "ok" {
				t.Fatalf("configure: %+v", r)
			}
			if res := sqlQuery(t, c, "SELECT 1"); !res.Success {
				t.Fatalf("first query: %+v", res)
			}
			base := rssBytes(t, h.Cmd.Process.Pid)
			for _, tc := range []struct{ name, sql, want string }{
				{"a value 5x the value bound", "SELECT length(randomblob(20971520))", "too big"},
				{"a value built by concatenation", "SELECT length(group_concat(hex(randomblob(65536)))) FROM (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r LIMIT 100) SELECT i FROM r)", "too big"},
				{"a sort 5x the memory bound", "SELECT count(*) FROM (SELECT b FROM (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r LIMIT 160000) SELECT randomblob(1000) AS b FROM r) ORDER BY b)", ""},
				{"a 50-million-row recursive query", "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r LIMIT 50000000) SELECT count(*) FROM r", "time"},
			} {
				t0 := time.Now()
				res := sqlQuery(t, c, tc.sql)
				took := time.Since(t0)
				if res.Success {
					t.Fatalf("%s: ran: %s", tc.name, toolText(res))
				}
				if res.Error == nil || !strings.Contains(*res.Error, tc.want) {
					t.Fatalf("%s: error %q, want %q", tc.name, toolErrorText(res), tc.want)
				}
				if took > 8*time.Second {
					t.Fatalf("%s took %s", tc.name, took)
				}
				t.Logf("%s: %s (%s)", tc.name, *res.Error, took.Round(time.Millisecond))
				if grown := rssBytes(t, h.Cmd.Process.Pid) - base; grown > 64<<20 {
					t.Fatalf("%s: the host grew by %d MiB", tc.name, grown>>20)
				}
				t1 := time.Now()
				if res := sqlQuery(t, c, "SELECT 42"); !res.Success {
					t.Fatalf("after %s: %+v", tc.name, res)
				}
				t.Logf("next statement after %s", time.Since(t1).Round(time.Millisecond))
			}
		})
	}
}

// toolErrorText is a failed tool result's error, or "" when it has none.
func toolErrorText(r *msg.ToolResult) string {
	if r.Error == nil {
		return ""
	}
	return *r.Error
}
