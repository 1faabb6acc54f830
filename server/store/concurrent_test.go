package store_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server/store"
)

// TestPostgresHostsStartAtOnce opens one fresh PostgreSQL schema from
// several hosts' stores at the same moment: each migration must succeed,
// as the hosts of a deployment behind a proxy start together.
func TestPostgresHostsStartAtOnce(t *testing.T) {
	const schema = "aep_store_concurrent"
	dsn := pgtest.DSN(t, schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Empty, so every run migrates from nothing.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, st := range openAtOnce(t, ctx, dsn, 4) {
		if _, err := st.Client.Snapshot.Query().Count(ctx); err != nil {
			t.Error(err)
		}
		st.Close()
	}
}

// TestSnapshotColumnsAdded: a store made before snapshots carried files
// and points (no kind, files, files_bytes, point columns) keeps its rows when hosts of this
// release open it, several at once — on PostgreSQL under the advisory
// lock, on a shared SQLite file by trying again — and the old rows read
// as snapshots taken at a session's request, without files or point.
func TestSnapshotColumnsAdded(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "old.db") }},
		{"postgres", func(t *testing.T) string {
			const schema = "aep_store_columns"
			dsn := pgtest.DSN(t, schema)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("DROP SCHEMA " + schema + " CASCADE; CREATE SCHEMA " + schema); err != nil {
				t.Fatal(err)
			}
			return dsn
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dsn := tc.dsn(t)
			st, err := store.Open(ctx, dsn, "")
			if err != nil {
				t.Fatal(err)
			}
			// Back to the earlier shape, with one row in it.
			for _, col := range []string{"kind", "files", "files_bytes", "point"} {
				if _, err := st.DB().ExecContext(ctx, "ALTER TABLE snapshots DROP COLUMN "+col); err != nil {
					t.Fatal(err)
				}
			}
			q := "INSERT INTO snapshots (id, session_id, agent_id, data, created_at) VALUES (?, ?, ?, ?, ?)"
			if st.Dialect() == "postgres" {
				q = "INSERT INTO snapshots (id, session_id, agent_id, data, created_at) VALUES ($1, $2, $3, $4, $5)"
			}
			if _, err := st.DB().ExecContext(ctx, q, "sql-old", "o-owner", "agent", []byte("{}"), time.Now()); err != nil {
				t.Fatal(err)
			}
			st.Close()
			for _, st := range openAtOnce(t, ctx, dsn, 3) {
				row, err := st.Client.Snapshot.Get(ctx, "sql-old")
				if err != nil || string(row.Data) != "{}" || row.Kind != "request" || len(row.Files) != 0 || row.FilesBytes != 0 || row.Point != nil {
					t.Errorf("old row after the migration: %+v %v", row, err)
				}
				st.Close()
			}
		})
	}
}

// openAtOnce opens dsn from n stores at the same moment, as the hosts of a
// deployment starting together do; it reports each failure and returns
// the stores that opened.
func openAtOnce(t *testing.T, ctx context.Context, dsn string, n int) []*store.Store {
	t.Helper()
	errs := make(chan error, n)
	opened := make(chan *store.Store, n)
	for range n {
		go func() {
			st, err := store.Open(ctx, dsn, "")
			if err == nil {
				opened <- st
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(opened)
	var out []*store.Store
	for st := range opened {
		out = append(out, st)
	}
	return out
}
