package tools_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
)

func TestCallPaths(t *testing.T) {
	for _, codec := range []client.Codec{client.JSON, client.Direct} {
		e := newEnv(t, codec, server.ToolPolicy{Deny: []string{"fail*", "tag:danger"}}, 0)
		cases := []struct {
			name      string
			req       msg.ToolCallReq
			success   bool
			code      string
			errPart   string
			data      string // substring of the encoded data
			truncated bool
		}{
			{"success", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "hi", "times": 2}}, true, "", "", `"text":"hihi"`, false},
			{"unknown", msg.ToolCallReq{ToolName: "nope"}, false, "UNKNOWN_TOOL", "no tool", "", false},
			{"denied by name", msg.ToolCallReq{ToolName: "fail"}, false, "TOOL_DENIED", "deny \"fail*\"", "", false},
			{"denied by tag", msg.ToolCallReq{ToolName: "boom"}, false, "TOOL_DENIED", "tag:danger", "", false},
			{"timeout", msg.ToolCallReq{ToolName: "sleep", Arguments: map[string]any{"ms": 5000}, Timeout: aeptest.Ptr(0.05)}, false, "TOOL_ERROR", "timed out", "", false},
			{"timeout of a tool ignoring its context", msg.ToolCallReq{ToolName: "sleep", Arguments: map[string]any{"ms": 300, "ignore": true}, Timeout: aeptest.Ptr(0.05)}, false, "TOOL_ERROR", "timed out", "", false},
			{"within timeout", msg.ToolCallReq{ToolName: "sleep", Arguments: map[string]any{"ms": 1}, Timeout: aeptest.Ptr(5.0)}, true, "", "", "slept", false},
			{"missing argument", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{}}, false, "TOOL_ERROR", `missing required argument "text"`, "", false},
			{"wrong type", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": 5}}, false, "TOOL_ERROR", `argument "text": expected string, got number`, "", false},
			{"unknown argument", msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "a", "txet": 1}}, false, "TOOL_ERROR", `unknown argument "txet"`, "", false},
			{"tool error", msg.ToolCallReq{ToolName: "shout", Arguments: map[string]any{"text": "a"}}, true, "", "", `"text":"A"`, false},
			{"output cap", msg.ToolCallReq{ToolName: "big", Arguments: map[string]any{"n": 2 << 20}}, true, "", "", "xxx", true},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%v/%s", codec, tc.name), func(t *testing.T) {
				req := tc.req
				res, err := e.c.CallTool(context.Background(), &req)
				if err != nil {
					t.Fatalf("a tool failure must be a result, got error %v", err)
				}
				if res.Success != tc.success || res.ToolName != tc.req.ToolName {
					t.Fatalf("result %+v (error %v)", res, deref(res.Error))
				}
				if tc.code == "" && res.ErrorCode != nil || tc.code != "" && (res.ErrorCode == nil || string(*res.ErrorCode) != tc.code) {
					t.Fatalf("error_code %v, want %q (error %v)", res.ErrorCode, tc.code, deref(res.Error))
				}
				if tc.errPart != "" && !strings.Contains(deref(res.Error), tc.errPart) {
					t.Fatalf("error %q does not contain %q", deref(res.Error), tc.errPart)
				}
				if res.Truncated != tc.truncated || res.Events == nil {
					t.Fatalf("truncated %v events %v", res.Truncated, res.Events)
				}
				if tc.truncated {
					// The cap bounds the whole result; data takes what the
					// other fields and the envelope leave.
					s, _ := res.Data.(string)
					if n := len(encode(t, res)); n > 1<<20 || len(s) < 1<<20-1024 {
						t.Fatalf("truncated data of %d bytes in a result of %d; want the 1 MiB cap nearly filled", len(s), n)
					}
				}
				if tc.data != "" && !strings.Contains(fmt.Sprint(encode(t, res.Data)), tc.data) {
					t.Fatalf("data %v lacks %q", encode(t, res.Data), tc.data)
				}
			})
		}
		// arguments that are not an object break the message's schema
		// (schemas/tools.json): schema_violation, not a tool result.
		if _, err := e.c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: "echo", Arguments: []any{1}}); !strings.Contains(fmt.Sprint(err), "schema_violation") || !strings.Contains(fmt.Sprint(err), "arguments") {
			t.Fatalf("%v: arguments [1]: got %v, want schema_violation naming arguments", codec, err)
		}
		// Denied tools are not offered: tool/list leaves them out, even
		// when searched for by name or asked for by tag.
		for _, req := range []msg.ToolListReq{{}, {Query: aeptest.Ptr("fail")}, {Tags: []string{"danger"}}} {
			l, err := e.c.ListTools(context.Background(), &req)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range l.Tools {
				if d.Name == "fail" || d.Name == "boom" {
					t.Fatalf("%v: denied tool %s listed", codec, d.Name)
				}
			}
		}
		if l, _ := e.c.ListTools(context.Background(), &msg.ToolListReq{}); !strings.Contains(names(l.Tools), "echo") {
			t.Fatalf("allowed tools missing: %s", names(l.Tools))
		}
	}
}

// TestPanickingToolAndHostSurvives: a tool that panics answers a failed
// result (TOOL_ERROR), not an error of the whole request; the result names
// the correlation id under which the host logged the panic value and its
// stack, and never the value itself; and the host goes on serving.
func TestPanickingToolAndHostSurvives(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0, server.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	ctx := aeptest.Context(t)
	res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "boom"})
	if err != nil || res.Success || res.ErrorCode == nil || string(*res.ErrorCode) != "TOOL_ERROR" || res.Error == nil {
		t.Fatalf("got %+v %v", res, err)
	}
	if b := encode(t, res); strings.Contains(b, "kaboom") {
		t.Fatalf("the panic value reached the wire: %s", b)
	}
	corr := regexp.MustCompile(`err-[0-9a-f]+`).FindString(*res.Error)
	if corr == "" {
		t.Fatalf("no correlation id in %q", *res.Error)
	}
	if log := logs.String(); !strings.Contains(log, corr) || !strings.Contains(log, "kaboom") {
		t.Fatalf("the host's log has no panic under %s:\n%s", corr, log)
	}
	res, err = e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "still here"}})
	if err != nil || !res.Success {
		t.Fatalf("after a panic: %+v %v", res, err)
	}
}

// lockedBuffer is a log destination the host's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestStreamingEvents(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprint("streaming=", streaming), func(t *testing.T) {
			e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
			var mu sync.Mutex
			var wireEvents []client.Event
			ctx := client.WithEvents(context.Background(), func(ev client.Event) {
				mu.Lock()
				wireEvents = append(wireEvents, ev)
				mu.Unlock()
			})
			res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: "steps", Streaming: streaming})
			if err != nil || !res.Success {
				t.Fatalf("%+v %v", res, err)
			}
			if len(res.Events) != 3 || res.Events[2].Kind != "progress" || fmt.Sprint(res.Events[2].Data["message"]) != "step 3" {
				t.Fatalf("result events %+v", res.Events)
			}
			mu.Lock()
			defer mu.Unlock()
			want := 0
			if streaming {
				want = 3
			}
			if len(wireEvents) != want {
				t.Fatalf("wire events %+v, want %d", wireEvents, want)
			}
			for i, ev := range wireEvents {
				if ev.Type != "tool/event" || ev.Seq != i || ev.Kind != "progress" {
					t.Fatalf("event %d: %+v", i, ev)
				}
			}
		})
	}
}

func TestCorrelationIDReachesAudit(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{}, 0)
	_, err := e.c.CallTool(context.Background(), &msg.ToolCallReq{ToolName: "echo", Arguments: map[string]any{"text": "x"}, CorrelationID: aeptest.Ptr("corr-42")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(2 * time.Second)
	for {
		select {
		case r := <-e.audits:
			if r.Type == "tool/call/req" && r.Plugin == "custom" {
				if r.CorrelationID != "corr-42" {
					t.Fatalf("audit %+v", r)
				}
				return
			}
		case <-deadline:
			t.Fatal("no audit record of the call")
		}
	}
}

func TestPolicyAllowList(t *testing.T) {
	e := newEnv(t, client.JSON, server.ToolPolicy{Allow: []string{"echo", "tag:file"}}, 0)
	ctx := context.Background()
	for name, ok := range map[string]bool{"echo": true, "list_dir": true, "shout": false, "run_command": false} {
		res, err := e.c.CallTool(ctx, &msg.ToolCallReq{ToolName: name, Arguments: map[string]any{"text": "a", "argv": []any{"true"}}})
		if err != nil {
			t.Fatal(err)
		}
		denied := res.ErrorCode != nil && *res.ErrorCode == "TOOL_DENIED"
		if denied == ok {
			t.Fatalf("%s: allowed=%v, got %+v", name, ok, res)
		}
	}
}
