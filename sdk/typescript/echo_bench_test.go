// Package typescript holds the Go side of the TypeScript SDK's benchmark:
// the SDK itself is sdk/typescript/src.
package typescript_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/internal/sdkbench"
)

func TestMain(m *testing.M) {
	code := m.Run()
	aepbin.Cleanup()
	os.Exit(code)
}

// BenchmarkPingWebSocket measures the echo round trip (ping → pong, one at
// a time) over WebSocket against one real `aep serve`, from the Go client
// and from the TypeScript SDK (bench/echo.ts, built by `npm test` or tsc -p
// tsconfig.test.json), in the same run. The node figure is its own timing
// of b.N round trips, reported as node-ns/op. docs/PERFORMANCE.md.
func BenchmarkPingWebSocket(b *testing.B) {
	script, _ := filepath.Abs(filepath.Join("build", "bench", "echo.js"))
	bin := aepbin.Build(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data-dir", b.TempDir(), "--log-level", "error")
	cmd.Env = append(os.Environ(), "AEP_AUTH_TOKEN="+aepbin.Token)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		if r, err := http.Get("http://" + addr + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if i > 200 {
			b.Fatal("aep serve did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	url := "ws://" + addr + "/ws"

	b.Run("go", func(b *testing.B) {
		ctx := context.Background()
		c, err := client.WebSocket(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Handshake(ctx, "bench-go", aepbin.Token); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := c.Ping(ctx, &msg.Ping{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("node", func(b *testing.B) {
		if _, err := os.Stat(script); err != nil {
			b.Skip("build/bench/echo.js missing: run npm ci and npx tsc -p tsconfig.test.json in sdk/typescript")
		}
		out, err := exec.Command("node", script, url, aepbin.Token, fmt.Sprint(b.N)).Output()
		if err != nil {
			b.Fatalf("node %s: %v", script, err)
		}
		var r struct {
			NsPerOp float64 `json:"ns_per_op"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			b.Fatalf("node output %q: %v", out, err)
		}
		b.ReportMetric(r.NsPerOp, "node-ns/op")
	})
}

// BenchmarkTypeScriptSDK times the TypeScript SDK against one real `aep
// serve` beside what Node itself does against the bare Go echo floor, in
// the same process and interleaved (bench/bench.ts; internal/sdkbench):
// ping and env step over WebSocket from one session and from 32 on one
// event loop, and ping over the single exchange. x-floor is the SDK's
// speed as a fraction of the floor's (docs/PERFORMANCE.md). Needs node and
// build/bench/bench.js (npm ci, then npx tsc -p tsconfig.test.json).
func BenchmarkTypeScriptSDK(b *testing.B) {
	node := sdkbench.Need(b, "node")
	script, _ := filepath.Abs(filepath.Join("build", "bench", "bench.js"))
	if _, err := os.Stat(script); err != nil {
		if os.Getenv("CI") != "" {
			b.Fatalf("%s missing: build it with npx tsc -p tsconfig.test.json", script)
		}
		b.Skip("build/bench/bench.js missing: run npm ci and npx tsc -p tsconfig.test.json in sdk/typescript")
	}
	t := sdkbench.Start(b)
	var cases []sdkbench.Case
	for _, op := range []string{"ping", "step"} {
		cases = append(cases,
			sdkbench.Case{Op: op, Transport: "ws", Sessions: 1, Client: "node"},
			sdkbench.Case{Op: op, Transport: "ws", Sessions: 32, Client: "node"})
	}
	cases = append(cases, sdkbench.Case{Op: "ping", Transport: "exchange", Sessions: 1, Client: "node"})
	for _, c := range cases {
		b.Run(c.Name(), func(b *testing.B) { t.Run(b, []string{node, script}, c) })
	}
}
