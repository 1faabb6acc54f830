package toolkits

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

// sqlToolkit is the `sql` toolkit. SQLite files live under
// dir: the agent names a file relative to it, never a host path.
func sqlToolkit(dir string) *Toolkit {
	return &Toolkit{
		Name: "sql", Description: "Query a SQL database: SQLite files of the host's sql directory or a PostgreSQL server.",
		Category: "data", Version: "1.0.0", Tags: []string{"sql", "database"},
		Tools: []string{"sql_describe_table", "sql_list_tables", "sql_query"},
		Schema: map[string]any{
			"type":     "object",
			"required": []any{"driver", "database", "mode"},
			"properties": map[string]any{
				"driver":   map[string]any{"type": "string", "enum": []any{"sqlite", "postgres"}, "description": "Database driver."},
				"database": map[string]any{"type": "string", "description": "SQLite: a file name relative to the host's sql directory; PostgreSQL: the database name."},
				"host":     map[string]any{"type": "string", "default": "127.0.0.1", "description": "PostgreSQL host."},
				"port":     map[string]any{"type": "integer", "default": 5432, "minimum": 1, "maximum": 65535},
				"user":     map[string]any{"type": "string", "default": "postgres"},
				"password": map[string]any{"type": "string", "format": "password", "writeOnly": true, "description": "A secret: never stored, logged or echoed."},
				"sslmode":  map[string]any{"type": "string", "enum": []any{"disable", "require", "verify-full"}, "default": "disable"},
				"mode":     map[string]any{"type": "string", "enum": []any{"read_only", "read_write"}, "description": "read_only refuses writes at the database level."},
				"max_rows": map[string]any{"type": "integer", "default": 1000, "minimum": 1, "description": "Row cap of sql_query; more rows set truncated."},
			},
			"additionalProperties": false,
		},
		Open: func(ctx context.Context, cfg map[string]any) (Backend, error) { return openSQL(ctx, dir, cfg) },
	}
}

type sqlBackend struct {
	db       *sql.DB
	driver   string
	readOnly bool
	maxRows  int
}

func str(cfg map[string]any, k string) string { s, _ := cfg[k].(string); return s }

func num(cfg map[string]any, k string) int {
	switch v := cfg[k].(type) {
	case float64:
		return int(v)
	case int:
		return v
	case int64:
		return int(v)
	}
	return 0
}

func openSQL(ctx context.Context, dir string, cfg map[string]any) (Backend, error) {
	b := &sqlBackend{driver: str(cfg, "driver"), readOnly: str(cfg, "mode") == "read_only", maxRows: num(cfg, "max_rows")}
	var driver, dsn, sqliteHint string
	switch b.driver {
	case "sqlite":
		name := str(cfg, "database")
		if strings.IndexByte(name, 0) >= 0 || filepath.IsAbs(name) || strings.Contains(name, "..") || strings.ContainsAny(name, "?#") {
			return nil, fmt.Errorf("database %s must be a plain file name: SQLite files live in the toolkits plugin's sqlite_dir (%s)", wire.Clip(name), dir)
		}
		// The file URI needs an absolute path: a relative one (the default
		// data dir is ./aep-data) would have its first segment read as the
		// URI's authority, which SQLite refuses.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("sqlite_dir %s: %w", dir, err)
		}
		path := filepath.Join(abs, name)
		sqliteHint = fmt.Sprintf(" (SQLite file %q in the toolkits plugin's sqlite_dir %s)", name, dir)
		mode := "rwc"
		if b.readOnly {
			mode = "ro"
		}
		driver, dsn = "sqlite", (&url.URL{Scheme: "file", Path: path, RawQuery: "mode=" + mode + "&_pragma=busy_timeout(5000)"}).String()
	case "postgres":
		u := &url.URL{Scheme: "postgres", User: url.UserPassword(str(cfg, "user"), str(cfg, "password")),
			Host: net.JoinHostPort(str(cfg, "host"), strconv.Itoa(num(cfg, "port"))), Path: "/" + str(cfg, "database")}
		q := url.Values{"sslmode": {str(cfg, "sslmode")}, "connect_timeout": {"5"}}
		if b.readOnly {
			q.Set("default_transaction_read_only", "on")
		}
		u.RawQuery = q.Encode()
		driver, dsn = "pgx", u.String()
	default:
		return nil, fmt.Errorf("unknown driver %q", b.driver)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot connect%s: %w", sqliteHint, err)
	}
	db.SetMaxOpenConns(4)
	b.db = db
	return b, nil
}

func (b *sqlBackend) Alive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return b.db.PingContext(ctx) == nil
}

func (b *sqlBackend) Close() error { return b.db.Close() }

type queryIn struct {
	SQL     string `json:"sql" desc:"One statement; use $1 (PostgreSQL) or ? (SQLite) placeholders."`
	Params  []any  `json:"params,omitempty" desc:"Values bound to the placeholders."`
	MaxRows int    `json:"max_rows,omitempty" desc:"Row cap, at most the configured max_rows."`
}

type queryOut struct {
	Columns      []string `json:"columns"`
	Rows         [][]any  `json:"rows"`
	RowsAffected *int64   `json:"rows_affected,omitempty"`
	Truncated    bool     `json:"truncated"`
}

func (o queryOut) ToolOutput() toolrun.Output {
	summary := fmt.Sprintf("%d rows", len(o.Rows))
	switch {
	case o.RowsAffected != nil:
		summary = fmt.Sprintf("%d rows affected", *o.RowsAffected)
	case o.Columns != nil && len(o.Columns) == 0:
		summary = "statement ran"
	}
	return toolrun.Output{Data: o, Truncated: o.Truncated, Summary: summary}
}

// statementKind sorts a statement by what its result holds: rows (a query,
// or a change with RETURNING), a count of changed rows (a data change
// without RETURNING, which only Exec can report), or nothing (schema
// changes; SQLite would report the previous change's count for them).
func statementKind(q string) (exec, counts bool) {
	f := strings.Fields(strings.ToLower(q))
	if len(f) == 0 {
		return false, false
	}
	switch f[0] {
	case "insert", "update", "delete", "replace", "merge":
		for _, w := range f[1:] {
			if strings.Trim(w, "();,") == "returning" {
				return false, false
			}
		}
		return true, true
	case "create", "drop", "alter", "truncate":
		return true, false
	}
	return false, false
}

type tablesOut struct {
	Tables []string `json:"tables"`
}

type describeIn struct {
	Table string `json:"table"`
}

type columnInfo struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Nullable   bool   `json:"nullable"`
	PrimaryKey bool   `json:"primary_key"`
}

type describeOut struct {
	Table   string       `json:"table"`
	Columns []columnInfo `json:"columns"`
}

// readOnlyStatement is a first, friendly check; the database itself is
// opened read-only (SQLite mode=ro, PostgreSQL default_transaction_read_only),
// which is what actually refuses writes.
func readOnlyStatement(q string) bool {
	f := strings.Fields(strings.ToLower(q))
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "select", "with", "explain", "values", "show", "table":
		return true
	}
	return false
}

func (b *sqlBackend) Tools() []*toolrun.Tool {
	mk := func(t *toolrun.Tool, err error) *toolrun.Tool {
		if err != nil {
			panic(err) // fixed definitions: a mistake here is a programming error
		}
		return t
	}
	return []*toolrun.Tool{
		mk(toolrun.NewTyped("sql_query", "Run one parameterised SQL statement; rows past the cap set truncated.", b.query, toolrun.Tags("sql"))),
		mk(toolrun.NewTyped("sql_list_tables", "List the tables of the database.", b.listTables, toolrun.Tags("sql"), toolrun.Idempotent())),
		mk(toolrun.NewTyped("sql_describe_table", "Describe the columns of a table.", b.describe, toolrun.Tags("sql"), toolrun.Idempotent())),
	}
}

func (b *sqlBackend) query(ctx context.Context, in queryIn) (queryOut, error) {
	if b.readOnly && !readOnlyStatement(in.SQL) {
		return queryOut{}, errors.New("the toolkit is configured read_only: only queries that read are allowed")
	}
	limit := b.maxRows
	if in.MaxRows > 0 && in.MaxRows < limit {
		limit = in.MaxRows
	}
	if exec, counts := statementKind(in.SQL); exec {
		res, err := b.db.ExecContext(ctx, in.SQL, in.Params...)
		if err != nil {
			return queryOut{}, err
		}
		out := queryOut{Columns: []string{}, Rows: [][]any{}}
		if counts {
			n, err := res.RowsAffected()
			if err != nil {
				return queryOut{}, err
			}
			out.RowsAffected = &n
		}
		return out, nil
	}
	rows, err := b.db.QueryContext(ctx, in.SQL, in.Params...)
	if err != nil {
		return queryOut{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return queryOut{}, err
	}
	out := queryOut{Columns: cols, Rows: [][]any{}}
	for rows.Next() {
		if len(out.Rows) == limit {
			out.Truncated = true
			break
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return queryOut{}, err
		}
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				vals[i] = string(bs)
			}
		}
		out.Rows = append(out.Rows, vals)
	}
	return out, rows.Err()
}

func (b *sqlBackend) listTables(ctx context.Context, _ struct{}) (tablesOut, error) {
	q := `SELECT name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' ORDER BY name`
	if b.driver == "postgres" {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
	}
	rows, err := b.db.QueryContext(ctx, q)
	if err != nil {
		return tablesOut{}, err
	}
	defer rows.Close()
	out := tablesOut{Tables: []string{}}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return tablesOut{}, err
		}
		out.Tables = append(out.Tables, n)
	}
	return out, rows.Err()
}

func (b *sqlBackend) describe(ctx context.Context, in describeIn) (describeOut, error) {
	out := describeOut{Table: in.Table, Columns: []columnInfo{}}
	if b.driver == "sqlite" {
		rows, err := b.db.QueryContext(ctx, `SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, in.Table)
		if err != nil {
			return out, err
		}
		defer rows.Close()
		for rows.Next() {
			var c columnInfo
			var notnull, pk int
			if err := rows.Scan(&c.Name, &c.Type, &notnull, &pk); err != nil {
				return out, err
			}
			c.Nullable, c.PrimaryKey = notnull == 0 && pk == 0, pk > 0
			out.Columns = append(out.Columns, c)
		}
		if err := rows.Err(); err != nil {
			return out, err
		}
	} else {
		rows, err := b.db.QueryContext(ctx, `SELECT c.column_name, c.data_type, c.is_nullable = 'YES',
			EXISTS (SELECT 1 FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage k
			  ON tc.constraint_name = k.constraint_name AND tc.table_schema = k.table_schema
			  WHERE tc.constraint_type = 'PRIMARY KEY' AND k.table_name = c.table_name AND k.column_name = c.column_name AND k.table_schema = c.table_schema)
			FROM information_schema.columns c WHERE c.table_schema = current_schema() AND c.table_name = $1 ORDER BY c.ordinal_position`, in.Table)
		if err != nil {
			return out, err
		}
		defer rows.Close()
		for rows.Next() {
			var c columnInfo
			if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &c.PrimaryKey); err != nil {
				return out, err
			}
			out.Columns = append(out.Columns, c)
		}
		if err := rows.Err(); err != nil {
			return out, err
		}
	}
	if len(out.Columns) == 0 {
		return out, fmt.Errorf("no table %q", in.Table)
	}
	return out, nil
}
