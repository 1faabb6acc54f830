package aepbin_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

// threads is a process's thread count.
func threads(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// TestFIFOsPinNoHostThread (docs/SECURITY.md, Host-side operations): 8
// sessions each plant FIFOs with a command, then call read_file and
// env/data/get on them, 200 calls in all. Every call is answered (a clear
// refusal, at once), the host's threads stay at their baseline, and
// /healthz answers within its 2 s liveness bound all along.
func TestFIFOsPinNoHostThread(t *testing.T) {
	caps := []string{"tools", "env", "session"}
	h := aepbin.Start(t, aepbin.Options{HTTP: true, Caps: caps})
	pid := h.Cmd.Process.Pid
	sessions := []*client.Client{h.Client}
	for len(sessions) < 8 {
		sessions = append(sessions, h.Connect(t, "", aepbin.Token, caps...))
	}
	for _, s := range sessions {
		out := runCommand(t, s, "mkdir -p data && mkfifo f data/f1 data/f2 && echo planted")
		if !strings.Contains(out, "planted") {
			t.Fatalf("mkfifo: %s", out)
		}
	}
	base := threads(t, pid)
	stop := make(chan struct{})
	var health sync.WaitGroup
	health.Add(1)
	go func() {
		defer health.Done()
		client := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := client.Get(h.URL + "/healthz")
			if err != nil {
				t.Errorf("/healthz: %v", err)
				return
			}
			resp.Body.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				var refused bool
				if i%2 == 0 {
					res, err := s.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "read_file", Timeout: ptr(2.0), Arguments: map[string]any{"path": "f"}})
					refused = err == nil && !res.Success && res.Error != nil && strings.Contains(*res.Error, "not a regular file")
					if !refused {
						t.Errorf("read_file of a FIFO: %+v %v", res, err)
					}
				} else {
					p := "f" + strconv.Itoa(1+i%2)
					c, cancel := context.WithTimeout(ctx(t), 2*time.Second)
					_, err := s.EnvDataGet(c, &msg.EnvDataGetReq{Path: &p, Inline: true})
					cancel()
					if err == nil || !strings.Contains(err.Error(), "not a regular file") {
						t.Errorf("env/data/get of a FIFO: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	health.Wait()
	if n := threads(t, pid); n > base+10 {
		t.Fatalf("the host has %d threads after the calls, %d before", n, base)
	}
}

// TestErrorsNameNoHostPath: an argument list too long for the system and
// the sql toolkit's failures are told without any host path — not the
// binary's, not the data directory's.
func TestErrorsNameNoHostPath(t *testing.T) {
	for _, m := range hostModes {
		t.Run(m.name, func(t *testing.T) {
			o := m.opts
			o.Caps = []string{"tools", "toolkits"}
			h := aepbin.Start(t, o)
			bin := aepbin.Build(t)
			var texts []string
			for _, argv := range [][]any{{"echo", strings.Repeat("x", 200_000)}, append([]any{"echo"}, manyArgs(9, 100_000)...)} {
				res, err := h.Client.CallTool(ctx(t), &msg.ToolCallReq{ToolName: "run_command", Arguments: map[string]any{"argv": argv}})
				if err != nil {
					texts = append(texts, err.Error())
					continue
				}
				if res.Success {
					t.Fatal("an argument list over the system's limit ran")
				}
				texts = append(texts, *res.Error)
			}
			if !strings.Contains(texts[0], "E2BIG") {
				t.Fatalf("E2BIG not said: %q", texts[0])
			}
			for _, cfg := range []map[string]any{
				{"driver": "sqlite", "database": "missing/x.db", "mode": "read_write"},
				{"driver": "sqlite", "database": "absent.db", "mode": "read_only"},
				{"driver": "postgres", "database": "x", "mode": "read_only", "host": "127.0.0.1", "port": 1},
			} {
				texts = append(texts, configureSQL(t, h.Client, cfg).Message)
			}
			for _, text := range texts {
				for _, p := range []string{bin, h.DataDir, "/tmp/", "/workspace"} {
					if strings.Contains(text, p) {
						t.Errorf("%q names the host path %s", text, p)
					}
				}
			}
		})
	}
}

func manyArgs(n, size int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = strings.Repeat("y", size)
	}
	return out
}
