package env_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

const token = "secret"

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

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newHost starts a host serving p; p.DataRoot defaults to a temp dir.
func newHost(t testing.TB, p *env.Plugin, opts ...server.Option) *server.Host {
	t.Helper()
	if p.DataRoot == "" {
		p.DataRoot = t.TempDir()
	}
	cfg := server.Defaults()
	cfg.Server.AuthToken = token
	opts = append([]server.Option{server.WithPlugin(server.PluginSpec{Name: "env", Type: "env", Impl: p})}, opts...)
	h, err := server.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func connect(t testing.TB, h *server.Host, codec client.Codec) *client.Client {
	t.Helper()
	c, err := client.InProcess(h, codec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Handshake(context.Background(), "agent", token, "env"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantErr checks that err is a protocol error with code whose message contains sub.
func wantErr(t testing.TB, err error, code wire.Code, sub string) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("want %s error containing %q, got %v", code, sub, err)
	}
	if we.Code != code || !strings.Contains(we.Message, sub) {
		t.Fatalf("want %s error containing %q, got %s: %s", code, sub, we.Code, we.Message)
	}
}

func ptr[T any](v T) *T { return &v }

func rawp(s string) *json.RawMessage { r := json.RawMessage(s); return &r }

func reset(t testing.TB, c *client.Client, name string, seed int, opts string) *msg.EnvResetResp {
	t.Helper()
	req := &msg.EnvResetReq{EnvName: name, Seed: &seed}
	if opts != "" {
		req.Options = rawp(opts)
	}
	r, err := c.EnvReset(ctxT(t), req)
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

func serverEnv() server.PluginEnv { return server.PluginEnv{Name: "env", Type: "env"} }
