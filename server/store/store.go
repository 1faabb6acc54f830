// Package store opens aep's persistent store: an ent client on SQLite
// (modernc.org/sqlite, pure Go) by default, or on PostgreSQL (pgx) when the
// DSN is a postgres:// URL (docs/DECISIONS.md, State). Entities that need SQLite-only
// features (FTS5) must check [Store.Dialect].
//
// One store serves the whole host. The kernel keeps session snapshots in it
// (target "sql"), and capability plugins reach the same shared client through
// server.PluginEnv.Store: a plugin adds its entities as schemas in ent/schema
// (one file per entity, named after the capability), runs `go generate ./...`,
// and uses env.Store.Client in Provision. Open migrates every entity, so a
// plugin never runs migrations itself. env.Store is nil on a host started
// without a store; a plugin that needs one fails Provision with a clear error.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver

	"github.com/aephost/aep/ent"
)

// DefaultFile is the SQLite file of a host's store, under its data directory.
const DefaultFile = "aep.db"

// ErrUnsupported is the cause when a DSN names a database this build cannot open yet.
var ErrUnsupported = errors.New("unsupported store")

// Store is an open store. Its Client is shared by the kernel and every plugin
// and is safe for concurrent use.
type Store struct {
	// Client is the ent client of every entity of ent/schema.
	Client  *ent.Client
	db      *sql.DB
	path    string
	dialect string
	met     *metrics // observe.go
}

// pragmas are applied to every SQLite connection of the pool (modernc's
// `_pragma` DSN parameter runs them on connect, not once per database):
// foreign keys are off by default in SQLite and ent's migration requires
// them; WAL lets readers run beside the writer; busy_timeout makes
// concurrent writers wait instead of failing with SQLITE_BUSY; `_txlock`
// takes the write lock at BEGIN so a read-then-write transaction cannot
// deadlock against another one. A 64 MiB page cache per connection and
// reads through a 256 MiB memory map keep full-text recall off the read
// syscalls: memory's recall over 100,000 entries went from p50 5.5–5.8 ms
// with SQLite's 2 MB default to 3.6–4.3 ms (docs/PERFORMANCE.md).
var pragmas = []string{"foreign_keys(1)", "journal_mode(WAL)", "busy_timeout(10000)", "synchronous(NORMAL)", "cache_size(-65536)", "mmap_size(268435456)"}

// Open opens the store that dsn names and migrates its schema.
//
//   - "" opens SQLite at <dataDir>/aep.db (docs/DECISIONS.md, State default);
//   - "sqlite://PATH", "file:PATH" or a plain PATH opens that SQLite file;
//     a relative PATH is taken relative to dataDir when one is given;
//   - "postgres://…" and "postgresql://…" URLs, and libpq's key/value
//     form ("host=db dbname=aep"), open PostgreSQL through pgx;
//   - anything else is refused with [ErrUnsupported] ([ParseDSN]).
//
// The SQLite file is created with mode 0600: snapshots and memories are the
// user's data.
func Open(ctx context.Context, dsn, dataDir string) (*Store, error) {
	d, err := ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if d.Postgres {
		return openPostgres(ctx, dsn, d.Where)
	}
	path, query, err := sqlitePath(d.Path, d.Query, dataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// SQLite would create the file with the process umask (usually 0644).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f.Close()
	for _, p := range pragmas {
		query.Add("_pragma", p)
	}
	if query.Get("_txlock") == "" {
		query.Set("_txlock", "immediate")
	}
	m := newMetrics()
	db, err := openTimed("sqlite", "file:"+path+"?"+query.Encode(), m)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return migrate(ctx, db, dialect.SQLite, path, m)
}

// openPostgres opens PostgreSQL. Its DSN may hold a password, so errors
// name the database by where only (host and database name).
func openPostgres(ctx context.Context, dsn, where string) (*Store, error) {
	m := newMetrics()
	db, err := openTimed("pgx", dsn, m)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres %s: %w", where, err)
	}
	// database/sql keeps 2 idle connections by default: a drain's
	// concurrent snapshots (server.snapshots.drain_parallel) or a burst
	// of requests would close and reopen the rest on every statement,
	// each reopening a TLS and SCRAM handshake. Keep as many as a drain
	// uses, and let them go after a while.
	db.SetMaxIdleConns(pgMaxIdleConns)
	db.SetConnMaxIdleTime(pgConnMaxIdle)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open postgres %s: %w", where, err)
	}
	return migrate(ctx, db, dialect.Postgres, where, m)
}

// The PostgreSQL pool's idle connections: as many as a drain snapshots at
// once by default (server/persist, DefaultDrainParallel), closed after a
// minute unused.
const (
	pgMaxIdleConns = 16
	pgConnMaxIdle  = time.Minute
)

// pgMigrateLock is the PostgreSQL advisory lock key ("aep.migr" in ASCII)
// that serialises the migrations of hosts starting at once on one
// database: two concurrent CREATE TABLEs of the same table fail on
// PostgreSQL's catalog, so the second host waits and then finds the
// tables there (docs/deploy.md).
const pgMigrateLock = 0x6165702e6d696772

// migrate wraps db in an ent client and creates or updates every entity's tables.
func migrate(ctx context.Context, db *sql.DB, dia, where string, m *metrics) (*Store, error) {
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dia, db)))
	if dia == dialect.Postgres {
		// The lock belongs to one connection, held apart from the pool
		// the migration runs on, and is released with it.
		conn, err := db.Conn(ctx)
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("store: migrate %s: %w", where, err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", int64(pgMigrateLock)); err != nil {
			client.Close()
			return nil, fmt.Errorf("store: migrate %s: lock: %w", where, err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(pgMigrateLock)) //nolint:errcheck // closing the connection releases it too
	}
	if err := createSchema(ctx, client, dia); err != nil {
		client.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", where, err)
	}
	st := &Store{Client: client, db: db, dialect: dia, met: m}
	if dia == dialect.SQLite {
		st.path = where
	}
	return st, nil
}

// migrateMu serialises the migrations of one process (createSchema).
var migrateMu sync.Mutex

// sqliteMigrateTries bounds the attempts at migrating a SQLite store.
const sqliteMigrateTries = 5

// createSchema migrates every entity. On SQLite, hosts sharing one file
// have no advisory lock: ent inspects the schema outside the
// transaction that applies its plan, so two hosts starting at once may
// both plan the same change (a new table, a new column) and the second
// fails on what the first made. It inspects again and finds nothing left
// to do, so a failed SQLite migration is tried again a few times.
func createSchema(ctx context.Context, client *ent.Client, dia string) error {
	// ent's migration works on its generated tables, which are process-wide
	// values it updates as it plans: stores opened at once in one process
	// (several hosts in one test binary) take turns.
	migrateMu.Lock()
	defer migrateMu.Unlock()
	err := client.Schema.Create(ctx)
	for try := 1; err != nil && dia == dialect.SQLite && try < sqliteMigrateTries; try++ {
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
		err = client.Schema.Create(ctx)
	}
	return err
}

// sqlitePath resolves a parsed SQLite path to a file path and its DSN
// parameters.
func sqlitePath(path string, query url.Values, dataDir string) (string, url.Values, error) {
	if path == "" {
		if dataDir == "" {
			return "", nil, errors.New("store: no data directory and no store.dsn; one of them is needed to place the database")
		}
		return filepath.Join(dataDir, DefaultFile), query, nil
	}
	if !filepath.IsAbs(path) && dataDir != "" {
		path = filepath.Join(dataDir, path)
	}
	return path, query, nil
}

// Path returns the SQLite file of the store ("" on PostgreSQL).
func (s *Store) Path() string { return s.path }

// Dialect returns the ent dialect of the store: "sqlite3" or "postgres".
func (s *Store) Dialect() string { return s.dialect }

// DB returns the underlying database handle, for checks and raw queries the
// ent client cannot express.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the client and its database.
func (s *Store) Close() error { return s.Client.Close() }
