package sandbox_test

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/aephost/aep/server/sandbox"
)

// benchRun starts and waits for `true` b.N times and reports the p50 and
// p99 of one spawn+wait.
func benchRun(b *testing.B, spec sandbox.Spec) { benchRunIdle(b, spec, 0) }

// benchRunIdle is benchRun with the host idle for idle before each run
// (outside the timing), as between the runs of a session: time for the
// spare init a run took to be replaced (spare.go).
func benchRunIdle(b *testing.B, spec sandbox.Spec, idle time.Duration) {
	spec.Argv = []string{"true"}
	if spec.Dir == "" {
		spec.Dir = b.TempDir()
	}
	ds := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if idle > 0 {
			b.StopTimer()
			time.Sleep(idle)
			b.StartTimer()
		}
		t0 := time.Now()
		p, err := sandbox.Start(spec)
		if err != nil {
			b.Fatal(err)
		}
		p.Stdin.Close()
		res, err := p.Wait(ctx)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkSpawnWait: spawn+wait of `true`, plain (target p50 ≤ 5 ms) and
// in each sandbox mode, with and without cgroup limits, for the sandbox's
// added cost. Runs follow each other at once, so in the namespaces mode
// each waits for the spare init the one before took to be replaced;
// namespaces-idle leaves the host idle 100 ms before each run (a spare is
// ready), namespaces-cold has no spares.
func BenchmarkSpawnWait(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchRun(b, sandbox.Spec{}) })
	if os.Geteuid() != 0 {
		return
	}
	lim := sandbox.Limits{CPUTime: 10 * time.Second, MemoryBytes: 256 << 20, MaxProcs: 64}
	modes := []sandbox.Mode{sandbox.ModeNamespaces}
	if sandbox.BwrapPath() != "" {
		modes = append(modes, sandbox.ModeBwrap)
	}
	b.Run("namespaces-idle", func(b *testing.B) {
		benchRunIdle(b, sandbox.Spec{Sandboxed: true, Mode: sandbox.ModeNamespaces}, 100*time.Millisecond)
	})
	b.Run("namespaces-cold", func(b *testing.B) {
		sandbox.WithoutSpares(b)
		benchRun(b, sandbox.Spec{Sandboxed: true, Mode: sandbox.ModeNamespaces})
	})
	for _, m := range modes {
		b.Run(string(m), func(b *testing.B) { benchRun(b, sandbox.Spec{Sandboxed: true, Mode: m}) })
		b.Run(string(m)+"+limits", func(b *testing.B) { benchRun(b, sandbox.Spec{Sandboxed: true, Mode: m, Limits: lim}) })
	}
}
