// Package sdkbench runs the benchmarks of the SDKs (sdk/python,
// sdk/typescript) as Go benchmarks: it starts one real `aep serve` and the
// echo floors (internal/echofloor), then, per case, a driver program of the
// SDK's language that times the SDK against aep and a bare client of the
// same language against the floor, interleaved in blocks within one
// process, so that a drift of a shared machine's speed falls on both alike.
// The driver's own timings become the benchmark's metrics; the ratio
// x-floor (the floor's time per round trip over the SDK's, i.e. the SDK's
// speed as a fraction of what its language does against a bare echo
// server) is reported, never asserted (docs/PERFORMANCE.md, SDKs beside
// their floors). A third side, the same bare client talking to aep itself
// (handshaken, then the same requests), splits the gap between the SDK and
// its floor into the SDK's own cost (x-raw) and the host's.
package sdkbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/internal/echofloor"
)

// Targets are the servers one benchmark run measures against.
type Targets struct {
	// AepWS and AepHTTP are one `aep serve`'s GET /ws URL and HTTP base.
	AepWS, AepHTTP string
	// FloorWS and FloorHTTP are the WebSocket echo floor and the
	// single-exchange floor.
	FloorWS, FloorHTTP string
	// Token is the host's auth token.
	Token string
}

// Start starts a host (default configuration, audit on; the binary named
// by $AEP_BIN, else one built here) and both floors for the rest of b.
func Start(b *testing.B) *Targets {
	b.Helper()
	h := aepbin.Start(b, aepbin.Options{HTTP: true, Caps: []string{"env"}, Binary: os.Getenv("AEP_BIN")})
	return &Targets{
		AepWS:     "ws" + strings.TrimPrefix(h.URL, "http") + "/ws",
		AepHTTP:   h.URL,
		FloorWS:   echofloor.WebSocketURL(b),
		FloorHTTP: echofloor.ExchangeURL(b),
		Token:     aepbin.Token,
	}
}

// Case is one benchmark of an SDK: an operation over a transport from a
// number of concurrent sessions of one process, with one of the SDK's
// clients.
type Case struct {
	// Op is "ping" (ping → pong) or "step" (env/step of the guess
	// environment, the floor carrying an env/step/req-sized line).
	Op string
	// Transport is "ws" (GET /ws) or "exchange" (POST /send with Accept:
	// application/json).
	Transport string
	// Sessions run concurrently on one event loop.
	Sessions int
	// Client names the SDK's client ("sync", "async"; "node").
	Client string
}

// Name is the case's sub-benchmark name.
func (c Case) Name() string {
	return fmt.Sprintf("op=%s/transport=%s/sessions=%d/client=%s", c.Op, c.Transport, c.Sessions, c.Client)
}

// Result is what a driver prints: nanoseconds per round trip of each side,
// measured over the same number of round trips in alternating blocks.
type Result struct {
	FloorNs float64 `json:"floor_ns_per_op"`
	// RawNs is the bare client against aep; 0 when the driver has none.
	RawNs float64 `json:"raw_ns_per_op"`
	SDKNs float64 `json:"sdk_ns_per_op"`
	N     int     `json:"n"`
}

// Run runs the driver argv for case c with b.N round trips a side and
// reports its figures: floor-ns/op, raw-ns/op, sdk-ns/op, x-floor, x-raw,
// and ns/op as the SDK's own time (not the driver's start-up). The driver gets flags
// --op, --transport, --sessions, --client, --n, --aep, --floor, --token.
func (t *Targets) Run(b *testing.B, argv []string, c Case) {
	b.Helper()
	aep, floor := t.AepWS, t.FloorWS
	if c.Transport != "ws" {
		aep, floor = t.AepHTTP, t.FloorHTTP
	}
	args := append(append([]string(nil), argv[1:]...),
		"--op", c.Op, "--transport", c.Transport, "--sessions", fmt.Sprint(c.Sessions), "--client", c.Client,
		"--n", fmt.Sprint(b.N), "--aep", aep, "--floor", floor, "--token", t.Token)
	cmd := exec.Command(argv[0], args...)
	cmd.Env = os.Environ()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b.ResetTimer()
	out, err := cmd.Output()
	b.StopTimer()
	if err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(lastLine(out)), &r); err != nil || r.SDKNs <= 0 || r.FloorNs <= 0 {
		b.Fatalf("driver output %q: %v\n%s", out, err, stderr.String())
	}
	b.ReportMetric(r.FloorNs, "floor-ns/op")
	b.ReportMetric(r.SDKNs, "sdk-ns/op")
	b.ReportMetric(r.FloorNs/r.SDKNs, "x-floor")
	if r.RawNs > 0 {
		b.ReportMetric(r.RawNs, "raw-ns/op")
		b.ReportMetric(r.RawNs/r.SDKNs, "x-raw")
	}
	b.ReportMetric(r.SDKNs, "ns/op")
}

func lastLine(out []byte) []byte {
	out = bytes.TrimRight(out, "\n")
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		return out[i+1:]
	}
	return out
}

// Need skips b when tool is not on PATH, unless CI is set: then the
// benchmark fails, as tests of external parts do (docs/DECISIONS.md).
func Need(b *testing.B, tool string) string {
	b.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			b.Fatalf("%s is needed: %v", tool, err)
		}
		b.Skipf("%s is not installed", tool)
	}
	return p
}
