package server_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// The kernel's benchmarks (docs/DECISIONS.md, Performance): each echo round
// trip is measured beside two floors from the same run, a bare channel
// ping-pong between two goroutines and one JSON encode+decode of the same
// message. Results and commands are in docs/PERFORMANCE.md.

func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// cpuMeter reports the process's CPU time per operation (all goroutines:
// client, session workers, the auditor, GC) from now until the returned
// function is called. On a shared machine wall-clock ops/s fall with the
// load of other processes; CPU time per operation mostly does not, so it is
// what compares two versions of the kernel.
func cpuMeter(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFloorChannelPingPong is the least a round trip between two
// goroutines can cost.
func BenchmarkFloorChannelPingPong(b *testing.B) {
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	b.ResetTimer()
	stop := cpuMeter(b)
	for i := range b.N {
		ping <- i
		<-pong
	}
	b.StopTimer()
	stop()
	close(ping)
	reportOps(b)
}

// BenchmarkFloorJSONEncodeDecode is one encode and one decode of the echo
// request with the project's JSON codec.
func BenchmarkFloorJSONEncodeDecode(b *testing.B) {
	req := &testproto.EchoSayReq{Text: "hello", Mode: "plain"}
	b.ReportAllocs()
	stop := cpuMeter(b)
	for b.Loop() {
		raw, err := wire.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		var out testproto.EchoSayReq
		if err := wire.Unmarshal(raw, &out); err != nil {
			b.Fatal(err)
		}
	}
	stop()
	reportOps(b)
}

// benchHost starts a host with one echo plugin and the file auditor on, as
// docs/DECISIONS.md, Performance asks for benchmarks.
func benchHost(b *testing.B) *server.Host {
	b.Helper()
	audit := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	cfg := server.Defaults()
	cfg.Server.AuthToken = "secret"
	h, err := server.New(context.Background(), cfg,
		server.WithRegistry(testRegistry()),
		server.WithAuditor(audit),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: &echoplug.Plugin{Name: "e1"}}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func benchClient(b *testing.B, h *server.Host, codec client.Codec) testproto.Client {
	c, err := client.InProcess(h, codec, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.Handshake(context.Background(), "bench", "secret", "echo"); err != nil {
		b.Fatal(err)
	}
	return testproto.Client{Requester: c}
}

func benchEcho(b *testing.B, codec client.Codec) {
	b.Run("serial", func(b *testing.B) {
		h := benchHost(b)
		ec := benchClient(b, h, codec)
		ctx := context.Background()
		req := &testproto.EchoSayReq{Text: "hello", Mode: "plain"}
		b.ReportAllocs()
		b.ResetTimer()
		stop := cpuMeter(b)
		for range b.N {
			if _, err := ec.EchoSay(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		stop()
		reportOps(b)
	})
	// Several sessions at once, one client each: the host's throughput
	// rather than one agent's latency.
	b.Run("sessions", func(b *testing.B) {
		h := benchHost(b)
		ctx := context.Background()
		clients := make(chan testproto.Client, 64)
		for range cap(clients) {
			clients <- benchClient(b, h, codec)
		}
		b.ReportAllocs()
		b.SetParallelism(4)
		b.ResetTimer()
		stop := cpuMeter(b)
		b.RunParallel(func(pb *testing.PB) {
			ec := <-clients
			req := &testproto.EchoSayReq{Text: "hello", Mode: "plain"}
			for pb.Next() {
				if _, err := ec.EchoSay(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		stop()
		reportOps(b)
	})
}

// BenchmarkEchoDirect is an echo/say round trip in process with the direct
// codec, audit on.
func BenchmarkEchoDirect(b *testing.B) { benchEcho(b, client.Direct) }

// BenchmarkEchoJSON is an echo/say round trip in process with the JSON
// codec, audit on.
func BenchmarkEchoJSON(b *testing.B) { benchEcho(b, client.JSON) }
