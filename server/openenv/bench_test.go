package openenv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/server/openenv"
)

// Benchmarks of an RL step loop through the OpenEnv face beside the same
// loop over aep's own WebSocket transport (server/httpapi
// BenchmarkEnvStepWS, impl=ws-aep), in one run: one session, the
// built-in guess environment, audit on, a raw coder/websocket client
// sending pre-built frames for both (docs/PERFORMANCE.md, The OpenEnv
// face). The face's target is at least 0.8 of aep's own steps per second.

// benchHost is a host with the guess environment and audit on, served with
// the face, as BenchmarkEnvStepWS's envStepWSHost serves it.
func benchHost(b *testing.B) string {
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	aud := server.NewFileAuditor(filepath.Join(b.TempDir(), "audit.jsonl"), 10, 5, nil)
	h, err := server.New(context.Background(), cfg, server.WithAuditor(aud), server.WithDataDir(b.TempDir()),
		server.WithPlugin(server.PluginSpec{Name: "env", Type: "env", Impl: &env.Plugin{Settings: env.Settings{DataRoot: b.TempDir()}}}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	face := openenv.New(h, openenv.Options{})
	base := serve(b, httpapi.Handler(h, httpapi.Options{Faces: []httpapi.Face{{Prefix: openenv.Prefix, Handler: face, Upgrade: face.Upgrade}}}))
	return "ws" + strings.TrimPrefix(base, "http")
}

type benchConn struct {
	c *websocket.Conn
}

func benchDial(b *testing.B, url string) *benchConn {
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadLimit(-1)
	b.Cleanup(func() { c.CloseNow() })
	return &benchConn{c: c}
}

func (w *benchConn) roundTrip(b *testing.B, line []byte, want []byte) []byte {
	ctx := context.Background()
	if err := w.c.Write(ctx, websocket.MessageText, line); err != nil {
		b.Fatal(err)
	}
	_, d, err := w.c.Read(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if !bytes.Contains(d, want) {
		b.Fatalf("reply %s to %s", d, line)
	}
	return d
}

// aepLoop is aep's own WebSocket env step: handshake, reset, then one
// step per call.
func aepLoop(b *testing.B, base string) func(i int) {
	w := benchDial(b, base+"/ws")
	w.roundTrip(b, []byte(`{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["env"],"auth_token":"`+token+`"}`), []byte(`"ok":true`))
	d := w.roundTrip(b, []byte(`{"type":"env/reset/req","id":"r","proto":"1.0","ts":1,"env_name":"guess","seed":1,"options":{"high":1000000,"max_steps":1000000000}}`), []byte(`"r"`))
	var reset struct {
		EpisodeID string `json:"episode_id"`
	}
	if err := json.Unmarshal(d, &reset); err != nil || reset.EpisodeID == "" {
		b.Fatalf("reset: %s", d)
	}
	return func(i int) {
		id := "s" + strconv.Itoa(i)
		w.roundTrip(b, []byte(`{"type":"env/step/req","id":"`+id+`","proto":"1.0","ts":1,"episode_id":"`+reset.EpisodeID+`","action":7}`), []byte(id))
	}
}

// openenvLoop is the same loop through the face, as the stock client
// sends it: reset with the token, then {"type":"step","data":{...}}.
func openenvLoop(b *testing.B, base string) func(i int) {
	w := benchDial(b, base+openenv.Prefix+"guess/ws")
	w.roundTrip(b, []byte(`{"type":"reset","data":{"seed":1,"high":1000000,"max_steps":1000000000,"aep_token":"`+token+`"}}`), []byte(`"observation"`))
	step := []byte(`{"type":"step","data":{"action":7}}`)
	want := []byte(`"reward":0.0`)
	return func(int) { w.roundTrip(b, step, want) }
}

func BenchmarkOpenEnvStepWS(b *testing.B) {
	for _, c := range []struct {
		name string
		loop func(*testing.B, string) func(int)
	}{{"impl=ws-aep", aepLoop}, {"impl=openenv", openenvLoop}} {
		b.Run(c.name, func(b *testing.B) {
			trip := c.loop(b, benchHost(b))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				trip(i)
			}
		})
	}
}

// BenchmarkOpenEnvStepWSPaired runs both loops in alternating blocks of
// steps within one benchmark, so a drift of the machine's speed falls on
// both alike, and reports each side's time per step and the face's steps
// per second over aep's own (openenv/aep; the target is ≥ 0.8).
func BenchmarkOpenEnvStepWSPaired(b *testing.B) {
	const block = 500
	aep, face := aepLoop(b, benchHost(b)), openenvLoop(b, benchHost(b))
	for i := range 2 * block { // warm both
		aep(i)
		face(i)
	}
	var tAep, tFace time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		start := time.Now()
		for i := range n {
			aep(done + i)
		}
		tAep += time.Since(start)
		start = time.Now()
		for i := range n {
			face(done + i)
		}
		tFace += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(tAep.Nanoseconds())/float64(b.N), "aep-ns/step")
	b.ReportMetric(float64(tFace.Nanoseconds())/float64(b.N), "openenv-ns/step")
	b.ReportMetric(float64(tAep)/float64(tFace), "openenv/aep")
}
