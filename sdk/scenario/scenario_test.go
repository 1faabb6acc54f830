package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	aepbin.Cleanup()
	os.Exit(code)
}

var caps = []string{"tools", "memory", "env", "toolkits"}

// httpHost is `aep serve` on a free loopback port; it serves HTTP+SSE and
// WebSocket.
type httpHost struct {
	addr string
	cmd  *exec.Cmd
	log  *os.File
}

func startHTTP(t testing.TB) *httpHost {
	t.Helper()
	bin := aepbin.Build(t)
	data := t.TempDir()
	logf, err := os.Create(filepath.Join(data, "host.log"))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		cmd := exec.Command(bin, "serve", "--listen", addr, "--data-dir", data)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + data, "AEP_AUTH_TOKEN=" + aepbin.Token}
		cmd.Dir = data
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		if ready(addr, exited) {
			h := &httpHost{addr: addr, cmd: cmd, log: logf}
			t.Cleanup(func() {
				_ = cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(15 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					b, _ := os.ReadFile(logf.Name())
					t.Logf("host log:\n%s", b)
				}
				logf.Close()
			})
			return h
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	b, _ := os.ReadFile(logf.Name())
	t.Fatalf("aep serve never became ready:\n%s", b)
	return nil
}

// ready polls /healthz until it answers, or the host exits (the port was
// taken between probing and binding).
func ready(addr string, exited <-chan struct{}) bool {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

type transport struct {
	name string
	dial func(ctx context.Context, t testing.TB) *client.Client
}

func transports(t testing.TB) []transport {
	h := startHTTP(t)
	return []transport{
		{"stdio", func(ctx context.Context, t testing.TB) *client.Client {
			data := t.TempDir()
			cmd := exec.Command(aepbin.Build(t), "serve", "--stdio", "--data-dir", data)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + data, "AEP_AUTH_TOKEN=" + aepbin.Token}
			cmd.Dir = data
			conn, err := client.SpawnStdio(cmd)
			if err != nil {
				t.Fatal(err)
			}
			return client.New(client.Lines(conn, nil))
		}},
		{"http", func(ctx context.Context, t testing.TB) *client.Client {
			conn, err := client.DialHTTP(ctx, "http://"+h.addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			return client.New(client.Lines(conn, nil))
		}},
		{"websocket", func(ctx context.Context, t testing.TB) *client.Client {
			c, err := client.WebSocket(ctx, "ws://"+h.addr+"/ws", nil)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	}
}

func open(ctx context.Context, t *testing.T, tr transport) *client.Client {
	t.Helper()
	c := tr.dial(ctx, t)
	t.Cleanup(func() {
		_ = c.Shutdown(context.Background(), 5)
		_ = c.Close()
	})
	hs, err := c.Handshake(ctx, "scenario-go", aepbin.Token, caps...)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if !hs.Ok || hs.SessionID == nil || *hs.SessionID == "" {
		t.Fatalf("handshake: %+v", hs)
	}
	for i, e := range hs.AcceptedCaps {
		if e.Name != caps[i] || !e.Enabled {
			t.Fatalf("accepted_caps[%d] = %+v, want %s enabled", i, e, caps[i])
		}
	}
	return c
}

func wireErr(t *testing.T, err error, code wire.Code) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	return we
}

func TestScenario(t *testing.T) {
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := open(ctx, t, tr)

			// Tool list, and a call with streaming events.
			list, err := c.ToolList(ctx, &msg.ToolListReq{})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, d := range list.Tools {
				found = found || d.Name == "run_command"
			}
			if !found {
				t.Fatalf("run_command not listed: %+v", list.Tools)
			}
			var events []client.Event
			streaming := true
			resp, err := c.ToolCall(client.WithEvents(ctx, func(e client.Event) { events = append(events, e) }),
				&msg.ToolCallReq{ToolName: "run_command", Streaming: streaming,
					Arguments: map[string]any{"argv": []string{"sh", "-c", "echo a; echo b; echo c"}}})
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Result.Success || len(resp.Result.Events) != 3 {
				t.Fatalf("result: %+v", resp.Result)
			}
			var got []string
			for i, e := range events {
				if e.Seq != i || e.Type != "tool/event" {
					t.Fatalf("event %d: %+v", i, e)
				}
				got = append(got, fmt.Sprint(e.Data["message"]))
			}
			if strings.Join(got, ",") != "a,b,c" {
				t.Fatalf("events %v", got)
			}

			// Memory store and recall.
			mem, err := c.MemoryInit(ctx, &msg.MemoryInitReq{Namespace: "scenario"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mem.MemoryID, Entries: []msg.MemoryEntry{
				{Key: "whale", Content: json.RawMessage(`"the blue whale is the largest animal"`), Tier: "episodic"},
				{Key: "ant", Content: json.RawMessage(`"ants are small and many"`), Tier: "episodic"},
			}}); err != nil {
				t.Fatal(err)
			}
			query := "whale"
			rec, err := c.MemoryRecall(ctx, &msg.MemoryRecallReq{MemoryID: mem.MemoryID, Query: &query})
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.Hits) == 0 || rec.Hits[0].Entry.Key != "whale" {
				t.Fatalf("recall: %+v", rec.Hits)
			}

			// An env episode to termination, by bisection.
			steps, total, terminated := bisect(ctx, t, c, 7)
			if !terminated || total != 1 || steps > 7 {
				t.Fatalf("episode: %d steps, return %v, terminated %v", steps, total, terminated)
			}

			// A toolkit configure error is a reply with status error.
			tk, err := c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql",
				Config: msg.ToolkitConfigureReqConfig{"driver": "oracle", "database": "x", "mode": "read_only"}})
			if err != nil {
				t.Fatal(err)
			}
			if tk.Status != msg.ToolkitConfigureRespStatusError || !strings.Contains(tk.Message, "driver") {
				t.Fatalf("configure: %+v", tk)
			}

			// A cancelled call: the Go client sends cancel when the call's
			// context ends; the tool's process is gone soon after, and the
			// session goes on.
			tag := aepbin.SleepTag()
			cctx, ccancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := c.ToolCall(cctx, &msg.ToolCallReq{ToolName: "run_command",
					Arguments: map[string]any{"argv": []string{"sleep", tag}}})
				done <- err
			}()
			for deadline := time.Now().Add(20 * time.Second); !aepbin.Running(tag); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the sleep never started")
				}
			}
			ccancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v", err)
			}
			if !aepbin.GoneWithin(tag, 20*time.Second) {
				t.Fatal("the cancelled call's process still runs")
			}

			// Protocol errors.
			_, err = c.ToolCall(ctx, &msg.ToolCallReq{ToolName: ""})
			we := wireErr(t, err, wire.CodeSchemaViolation)
			if d, _ := we.Detail.(map[string]any); d["field"] != "tool_name" || we.Retryable() {
				t.Fatalf("schema_violation: %+v", we)
			}
			_, err = c.ProcList(ctx, &msg.ProcListReq{})
			if we := wireErr(t, err, wire.CodeCapabilityMissing); we.Retryable() {
				t.Fatalf("capability_missing retryable: %+v", we)
			}
			if _, err := c.Ping(ctx, &msg.Ping{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestHandshakeRefused(t *testing.T) {
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := tr.dial(ctx, t)
			defer c.Close()
			_, err := c.Handshake(ctx, "scenario-go", "wrong-"+aepbin.Token, caps...)
			wireErr(t, err, wire.CodeUnauthorized)
		})
	}
}

func bisect(ctx context.Context, t *testing.T, c *client.Client, seed int) (steps int, total float64, terminated bool) {
	t.Helper()
	r, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	var obs struct{ Hint, High int }
	if err := json.Unmarshal(r.Observation, &obs); err != nil {
		t.Fatal(err)
	}
	lo, hi := 0, obs.High
	for {
		guess := (lo + hi) / 2
		s, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: r.EpisodeID, Action: json.RawMessage(fmt.Sprint(guess))})
		if err != nil {
			t.Fatal(err)
		}
		steps++
		total += s.Reward
		if err := json.Unmarshal(s.Observation, &obs); err != nil {
			t.Fatal(err)
		}
		switch {
		case obs.Hint < 0:
			hi = guess
		case obs.Hint > 0:
			lo = guess + 1
		}
		if s.Terminated || s.Truncated {
			if _, err := c.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: r.EpisodeID}); err != nil {
				t.Fatal(err)
			}
			return steps, total, s.Terminated
		}
	}
}
