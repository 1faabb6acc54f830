package toolkits_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/capabilities/toolkits/sqlrun"
	"github.com/aephost/aep/capabilities/toolkits/sqlworker"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/sandbox"
)

// BenchmarkSQLQuery is a one-row SELECT of the sql toolkit
// (docs/PERFORMANCE.md, The sql toolkit contained): in_process is the
// engine where it ran before, in the host's own process (the floor); worker
// is the same statement through the SQLite worker in the session's
// sandbox (a round trip over its pipes); tool_call is the whole tool call
// through the in-process transport, as an agent makes it.
func BenchmarkSQLQuery(b *testing.B) {
	ctx := context.Background()
	const q = "SELECT name FROM items WHERE id = ?"
	in := sqlrun.QueryIn{SQL: q, Params: []any{2}}
	b.Run("in_process", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "bench.db")
		sqliteFileAt(b, path, 10)
		db, err := sql.Open("sqlite", path)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(4)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sqlrun.Query(ctx, db, false, in, sqlrun.Limits{MaxRows: 1000, MaxBytes: 1 << 20}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		dir := b.TempDir()
		path := filepath.Join(dir, "bench.db")
		sqliteFileAt(b, path, 10)
		w, err := sqlworker.Start(ctx, sqlworker.Spec{Mode: sandbox.ModeAuto, WorkDir: dir, Path: path,
			MemoryBytes: 128 << 20, MaxValueBytes: 16 << 20})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := w.Do(ctx, sqlworker.Request{Op: sqlworker.OpQuery, Query: &in, MaxRows: 1000, MaxBytes: 1 << 20}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tool_call", func(b *testing.B) {
		e := newEnv(b)
		e.sqliteFile(b, e.c, "bench.db", 10)
		if r := e.configure(b, e.c, map[string]any{"driver": "sqlite", "database": "bench.db", "mode": "read_only"}); r.Status != "ok" {
			b.Fatal(r.Message)
		}
		req := &msg.ToolCallReq{ToolName: "sql_query", Arguments: map[string]any{"sql": q, "params": []any{2}}}
		b.ReportAllocs()
		for b.Loop() {
			res, err := e.c.CallTool(ctx, req)
			if err != nil || !res.Success {
				b.Fatal(res, err)
			}
		}
	})
}
