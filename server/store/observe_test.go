package store_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aephost/aep/server/store"
)

// TestStoreOperationsTimed: statements sent through the raw handle and
// through a transaction are timed by operation, and a failing statement
// is counted as an error of its operation.
func TestStoreOperationsTimed(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collector())
	count := func(op string) uint64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "aep_store_operation_duration_seconds" {
				continue
			}
			for _, m := range f.GetMetric() {
				if m.GetLabel()[0].GetValue() == op {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
		return 0
	}
	before := map[string]uint64{}
	for _, op := range []string{"exec", "query", "begin", "commit", "rollback"} {
		before[op] = count(op)
	}
	db := st.DB()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	errsBefore := storeErrors(t, reg, "query")
	if _, err := db.QueryContext(ctx, "SELECT * FROM no_such_table"); err == nil {
		t.Fatal("a query of a missing table succeeded")
	}
	want := map[string]uint64{"exec": 2, "query": 2, "begin": 2, "commit": 1, "rollback": 1}
	for op, w := range want {
		if got := count(op) - before[op]; got != w {
			t.Errorf("%s timed %d times, want %d", op, got, w)
		}
	}
	if got := storeErrors(t, reg, "query") - errsBefore; got != 1 {
		t.Errorf("query errors rose by %v, want 1", got)
	}
}

// storeErrors returns aep_store_errors_total{op}.
func storeErrors(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "aep_store_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == op {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
