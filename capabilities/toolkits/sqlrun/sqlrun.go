// Package sqlrun runs the sql toolkit's statements on a database/sql
// handle: the one implementation of sql_query, sql_list_tables and
// sql_describe_table, used by the PostgreSQL backend in the host and by
// the SQLite worker inside the session's sandbox
// (capabilities/toolkits/sqlworker). Results are bounded twice: by a row
// cap and by a byte budget on the encoded rows, so neither side ever holds
// more than the caller can send on.
package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Flavor selects the catalogue queries of a database.
type Flavor string

// The flavors the toolkit serves.
const (
	SQLite   Flavor = "sqlite"
	Postgres Flavor = "postgres"
)

// QueryIn is sql_query's input.
type QueryIn struct {
	SQL     string `json:"sql" desc:"One statement; use $1 (PostgreSQL) or ? (SQLite) placeholders."`
	Params  []any  `json:"params,omitempty" desc:"Values bound to the placeholders."`
	MaxRows int    `json:"max_rows,omitempty" desc:"Row cap, at most the configured max_rows."`
}

// QueryOut is sql_query's result.
type QueryOut struct {
	Columns      []string `json:"columns"`
	Rows         [][]any  `json:"rows"`
	RowsAffected *int64   `json:"rows_affected,omitempty"`
	Truncated    bool     `json:"truncated"`
}

// TablesOut is sql_list_tables' result.
type TablesOut struct {
	Tables []string `json:"tables"`
}

// DescribeIn is sql_describe_table's input.
type DescribeIn struct {
	Table string `json:"table"`
}

// ColumnInfo describes one column.
type ColumnInfo struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Nullable   bool   `json:"nullable"`
	PrimaryKey bool   `json:"primary_key"`
}

// DescribeOut is sql_describe_table's result.
type DescribeOut struct {
	Table   string       `json:"table"`
	Columns []ColumnInfo `json:"columns"`
}

// ErrReadOnly refuses a statement that would write on a read_only toolkit.
var ErrReadOnly = errors.New("the toolkit is configured read_only: only queries that read are allowed")

// DB is what the functions here run statements on: a *sql.DB (the
// PostgreSQL pool) or a *sql.Conn (the SQLite worker's one connection,
// which holds its limits).
type DB interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Limits bound one query's result.
type Limits struct {
	// MaxRows caps the rows; more set Truncated.
	MaxRows int
	// MaxBytes caps the rows' approximate encoded size; rows past it are
	// left out and Truncated set (0: no byte cap).
	MaxBytes int
}

// StatementKind sorts a statement by what its result holds: rows (a query,
// or a change with RETURNING), a count of changed rows (a data change
// without RETURNING, which only Exec can report), or nothing (schema
// changes; SQLite would report the previous change's count for them).
func StatementKind(q string) (exec, counts bool) {
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

// ReadOnlyStatement is a first, friendly check; the database itself is
// opened read-only (SQLite mode=ro, PostgreSQL default_transaction_read_only),
// which is what actually refuses writes.
func ReadOnlyStatement(q string) bool {
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

// Query runs one statement of sql_query.
func Query(ctx context.Context, db DB, readOnly bool, in QueryIn, lim Limits) (QueryOut, error) {
	if readOnly && !ReadOnlyStatement(in.SQL) {
		return QueryOut{}, ErrReadOnly
	}
	limit := lim.MaxRows
	if in.MaxRows > 0 && (limit <= 0 || in.MaxRows < limit) {
		limit = in.MaxRows
	}
	if exec, counts := StatementKind(in.SQL); exec {
		res, err := db.ExecContext(ctx, in.SQL, in.Params...)
		if err != nil {
			return QueryOut{}, err
		}
		out := QueryOut{Columns: []string{}, Rows: [][]any{}}
		if counts {
			n, err := res.RowsAffected()
			if err != nil {
				return QueryOut{}, err
			}
			out.RowsAffected = &n
		}
		return out, nil
	}
	rows, err := db.QueryContext(ctx, in.SQL, in.Params...)
	if err != nil {
		return QueryOut{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return QueryOut{}, err
	}
	out := QueryOut{Columns: cols, Rows: [][]any{}}
	size := 0
	for rows.Next() {
		if limit > 0 && len(out.Rows) == limit {
			out.Truncated = true
			break
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return QueryOut{}, err
		}
		rowSize := 2
		for i, v := range vals {
			if bs, ok := v.([]byte); ok {
				vals[i] = string(bs)
			}
			rowSize += approxSize(vals[i]) + 1
		}
		if lim.MaxBytes > 0 && size+rowSize > lim.MaxBytes {
			out.Truncated = true
			break
		}
		size += rowSize
		out.Rows = append(out.Rows, vals)
	}
	return out, rows.Err()
}

// approxSize is an upper bound of v's JSON size for the byte budget: a
// string may grow to six bytes a byte when escaped, numbers and times are
// short.
func approxSize(v any) int {
	switch x := v.(type) {
	case string:
		if utf8.ValidString(x) {
			return 2 + len(x) + len(x)/8 + 8
		}
		return 2 + 6*len(x)
	case nil:
		return 4
	}
	return 32
}

// ListTables runs sql_list_tables.
func ListTables(ctx context.Context, db DB, f Flavor) (TablesOut, error) {
	q := `SELECT name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' ORDER BY name`
	if f == Postgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return TablesOut{}, err
	}
	defer rows.Close()
	out := TablesOut{Tables: []string{}}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return TablesOut{}, err
		}
		out.Tables = append(out.Tables, n)
	}
	return out, rows.Err()
}

// Describe runs sql_describe_table.
func Describe(ctx context.Context, db DB, f Flavor, in DescribeIn) (DescribeOut, error) {
	out := DescribeOut{Table: in.Table, Columns: []ColumnInfo{}}
	if f == SQLite {
		rows, err := db.QueryContext(ctx, `SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, in.Table)
		if err != nil {
			return out, err
		}
		defer rows.Close()
		for rows.Next() {
			var c ColumnInfo
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
		rows, err := db.QueryContext(ctx, `SELECT c.column_name, c.data_type, c.is_nullable = 'YES',
			EXISTS (SELECT 1 FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage k
			  ON tc.constraint_name = k.constraint_name AND tc.table_schema = k.table_schema
			  WHERE tc.constraint_type = 'PRIMARY KEY' AND k.table_name = c.table_name AND k.column_name = c.column_name AND k.table_schema = c.table_schema)
			FROM information_schema.columns c WHERE c.table_schema = current_schema() AND c.table_name = $1 ORDER BY c.ordinal_position`, in.Table)
		if err != nil {
			return out, err
		}
		defer rows.Close()
		for rows.Next() {
			var c ColumnInfo
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
