package persist_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// BenchmarkDrain1000: a drain of 1,000 idle sessions (each with a note of
// plugin state and an empty directory) to PostgreSQL, the snapshot phase
// at server.snapshots.drain_parallel, beside its floor: the same 1,000
// documents and archives the drain wrote, inserted by a bare loop of as
// many goroutines into the same store. docs/PERFORMANCE.md has the
// figures; the target is drain ≤ 1.5× floor.
func BenchmarkDrain1000(b *testing.B) {
	const sessions = 1000
	dsn := pgtest.DSN(b, "aep_bench_drain")
	ctx := context.Background()
	var written []*ent.Snapshot
	clear := func(st *store.Store) {
		if _, err := st.Client.Snapshot.Delete().Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("drain", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			r := startRigConf(b, ctx, dsn, b.TempDir(), &lockedBuffer{}, []string{"notes"}, "", "")
			clear(r.st)
			for i := range sessions {
				a := r.connect(b, ctx)
				if _, err := a.echo.EchoSay(ctx, &testproto.EchoSayReq{Text: fmt.Sprint("note ", i)}); err != nil {
					b.Fatal(err)
				}
			}
			dctx, cancel := context.WithTimeout(ctx, 120*time.Second)
			b.StartTimer()
			res, err := r.h.Drain(dctx, true)
			b.StopTimer()
			cancel()
			if err != nil || len(res.Snapshots) != sessions {
				b.Fatalf("drain saved %d of %d: %v", len(res.Snapshots), sessions, err)
			}
			rows, err := r.st.Client.Snapshot.Query().Where(snapshot.Kind(persist.KindDrain)).All(ctx)
			if err != nil || len(rows) != sessions {
				b.Fatalf("%d drain rows: %v", len(rows), err)
			}
			written = rows
			r.close(ctx)
		}
	})
	b.Run("floor", func(b *testing.B) {
		if written == nil {
			b.Skip("no drain ran")
		}
		st, err := store.Open(ctx, dsn, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		for range b.N {
			b.StopTimer()
			clear(st)
			next := make(chan *ent.Snapshot)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			b.StartTimer()
			for range persist.DefaultDrainParallel {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for row := range next {
						c := st.Client.Snapshot.Create().SetID("sql-" + wire.RandomHex(16)).SetSessionID(row.SessionID).SetAgentID(row.AgentID).
							SetData(row.Data).SetCreatedAt(time.Now()).SetKind(row.Kind).SetFilesBytes(row.FilesBytes).SetTenant(row.Tenant)
						if row.Files != nil {
							c.SetFiles(row.Files)
						}
						if row.Point != nil {
							c.SetPoint(*row.Point)
						}
						if err := c.Exec(ctx); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				}()
			}
			for _, row := range written {
				next <- row
			}
			close(next)
			wg.Wait()
			b.StopTimer()
			if len(errs) > 0 {
				b.Fatal(errs[0])
			}
		}
	})
}
