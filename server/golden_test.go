package server_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/golden"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// TestGolden replays the agent lines of each testdata/golden/*.txtar file
// against a host through the in-process JSON pipe and compares what the host
// answers, with volatile fields replaced by placeholders, to the file's
// `host` section (the wire-level conformance tests of the protocol). Package internal/golden documents
// the archive format and the script language; run with -update to rewrite
// the host sections.
//
// The kernel's archives run against a host with no capability plugin but
// one echoplug plugin named "echo" (Name e1); auth_token defaults to
// "secret". Their scripts may also use the echo steps:
//
//	!long N         send a valid echo/say line padded to N bytes, then
//	                record host lines up to the first that is not an event;
//	!started GATE   wait until an echo/wait on GATE runs in the plugin;
//	!release GATE   let every echo/wait on GATE finish;
//	!ctxdone GATE   wait until an echo/wait on GATE saw its context end.
func TestGolden(t *testing.T) {
	c := checker(t)
	golden.Harness{
		DefaultConfig: "server:\n  auth_token: secret\n",
		NewHost:       newGoldenHost,
		Check:         c.CheckHostLine,
	}.Run(t)
}

// newGoldenHost builds a kernel-only host with the echo plugin, and the steps
// that drive that plugin.
func newGoldenHost(a *golden.Archive) (*server.Host, map[string]golden.Step, error) {
	plug := &echoplug.Plugin{Name: "e1", Started: make(chan string, 64), CtxDone: make(chan string, 64)}
	h, err := server.New(a.Ctx, a.Config,
		server.WithRegistry(testRegistry()),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: plug}))
	if err != nil {
		return nil, nil, err
	}
	steps := map[string]golden.Step{
		"!long": func(r *golden.Run, arg string) error {
			n, err := strconv.Atoi(arg)
			if err != nil {
				return err
			}
			head := `{"type":"echo/say/req","id":"long","proto":"1.0","ts":1,"text":"`
			pad := max(n-len(head)-2, 0)
			return r.SendAndRead(head + strings.Repeat("x", pad) + `"}`)
		},
		"!started": func(r *golden.Run, gate string) error {
			return waitFor(r.Ctx(), plug.Started, gate)
		},
		"!release": func(r *golden.Run, gate string) error {
			plug.Release(gate)
			return nil
		},
		"!ctxdone": func(r *golden.Run, gate string) error {
			if err := waitFor(r.Ctx(), plug.CtxDone, gate); err != nil {
				return err
			}
			r.Printf("ctx done: %s", gate)
			return nil
		},
	}
	return h, steps, nil
}

func waitFor(ctx context.Context, ch chan string, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		select {
		case got := <-ch:
			if got == want {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q: %w", want, ctx.Err())
		}
	}
}

// testRegistry is the registry of every golden host: the core and session
// namespaces plus the echo test namespace.
func testRegistry() *wire.Registry { return msg.Registry().Union(testproto.Registry()) }

// isEvent reports whether a host line is an event; dispatch tests use it too.
func isEvent(line []byte) bool { return golden.IsEvent(line) }
