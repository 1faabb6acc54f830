package store_test

import (
	"context"
	"database/sql"
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
	const hosts = 4
	errs := make(chan error, hosts)
	stores := make(chan *store.Store, hosts)
	for range hosts {
		go func() {
			st, err := store.Open(ctx, dsn, "")
			if err == nil {
				stores <- st
			}
			errs <- err
		}()
	}
	for range hosts {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stores)
	for st := range stores {
		if _, err := st.Client.Snapshot.Query().Count(ctx); err != nil {
			t.Error(err)
		}
		st.Close()
	}
}
