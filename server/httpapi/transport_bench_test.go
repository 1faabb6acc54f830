package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/internal/echofloor"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
)

// Benchmarks of the WebSocket transport and the single-exchange mode of
// POST /send, each beside its floor and mcp-go's streamable HTTP server,
// all measured in one run (docs/PERFORMANCE.md):
//   - WebSocket floor: a bare coder/websocket server echoing each text frame
//     (internal/echofloor, shared with the SDKs' benchmarks);
//   - single-exchange floor: a bare net/http server answering each POST with
//     its body (internal/echofloor);
//   - mcp-go: mcpBase/mcpCall of bench_test.go (one exchange per call).
// The client side is the same raw code for aep and its floor.

// wsBench is one raw WebSocket connection of a benchmark.
type wsBench struct {
	c *websocket.Conn
}

func dialBenchWS(b *testing.B, url string) *wsBench {
	b.Helper()
	c, _, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPClient: benchHTTP})
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadLimit(-1)
	b.Cleanup(func() { c.CloseNow() })
	return &wsBench{c: c}
}

func (w *wsBench) roundTrip(b *testing.B, line string, id string) []byte {
	ctx := context.Background()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
		b.Fatal(err)
	}
	_, d, err := w.c.Read(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if !bytes.Contains(d, []byte(id)) {
		b.Fatalf("reply %s to %s", d, id)
	}
	return d
}

// wsFloorURL serves the WebSocket floor: read a frame, write it back.
func wsFloorURL(b *testing.B) string { return echofloor.WebSocketURL(b) }

func aepWSURL(b *testing.B) string {
	base := aepBase(b)
	return "ws" + strings.TrimPrefix(base, "http") + "/ws"
}

func aepWSSession(b *testing.B, url string) *wsBench {
	w := dialBenchWS(b, url)
	w.roundTrip(b, handshakeLine("h"), `"ok":true`)
	return w
}

// exchangeFloorBase serves the single-exchange floor: the POST's body is the
// answer.
func exchangeFloorBase(b *testing.B) string { return echofloor.ExchangeURL(b) }

// exchangeFloor is the single-exchange floor's handler.
var exchangeFloor = echofloor.Exchange()

// exchangeSession posts lines with Accept: application/json.
type exchangeSession struct{ base, sid string }

func (s *exchangeSession) roundTrip(b *testing.B, line, id string) {
	req, _ := http.NewRequest(http.MethodPost, s.base+"/send", strings.NewReader(line))
	req.Header.Set("X-Session-Id", s.sid)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Accept", "application/json")
	resp, err := benchHTTP.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	d, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(d, []byte(id)) {
		b.Fatalf("send: %d %s", resp.StatusCode, d)
	}
}

func aepExchangeSession(b *testing.B, base string) *exchangeSession {
	s := &exchangeSession{base: base, sid: createSession(b, base)}
	s.roundTrip(b, handshakeLine("h"), `"ok":true`)
	return s
}

// BenchmarkTransportRoundTrip is one session's echo round trip over each
// transport, beside its floor and mcp-go, in one run.
func BenchmarkTransportRoundTrip(b *testing.B) {
	b.Run("impl=mcp-go", func(b *testing.B) {
		c := mcpSession(b, mcpBase(b))
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			mcpCall(b, c, i)
		}
	})
	b.Run("impl=ws-floor", func(b *testing.B) {
		w := dialBenchWS(b, wsFloorURL(b))
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			id := "r" + strconv.Itoa(i)
			w.roundTrip(b, benchLine(id), id)
		}
	})
	b.Run("impl=ws-aep", func(b *testing.B) {
		w := aepWSSession(b, aepWSURL(b))
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			id := "r" + strconv.Itoa(i)
			w.roundTrip(b, benchLine(id), id)
		}
	})
	b.Run("impl=exchange-floor", func(b *testing.B) {
		s := &exchangeSession{base: exchangeFloorBase(b), sid: "floor"}
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			id := "r" + strconv.Itoa(i)
			s.roundTrip(b, benchLine(id), id)
		}
	})
	b.Run("impl=exchange-aep", func(b *testing.B) {
		s := aepExchangeSession(b, aepBase(b))
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			id := "r" + strconv.Itoa(i)
			s.roundTrip(b, benchLine(id), id)
		}
	})
}

// BenchmarkTransportThroughput32 runs round trips on 32 concurrent sessions
// per transport; ops/s is round trips per second across all of them.
func BenchmarkTransportThroughput32(b *testing.B) {
	const sessions = 32
	run := func(b *testing.B, open func() func(i int)) {
		trips := make([]func(int), sessions)
		for i := range trips {
			trips[i] = open()
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		defer measure(b)()
		for _, trip := range trips {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					trip(int(i))
				}
			}()
		}
		wg.Wait()
	}
	b.Run("impl=mcp-go", func(b *testing.B) {
		base := mcpBase(b)
		run(b, func() func(int) {
			c := mcpSession(b, base)
			return func(i int) { mcpCall(b, c, i) }
		})
	})
	b.Run("impl=ws-floor", func(b *testing.B) {
		url := wsFloorURL(b)
		run(b, func() func(int) {
			w := dialBenchWS(b, url)
			return func(i int) { id := "r" + strconv.Itoa(i); w.roundTrip(b, benchLine(id), id) }
		})
	})
	b.Run("impl=ws-aep", func(b *testing.B) {
		url := aepWSURL(b)
		run(b, func() func(int) {
			w := aepWSSession(b, url)
			return func(i int) { id := "r" + strconv.Itoa(i); w.roundTrip(b, benchLine(id), id) }
		})
	})
	b.Run("impl=exchange-floor", func(b *testing.B) {
		base := exchangeFloorBase(b)
		run(b, func() func(int) {
			s := &exchangeSession{base: base, sid: "floor"}
			return func(i int) { id := "r" + strconv.Itoa(i); s.roundTrip(b, benchLine(id), id) }
		})
	})
	b.Run("impl=exchange-aep", func(b *testing.B) {
		base := aepBase(b)
		run(b, func() func(int) {
			s := aepExchangeSession(b, base)
			return func(i int) { id := "r" + strconv.Itoa(i); s.roundTrip(b, benchLine(id), id) }
		})
	})
}

// BenchmarkEnvStepWS is an RL step loop over WebSocket, one session, with
// the built-in guess environment (audit on), beside the WebSocket echo floor
// carrying a step-sized message.
func BenchmarkEnvStepWS(b *testing.B) {
	stepLine := func(ep, id string) string {
		return `{"type":"env/step/req","id":"` + id + `","proto":"1.0","ts":1,"episode_id":"` + ep + `","action":7}`
	}
	b.Run("impl=ws-floor", func(b *testing.B) {
		w := dialBenchWS(b, wsFloorURL(b))
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			id := "s" + strconv.Itoa(i)
			w.roundTrip(b, stepLine("ep-0123456789abcdef", id), id)
		}
	})
	b.Run("impl=ws-aep", func(b *testing.B) {
		url, episode := envStepWSHost(b)
		w := dialBenchWS(b, url)
		w.roundTrip(b, `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["env"],"auth_token":"`+token+`"}`, `"ok":true`)
		ep := episode(w)
		b.ResetTimer()
		defer measure(b)()
		for i := range b.N {
			id := "s" + strconv.Itoa(i)
			w.roundTrip(b, stepLine(ep, id), id)
		}
	})
}

// envStepWSHost serves a host with the env capability (audit on) over
// WebSocket: its /ws URL, and how a handshaken connection starts an episode
// of the guess environment long enough for any benchmark.
func envStepWSHost(b *testing.B) (string, func(*wsBench) string) {
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	aud := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	h, err := server.New(context.Background(), cfg, server.WithAuditor(aud), server.WithDataDir(b.TempDir()),
		server.WithPlugin(server.PluginSpec{Name: "env", Type: "env", Impl: &env.Plugin{Settings: env.Settings{DataRoot: b.TempDir()}}}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	base := newServer(b, h, httpapi.Options{})
	return "ws" + strings.TrimPrefix(base, "http") + "/ws", func(w *wsBench) string {
		d := w.roundTrip(b, `{"type":"env/reset/req","id":"r","proto":"1.0","ts":1,"env_name":"`+env.GuessName+`","seed":1,"options":{"high":1000000,"max_steps":1000000000}}`, `"r"`)
		var reset struct {
			EpisodeID string `json:"episode_id"`
		}
		if err := json.Unmarshal(d, &reset); err != nil || reset.EpisodeID == "" {
			b.Fatalf("reset: %s", d)
		}
		return reset.EpisodeID
	}
}

// BenchmarkTransportPaired runs aep and its floor in alternating blocks of
// round trips within one benchmark: a drift of the machine's speed, which
// moves the separate benchmarks' medians by a tenth or more from one run to
// the next on a shared 2-core machine, falls on both alike. Blocks are long
// enough for each side to run with its own code warm. It reports each
// side's wall time per round trip and aep's over the floor's
// (docs/PERFORMANCE.md).
func BenchmarkTransportPaired(b *testing.B) {
	const block = 200 // round trips per session per block
	paired := func(b *testing.B, sessions int, floor, aep func() func(i int)) {
		floors, aeps := make([]func(int), sessions), make([]func(int), sessions)
		for i := range sessions {
			floors[i], aeps[i] = floor(), aep()
		}
		var tFloor, tAep time.Duration
		runBlock := func(trips []func(int), from, n int) time.Duration {
			start := time.Now()
			if len(trips) == 1 {
				for i := from; i < from+n; i++ {
					trips[0](i)
				}
				return time.Since(start)
			}
			var next atomic.Int64
			next.Store(int64(from))
			var wg sync.WaitGroup
			for _, trip := range trips {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(from+n) {
							return
						}
						trip(int(i))
					}
				}()
			}
			wg.Wait()
			return time.Since(start)
		}
		b.ResetTimer()
		for done := 0; done < b.N; {
			n := min(block*sessions, b.N-done)
			tFloor += runBlock(floors, done, n)
			tAep += runBlock(aeps, done, n)
			done += n
		}
		b.ReportMetric(float64(tFloor.Nanoseconds())/float64(b.N), "floor-ns/op")
		b.ReportMetric(float64(tAep.Nanoseconds())/float64(b.N), "aep-ns/op")
		b.ReportMetric(float64(tAep)/float64(tFloor), "aep/floor")
		b.ReportMetric(0, "ns/op") // both sides ran b.N each: the metrics above say it
	}
	wsTrip := func(url string, line func(id string) string) func() func(int) {
		return func() func(int) {
			w := dialBenchWS(b, url)
			if line == nil {
				line = benchLine
			}
			return func(i int) { id := "r" + strconv.Itoa(i); w.roundTrip(b, line(id), id) }
		}
	}
	for _, sessions := range []int{1, 32} {
		b.Run(fmt.Sprintf("transport=ws/sessions=%d", sessions), func(b *testing.B) {
			url := aepWSURL(b)
			paired(b, sessions, wsTrip(wsFloorURL(b), nil), func() func(int) {
				w := aepWSSession(b, url)
				return func(i int) { id := "r" + strconv.Itoa(i); w.roundTrip(b, benchLine(id), id) }
			})
		})
		b.Run(fmt.Sprintf("transport=exchange/sessions=%d", sessions), func(b *testing.B) {
			floorURL, base := exchangeFloorBase(b), aepBase(b)
			paired(b, sessions, func() func(int) {
				s := &exchangeSession{base: floorURL, sid: "floor"}
				return func(i int) { id := "r" + strconv.Itoa(i); s.roundTrip(b, benchLine(id), id) }
			}, func() func(int) {
				s := aepExchangeSession(b, base)
				return func(i int) { id := "r" + strconv.Itoa(i); s.roundTrip(b, benchLine(id), id) }
			})
		})
	}
	b.Run("transport=ws/env-step", func(b *testing.B) {
		stepLine := func(ep string) func(id string) string {
			return func(id string) string {
				return `{"type":"env/step/req","id":"` + id + `","proto":"1.0","ts":1,"episode_id":"` + ep + `","action":7}`
			}
		}
		url, episode := envStepWSHost(b)
		paired(b, 1, wsTrip(wsFloorURL(b), stepLine("ep-0123456789abcdef")), func() func(int) {
			w := dialBenchWS(b, url)
			w.roundTrip(b, `{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["env"],"auth_token":"`+token+`"}`, `"ok":true`)
			ep := episode(w)
			return func(i int) { id := "s" + strconv.Itoa(i); w.roundTrip(b, stepLine(ep)(id), id) }
		})
	})
}
