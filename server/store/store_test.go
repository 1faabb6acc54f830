package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server/store"
)

func TestOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := t.TempDir()
	tests := []struct {
		name, dsn, dataDir, wantPath string
	}{
		{"default under the data dir", "", dir, filepath.Join(dir, "aep.db")},
		{"plain relative path", "rel/x.db", dir, filepath.Join(dir, "rel/x.db")},
		{"sqlite scheme absolute", "sqlite://" + filepath.Join(dir, "a.db"), "", filepath.Join(dir, "a.db")},
		{"file: with parameters", "file:" + filepath.Join(dir, "b.db") + "?_time_format=sqlite", "", filepath.Join(dir, "b.db")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(ctx, tc.dsn, tc.dataDir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if st.Path() != tc.wantPath {
				t.Fatalf("path %q, want %q", st.Path(), tc.wantPath)
			}
			fi, err := os.Stat(tc.wantPath)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
			}
			// The pragmas hold on every pooled connection, so check several at once.
			db := st.DB()
			db.SetMaxOpenConns(4)
			conns := make([]func() error, 0, 3)
			for range 3 {
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c.Close)
				var fk, busy int
				var mode string
				if err := c.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
					t.Fatal(err)
				}
				if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
					t.Fatal(err)
				}
				if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
					t.Fatal(err)
				}
				if fk != 1 || mode != "wal" || busy <= 0 {
					t.Fatalf("foreign_keys=%d journal_mode=%s busy_timeout=%d", fk, mode, busy)
				}
			}
			for _, c := range conns {
				c()
			}
			// The schema was migrated: the snapshot entity round-trips.
			if err := st.Client.Snapshot.Create().SetID("sql-x").SetSessionID("s").SetAgentID("a").SetData([]byte("{}")).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := st.Client.Snapshot.Query().Count(ctx); err != nil || n != 1 {
				t.Fatalf("count %d, %v", n, err)
			}
		})
	}
}

func TestOpenPersistsAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Snapshot.Create().SetID("sql-1").SetSessionID("s").SetAgentID("a").SetData([]byte("{}")).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = store.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	row, err := st.Client.Snapshot.Get(ctx, "sql-1")
	if err != nil || string(row.Data) != "{}" {
		t.Fatalf("row %+v, %v", row, err)
	}
}

func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, dsn, dataDir, want string
		unsupported              bool
	}{
		{"other scheme", "mysql://u@localhost/aep", "", "scheme \"mysql\"", true},
		{"no place", "", "", "no data directory", false},
		{"memory", ":memory:", t.TempDir(), "names no database file", false},
		{"unwritable", "", "/proc/aep-no-such-dir", "store:", false},
		// Port 1 is closed; the password must not reach the error.
		{"postgres unreachable", "postgres://u:pw-canary@127.0.0.1:1/aep?connect_timeout=2", "", "store: open postgres 127.0.0.1:1/aep", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(ctx, tc.dsn, tc.dataDir)
			if err == nil {
				st.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) || errors.Is(err, store.ErrUnsupported) != tc.unsupported || strings.Contains(err.Error(), "pw-canary") {
				t.Fatalf("got %v", err)
			}
		})
	}
}

func TestOpenPostgres(t *testing.T) {
	dsn := pgtest.DSN(t, "aep_store_test")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := fmt.Sprintf("sql-test-%d", time.Now().UnixNano())
	for i := range 2 { // the second open finds the schema and the row
		st, err := store.Open(ctx, dsn, "")
		if err != nil {
			t.Fatal(err)
		}
		if st.Dialect() != "postgres" || st.Path() != "" {
			t.Fatalf("dialect %q path %q", st.Dialect(), st.Path())
		}
		if i == 0 {
			if err := st.Client.Snapshot.Create().SetID(id).SetSessionID("s").SetAgentID("a").SetData([]byte("{}")).Exec(ctx); err != nil {
				t.Fatal(err)
			}
		} else if row, err := st.Client.Snapshot.Get(ctx, id); err != nil || string(row.Data) != "{}" {
			t.Fatalf("row %+v, %v", row, err)
		}
		st.Close()
	}
}
