package toolkits_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/aephost/aep/capabilities/toolkits"
	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

const canary = "CANARY-pw-7f3a91"

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type env struct {
	h        *server.Host
	c        *client.Client
	data     string
	logs     *syncBuf
	auditLog string
	audit    *server.FileAuditor
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{data: t.TempDir(), logs: &syncBuf{}}
	e.auditLog = filepath.Join(e.data, "audit.jsonl")
	e.audit = server.NewFileAuditor(e.auditLog, 10, 5, nil)
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.h = aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		{Name: "tk", Type: "toolkits", Impl: &toolkits.Plugin{Settings: toolkits.Settings{PostgresEndpoints: []string{"127.0.0.1:*"}}}},
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithDataDir(e.data), server.WithLogger(logger), server.WithAuditor(e.audit))
	e.c = connect(t, e.h)
	return e
}

// connect handshakes an agent that enables the built-in tools and the toolkits.
func connect(t testing.TB, h *server.Host) *client.Client {
	t.Helper()
	return aeptest.Connect(t, h, "tools", "toolkits")
}

// sessionDir is the host path of the directory of c's session.
func sessionDir(t testing.TB, h *server.Host, c *client.Client) string {
	t.Helper()
	s, ok := h.Session(c.SessionID())
	if !ok {
		t.Fatal("no such session")
	}
	d, err := h.SessionDir(s.Handle())
	if err != nil {
		t.Fatal(err)
	}
	return d.Path
}

// sqliteFile creates a real SQLite database in the directory of c's
// session, where the toolkit's databases live.
func (e *env) sqliteFile(t testing.TB, c *client.Client, name string, rows int) {
	t.Helper()
	sqliteFileAt(t, filepath.Join(sessionDir(t, e.h, c), name), rows)
}

func sqliteFileAt(t testing.TB, path string, rows int) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, note TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= rows; i++ {
		if _, err := db.Exec(`INSERT INTO items (name) VALUES (?)`, fmt.Sprintf("item%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) configure(t testing.TB, c *client.Client, cfg map[string]any) *msg.ToolkitConfigureResp {
	t.Helper()
	r, err := c.ToolkitConfigure(context.Background(), &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func toolNames(t *testing.T, c *client.Client) string {
	r, err := c.ListTools(context.Background(), &msg.ToolListReq{Tags: []string{"sql"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range r.Tools {
		if d.Toolkit == nil || *d.Toolkit != "sql" {
			t.Fatalf("tool %s without toolkit", d.Name)
		}
		out = append(out, d.Name)
	}
	return strings.Join(out, ",")
}

func TestConfigureRules(t *testing.T) {
	e := newEnv(t)
	e.sqliteFile(t, e.c, "ok.db", 1)
	ctx := context.Background()
	cases := []struct {
		name, toolkit string
		cfg           map[string]any
		status        string
		msgParts      []string
	}{
		{"unknown toolkit", "nosuch", map[string]any{}, "error", []string{"unknown toolkit"}},
		{"missing required, all listed", "sql", map[string]any{}, "error", []string{"missing required fields", "database", "driver", "mode"}},
		{"empty required", "sql", map[string]any{"driver": "sqlite", "database": "", "mode": "read_only"}, "error", []string{"missing required fields: database"}},
		{"enum", "sql", map[string]any{"driver": "oracle", "database": "ok.db", "mode": "read_only"}, "error", []string{`field "driver" must be one of: sqlite, postgres`}},
		{"enum mode", "sql", map[string]any{"driver": "sqlite", "database": "ok.db", "mode": "rw"}, "error", []string{`field "mode"`, "read_only, read_write"}},
		{"schema type", "sql", map[string]any{"driver": "sqlite", "database": "ok.db", "mode": "read_only", "max_rows": "many"}, "error", []string{"/max_rows"}},
		{"unknown field", "sql", map[string]any{"driver": "sqlite", "database": "ok.db", "mode": "read_only", "colour": 1}, "error", []string{"schema"}},
		{"backend unreachable", "sql", map[string]any{"driver": "postgres", "database": "x", "mode": "read_only", "host": "127.0.0.1", "port": freePort(t), "password": canary}, "error", []string{"backend", "cannot connect"}},
		{"missing sqlite file in read_only", "sql", map[string]any{"driver": "sqlite", "database": "absent.db", "mode": "read_only"}, "error", []string{"backend", "cannot open the database"}},
		{"path escape", "sql", map[string]any{"driver": "sqlite", "database": "../x.db", "mode": "read_write"}, "error", []string{"relative path of a file in the session's directory"}},
		{"absolute path", "sql", map[string]any{"driver": "sqlite", "database": "/etc/passwd", "mode": "read_only"}, "error", []string{"relative path of a file in the session's directory"}},
		{"unknown reference", "sql", map[string]any{"driver": "sqlite", "database": "reference/geo", "mode": "read_only"}, "error", []string{`no reference database "geo"`}},
		{"postgres endpoint not allowed", "sql", map[string]any{"driver": "postgres", "database": "x", "mode": "read_only", "host": "10.1.2.3", "port": 5432}, "error", []string{"endpoint not allowed"}},
		{"success", "sql", map[string]any{"driver": "sqlite", "database": "ok.db", "mode": "read_only"}, "ok", []string{"configured"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := e.c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: tc.toolkit, Config: tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Status) != tc.status || r.ToolkitName != tc.toolkit {
				t.Fatalf("got %+v", r)
			}
			for _, p := range tc.msgParts {
				if !strings.Contains(r.Message, p) {
					t.Fatalf("message %q lacks %q", r.Message, p)
				}
			}
			if strings.Contains(r.Message, canary) {
				t.Fatal("password echoed")
			}
		})
	}
}

// TestSQLiteRelativeDataDir runs the toolkit under a relative data
// directory, as `aep serve` does by default (./aep-data): the file URI must
// still name the file, not take the directory for a URI authority.
func TestSQLiteRelativeDataDir(t *testing.T) {
	t.Chdir(t.TempDir())
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		{Name: "tk", Type: "toolkits", Impl: &toolkits.Plugin{}},
		{Name: "builtin", Type: "tools", Impl: &tools.Plugin{Settings: tools.Settings{Root: t.TempDir()}}},
	}, server.WithDataDir("aep-data"))
	e := &env{h: h}
	c := connect(t, h)
	e.sqliteFile(t, c, "rel.db", 3)
	for _, mode := range []string{"read_only", "read_write"} {
		if r := e.configure(t, c, map[string]any{"driver": "sqlite", "database": "rel.db", "mode": mode}); r.Status != "ok" {
			t.Fatalf("%s: %s", mode, r.Message)
		}
		if res := call(t, c, "sql_query", map[string]any{"sql": "SELECT count(*) FROM items"}); !res.Success || !strings.Contains(encode(res.Data), "[[3]]") {
			t.Fatalf("%s: %+v", mode, res)
		}
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestToolsAppearOnlyAfterConfigure(t *testing.T) {
	e := newEnv(t)
	e.sqliteFile(t, e.c, "shop.db", 3)
	ctx := context.Background()
	def, err := e.c.GetToolkit(ctx, "sql")
	if err != nil || def.Configured || def.State != "installed" || len(def.Tools) != 3 {
		t.Fatalf("before: %+v %v", def, err)
	}
	if got := toolNames(t, e.c); got != "" {
		t.Fatalf("tools before configure: %s", got)
	}
	res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "sql_list_tables"})
	if err != nil || res.Success || !strings.Contains(*res.Error, "not configured") {
		t.Fatalf("call before configure: %+v %v", res, err)
	}
	r, err := e.c.EnsureToolkit(ctx, "sql", map[string]any{"driver": "sqlite", "database": "shop.db", "mode": "read_only"})
	if err != nil || r == nil || r.Status != "ok" {
		t.Fatalf("ensure: %+v %v", r, err)
	}
	if r, err := e.c.EnsureToolkit(ctx, "sql", map[string]any{}); err != nil || r != nil {
		t.Fatalf("second ensure must not configure: %+v %v", r, err)
	}
	def, _ = e.c.GetToolkit(ctx, "sql")
	if !def.Configured || def.State != "running" {
		t.Fatalf("after: %+v", def)
	}
	if got := toolNames(t, e.c); got != "sql_describe_table,sql_list_tables,sql_query" {
		t.Fatalf("tools after configure: %s", got)
	}
	// The built-in tools are still listed beside them (merged replies).
	all, _ := e.c.ListTools(ctx, &msg.ToolListReq{Query: ptr("table")})
	if names(all.Tools) != "sql_describe_table,sql_list_tables" {
		t.Fatalf("query over merged tools: %s", names(all.Tools))
	}
	// State is per session: another session sees nothing configured.
	other := connect(t, e.h)
	if def, _ := other.GetToolkit(ctx, "sql"); def.Configured {
		t.Fatal("configured leaked into another session")
	}
	if got := toolNames(t, other); got != "" {
		t.Fatalf("other session lists %s", got)
	}
	if _, err := e.c.GetToolkit(ctx, "nosuch"); err == nil {
		t.Fatal("get of unknown toolkit")
	}
	// filter_tags
	lr, _ := e.c.ToolkitList(ctx, &msg.ToolkitListReq{FilterTags: []string{"nope"}})
	if len(lr.Toolkits) != 0 {
		t.Fatalf("filter_tags: %+v", lr.Toolkits)
	}
	lr, _ = e.c.ToolkitList(ctx, &msg.ToolkitListReq{FilterTags: []string{"nope", "database"}})
	if len(lr.Toolkits) != 1 {
		t.Fatalf("filter_tags any-of: %+v", lr.Toolkits)
	}
}

func ptr[T any](v T) *T { return &v }

func names(ts []msg.ToolDefinition) string {
	var out []string
	for _, d := range ts {
		out = append(out, d.Name)
	}
	return strings.Join(out, ",")
}

func call(t *testing.T, c *client.Client, name string, args map[string]any) *msg.ToolResult {
	t.Helper()
	res, err := c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func encode(v any) string {
	b, _ := wire.Marshal(v)
	return string(b)
}

// sqlSuite runs the same checks against any configured sql backend.
func sqlSuite(t *testing.T, c *client.Client, placeholder string) {
	res := call(t, c, "sql_list_tables", nil)
	if !res.Success || !strings.Contains(encode(res.Data), `"items"`) {
		t.Fatalf("list tables: %+v", res)
	}
	res = call(t, c, "sql_describe_table", map[string]any{"table": "items"})
	if !res.Success || !strings.Contains(encode(res.Data), `"name":"id","nullable":false,"primary_key":true`) ||
		!strings.Contains(encode(res.Data), `"name":"note","nullable":true,"primary_key":false`) {
		t.Fatalf("describe: %s", encode(res.Data))
	}
	res = call(t, c, "sql_describe_table", map[string]any{"table": "nosuch"})
	if res.Success {
		t.Fatal("describe of a missing table")
	}
	res = call(t, c, "sql_query", map[string]any{"sql": "SELECT name FROM items WHERE id = " + placeholder, "params": []any{2}})
	if !res.Success || encode(res.Data) != `{"columns":["name"],"rows":[["item2"]],"truncated":false}` || res.Truncated {
		t.Fatalf("param query: %s", encode(res.Data))
	}
	res = call(t, c, "sql_query", map[string]any{"sql": "SELECT id FROM items ORDER BY id", "max_rows": 2})
	if !res.Success || !res.Truncated || !strings.Contains(encode(res.Data), `"rows":[[1],[2]]`) {
		t.Fatalf("row cap: %+v %s", res, encode(res.Data))
	}
	// read_only refuses writes, also when disguised as a read.
	for _, q := range []string{"INSERT INTO items (name) VALUES ('x')", "DELETE FROM items", "WITH x AS (SELECT 1) DELETE FROM items"} {
		res = call(t, c, "sql_query", map[string]any{"sql": q})
		if res.Success {
			t.Fatalf("read_only ran %q", q)
		}
	}
	res = call(t, c, "sql_query", map[string]any{"sql": "SELECT count(*) FROM items"})
	if !strings.Contains(encode(res.Data), `[[5]]`) {
		t.Fatalf("rows changed in read_only: %s", encode(res.Data))
	}
}

func TestSQLiteRealFile(t *testing.T) {
	e := newEnv(t)
	e.sqliteFile(t, e.c, "shop.db", 5)
	if r := e.configure(t, e.c, map[string]any{"driver": "sqlite", "database": "shop.db", "mode": "read_only"}); r.Status != "ok" {
		t.Fatal(r.Message)
	}
	sqlSuite(t, e.c, "?")
	// read_write in another session may write, its own copy.
	rw := connect(t, e.h)
	e.sqliteFile(t, rw, "shop.db", 5)
	if r := e.configure(t, rw, map[string]any{"driver": "sqlite", "database": "shop.db", "mode": "read_write"}); r.Status != "ok" {
		t.Fatal(r.Message)
	}
	if res := call(t, rw, "sql_query", map[string]any{"sql": "INSERT INTO items (name) VALUES (?)", "params": []any{"new"}}); !res.Success {
		t.Fatalf("write: %v", *res.Error)
	}
	if res := call(t, rw, "sql_query", map[string]any{"sql": "SELECT count(*) FROM items"}); !strings.Contains(encode(res.Data), "[[6]]") {
		t.Fatalf("after write: %s", encode(res.Data))
	}
	// A change without RETURNING reports how many rows it touched; with
	// RETURNING it answers rows.
	tests := []struct{ sql, data, summary string }{
		{"UPDATE items SET note = 'n' WHERE id <= 3", `{"columns":[],"rows":[],"rows_affected":3,"truncated":false}`, "3 rows affected"},
		{"DELETE FROM items WHERE name = 'new'", `{"columns":[],"rows":[],"rows_affected":1,"truncated":false}`, "1 rows affected"},
		{"UPDATE items SET note = 'm' WHERE id = 1 RETURNING id, note", `{"columns":["id","note"],"rows":[[1,"m"]],"truncated":false}`, "1 rows"},
		{"CREATE TABLE extra (x INTEGER)", `{"columns":[],"rows":[],"truncated":false}`, "statement ran"},
	}
	for _, tc := range tests {
		res := call(t, rw, "sql_query", map[string]any{"sql": tc.sql})
		if !res.Success || encode(res.Data) != tc.data || res.Summary != tc.summary {
			t.Fatalf("%s: %+v %s", tc.sql, res, encode(res.Data))
		}
	}
	// A failed statement has no result, only its error (spec §7).
	res := call(t, rw, "sql_query", map[string]any{"sql": "SELECT * FROM nosuch"})
	if res.Success || res.Error == nil || res.Data != nil || res.Summary != nil {
		t.Fatalf("failed query: %+v", res)
	}
}

func pgPassword() string {
	if p := os.Getenv("AEP_TEST_PG_PASSWORD"); p != "" {
		return p
	}
	return "aep-test-pw"
}

// needPostgres skips the test when no PostgreSQL listens on 127.0.0.1:5432,
// unless CI is set: then it fails.
func needPostgres(t *testing.T) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second)
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("no PostgreSQL on 127.0.0.1:5432 (CI unset)")
		}
		t.Fatal(err)
	}
	conn.Close()
}

func TestPostgres(t *testing.T) {
	needPostgres(t)
	e := newEnv(t)
	base := map[string]any{"driver": "postgres", "database": "postgres", "host": "127.0.0.1", "port": 5432, "user": "postgres"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	// Wrong password: status error, the password nowhere.
	r := e.configure(t, e.c, with("password", canary, "mode", "read_only"))
	if r.Status != "error" || strings.Contains(r.Message, canary) || !strings.Contains(r.Message, "backend") {
		t.Fatalf("wrong password: %+v", r)
	}
	rw := connect(t, e.h)
	if r := e.configure(t, rw, with("password", pgPassword(), "mode", "read_write")); r.Status != "ok" {
		if os.Getenv("CI") == "" && strings.Contains(r.Message, "password authentication failed") {
			t.Skip("PostgreSQL reachable but the test password is not set (run .ci/run's postgres_start)")
		}
		t.Fatal(r.Message)
	}
	for _, q := range []string{"DROP TABLE IF EXISTS items", "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, note TEXT)",
		"INSERT INTO items SELECT g, 'item' || g FROM generate_series(1, 5) g"} {
		if res := call(t, rw, "sql_query", map[string]any{"sql": q}); !res.Success {
			t.Fatalf("%s: %s", q, *res.Error)
		}
	}
	t.Cleanup(func() { call(t, rw, "sql_query", map[string]any{"sql": "DROP TABLE IF EXISTS items"}) })
	if r := e.configure(t, e.c, with("password", pgPassword(), "mode", "read_only")); r.Status != "ok" {
		t.Fatal(r.Message)
	}
	sqlSuite(t, e.c, "$1")
	// A row larger than max_value_bytes (16 MiB by default) is an error,
	// not an allocation of its size in the host; the connection goes on.
	if res := call(t, e.c, "sql_query", map[string]any{"sql": "SELECT repeat('x', 20000000)"}); res.Success {
		t.Fatal("a 20 MB value was read into the host")
	}
	if res := call(t, e.c, "sql_query", map[string]any{"sql": "SELECT 1"}); !res.Success {
		t.Fatalf("after the large value: %s", *res.Error)
	}
}

func TestSecretsNeverLeak(t *testing.T) {
	e := newEnv(t)
	e.sqliteFile(t, e.c, "s.db", 1)
	ctx := context.Background()
	// A configure that fails on the backend and one that succeeds, both with the canary.
	e.configure(t, e.c, map[string]any{"driver": "postgres", "database": "x", "mode": "read_only", "port": freePort(t), "password": canary})
	if r := e.configure(t, e.c, map[string]any{"driver": "sqlite", "database": "s.db", "mode": "read_only", "password": canary}); r.Status != "ok" {
		t.Fatal(r.Message)
	}
	snap, err := e.c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	// The kernel stores snapshots below the data directory.
	found := false
	filepath.Walk(e.data, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(p, snap.SnapshotID) {
			found = true
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("canary in %s", p)
		}
		return nil
	})
	if !found {
		t.Fatalf("snapshot %s not found under the data directory", snap.SnapshotID)
	}
	// Restore: the toolkit is not configured any more.
	if _, err := e.c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	if def, _ := e.c.GetToolkit(ctx, "sql"); def.Configured {
		t.Fatal("configured after restore")
	}
	if err := e.audit.Close(ctx); err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(e.auditLog)
	if err != nil || !bytes.Contains(audit, []byte("toolkit/configure/req")) {
		t.Fatalf("audit log: %v %s", err, audit)
	}
	if bytes.Contains(audit, []byte(canary)) {
		t.Fatal("canary in the audit log")
	}
	if strings.Contains(e.logs.String(), canary) {
		t.Fatal("canary in the logs")
	}
}

// tcpProxy forwards loopback connections to a backend; stop cuts every
// connection and stops listening, start listens again on the same address.
type tcpProxy struct {
	t       *testing.T
	addr    string
	backend string
	mu      sync.Mutex
	ln      net.Listener
	conns   []net.Conn
}

func (p *tcpProxy) start() {
	p.t.Helper()
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.backend)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }() //nolint:errcheck // ends when either side closes
			go func() { io.Copy(c, b); c.Close() }() //nolint:errcheck
		}
	}()
}

func (p *tcpProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A configured toolkit whose backend goes away falls from `running` to
// `configured` (spec §2.8 states), its calls fail as tool errors, and it is
// `running` again, without configuring anew, once the backend is back.
func TestPostgresLostConnection(t *testing.T) {
	needPostgres(t)
	proxy := &tcpProxy{t: t, backend: "127.0.0.1:5432"}
	proxy.start()
	t.Cleanup(proxy.stop)
	_, portText, _ := net.SplitHostPort(proxy.addr)
	port, _ := strconv.Atoi(portText)
	e := newEnv(t)
	ctx := context.Background()
	r := e.configure(t, e.c, map[string]any{"driver": "postgres", "database": "postgres", "host": "127.0.0.1", "port": port,
		"user": "postgres", "password": pgPassword(), "mode": "read_only"})
	if r.Status != "ok" {
		if os.Getenv("CI") == "" && strings.Contains(r.Message, "password authentication failed") {
			t.Skip("PostgreSQL reachable but the test password is not set (run .ci/run's postgres_start)")
		}
		t.Fatal(r.Message)
	}
	state := func() string {
		t.Helper()
		def, err := e.c.GetToolkit(ctx, "sql")
		if err != nil {
			t.Fatal(err)
		}
		if !def.Configured {
			t.Fatalf("toolkit no longer configured: %+v", def)
		}
		return string(def.State)
	}
	query := func() *msg.ToolResult {
		t.Helper()
		return call(t, e.c, "sql_query", map[string]any{"sql": "SELECT 41 + 1 AS n"})
	}
	if s := state(); s != "running" {
		t.Fatalf("state after configure %q", s)
	}
	if res := query(); !res.Success {
		t.Fatalf("query: %s", *res.Error)
	}

	proxy.stop()
	if s := state(); s != "configured" {
		t.Fatalf("state with the backend gone %q, want configured", s)
	}
	res := query()
	if res.Success || res.ErrorCode == nil || *res.ErrorCode != "TOOL_ERROR" {
		t.Fatalf("query with the backend gone: %+v", res)
	}
	if strings.Contains(*res.Error, pgPassword()) {
		t.Fatal("the password reached the error")
	}

	proxy.start() // same address
	if s := state(); s != "running" {
		t.Fatalf("state with the backend back %q, want running", s)
	}
	if res := query(); !res.Success {
		t.Fatalf("query with the backend back: %s", *res.Error)
	}
}

// TestSQLiteRefusedWithoutPathConfinement: on a host whose sandbox cannot
// keep a process from the host's files (the supervised tier without
// Landlock), the sqlite driver is refused at configure, saying why, and
// no worker starts (fail closed).
func TestSQLiteRefusedWithoutPathConfinement(t *testing.T) {
	e := newEnv(t)
	restore := toolkits.SetPathsConfined(func(sandbox.Mode) (bool, error) { return false, nil })
	defer restore()
	r := e.configure(t, e.c, map[string]any{"driver": "sqlite", "database": "x.db", "mode": "read_write"})
	if r.Status != "error" || !strings.Contains(r.Message, "sqlite driver is refused on this host") || !strings.Contains(r.Message, "Landlock") {
		t.Fatalf("configure: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(sessionDir(t, e.h, e.c), "x.db")); !os.IsNotExist(err) {
		t.Fatalf("the database file was made: %v", err)
	}
}

// TestReferenceDatabases: a database the operator lists is open to every
// session, read-only, as reference/<name>; writing it is refused, and a
// name the operator did not list is not found.
func TestReferenceDatabases(t *testing.T) {
	ref := filepath.Join(t.TempDir(), "geo.db")
	sqliteFileAt(t, ref, 4)
	os.Chmod(filepath.Dir(ref), 0o755)
	os.Chmod(ref, 0o644)
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		{Name: "tk", Type: "toolkits", Impl: &toolkits.Plugin{Settings: toolkits.Settings{
			ReferenceDatabases: []toolkits.ReferenceDatabase{{Name: "geo", Path: ref}}}}},
	}, server.WithDataDir(t.TempDir()))
	e := &env{h: h}
	for i := 0; i < 2; i++ {
		c := connect(t, h)
		if r := e.configure(t, c, map[string]any{"driver": "sqlite", "database": "reference/geo", "mode": "read_write"}); r.Status != "error" || !strings.Contains(r.Message, "read_only") {
			t.Fatalf("read_write: %+v", r)
		}
		if r := e.configure(t, c, map[string]any{"driver": "sqlite", "database": "reference/geo", "mode": "read_only"}); r.Status != "ok" {
			t.Fatalf("session %d: %s", i, r.Message)
		}
		if res := call(t, c, "sql_query", map[string]any{"sql": "SELECT count(*) FROM items"}); !res.Success || !strings.Contains(encode(res.Data), "[[4]]") {
			t.Fatalf("session %d: %+v", i, res)
		}
		for _, q := range []string{"DELETE FROM items", "PRAGMA query_only=0"} {
			call(t, c, "sql_query", map[string]any{"sql": q})
		}
		if res := call(t, c, "sql_query", map[string]any{"sql": "SELECT count(*) FROM items"}); !strings.Contains(encode(res.Data), "[[4]]") {
			t.Fatalf("the reference database changed: %+v", res)
		}
		if r := e.configure(t, c, map[string]any{"driver": "sqlite", "database": "reference/other", "mode": "read_only"}); r.Status != "error" {
			t.Fatalf("an unlisted reference: %+v", r)
		}
	}
}
