package env_test

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// Benchmarks of the RL step loop through the real kernel and the Go client
// in process, audit on (docs/DECISIONS.md, Performance). Targets: direct codec
// ≥ 250,000 steps/s, JSON ≥ 30,000 steps/s, 64-episode batches ≥ 1,000,000
// env steps/s. The steps/s metric is what docs/PERFORMANCE.md records.

func benchHost(b *testing.B) *server.Host {
	aud := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	return newHost(b, &env.Plugin{}, server.WithAuditor(aud))
}

const benchOpts = `{"high":1000000,"max_steps":1000000000}`

func BenchmarkStepLoop(b *testing.B) {
	h := benchHost(b)
	for _, cd := range codecs {
		b.Run(cd.name, func(b *testing.B) {
			c := aeptest.ConnectWith(b, h, cd.codec, nil, "env")
			ctx := aeptest.Context(b)
			ep := reset(b, c, env.GuessName, 1, benchOpts).EpisodeID
			req := &msg.EnvStepReq{EpisodeID: ep, Action: json.RawMessage("7")}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// A fresh request per step: the direct codec shares values.
				r := *req
				if _, err := c.EnvStep(ctx, &r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

// BenchmarkStepLoopParallel runs one step loop per actor, each on its own
// session, as a trainer with several actors does.
func BenchmarkStepLoopParallel(b *testing.B) {
	h := benchHost(b)
	for _, cd := range codecs {
		b.Run(cd.name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				c, err := client.InProcess(h, cd.codec, nil)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				if _, err := c.Handshake(aeptest.Context(b), "agent", aeptest.Token, "env"); err != nil {
					b.Error(err)
					return
				}
				ctx := aeptest.Context(b)
				ep := reset(b, c, env.GuessName, 1, benchOpts).EpisodeID
				for pb.Next() {
					if _, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: json.RawMessage("7")}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

func BenchmarkStepBatch64(b *testing.B) {
	h := benchHost(b)
	for _, cd := range codecs {
		b.Run(cd.name, func(b *testing.B) {
			c := aeptest.ConnectWith(b, h, cd.codec, nil, "env")
			ctx := aeptest.Context(b)
			const n = 64
			ids := make([]string, n)
			actions := make([]json.RawMessage, n)
			for i := range ids {
				ids[i] = reset(b, c, env.GuessName, i, benchOpts).EpisodeID
				actions[i] = json.RawMessage(strconv.Itoa(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := c.EnvStepBatch(ctx, &msg.EnvStepBatchReq{EpisodeIds: ids, Actions: actions, AutoresetMode: "next_step"})
				if err != nil || len(r.Results) != n {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "env-steps/s")
		})
	}
}
