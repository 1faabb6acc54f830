package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DSN is a parsed store.dsn: which database it names, without opening it.
type DSN struct {
	// Postgres is set for PostgreSQL (a URL or libpq's key/value form).
	Postgres bool
	// Where names a PostgreSQL database for messages, host and database
	// name only: the DSN itself may hold a password.
	Where string
	// Path is the SQLite file as written ("" for the default
	// <data-dir>/aep.db), relative to the data directory unless absolute.
	Path string
	// Query holds SQLite driver parameters written after a '?'.
	Query url.Values
}

// keyValue matches the start of libpq's key/value form ("host=db
// dbname=aep"): a key, optional blanks, '='.
var keyValue = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*[ \t]*=`)

// pgKey matches a key/value pair that says which PostgreSQL to reach.
var pgKey = regexp.MustCompile(`(^|[ \t])(host|hostaddr|port|dbname|user|service)[ \t]*=`)

// ParseDSN checks a store.dsn and says what it names, opening nothing:
// "" (SQLite at <data-dir>/aep.db), a SQLite path, sqlite://PATH or
// file:PATH; a postgres:// or postgresql:// URL, or libpq's key/value
// form, which pgx parses as it would to connect (a bad port, sslmode or
// option is refused here). Any other scheme is [ErrUnsupported]. A
// key/value string is never taken for a file name, and no message repeats
// the DSN: it may hold a password.
func ParseDSN(dsn string) (DSN, error) {
	if dsn == "" {
		return DSN{Query: url.Values{}}, nil
	}
	if strings.TrimSpace(dsn) != dsn {
		return DSN{}, errors.New("the DSN begins or ends with white space (a newline from a secret file?)")
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return parsePostgres(dsn)
	}
	if keyValue.MatchString(dsn) {
		// libpq's key/value form: PostgreSQL when it names a database
		// to reach, and refused otherwise, never a SQLite file name.
		if !pgKey.MatchString(dsn) {
			return DSN{}, errors.New("reads as libpq's key/value form but names no host, hostaddr, port, dbname, user or service; write a SQLite path without '=' or a complete PostgreSQL DSN")
		}
		return parsePostgres(dsn)
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "file:")
	query := url.Values{}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		q, err := url.ParseQuery(rest[i+1:])
		if err != nil {
			return DSN{}, fmt.Errorf("SQLite parameters after '?': %w", err)
		}
		query, rest = q, rest[:i]
	}
	if scheme, _, ok := strings.Cut(rest, "://"); ok {
		return DSN{}, fmt.Errorf("%w: scheme %q%s; use a SQLite path, sqlite://PATH, or PostgreSQL as postgres://… or host=… dbname=…", ErrUnsupported, scheme, didYouMean(scheme))
	}
	if rest == "" || strings.HasPrefix(rest, ":") {
		return DSN{}, errors.New("names no database file (an in-memory SQLite database would lose everything at exit)")
	}
	if strings.ContainsRune(rest, 0) {
		return DSN{}, errors.New("the path holds a NUL byte")
	}
	return DSN{Path: rest, Query: query}, nil
}

// didYouMean suggests postgres for a scheme that looks like a misspelling of it.
func didYouMean(scheme string) string {
	s := strings.ToLower(scheme)
	if s != "postgres" && (strings.HasPrefix(s, "postg") || strings.HasPrefix(s, "pg") || s == "psql") {
		return " (did you mean postgres?)"
	}
	return ""
}

// sslModes are libpq's sslmode values.
var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// kvSSLMode finds sslmode in the key/value form.
var kvSSLMode = regexp.MustCompile(`(?:^|[ \t])sslmode[ \t]*=[ \t]*('([^']*)'|[^ \t]*)`)

// parsePostgres checks a PostgreSQL DSN as pgx would parse it to connect,
// and its sslmode as libpq would: pgx ignores sslmode for a Unix socket,
// where a misspelt mode would go unnoticed until the DSN moved to TCP.
func parsePostgres(dsn string) (DSN, error) {
	mode := ""
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		mode = u.Query().Get("sslmode")
	} else if m := kvSSLMode.FindStringSubmatch(dsn); m != nil {
		mode = strings.Trim(m[1], "'")
	}
	if mode != "" && !slices.Contains(sslModes, mode) {
		return DSN{}, fmt.Errorf("PostgreSQL DSN: sslmode %q: want one of %s", mode, strings.Join(sslModes, ", "))
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return DSN{}, fmt.Errorf("PostgreSQL DSN: %s", pgReason(err))
	}
	where := cfg.Host
	if cfg.Port != 0 && !strings.HasPrefix(cfg.Host, "/") {
		where = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	}
	return DSN{Postgres: true, Where: where + "/" + cfg.Database}, nil
}

// pgReason is pgx's reason without the DSN it quotes (redacted, but still
// the operator's secret-bearing string).
func pgReason(err error) string {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if _, after, ok := strings.Cut(msg, "`: "); ok {
			return after
		}
		return "cannot be parsed"
	}
	return msg
}

// Reach checks that the database dsn names can be reached, changing
// nothing: PostgreSQL is connected to and pinged (bounded by ctx); for
// SQLite, the file, if it exists, must open for reading and writing, and
// otherwise the nearest existing directory above it must be a directory
// the database could be made in. `aep config validate` reports its error
// as a warning; `aep serve` fails on it when it opens the store.
func Reach(ctx context.Context, dsn, dataDir string) error {
	d, err := ParseDSN(dsn)
	if err != nil {
		return err
	}
	if d.Postgres {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return fmt.Errorf("postgres %s: %w", d.Where, err)
		}
		defer db.Close()
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
		}
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("postgres %s: %w", d.Where, err)
		}
		return nil
	}
	path, _, err := sqlitePath(d.Path, d.Query, dataDir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("SQLite %s is not a regular file", path)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("SQLite %s: %w", path, err)
		}
		return f.Close()
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("SQLite %s: %s is not a directory", path, dir)
			}
			return nil
		}
		if next := filepath.Dir(dir); next == dir {
			return fmt.Errorf("SQLite %s: %w", path, err)
		}
	}
}
