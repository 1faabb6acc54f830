package env_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

var codecs = []struct {
	name  string
	codec client.Codec
}{{"json", client.JSON}, {"direct", client.Direct}}

// sleepEnv blocks in Step for the action's milliseconds, honouring its
// context: it exercises the per-step timeout.
type sleepEnv struct{}

func (sleepEnv) Reset(ctx context.Context, seed *int64, o json.RawMessage) (env.Obs, error) {
	return env.Obs{Observation: json.RawMessage(`0`)}, nil
}
func (sleepEnv) Step(ctx context.Context, ms int) (env.Step, error) {
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
	case <-ctx.Done():
		return env.Step{}, ctx.Err()
	}
	return env.Step{Observation: json.RawMessage(`1`)}, nil
}
func (sleepEnv) Render() (string, error) { return "sleeping", nil }
func (sleepEnv) Close() error            { return nil }

func init() {
	env.Register(env.Spec{Name: "test/sleep", Description: "sleeps for the action's milliseconds"}, func() env.Env[int] { return sleepEnv{} })
}

// newHost starts a host serving p as plugin "env"; p.DataRoot defaults to
// a temp dir.
func newHost(t testing.TB, p *env.Plugin, opts ...server.Option) *server.Host {
	t.Helper()
	if p.DataRoot == "" {
		p.DataRoot = t.TempDir()
	}
	return aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("env", p)}, opts...)
}

func rawp(s string) *json.RawMessage { r := json.RawMessage(s); return &r }

func reset(t testing.TB, c *client.Client, name string, seed int, opts string) *msg.EnvResetResp {
	t.Helper()
	req := &msg.EnvResetReq{EnvName: name, Seed: &seed}
	if opts != "" {
		req.Options = rawp(opts)
	}
	r, err := c.EnvReset(aeptest.Context(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type guessObs struct {
	Hint    int `json:"hint"`
	Guesses int `json:"guesses"`
	High    int `json:"high"`
}

func decodeObs(t testing.TB, raw json.RawMessage) guessObs {
	t.Helper()
	var o guessObs
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatalf("observation %s: %v", raw, err)
	}
	return o
}

func directCodec() client.Codec { return client.Direct }

// serverEnv is the plugin env of a plugin provisioned without a host.
func serverEnv() server.PluginEnv {
	return server.PluginEnv{Name: "env", Type: "env", Logger: slog.New(slog.DiscardHandler)}
}
