package all_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
)

// BenchmarkCrashWindow is the agent loop the crash window
// (server.snapshots.crash_window, server/persist/crashwin.go) pays for:
// one op is a working-memory write (memory/store, one of 64 keys over
// again) and an env step (the guess env), in process (JSON codec), audit
// on, 4 sessions per core at once (8 on two), each its own loop. The same loop runs with the
// window off (the floor, "window=off") and on, in the same run, on
// SQLite and on PostgreSQL; docs/PERFORMANCE.md, Crash window, has the
// figures. saves/s counts the automatic snapshot writes the store took,
// cpu-µs/loop the process's CPU per loop (the savers' included).
func BenchmarkCrashWindow(b *testing.B) {
	for _, st := range []struct {
		name string
		dsn  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return "sqlite://" + filepath.Join(b.TempDir(), "s.db") }},
		{"postgres", func(b *testing.B) string { return pgtest.DSN(b, "aep_bench_crashwin") }},
	} {
		for _, win := range []time.Duration{0, 2 * time.Second, 400 * time.Millisecond} {
			name := "window=off"
			if win > 0 {
				name = "window=" + win.String()
			}
			b.Run(st.name+"/"+name, func(b *testing.B) { benchWindowLoop(b, st.dsn(b), win) })
		}
	}
}

// sessions is how many loops run at once: a multiple of GOMAXPROCS
// (b.SetParallelism), 8 on two cores.
var sessions = 4 * runtime.GOMAXPROCS(0)

func benchWindowLoop(b *testing.B, dsn string, win time.Duration) {
	ctx := context.Background()
	dir := benchDir(b)
	stor, err := store.Open(ctx, dsn, dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stor.Close() })
	// The schema is the benchmark's own; rows of the run before go.
	if _, err := stor.Client.Snapshot.Delete().Exec(ctx); err != nil {
		b.Fatal(err)
	}
	saves := &saveCounter{warn: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	cfg := aeptest.Config(func(c *server.Config) {
		for _, p := range []string{"memory", "env"} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
		c.Server.Snapshots.CrashWindow = server.Duration(win)
	})
	h, err := server.New(ctx, cfg, server.WithDataDir(dir), server.WithStore(stor), server.WithLogger(slog.New(saves)),
		server.WithAuditor(server.NewFileAuditor(filepath.Join(dir, "audit.jsonl"), 10, 5, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	type loop struct {
		c   *client.Client
		mem string
		ep  string
	}
	loops := make(chan *loop, sessions)
	for range sessions {
		c := aeptest.ConnectWith(b, h, client.JSON, nil, "memory", "env")
		mem, err := c.MemoryInit(ctx, &msg.MemoryInitReq{})
		if err != nil {
			b.Fatal(err)
		}
		seed := 1
		ep, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed,
			Options: new(json.RawMessage(`{"high":1000000,"max_steps":1000000000}`))})
		if err != nil {
			b.Fatal(err)
		}
		loops <- &loop{c, mem.MemoryID, ep.EpisodeID}
	}
	b.SetParallelism(sessions / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l := <-loops
		i := 0
		for pb.Next() {
			i++
			content, _ := json.Marshal(fmt.Sprintf("step %d of the loop", i))
			if _, err := l.c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: l.mem,
				Entries: []msg.MemoryEntry{{Key: fmt.Sprintf("k%d", i%64), Tier: "working", Content: content}}}); err != nil {
				b.Error(err)
				return
			}
			if _, err := l.c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: l.ep, Action: json.RawMessage("7")}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	// The process's CPU (user and system, the savers' included; not
	// PostgreSQL's own) per loop: steadier than wall time on a shared
	// machine.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/loop")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "loops/s")
	b.ReportMetric(float64(saves.n.Load())/b.Elapsed().Seconds(), "saves/s")
	// The window on, every session has its one automatic snapshot, in a
	// window at most (with a generous margin).
	for deadline := time.Now().Add(win + 10*time.Second); win > 0; time.Sleep(20 * time.Millisecond) {
		n, err := stor.Client.Snapshot.Query().Where(snapshot.Kind("auto")).Count(ctx)
		if err == nil && n == sessions {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d automatic snapshots of %d sessions: %v", n, sessions, err)
		}
	}
}

// saveCounter counts the snapshots the host wrote (its "snapshot
// written" debug records) and passes warnings on.
type saveCounter struct {
	n    atomic.Int64
	warn slog.Handler
}

func (c *saveCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *saveCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "snapshot written" {
		c.n.Add(1)
	}
	if r.Level >= slog.LevelWarn {
		return c.warn.Handle(ctx, r)
	}
	return nil
}
func (c *saveCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *saveCounter) WithGroup(string) slog.Handler      { return c }

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
