package memory_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"entgo.io/ent/dialect"

	"github.com/aephost/aep/capabilities/memory"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// Benchmarks through the real kernel and the Go client in process, audit
// on, on a real SQLite file (docs/DECISIONS.md, Performance), and the same store and
// recall on PostgreSQL (…Postgres; skipped without one, internal/pgtest),
// for which no target was set. Targets:
// batched semantic store ≥ 20,000 entries/s; recall p50 ≤ 5 ms over
// 100,000 semantic entries for a query matching about 1% of them; working
// get/set with the direct codec ≥ 150,000 ops/s. The machine is shared, so
// each also reports process CPU time per op (cpu-ns/op) beside wall time.

// cpuNanos is the process's user+system CPU time.
func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchHost is a host with audit on, on the store dsn names ("" is
// SQLite in dir).
func benchHost(dir, dsn string) (*server.Host, *store.Store, error) {
	st, err := store.Open(context.Background(), dsn, dir)
	if err != nil {
		return nil, nil, err
	}
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	aud := server.NewFileAuditor(filepath.Join(dir, "audit.jsonl"), 10, 5, nil)
	h, err := server.New(context.Background(), cfg, server.WithDataDir(dir), server.WithStore(st), server.WithAuditor(aud),
		server.WithPlugin(server.PluginSpec{Name: "memory", Type: "memory", Impl: &memory.Plugin{}}))
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return h, st, nil
}

func benchClient(b *testing.B, h *server.Host, codec client.Codec) (*client.Client, string) {
	c, err := client.InProcess(h, codec, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.Handshake(context.Background(), "agent", token, "memory"); err != nil {
		b.Fatal(err)
	}
	r, err := c.MemoryInit(context.Background(), &msg.MemoryInitReq{Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return c, r.MemoryID
}

var words = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
	"kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"}

// doc is entry i's text: eight common words, and the rare word "zephyr"
// in every 100th entry (1% of the corpus).
func doc(i int) json.RawMessage {
	s := ""
	for j := range 8 {
		s += words[(i*7+j*3)%len(words)] + " "
	}
	s += fmt.Sprintf("note %d", i)
	if i%100 == 0 {
		s += " zephyr"
	}
	b, _ := json.Marshal(s)
	return b
}

func batch(start, n int) []msg.MemoryEntry {
	es := make([]msg.MemoryEntry, n)
	for i := range es {
		es[i] = msg.MemoryEntry{Key: fmt.Sprintf("k%d", start+i), Content: doc(start + i), Tier: "semantic", Tags: []string{"bench"}}
	}
	return es
}

// BenchmarkSemanticStoreBatch stores batches of 1,000 new semantic
// entries (each upserted, FTS5-indexed) in one request.
func BenchmarkSemanticStoreBatch(b *testing.B) { benchStoreBatch(b, "") }

// BenchmarkSemanticStoreBatchPostgres is the same on PostgreSQL (tsvector
// with a GIN index), in a schema of its own.
func BenchmarkSemanticStoreBatchPostgres(b *testing.B) { benchStoreBatch(b, pgSchema(b)) }

func benchStoreBatch(b *testing.B, dsn string) {
	h, st, err := benchHost(b.TempDir(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	defer h.Close(context.Background())
	c, id := benchClient(b, h, client.Direct)
	const n = 1000
	b.ReportAllocs()
	cpu := cpuNanos()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.MemoryStore(context.Background(), &msg.MemoryStoreReq{MemoryID: id, Entries: batch(i*n, n)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N*n), "cpu-ns/entry")
}

// corpus is the 100,000-entry corpus on one store, built once per process.
type corpus struct {
	once sync.Once
	dir  string
	dsn  string
	h    *server.Host
	st   *store.Store
	err  error
}

// The corpora on SQLite and on PostgreSQL; the latter in a schema of this
// process, dropped by TestMain.
var (
	sqliteCorpus, pgCorpus corpus
	pgCorpusSchema         = "aep_memory_bench_" + wire.RandomHex(6)
)

// corpusHost builds rc on the store dsn names the first time, and returns
// its host.
func corpusHost(b *testing.B, rc *corpus, dsn string) *server.Host {
	rc.once.Do(func() {
		rc.dsn = dsn
		if rc.dir, rc.err = os.MkdirTemp("", "aep-memory-bench-"); rc.err != nil {
			return
		}
		if rc.h, rc.st, rc.err = benchHost(rc.dir, dsn); rc.err != nil {
			return
		}
		c, err := client.InProcess(rc.h, client.Direct, nil)
		if err != nil {
			rc.err = err
			return
		}
		defer c.Close()
		ctx := context.Background()
		if _, rc.err = c.Handshake(ctx, "agent", token, "memory"); rc.err != nil {
			return
		}
		r, err := c.MemoryInit(ctx, &msg.MemoryInitReq{Namespace: "bench"})
		if err != nil {
			rc.err = err
			return
		}
		start := time.Now()
		for i := 0; i < 100_000; i += 5000 {
			if _, rc.err = c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: r.MemoryID, Entries: batch(i, 5000)}); rc.err != nil {
				return
			}
		}
		fmt.Fprintf(os.Stderr, "memory bench corpus: 100000 semantic entries in %v (%s)\n", time.Since(start), rc.st.Dialect())
		if dsn != "" {
			// What autovacuum does to a table this size within about a
			// minute: without statistics the planner takes the scope's
			// B-tree over the GIN index (every row of the namespace read,
			// ~60 ms), and the GIN's pending list is read linearly until
			// it is merged.
			_, rc.err = rc.st.DB().ExecContext(ctx, `VACUUM ANALYZE memory_semantic`)
		}
	})
	if rc.err != nil {
		b.Fatal(rc.err)
	}
	return rc.h
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, rc := range []*corpus{&sqliteCorpus, &pgCorpus} {
		if rc.h != nil {
			rc.h.Close(context.Background())
			rc.st.Close()
		}
		if rc.dir != "" {
			os.RemoveAll(rc.dir)
		}
	}
	if dsn := pgCorpus.dsn; dsn != "" {
		if db, err := sql.Open("pgx", dsn); err == nil {
			if _, err := db.Exec("DROP SCHEMA " + pgCorpusSchema + " CASCADE"); err != nil {
				fmt.Fprintf(os.Stderr, "dropping schema %s: %v\n", pgCorpusSchema, err)
			}
			db.Close()
		}
	}
	os.Exit(code)
}

// BenchmarkRecall100k recalls the 10 best of the ~1,000 entries (1%) that
// match "zephyr" among 100,000 on SQLite; p50-ms is the median latency of
// one request. Its floor, in the same run, is the bare FTS5 query for the
// same word on the same store through database/sql (recallFloors).
func BenchmarkRecall100k(b *testing.B) {
	benchRecall(b, corpusHost(b, &sqliteCorpus, ""), &sqliteCorpus)
}

// BenchmarkRecall100kPostgres is the same on PostgreSQL, beside the bare
// tsquery of the word.
func BenchmarkRecall100kPostgres(b *testing.B) {
	benchRecall(b, corpusHost(b, &pgCorpus, pgtest.DSN(b, pgCorpusSchema)), &pgCorpus)
}

// recallFloors are what the store itself costs for the benchmark's query,
// without the host: "floor" is the engine's bare full-text query — the 10
// best matches of the word by the engine's own rank (FTS5 bm25, ts_rank),
// with their key and text, over the whole table; "floor-scoped" adds what a
// recall must also check, the scope and liveness, in one statement (the
// content row of every match joined).
var recallFloors = map[string][]struct{ name, query string }{
	dialect.SQLite: {
		{"floor", `SELECT rowid, "key", body, rank FROM memory_semantic_fts WHERE memory_semantic_fts MATCH ? ORDER BY rank LIMIT 10`},
		{"floor-scoped", `SELECT t.id, t."key", t.body, bm25(memory_semantic_fts) AS r FROM memory_semantic_fts JOIN memory_semantic t ON t.id = memory_semantic_fts.rowid
WHERE memory_semantic_fts MATCH ? AND t.namespace = ? AND t.agent = ? AND (t.expires_at = 0 OR t.expires_at > ?) ORDER BY r, t.id DESC LIMIT 10`},
	},
	dialect.Postgres: {
		{"floor", `SELECT t.id, t."key", t.body, ts_rank(t.fts, q)::float8 AS r FROM memory_semantic t, to_tsquery('aep_english', $1) q WHERE t.fts @@ q ORDER BY r DESC LIMIT 10`},
		{"floor-scoped", `SELECT t.id, t."key", t.body, ts_rank(t.fts, q)::float8 AS r FROM memory_semantic t, to_tsquery('aep_english', $1) q
WHERE t.fts @@ q AND t.namespace = $2 AND t.agent = $3 AND (t.expires_at = 0 OR t.expires_at > $4) ORDER BY r DESC, t.id DESC LIMIT 10`},
	},
}

func benchRecall(b *testing.B, h *server.Host, rc *corpus) {
	for _, fl := range recallFloors[rc.st.Dialect()] {
		b.Run(fl.name, func(b *testing.B) {
			db := rc.st.DB()
			ctx := context.Background()
			args := []any{`"zephyr"`}
			if rc.st.Dialect() == dialect.Postgres {
				args[0] = "'zephyr'"
			}
			if fl.name == "floor-scoped" {
				args = append(args, "bench", "", time.Now().UnixNano())
			}
			measure(b, func() error {
				rows, err := db.QueryContext(ctx, fl.query, args...)
				if err != nil {
					return err
				}
				defer rows.Close()
				n := 0
				for rows.Next() {
					var id int64
					var key, body string
					var rank float64
					if err := rows.Scan(&id, &key, &body, &rank); err != nil {
						return err
					}
					n++
				}
				if n != 10 {
					return fmt.Errorf("%d rows", n)
				}
				return rows.Err()
			})
		})
	}
	for _, cd := range codecs {
		b.Run(cd.name, func(b *testing.B) {
			c, id := benchClient(b, h, cd.codec)
			tier := msg.MemoryRecallReqTierSemantic
			q := "zephyr"
			// The memory_id is this session's; the corpus namespace is shared.
			measure(b, func() error {
				r, err := c.MemoryRecall(context.Background(), &msg.MemoryRecallReq{MemoryID: id, Query: &q, Tier: &tier, Limit: 10, Order: "relevance"})
				if err != nil {
					return err
				}
				if len(r.Hits) != 10 {
					return fmt.Errorf("%d hits", len(r.Hits))
				}
				return nil
			})
		})
	}
}

// measure runs op b.N times and reports its median and 99th-percentile
// latency and the process's CPU time per op.
func measure(b *testing.B, op func() error) {
	lat := make([]time.Duration, 0, b.N)
	cpu := cpuNanos()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		err := op()
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWorkingGetSet alternates a one-entry working store and a
// one-key retrieve; one op is one request.
func BenchmarkWorkingGetSet(b *testing.B) {
	h, st, err := benchHost(b.TempDir(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	defer h.Close(context.Background())
	for _, cd := range codecs {
		b.Run(cd.name, func(b *testing.B) {
			c, id := benchClient(b, h, cd.codec)
			ctx := context.Background()
			tier := msg.MemoryRetrieveReqTierWorking
			content := json.RawMessage(`"value"`)
			b.ReportAllocs()
			cpu := cpuNanos()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				key := "k" + string(rune('a'+i%16))
				var err error
				if i%2 == 0 {
					_, err = c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: id, Entries: []msg.MemoryEntry{{Key: key, Content: content, Tier: "working"}}})
				} else {
					_, err = c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{key}, Tier: &tier})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
