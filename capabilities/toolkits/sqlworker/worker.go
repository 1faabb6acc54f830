package sqlworker

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/aephost/aep/capabilities/toolkits/sqlrun"
)

// SQLite's limit categories (sqlite3_limit).
const (
	limitLength    = 0 // SQLITE_LIMIT_LENGTH: largest string or blob
	limitSQLLength = 1 // SQLITE_LIMIT_SQL_LENGTH: longest statement text
	limitAttached  = 7 // SQLITE_LIMIT_ATTACHED: databases ATTACH may add
)

// maxRequestBytes bounds a request frame: a statement and its parameters
// (the host's message limit is 1 MiB).
const maxRequestBytes = 8 << 20

func init() {
	raw, ok := os.LookupEnv(Env)
	if !ok {
		return
	}
	os.Unsetenv(Env)
	os.Exit(serve(raw))
}

// serve is the worker's life: open the database, say so, answer requests
// until the host closes standard input.
func serve(raw string) int {
	out := bufio.NewWriter(os.Stdout)
	reply := func(r Response) bool {
		if err := writeFrame(out, r); err != nil {
			return false
		}
		return out.Flush() == nil
	}
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil || cfg.Path == "" {
		reply(Response{Error: "sql worker: bad instructions", Kind: KindOpen})
		return 2
	}
	ctx := context.Background()
	db, conn, err := open(ctx, cfg)
	if err != nil {
		reply(Response{Error: err.Error(), Kind: KindOpen})
		return 1
	}
	defer db.Close()
	if !reply(Response{}) {
		return 1
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	for {
		var req Request
		if err := readFrame(in, maxRequestBytes, &req); err != nil {
			// The host closed the pipe (the session ended) or broke the
			// protocol: either way the worker's life is over.
			return 0
		}
		if !reply(handle(ctx, conn, req)) {
			return 1
		}
	}
}

// open opens the database on one connection, held for the worker's life,
// with the limits that keep a statement to this one file and to bounded
// values: ATTACH is refused (so are VACUUM and VACUUM INTO, which attach
// their target), strings and blobs are at most cfg.MaxValueBytes, the
// schema is not trusted, temporary storage is in memory (bounded by the
// sandbox), and defensive mode refuses statements that corrupt the file.
func open(ctx context.Context, cfg Config) (*sql.DB, *sql.Conn, error) {
	mode := "rwc"
	if cfg.ReadOnly {
		mode = "ro"
	}
	q := url.Values{"mode": {mode}, "_defensive": {"1"}}
	q["_pragma"] = []string{"busy_timeout(5000)", "trusted_schema(0)", "temp_store(2)"}
	dsn := (&url.URL{Scheme: "file", Path: cfg.Path, RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("cannot open the database: %s", plain(err))
	}
	max := cfg.MaxValueBytes
	if max <= 0 {
		max = 16 << 20
	}
	for _, l := range []struct{ id, v int }{{limitAttached, 0}, {limitLength, max}, {limitSQLLength, min(max, maxRequestBytes)}} {
		if _, err := sqlite.Limit(conn, l.id, l.v); err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("setting the database's limits: %w", err)
		}
	}
	if err := conn.PingContext(ctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("cannot open the database: %s", plain(err))
	}
	return db, conn, nil
}

// handle runs one request within its deadline.
func handle(ctx context.Context, conn *sql.Conn, req Request) Response {
	if req.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	var r Response
	var err error
	switch req.Op {
	case OpQuery:
		if req.Query == nil {
			return Response{Error: "query: no statement"}
		}
		var out sqlrun.QueryOut
		out, err = sqlrun.Query(ctx, conn, false, *req.Query, sqlrun.Limits{MaxRows: req.MaxRows, MaxBytes: req.MaxBytes})
		r.Query = &out
	case OpTables:
		var out sqlrun.TablesOut
		out, err = sqlrun.ListTables(ctx, conn, sqlrun.SQLite)
		r.Tables = &out
	case OpDescribe:
		var out sqlrun.DescribeOut
		out, err = sqlrun.Describe(ctx, conn, sqlrun.SQLite, sqlrun.DescribeIn{Table: req.Table})
		r.Describe = &out
	case OpCheckpoint:
		// Everything of a WAL database moved into its main file, so a copy
		// of the directory taken while the host holds this worker is whole.
		_, err = conn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	default:
		return Response{Error: fmt.Sprintf("unknown op %q", req.Op)}
	}
	if err != nil {
		return failure(ctx, err)
	}
	return r
}

// failure describes err for the agent: SQLite's own words, the kind the
// host reports differently (a deadline, memory).
func failure(ctx context.Context, err error) Response {
	text := plain(err)
	var se *sqlite.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return Response{Error: "the statement was interrupted at its timeout", Kind: KindTimeout}
	case errors.As(err, &se) && se.Code()&0xff == 7: // SQLITE_NOMEM
		return Response{Error: "the statement ran out of memory", Kind: KindMemory}
	case strings.Contains(text, "out of memory"):
		return Response{Error: "the statement ran out of memory", Kind: KindMemory}
	}
	return Response{Error: text}
}

// plain is an error's text without the driver's numeric suffix noise.
func plain(err error) string { return err.Error() }
