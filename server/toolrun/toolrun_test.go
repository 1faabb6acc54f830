package toolrun

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// scope records what a tool run sends on the wire.
type scope struct {
	mu     sync.Mutex
	events []wire.EventKind
}

func (s *scope) SessionID() string   { return "s" }
func (s *scope) RequestID() string   { return "r" }
func (s *scope) Enabled(string) bool { return true }
func (s *scope) Dispatch(context.Context, wire.Message) (wire.Message, error) {
	return nil, errors.New("not here")
}
func (s *scope) Emit(kind wire.EventKind, _ map[string]any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, kind)
	return nil
}

func ptr[T any](v T) *T { return &v }

func TestAllowed(t *testing.T) {
	tool := Subject{Name: "sql_query", Tags: []string{"db", "write"}}
	cases := []struct {
		name        string
		allow, deny []string
		want        bool
	}{
		{"no policy", nil, nil, true},
		{"deny by name pattern", nil, []string{"sql_*"}, false},
		{"deny by tag", nil, []string{"tag:wr*"}, false},
		{"deny another tag", nil, []string{"tag:net"}, true},
		{"allow list hit", []string{"read_*", "sql_query"}, nil, true},
		{"allow list miss", []string{"read_*"}, nil, false},
		{"allow by tag", []string{"tag:db"}, nil, true},
		{"deny wins over allow", []string{"sql_query"}, []string{"tag:write"}, false},
	}
	for _, c := range cases {
		ok, why := Options{Policy: server.ToolPolicy{Allow: c.allow, Deny: c.deny}}.Allowed(tool)
		if ok != c.want {
			t.Errorf("%s: Allowed = %v (%s), want %v", c.name, ok, why, c.want)
		}
		if !ok && !strings.Contains(why, "sql_query") {
			t.Errorf("%s: reason %q does not name the tool", c.name, why)
		}
	}
}

func TestRun(t *testing.T) {
	var logs bytes.Buffer
	opt := Options{MaxOutputBytes: 1024, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Policy: server.ToolPolicy{Deny: []string{"banned"}}}
	emitTwo := func(ctx context.Context) (Output, error) {
		_ = Progress(ctx, 50, "half")
		_ = Log(ctx, "info", "done")
		return Output{Data: "ok"}, nil
	}
	cases := []struct {
		name      string
		tool      string
		req       msg.ToolCallReq
		fn        Func
		success   bool
		code      msg.ToolResultErrorCode
		errPart   string
		data      any
		truncated bool
		exit      *int
		events    int // collected in the result
		wire      int // sent on the wire
	}{
		{name: "success", tool: "t", fn: func(ctx context.Context) (Output, error) { return Output{Data: "hi", Summary: "said hi"}, nil },
			success: true, data: "hi"},
		{name: "denied", tool: "banned", fn: emitTwo, code: msg.ToolResultErrorCodeTOOLDENIED, errPart: "denied"},
		{name: "error", tool: "t", fn: func(ctx context.Context) (Output, error) { return Output{}, errors.New("disk full") },
			code: msg.ToolResultErrorCodeTOOLERROR, errPart: "disk full"},
		{name: "exit code", tool: "t", fn: func(ctx context.Context) (Output, error) {
			return Output{}, &ExitError{Output: Output{Data: "out", ExitCode: ptr(3)}, Err: errors.New("exit status 3")}
		}, code: msg.ToolResultErrorCodeTOOLERROR, errPart: "exit status 3", data: "out", exit: ptr(3)},
		{name: "panic", tool: "t", fn: func(ctx context.Context) (Output, error) { panic("boom") },
			code: msg.ToolResultErrorCodeTOOLERROR, errPart: "panicked"},
		{name: "timeout honoured", tool: "t", req: msg.ToolCallReq{Timeout: ptr(0.02)}, fn: func(ctx context.Context) (Output, error) {
			<-ctx.Done()
			return Output{}, ctx.Err()
		}, code: msg.ToolResultErrorCodeTOOLERROR, errPart: "timed out"},
		{name: "timeout ignored by the tool", tool: "t", req: msg.ToolCallReq{Timeout: ptr(0.02)}, fn: func(ctx context.Context) (Output, error) {
			time.Sleep(300 * time.Millisecond)
			return Output{Data: "late"}, nil
		}, code: msg.ToolResultErrorCodeTOOLERROR, errPart: "timed out"},
		{name: "events collected, not streamed", tool: "t", fn: emitTwo, success: true, data: "ok", events: 2},
		{name: "events collected and streamed", tool: "t", req: msg.ToolCallReq{Streaming: true}, fn: emitTwo, success: true, data: "ok", events: 2, wire: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := &scope{}
			res := Run(context.Background(), sc, &c.req, Subject{Name: c.tool}, opt, c.fn)
			if res.Success != c.success || res.ToolName != c.tool {
				t.Fatalf("result %+v", res)
			}
			if !c.success {
				if res.ErrorCode == nil || *res.ErrorCode != c.code || res.Error == nil || !strings.Contains(*res.Error, c.errPart) {
					t.Fatalf("error %v %v, want %s containing %q", res.ErrorCode, res.Error, c.code, c.errPart)
				}
			}
			if c.data != nil && res.Data != c.data {
				t.Fatalf("data %#v, want %#v", res.Data, c.data)
			}
			if res.Truncated != c.truncated {
				t.Fatalf("truncated %v", res.Truncated)
			}
			if (c.exit == nil) != (res.ExitCode == nil) || (c.exit != nil && *c.exit != *res.ExitCode) {
				t.Fatalf("exit code %v, want %v", res.ExitCode, c.exit)
			}
			if len(res.Events) != c.events || len(sc.events) != c.wire {
				t.Fatalf("events: %d in the result, %d on the wire; want %d and %d", len(res.Events), len(sc.events), c.events, c.wire)
			}
		})
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Fatalf("the panic's stack should reach the log: %s", logs.String())
	}
}

func TestEmitAfterRun(t *testing.T) {
	var late context.Context
	res := Run(context.Background(), &scope{}, &msg.ToolCallReq{}, Subject{Name: "t"}, Options{}, func(ctx context.Context) (Output, error) {
		late = ctx
		return Output{}, nil
	})
	if !res.Success {
		t.Fatal(res)
	}
	if err := Status(late, "too late"); !errors.Is(err, wire.ErrNotInFlight) {
		t.Fatalf("an event after the result must be refused, got %v", err)
	}
}
