package all_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

// reportP50 reports the median of ds, in milliseconds, beside ns/op: the
// targets of docs/PERFORMANCE.md are medians.
func reportP50(b *testing.B, ds []time.Duration, per int) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000/float64(per), "p50-ms")
}

// benchDir is a temporary directory under $AEP_BENCH_DIR when set (to
// measure on another file system, one with reflinks say), else b.TempDir.
func benchDir(b *testing.B) string {
	b.Helper()
	base := os.Getenv("AEP_BENCH_DIR")
	if base == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(base, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func benchHost(b *testing.B, plugins ...string) *server.Host {
	b.Helper()
	dir := benchDir(b)
	cfg := aeptest.Config(func(c *server.Config) {
		for _, p := range plugins {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
		c.Server.Limits.MaxSessions = 100000
	})
	// Audit on, as in every benchmark of docs/PERFORMANCE.md.
	h, err := server.New(context.Background(), cfg, server.WithDataDir(dir),
		server.WithAuditor(server.NewFileAuditor(filepath.Join(dir, "audit.jsonl"), 10, 5, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// BenchmarkColdStart is a new session in process (JSON codec), its
// handshake and its first sandboxed tool result (run_command of `true`,
// contained in the host's isolation tier); the floor is a plain
// fork/exec of `true`.
func BenchmarkColdStart(b *testing.B) {
	b.Run("floor-forkexec", func(b *testing.B) {
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		reportP50(b, ds, 1)
	})
	b.Run("session-handshake-sandboxed-call", func(b *testing.B) { coldStart(b, 0) })
	b.Run("session-handshake-sandboxed-call-idle", func(b *testing.B) { coldStart(b, 100*time.Millisecond) })
}

// coldStart times new sessions' first sandboxed tool result, one after
// the other, or with the host idle for idle before each (outside the
// timing), as when sessions do not arrive back to back: the spare init the
// last run took (server/sandbox/spare.go) is then replaced.
func coldStart(b *testing.B, idle time.Duration) {
	{
		h := benchHost(b, "tools")
		ctx := context.Background()
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			if idle > 0 {
				b.StopTimer()
				time.Sleep(idle)
				b.StartTimer()
			}
			t0 := time.Now()
			c, err := client.InProcess(h, client.JSON, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Handshake(ctx, "bench", aeptest.Token, "tools"); err != nil {
				b.Fatal(err)
			}
			res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": []string{"true"}}})
			if err != nil || !res.Success {
				b.Fatalf("run_command: %+v %v", res, err)
			}
			ds = append(ds, time.Since(t0))
			c.Close()
		}
		reportP50(b, ds, 1)
	}
}

// benchWorkspace fills dir with 10 files of 1 MiB of random bytes.
func benchWorkspace(b *testing.B, dir string) {
	b.Helper()
	buf := make([]byte, 1<<20)
	for i := 0; i < 10; i++ {
		rand.Read(buf)
		sub := filepath.Join(dir, "ws", fmt.Sprint(i%3))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d.bin", i)), buf, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// plainCopy copies the regular files of src into dst byte by byte.
func plainCopy(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// BenchmarkFork forks a session holding a 10 MiB workspace and 3 live
// episodes, one child per fork and eight per fork, reporting the time per
// child; each child is closed after (outside the timing). The floor is a
// plain copy of the same 10 MiB directory.
func BenchmarkFork(b *testing.B) {
	b.Run("floor-dircopy", func(b *testing.B) {
		src := benchDir(b)
		benchWorkspace(b, src)
		root := benchDir(b)
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			dst := filepath.Join(root, fmt.Sprint(i))
			t0 := time.Now()
			if err := plainCopy(src, dst); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		}
		reportP50(b, ds, 1)
	})
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("children-%d", n), func(b *testing.B) {
			h := benchHost(b, "tools", "env", "memory")
			ctx := context.Background()
			c, err := client.InProcess(h, client.JSON, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Handshake(ctx, "bench", aeptest.Token, "tools", "env", "memory"); err != nil {
				b.Fatal(err)
			}
			info, err := c.SessionInfo(ctx, &msg.SessionInfoReq{})
			if err != nil {
				b.Fatal(err)
			}
			d, err := h.SessionDir(info.Handle)
			if err != nil {
				b.Fatal(err)
			}
			benchWorkspace(b, d.Path)
			for i := 0; i < 3; i++ {
				r, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(i)})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: []byte("50")}); err != nil {
					b.Fatal(err)
				}
			}
			ds := make([]time.Duration, 0, b.N)
			var mode msg.SessionForkRespCopy
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				f, err := c.SessionFork(ctx, &msg.SessionForkReq{Count: n})
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				b.StopTimer()
				mode = *f.Copy
				for _, fi := range f.Forks {
					if s, ok := h.Session(fi.SessionID); ok {
						s.Close()
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(n), "children/op")
			reportP50(b, ds, n)
			b.Logf("copy: %s", mode)
		})
	}
}
