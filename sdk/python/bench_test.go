// Package python holds the Go side of the Python SDK's benchmarks: the SDK
// itself is sdk/python/aep, the driver sdk/python/bench/bench.py.
package python_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/internal/sdkbench"
)

func TestMain(m *testing.M) {
	code := m.Run()
	aepbin.Cleanup()
	os.Exit(code)
}

// BenchmarkPythonSDK times the Python SDK against one real `aep serve`
// beside what Python itself does against the bare Go echo floor, in the
// same process and interleaved (bench/bench.py; internal/sdkbench): ping
// and env step over WebSocket with the synchronous client (one session)
// and the asyncio client (one session, and 32 on one loop), and ping over
// the single exchange. x-floor is the SDK's speed as a fraction of the
// floor's (docs/PERFORMANCE.md). Needs python3 with pydantic 2 and
// websockets (the floor's client).
func BenchmarkPythonSDK(b *testing.B) {
	py := sdkbench.Need(b, "python3")
	script, _ := filepath.Abs(filepath.Join("bench", "bench.py"))
	t := sdkbench.Start(b)
	var cases []sdkbench.Case
	for _, op := range []string{"ping", "step"} {
		cases = append(cases,
			sdkbench.Case{Op: op, Transport: "ws", Sessions: 1, Client: "sync"},
			sdkbench.Case{Op: op, Transport: "ws", Sessions: 1, Client: "async"},
			sdkbench.Case{Op: op, Transport: "ws", Sessions: 32, Client: "async"})
	}
	cases = append(cases, sdkbench.Case{Op: "ping", Transport: "exchange", Sessions: 1, Client: "sync"})
	for _, c := range cases {
		b.Run(c.Name(), func(b *testing.B) { t.Run(b, []string{py, script}, c) })
	}
}
