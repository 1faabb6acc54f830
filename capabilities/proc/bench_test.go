package proc_test

import (
	"sort"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

// BenchmarkSpawnWaitTrue: proc/spawn + proc/wait of `true` through the
// kernel (in-process JSON transport), unsandboxed; target p50 ≤ 5 ms.
func BenchmarkSpawnWaitTrue(b *testing.B) {
	for _, sandboxed := range []bool{false, true} {
		name := "plain"
		if sandboxed {
			name = "sandboxed"
		}
		b.Run(name, func(b *testing.B) {
			c := aeptest.Connect(b, newHost(b, &proc.Plugin{Settings: proc.Settings{Sandbox: &sandboxed, MaxRecords: 16}}), "proc")
			ctx := aeptest.Context(b)
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				r, err := c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"true"}})
				if err != nil {
					b.Fatal(err)
				}
				w, err := c.ProcWait(ctx, &msg.ProcWaitReq{ProcID: r.Process.ProcID})
				if err != nil || w.Process.State != msg.ProcRecordStateExited {
					b.Fatalf("%+v %v", w, err)
				}
				ds = append(ds, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
