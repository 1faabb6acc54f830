package env_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// BenchmarkExternalCartPole: steps/s of the pure-Python cart-pole of
// sdk/python/tests/cartpole.py served by aep.envserver in the sandbox,
// stepped through aep by the Go client in process (both codecs) and over
// WebSocket, beside the floor measured in the same run: the same
// environment stepped directly in Python. docs/PERFORMANCE.md records it.
func BenchmarkExternalCartPole(b *testing.B) {
	py := systemPython()
	if py == "" {
		b.Skip("no python3 among the sandbox's system paths")
	}
	sdk, err := filepath.Abs("../../sdk/python")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("python-direct", func(b *testing.B) {
		script := `import sys, time, cartpole
env = cartpole.CartPole(); obs, _ = env.reset(seed=3); n = int(sys.argv[1])
t = time.perf_counter()
for _ in range(n):
    obs, r, term, trunc, _ = env.step(cartpole.policy(obs))
    if term or trunc:
        obs, _ = env.reset(seed=3)
print(n / (time.perf_counter() - t))`
		cmd := exec.Command(py, "-B", "-c", script, strconv.Itoa(b.N))
		cmd.Dir = filepath.Join(sdk, "tests")
		out, err := cmd.Output()
		if err != nil {
			b.Fatal(err)
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "steps/s")
	})
	cfg := env.ExternalEnv{Name: "cartpole", Command: "python3",
		Args:     []string{filepath.Join(sdk, "aep", "envserver.py"), filepath.Join(sdk, "tests", "cartpole.py") + ":CartPole"},
		ReadOnly: []string{sdk}, EnvAllow: []string{"LANG"}, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": "1"}}
	if os.Getenv("AEP_BENCH_UNCONTAINED") != "" {
		off := false
		cfg.Sandbox = &off
	}
	aud := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	h := newHost(b, &env.Plugin{Settings: env.Settings{External: []env.ExternalEnv{cfg}}}, server.WithAuditor(aud))
	loop := func(b *testing.B, c *client.Client) {
		ctx := aeptest.Context(b)
		r := reset(b, c, "cartpole", 3, "")
		ep := r.EpisodeID
		obs := r.Observation
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var o []float64
			if err := json.Unmarshal(obs, &o); err != nil {
				b.Fatal(err)
			}
			a := json.RawMessage("0")
			if o[2]+0.5*o[3] > 0 {
				a = json.RawMessage("1")
			}
			st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: a})
			if err != nil {
				b.Fatal(err)
			}
			obs = st.Observation
			if st.Terminated || st.Truncated {
				seed := 3
				rr, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "cartpole", EpisodeID: &ep, Seed: &seed})
				if err != nil {
					b.Fatal(err)
				}
				obs = rr.Observation
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	}
	for _, cd := range codecs {
		b.Run("aep-inprocess-"+cd.name, func(b *testing.B) {
			loop(b, aeptest.ConnectWith(b, h, cd.codec, nil, "env"))
		})
	}
	b.Run("aep-websocket", func(b *testing.B) {
		ts := httptest.NewServer(httpapi.Handler(h, httpapi.Options{}))
		b.Cleanup(ts.Close)
		ctx := aeptest.Context(b)
		c, err := client.WebSocket(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/ws", nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, "bench", aeptest.Token, "env"); err != nil {
			b.Fatal(err)
		}
		loop(b, c)
	})
}
