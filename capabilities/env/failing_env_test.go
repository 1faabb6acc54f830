package env_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/internal/aeptest"
)

// faultyEnv fails on request, so that every failure path of the env plugin
// can be driven from the wire. Reset reads options {"reset": "error" |
// "panic"}; Step fails on action 1 and panics on action 2; Render fails.
type faultyEnv struct{}

func (faultyEnv) Reset(ctx context.Context, seed *int64, o json.RawMessage) (env.Obs, error) {
	var opt struct {
		Reset string `json:"reset"`
	}
	if len(o) > 0 {
		if err := json.Unmarshal(o, &opt); err != nil {
			return env.Obs{}, err
		}
	}
	switch opt.Reset {
	case "error":
		return env.Obs{}, errors.New("the simulator did not start")
	case "panic":
		panic("faulty: reset panicked")
	}
	return env.Obs{Observation: json.RawMessage(`0`)}, nil
}

func (faultyEnv) Step(ctx context.Context, a int) (env.Step, error) {
	switch a {
	case 1:
		return env.Step{}, errors.New("the simulator lost its state")
	case 2:
		panic("faulty: step panicked")
	}
	return env.Step{Observation: json.RawMessage(`1`)}, nil
}

func (faultyEnv) Render() (string, error) { return "", errors.New("no display") }
func (faultyEnv) Close() error            { return nil }

func init() {
	// The same environment on a watched goroutine and inline on the request's
	// own goroutine: the two ways the plugin runs environment code.
	env.Register(env.Spec{Name: "test/faulty", Description: "fails on request"}, func() env.Env[int] { return faultyEnv{} })
	env.Register(env.Spec{Name: "test/faulty-inline", Description: "fails on request, inline", Inline: true}, func() env.Env[int] { return faultyEnv{} })
}

// TestFailingEnvironmentAlwaysAnswers pins a defect of an earlier Python
// host: its env reset and observe failure paths raised inside the error
// handler, so the agent got no reply at all.
// Here every request to an environment that errors or panics — in reset,
// step or render, on a watched goroutine or inline — gets exactly one reply
// with its req_id (spec §7 condition 4: an uncaught exception in a handler
// becomes an error message). An error the environment returns is its
// answer and reaches the agent as written; a panic reaches it only as a
// generic error with a correlation id, never the panic value. An episode
// whose environment panicked is closed, since its state is unknown; and the
// host stays up and closes cleanly afterwards.
func TestFailingEnvironmentAlwaysAnswers(t *testing.T) {
	for _, name := range []string{"test/faulty", "test/faulty-inline"} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, &env.Plugin{Settings: env.Settings{Envs: []string{name}}})
			pipe, err := h.ConnectLines(16)
			must(t, err)
			defer pipe.Close()
			ctx := aeptest.Context(t)
			// ask sends one line and returns the next host line, which must
			// answer it: nothing else is in flight.
			ask := func(id, typ, body string) map[string]any {
				t.Helper()
				line := fmt.Sprintf(`{"type":%q,"id":%q,"proto":"1.0","ts":1%s}`, typ, id, body)
				must(t, pipe.WriteLine(ctx, []byte(line)))
				got, err := pipe.ReadLine(ctx)
				if err != nil {
					t.Fatalf("%s: no reply: %v", id, err)
				}
				var m map[string]any
				must(t, json.Unmarshal(got, &m))
				if m["req_id"] != id {
					t.Fatalf("%s: the next host line answers %v: %s", id, m["req_id"], got)
				}
				return m
			}
			wantError := func(m map[string]any, code, part string) {
				t.Helper()
				if m["type"] != "error" || m["code"] != code || !strings.Contains(fmt.Sprint(m["message"]), part) {
					t.Fatalf("want error %s containing %q, got %v", code, part, m)
				}
			}
			// wantPanic checks the answer to a request whose environment
			// panicked: generic, with the correlation id under which the
			// host logged the panic, and no trace of the panic value.
			wantPanic := func(m map[string]any) {
				t.Helper()
				wantError(m, "runtime_error", "internal error")
				d, _ := m["detail"].(map[string]any)
				corr, _ := d["correlation_id"].(string)
				if !strings.HasPrefix(corr, "err-") || !strings.Contains(fmt.Sprint(m["message"]), corr) {
					t.Fatalf("a panic's answer carries no correlation id: %v", m)
				}
				if b, _ := json.Marshal(m); strings.Contains(string(b), "faulty:") {
					t.Fatalf("the panic value reached the wire: %s", b)
				}
			}
			if m := ask("h", "handshake/req", `,"agent_id":"a","agent_caps":["env"],"auth_token":"`+aeptest.Token+`"`); m["ok"] != true {
				t.Fatalf("handshake: %v", m)
			}
			envName := fmt.Sprintf(`,"env_name":%q`, name)
			wantError(ask("r-err", "env/reset/req", envName+`,"options":{"reset":"error"}`), "runtime_error", "did not start")
			wantPanic(ask("r-panic", "env/reset/req", envName+`,"options":{"reset":"panic"}`))

			r := ask("r-ok", "env/reset/req", envName)
			ep, _ := r["episode_id"].(string)
			if r["type"] != "env/reset/resp" || ep == "" {
				t.Fatalf("reset: %v", r)
			}
			epField := fmt.Sprintf(`,"episode_id":%q`, ep)
			wantError(ask("d", "env/render/req", epField), "runtime_error", "no display")
			wantError(ask("s-err", "env/step/req", epField+`,"action":1`), "runtime_error", "lost its state")
			if m := ask("o1", "env/observe/req", epField); m["type"] != "env/observe/resp" {
				t.Fatalf("an environment error leaves the episode open: %v", m)
			}
			wantPanic(ask("s-panic", "env/step/req", epField+`,"action":2`))
			o2 := ask("o2", "env/observe/req", epField)
			wantError(o2, "runtime_error", "closed")
			if b, _ := json.Marshal(o2); strings.Contains(string(b), "faulty:") {
				t.Fatalf("the closed episode's reason holds the panic value: %s", b)
			}

			// The host is still up: a fresh episode runs, and nothing else was sent.
			if m := ask("r2", "env/reset/req", envName); m["type"] != "env/reset/resp" {
				t.Fatalf("reset after the failures: %v", m)
			}
			if m := ask("p", "ping", ""); m["type"] != "pong" {
				t.Fatalf("ping: %v", m)
			}
			// Closing the session and the host must not hang on an episode
			// left locked by a panic.
			must(t, pipe.Close())
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := h.Close(cctx); err != nil {
				t.Fatalf("host close: %v", err)
			}
		})
	}
}
