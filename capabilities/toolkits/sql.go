package toolkits

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/aephost/aep/capabilities/toolkits/sqlrun"
	"github.com/aephost/aep/capabilities/toolkits/sqlworker"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/internal/egress"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

// referencePrefix starts the database name of an operator's reference
// database (settings reference_databases).
const referencePrefix = "reference/"

// sqlToolkit is the `sql` toolkit (docs/DECISIONS.md, The sql toolkit
// contained). SQLite databases are files of the session's own directory,
// run by a worker inside the session's sandbox (package sqlworker); a
// PostgreSQL connection is made by the host, to the endpoints the
// operator lists only.
func (p *Plugin) sqlToolkit() *Toolkit {
	return &Toolkit{
		Name: "sql", Description: "Query a SQL database: a SQLite file of the session's directory or a PostgreSQL server the host allows.",
		Category: "data", Version: "1.0.0", Tags: []string{"sql", "database"},
		Tools: []string{"sql_describe_table", "sql_list_tables", "sql_query"},
		Schema: map[string]any{
			"type":     "object",
			"required": []any{"driver", "database", "mode"},
			"properties": map[string]any{
				"driver":   map[string]any{"type": "string", "enum": []any{"sqlite", "postgres"}, "description": "Database driver."},
				"database": map[string]any{"type": "string", "description": "SQLite: a file of the session's directory, by its relative path (created in read_write), or reference/<name> for a read-only reference database of the host; PostgreSQL: the database name."},
				"host":     map[string]any{"type": "string", "default": "127.0.0.1", "description": "PostgreSQL host: one of the endpoints the host allows."},
				"port":     map[string]any{"type": "integer", "default": 5432, "minimum": 1, "maximum": 65535},
				"user":     map[string]any{"type": "string", "default": "postgres"},
				"password": map[string]any{"type": "string", "format": "password", "writeOnly": true, "description": "A secret: never stored, logged or echoed."},
				"sslmode":  map[string]any{"type": "string", "enum": []any{"disable", "require", "verify-full"}, "default": "disable"},
				"mode":     map[string]any{"type": "string", "enum": []any{"read_only", "read_write"}, "description": "read_only refuses writes at the database level."},
				"max_rows": map[string]any{"type": "integer", "default": 1000, "minimum": 1, "description": "Row cap of sql_query; more rows set truncated."},
			},
			"additionalProperties": false,
		},
		Open: p.openSQL,
	}
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

// pathsConfined is sandbox.PathsConfined; a test replaces it to play a
// supervised tier without Landlock.
var pathsConfined = sandbox.PathsConfined

func (p *Plugin) openSQL(ctx context.Context, place Place, cfg map[string]any) (Backend, error) {
	readOnly := str(cfg, "mode") == "read_only"
	switch str(cfg, "driver") {
	case "sqlite":
		return p.openSQLite(ctx, place, cfg, readOnly)
	case "postgres":
		return p.openPostgres(ctx, cfg, readOnly)
	}
	return nil, fmt.Errorf("unknown driver %q", str(cfg, "driver"))
}

// openSQLite starts the database's worker in the session's sandbox.
func (p *Plugin) openSQLite(ctx context.Context, place Place, cfg map[string]any, readOnly bool) (Backend, error) {
	confined, err := pathsConfined(p.mode)
	if err != nil {
		return nil, fmt.Errorf("the sqlite driver needs the session's sandbox, which this host cannot provide: %w", err)
	}
	if !confined {
		return nil, errors.New("the sqlite driver is refused on this host: its sandbox (the supervised tier without Landlock) cannot keep a database engine from the host's own files")
	}
	name := str(cfg, "database")
	spec := sqlworker.Spec{Mode: p.mode, WorkDir: place.Dir, WorkReadOnly: place.ReadOnly, ReadOnly: readOnly,
		MemoryBytes: p.SQLiteMemoryBytes, FileBytes: p.quota, MaxValueBytes: p.MaxValueBytes,
		MaxResponseBytes: p.MaxOutputBytes + 64<<10}
	if ref, ok := strings.CutPrefix(name, referencePrefix); ok {
		path, found := p.references[ref]
		if !found {
			return nil, fmt.Errorf("no reference database %s on this host", wire.Clip(ref))
		}
		if !readOnly {
			return nil, errors.New("a reference database opens only with mode read_only")
		}
		spec.Path, spec.References = path, []string{path}
	} else {
		rel, err := confine.Rel("database", name)
		if err != nil || rel == "." {
			return nil, fmt.Errorf("database %s must be a relative path of a file in the session's directory", wire.Clip(name))
		}
		if place.ReadOnly && !readOnly {
			return nil, errors.New("this session's directory is read-only (a restricted subagent): configure mode read_only")
		}
		spec.Path = filepath.Join(place.Dir, rel)
	}
	b := &sqliteBackend{spec: spec, maxRows: num(cfg, "max_rows"), host: p.env.Host, session: place.Session}
	if _, err := b.worker(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// sqliteBackend is one configured SQLite database: its worker, started
// again on the next call when it ended (a statement that ran out of
// memory or past its timeout ends it).
type sqliteBackend struct {
	spec    sqlworker.Spec
	maxRows int
	// host and session: the worker is a unit of the session's leaf work,
	// its memory in the session's sandbox memory, while it runs
	// (server/budget.go).
	host    *server.Host
	session string

	mu     sync.Mutex
	w      *sqlworker.Worker
	closed bool
}

var errClosed = errors.New("the toolkit was closed")

func (b *sqliteBackend) worker(ctx context.Context) (*sqlworker.Worker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	if b.w != nil && b.w.Alive() {
		return b.w, nil
	}
	if b.w != nil {
		b.w.Close()
		b.w = nil
	}
	spec := b.spec
	var leaf *server.Leaf
	if b.host != nil {
		var err error
		if leaf, err = b.host.AcquireLeaf(ctx, b.session); err != nil {
			return nil, err
		}
		if spec.MemoryBytes, spec.FileBytes, err = leaf.ReserveProcess(ctx, spec.MemoryBytes); err != nil {
			leaf.Release()
			return nil, err
		}
	}
	w, err := sqlworker.Start(ctx, spec)
	if err != nil {
		if leaf != nil {
			leaf.Release()
		}
		return nil, err
	}
	if leaf != nil {
		go func() {
			select {
			case <-w.Done():
			case <-leaf.Context().Done():
				w.Kill() // the session passed its disk budget
				<-w.Done()
			}
			leaf.Release()
		}()
	}
	b.w = w
	return w, nil
}

func (b *sqliteBackend) do(ctx context.Context, req sqlworker.Request) (sqlworker.Response, error) {
	w, err := b.worker(ctx)
	if err != nil {
		return sqlworker.Response{}, err
	}
	return w.Do(ctx, req)
}

func (b *sqliteBackend) Alive(ctx context.Context) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w != nil && b.w.Alive()
}

func (b *sqliteBackend) Close() error {
	b.mu.Lock()
	w := b.w
	b.w, b.closed = nil, true
	b.mu.Unlock()
	if w != nil {
		return w.Close()
	}
	return nil
}

// Hold checkpoints the database and holds its worker while the session's
// files are copied (a snapshot's files, a fork): see [FileHolder].
func (b *sqliteBackend) Hold(ctx context.Context, dir string) (func(), error) {
	if !within(b.spec.Path, dir) {
		return func() {}, nil
	}
	b.mu.Lock()
	w := b.w
	b.mu.Unlock()
	if w == nil || !w.Alive() {
		return func() {}, nil
	}
	return w.Hold(ctx)
}

func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel)
}

func (b *sqliteBackend) Tools() []*toolrun.Tool {
	return sqlTools(
		func(ctx context.Context, in sqlrun.QueryIn) (sqlrun.QueryOut, error) {
			if b.spec.ReadOnly && !sqlrun.ReadOnlyStatement(in.SQL) {
				return sqlrun.QueryOut{}, sqlrun.ErrReadOnly
			}
			r, err := b.do(ctx, sqlworker.Request{Op: sqlworker.OpQuery, Query: &in, MaxRows: b.maxRows, MaxBytes: toolrun.MaxOutput(ctx)})
			if err != nil {
				return sqlrun.QueryOut{}, err
			}
			return *r.Query, nil
		},
		func(ctx context.Context) (sqlrun.TablesOut, error) {
			r, err := b.do(ctx, sqlworker.Request{Op: sqlworker.OpTables})
			if err != nil {
				return sqlrun.TablesOut{}, err
			}
			return *r.Tables, nil
		},
		func(ctx context.Context, in sqlrun.DescribeIn) (sqlrun.DescribeOut, error) {
			r, err := b.do(ctx, sqlworker.Request{Op: sqlworker.OpDescribe, Table: in.Table})
			if err != nil {
				return sqlrun.DescribeOut{Table: in.Table, Columns: []sqlrun.ColumnInfo{}}, err
			}
			return *r.Describe, nil
		})
}

// openPostgres connects, from the host, to an endpoint the operator
// lists (settings postgres_endpoints): the name is resolved once and the
// connection made to an address that was checked. A refused endpoint is
// refused before any connection, with a text that says nothing of the
// network.
func (p *Plugin) openPostgres(ctx context.Context, cfg map[string]any, readOnly bool) (Backend, error) {
	host, port := str(cfg, "host"), num(cfg, "port")
	if _, err := p.endpoints.Resolve(ctx, host, port); err != nil {
		return nil, fmt.Errorf("the postgres driver may connect only to the endpoints this host allows (toolkits setting postgres_endpoints): %w", err)
	}
	pc, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.Host, pc.Port, pc.Database = host, uint16(port), str(cfg, "database")
	pc.User, pc.Password = str(cfg, "user"), str(cfg, "password")
	pc.ConnectTimeout = 5 * time.Second
	pc.Fallbacks = nil
	if err := setSSLMode(pc, str(cfg, "sslmode"), host); err != nil {
		return nil, err
	}
	// The name resolves to the address pgx is then told, and the dial
	// goes through the allowlist again, to a checked address only.
	d := &egress.Dialer{Endpoints: p.endpoints}
	pc.LookupFunc = func(ctx context.Context, h string) ([]string, error) { return []string{h}, nil }
	pc.DialFunc = d.DialContext
	maxBody := p.MaxValueBytes
	pc.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		f := pgproto3.NewFrontend(r, w)
		// A row, or any message, past the bound is an error rather than
		// an allocation the size of what the server sends.
		f.SetMaxBodyLen(maxBody)
		return f
	}
	pc.RuntimeParams = map[string]string{"application_name": "aep"}
	if readOnly {
		pc.RuntimeParams["default_transaction_read_only"] = "on"
	}
	db := stdlib.OpenDB(*pc)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot connect: %w", pgError(err))
	}
	db.SetMaxOpenConns(4)
	return &pgBackend{db: db, readOnly: readOnly, maxRows: num(cfg, "max_rows")}, nil
}

// setSSLMode applies the toolkit's sslmode as libpq would.
func setSSLMode(pc *pgx.ConnConfig, mode, host string) error {
	ref, err := pgconn.ParseConfig("sslmode=" + mode + " host=" + quoteConn(host))
	if err != nil {
		return fmt.Errorf("sslmode %q: %w", mode, err)
	}
	pc.TLSConfig = ref.TLSConfig
	return nil
}

// quoteConn quotes a value of a libpq key/value string.
func quoteConn(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// pgError keeps what an agent may read of a connection failure: the
// server's own words (a wrong password, a missing database), not the
// network's (addresses, which port answered how).
func pgError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return errors.New(pe.Message)
	}
	if errors.Is(err, egress.ErrNotAllowed) {
		return egress.ErrNotAllowed
	}
	return errors.New("the server did not answer")
}

type pgBackend struct {
	db       *sql.DB
	readOnly bool
	maxRows  int
}

func (b *pgBackend) Alive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return b.db.PingContext(ctx) == nil
}

func (b *pgBackend) Close() error { return b.db.Close() }

func (b *pgBackend) Tools() []*toolrun.Tool {
	return sqlTools(
		func(ctx context.Context, in sqlrun.QueryIn) (sqlrun.QueryOut, error) {
			return sqlrun.Query(ctx, b.db, b.readOnly, in, sqlrun.Limits{MaxRows: b.maxRows, MaxBytes: toolrun.MaxOutput(ctx)})
		},
		func(ctx context.Context) (sqlrun.TablesOut, error) {
			return sqlrun.ListTables(ctx, b.db, sqlrun.Postgres)
		},
		func(ctx context.Context, in sqlrun.DescribeIn) (sqlrun.DescribeOut, error) {
			return sqlrun.Describe(ctx, b.db, sqlrun.Postgres, in)
		})
}

type queryOut sqlrun.QueryOut

func (o queryOut) ToolOutput() toolrun.Output {
	summary := fmt.Sprintf("%d rows", len(o.Rows))
	switch {
	case o.RowsAffected != nil:
		summary = fmt.Sprintf("%d rows affected", *o.RowsAffected)
	case o.Columns != nil && len(o.Columns) == 0:
		summary = "statement ran"
	}
	return toolrun.Output{Data: sqlrun.QueryOut(o), Truncated: o.Truncated, Summary: summary}
}

// sqlTools are the toolkit's three tools over one backend's functions.
func sqlTools(query func(context.Context, sqlrun.QueryIn) (sqlrun.QueryOut, error),
	tables func(context.Context) (sqlrun.TablesOut, error),
	describe func(context.Context, sqlrun.DescribeIn) (sqlrun.DescribeOut, error)) []*toolrun.Tool {
	mk := func(t *toolrun.Tool, err error) *toolrun.Tool {
		if err != nil {
			panic(err) // fixed definitions: a mistake here is a programming error
		}
		return t
	}
	return []*toolrun.Tool{
		mk(toolrun.NewTyped("sql_query", "Run one parameterised SQL statement; rows past the cap set truncated.",
			func(ctx context.Context, in sqlrun.QueryIn) (queryOut, error) {
				out, err := query(ctx, in)
				return queryOut(out), err
			}, toolrun.Tags("sql"))),
		mk(toolrun.NewTyped("sql_list_tables", "List the tables of the database.",
			func(ctx context.Context, _ struct{}) (sqlrun.TablesOut, error) { return tables(ctx) }, toolrun.Tags("sql"), toolrun.Idempotent())),
		mk(toolrun.NewTyped("sql_describe_table", "Describe the columns of a table.", describe, toolrun.Tags("sql"), toolrun.Idempotent())),
	}
}
