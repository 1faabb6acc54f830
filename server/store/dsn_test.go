package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server/store"
)

func TestParseDSN(t *testing.T) {
	tests := []struct {
		dsn         string
		postgres    bool
		path, where string
		err         string // fragment; empty: accepted
	}{
		{dsn: ""},
		{dsn: "aep.db", path: "aep.db"},
		{dsn: "/srv/aep/aep.db", path: "/srv/aep/aep.db"},
		{dsn: "sqlite:///srv/aep.db", path: "/srv/aep.db"},
		{dsn: "file:aep.db?_txlock=deferred", path: "aep.db"},
		{dsn: "postgres://aep:pw@db:5432/aep", postgres: true, where: "db:5432/aep"},
		{dsn: "postgresql://db/aep?sslmode=require", postgres: true, where: "db:5432/aep"},
		{dsn: "host=db dbname=aep user=aep", postgres: true, where: "db:5432/aep"},
		{dsn: "host=/var/run/postgresql dbname=aep", postgres: true, where: "/var/run/postgresql/aep"},
		{dsn: "dbname = aep host = db", postgres: true, where: "db:5432/aep"},
		// Refused, never a file name.
		{dsn: "host=/x dbname=aep sslmode=bogus", err: `sslmode "bogus"`},
		{dsn: "postgres://db/aep?sslmode=nope", err: `sslmode "nope"`},
		{dsn: "host=db sslmode='verify-fully'", err: `sslmode "verify-fully"`},
		{dsn: "host=db port=99999", err: "invalid port"},
		{dsn: "postgres://aep:pw@db:99999/aep", err: "invalid port"},
		{dsn: "postgress://aep:pw@db/aep", err: `scheme "postgress" (did you mean postgres?)`},
		{dsn: "mysql://db/aep", err: `scheme "mysql"`},
		{dsn: "application_name=aep", err: "names no host"},
		{dsn: ":memory:", err: "names no database file"},
		{dsn: "file:", err: "names no database file"},
		{dsn: " postgres://db/aep", err: "white space"},
		{dsn: "postgres://db/aep\n", err: "white space"},
		{dsn: "a\x00b", err: "NUL"},
	}
	for _, tc := range tests {
		d, err := store.ParseDSN(tc.dsn)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDSN(%q) = %+v, %v; want an error with %q", tc.dsn, d, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("ParseDSN(%q): the error repeats the password: %v", tc.dsn, err)
			}
			continue
		}
		if err != nil || d.Postgres != tc.postgres || d.Path != tc.path || d.Where != tc.where {
			t.Errorf("ParseDSN(%q) = %+v, %v; want postgres %v path %q where %q", tc.dsn, d, err, tc.postgres, tc.path, tc.where)
		}
	}
	if _, err := store.ParseDSN("oracle://db"); !errors.Is(err, store.ErrUnsupported) {
		t.Errorf("another scheme: %v, want ErrUnsupported", err)
	}
}

// TestOpenKeyValue: libpq's key/value form opens PostgreSQL, as a URL does.
func TestOpenKeyValue(t *testing.T) {
	u, err := url.Parse(pgtest.DSN(t, "aep_store_kv_test"))
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	kv := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=disable search_path=aep_store_kv_test",
		u.Hostname(), u.Port(), u.User.Username(), pw, strings.TrimPrefix(u.Path, "/"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := store.Reach(ctx, kv, ""); err != nil {
		t.Fatalf("Reach: %v", err)
	}
	st, err := store.Open(ctx, kv, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Dialect() != "postgres" || st.Path() != "" {
		t.Fatalf("dialect %q path %q", st.Dialect(), st.Path())
	}
}

func TestReach(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := store.Reach(ctx, "", dir); err != nil {
		t.Errorf("default SQLite in a fresh data dir: %v", err)
	}
	if err := store.Reach(ctx, "sub/dir/aep.db", dir); err != nil {
		t.Errorf("SQLite below a directory to be made: %v", err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := store.Reach(ctx, file+"/aep.db", ""); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("SQLite below a file: %v", err)
	}
	if err := store.Reach(ctx, dir, ""); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("SQLite at a directory: %v", err)
	}
	if err := store.Reach(ctx, "postgres://u:pw-canary@127.0.0.1:1/aep?connect_timeout=2", ""); err == nil || !strings.Contains(err.Error(), "postgres 127.0.0.1:1/aep") || strings.Contains(err.Error(), "pw-canary") {
		t.Errorf("unreachable PostgreSQL: %v", err)
	}
}
