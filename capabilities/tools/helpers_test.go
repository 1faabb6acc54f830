package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/tools"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/toolrun"
	"github.com/aephost/aep/wire"
)

func encode(t testing.TB, v any) string {
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type echoIn struct {
	Text  string `json:"text" desc:"Text to echo."`
	Times int    `json:"times,omitempty"`
}

type echoOut struct {
	Text string `json:"text"`
}

func echo(ctx context.Context, in echoIn) (echoOut, error) {
	return echoOut{Text: strings.Repeat(in.Text, max(in.Times, 1))}, nil
}

type sleepIn struct {
	Ms     int  `json:"ms"`
	Ignore bool `json:"ignore,omitempty"`
}

// testRegistry is a second tool-serving plugin's registry.
func testRegistry(t testing.TB) *toolrun.Registry {
	r := toolrun.NewRegistry()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(toolrun.Register(r, "echo", "Echo the text back.", echo, toolrun.Tags("text", "demo"), toolrun.Idempotent()))
	must(toolrun.Register(r, "shout", "Echo in UPPER case.", func(ctx context.Context, in echoIn) (echoOut, error) {
		return echoOut{Text: strings.ToUpper(in.Text)}, nil
	}, toolrun.Tags("text")))
	must(toolrun.Register(r, "secret_search", "Deferred semantic search.", echo, toolrun.Tags("search"), toolrun.Deferred()))
	must(toolrun.Register(r, "sleep", "Sleep for ms milliseconds.", func(ctx context.Context, in sleepIn) (echoOut, error) {
		if in.Ignore {
			time.Sleep(time.Duration(in.Ms) * time.Millisecond)
			return echoOut{}, nil
		}
		select {
		case <-time.After(time.Duration(in.Ms) * time.Millisecond):
			return echoOut{Text: "slept"}, nil
		case <-ctx.Done():
			return echoOut{}, ctx.Err()
		}
	}, toolrun.Tags("slow")))
	must(toolrun.Register(r, "boom", "Panics.", func(ctx context.Context, in struct{}) (echoOut, error) {
		panic("kaboom")
	}, toolrun.Tags("danger")))
	must(toolrun.Register(r, "fail", "Fails.", func(ctx context.Context, in struct{}) (echoOut, error) {
		return echoOut{}, errors.New("it failed")
	}))
	must(toolrun.Register(r, "steps", "Emits three progress events.", func(ctx context.Context, in struct{}) (echoOut, error) {
		for i := 1; i <= 3; i++ {
			if err := toolrun.Progress(ctx, i*33, fmt.Sprintf("step %d", i)); err != nil {
				return echoOut{}, err
			}
		}
		return echoOut{Text: "done"}, nil
	}, toolrun.Streaming()))
	must(toolrun.Register(r, "big", "Returns n bytes.", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (string, error) {
		return strings.Repeat("x", in.N), nil
	}))
	return r
}

type env struct {
	h      *server.Host
	c      *client.Client
	root   string
	audits chan server.AuditRecord
}

// newEnv starts a host with the built-in tools (plugin "builtin") and the
// test registry (plugin "custom"), records its audit lines, and connects an
// agent with codec.
func newEnv(t testing.TB, codec client.Codec, policy server.ToolPolicy, maxOut int, opts ...server.Option) *env {
	t.Helper()
	cfg := aeptest.Config(func(cfg *server.Config) { cfg.Server.ToolPolicy = policy })
	root := t.TempDir()
	builtin := &tools.Plugin{Settings: tools.Settings{Root: root, MaxOutputBytes: maxOut}}
	custom := tools.NewPlugin(testRegistry(t))
	custom.MaxOutputBytes = maxOut
	h := aeptest.NewHost(t, cfg, []server.PluginSpec{
		{Name: "builtin", Type: "tools", Impl: builtin},
		{Name: "custom", Type: "tools", Impl: custom},
	}, append([]server.Option{server.WithDataDir(t.TempDir())}, opts...)...)
	e := &env{h: h, root: root, audits: make(chan server.AuditRecord, 1000)}
	unsub := h.SubscribeAudit(func(r server.AuditRecord) {
		select {
		case e.audits <- r:
		default:
		}
	})
	t.Cleanup(unsub)
	e.c = aeptest.ConnectWith(t, h, codec, nil, "tools")
	// The workspace is the session's own directory (server/persist/dirs.go).
	d, err := h.SessionDir(aeptest.Handle(t, e.c))
	if err != nil {
		t.Fatal(err)
	}
	e.root = d.Path
	return e
}

// workdirSeen is where a contained command finds its session directory:
// /workspace in tier (a), the host path in tier (b).
func workdirSeen(t *testing.T, hostPath string) string {
	mech, err := sandbox.Mechanism(sandbox.ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	if sandbox.TierOf(mech) == sandbox.TierNamespaces {
		return sandbox.Workspace
	}
	return hostPath
}

func names(ts []msg.ToolDefinition) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return strings.Join(out, ",")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
