package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Every statement the kernel and the plugins send to the store, through
// the ent client or the raw handle (Store.DB), is timed here, at the
// database/sql driver: the connections of the pool are wrapped, so no
// caller has to remember to. Operations are few and fixed — exec, query,
// begin, commit, rollback — so the labels stay bounded whatever the SQL
// (docs/operating.md, Metrics).

// Operation labels of the store metrics.
const (
	opExec     = "exec"
	opQuery    = "query"
	opBegin    = "begin"
	opCommit   = "commit"
	opRollback = "rollback"
)

// storeBuckets resolve a cached SQLite read (tens of microseconds) as well
// as a PostgreSQL round trip across a network and a slow commit.
var storeBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1, .5, 2.5}

// metrics are one store's collectors; every label value is pre-resolved,
// so timing a statement costs two atomic adds and a clock reading.
type metrics struct {
	latency *prometheus.HistogramVec
	errs    *prometheus.CounterVec
	obs     map[string]prometheus.Observer
	failed  map[string]prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aep_store_operation_duration_seconds",
			Help:    "Time the store took for one operation (exec, query: until the first result; begin, commit, rollback), failed ones included.",
			Buckets: storeBuckets}, []string{"op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "aep_store_errors_total",
			Help: "Store operations that failed (a cancelled or timed-out one included), by operation."}, []string{"op"}),
		obs:    map[string]prometheus.Observer{},
		failed: map[string]prometheus.Counter{},
	}
	for _, op := range []string{opExec, opQuery, opBegin, opCommit, opRollback} {
		m.obs[op] = m.latency.WithLabelValues(op)
		m.failed[op] = m.errs.WithLabelValues(op)
	}
	return m
}

// done records one operation that began at t0 and ended with err. A
// driver's ErrSkip is not an operation: database/sql retries another way.
func (m *metrics) done(op string, t0 time.Time, err error) {
	if errors.Is(err, driver.ErrSkip) {
		return
	}
	m.obs[op].Observe(time.Since(t0).Seconds())
	if err != nil {
		m.failed[op].Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.latency.Describe(ch)
	m.errs.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	m.errs.Collect(ch)
}

// Collector returns the store's metrics, for the host's registry: the
// latency and the errors of every store operation.
func (s *Store) Collector() prometheus.Collector { return s.met }

// openTimed opens the database/sql pool of driverName with every
// connection timed into m.
func openTimed(driverName, dsn string, m *metrics) (*sql.DB, error) {
	// sql.Open connects nothing; it only finds the driver.
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	drv := probe.Driver()
	probe.Close()
	var c driver.Connector
	if dc, ok := drv.(driver.DriverContext); ok {
		if c, err = dc.OpenConnector(dsn); err != nil {
			return nil, fmt.Errorf("%s: %w", driverName, err)
		}
	} else {
		c = dsnConnector{drv: drv, dsn: dsn}
	}
	return sql.OpenDB(&timedConnector{inner: c, m: m}), nil
}

// dsnConnector is the connector of a driver without one of its own.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

type timedConnector struct {
	inner driver.Connector
	m     *metrics
}

func (c *timedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &timedConn{Conn: conn, m: c.m}, nil
}

func (c *timedConnector) Driver() driver.Driver { return c.inner.Driver() }

// timedConn times the operations of one connection. It has every optional
// interface database/sql looks for and passes each on to the driver's
// connection, answering as database/sql would without it where the driver
// lacks one (driver.ErrSkip, nil), so a wrapped connection behaves as the
// bare one does.
type timedConn struct {
	driver.Conn
	m *metrics
}

var (
	_ driver.ConnBeginTx        = (*timedConn)(nil)
	_ driver.ConnPrepareContext = (*timedConn)(nil)
	_ driver.ExecerContext      = (*timedConn)(nil)
	_ driver.QueryerContext     = (*timedConn)(nil)
	_ driver.Pinger             = (*timedConn)(nil)
	_ driver.SessionResetter    = (*timedConn)(nil)
	_ driver.Validator          = (*timedConn)(nil)
	_ driver.NamedValueChecker  = (*timedConn)(nil)
)

func (c *timedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	t0 := time.Now()
	r, err := e.ExecContext(ctx, query, args)
	c.m.done(opExec, t0, err)
	return r, err
}

func (c *timedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	t0 := time.Now()
	r, err := q.QueryContext(ctx, query, args)
	c.m.done(opQuery, t0, err)
	return r, err
}

func (c *timedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *timedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	t0 := time.Now()
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the fallback database/sql itself takes for a driver without BeginTx
		tx, err = c.Conn.Begin() //nolint:staticcheck
	}
	c.m.done(opBegin, t0, err)
	if err != nil {
		return nil, err
	}
	return &timedTx{Tx: tx, m: c.m}, nil
}

func (c *timedConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *timedConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *timedConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *timedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type timedTx struct {
	driver.Tx
	m *metrics
}

func (t *timedTx) Commit() error {
	t0 := time.Now()
	err := t.Tx.Commit()
	t.m.done(opCommit, t0, err)
	return err
}

func (t *timedTx) Rollback() error {
	t0 := time.Now()
	err := t.Tx.Rollback()
	t.m.done(opRollback, t0, err)
	return err
}
