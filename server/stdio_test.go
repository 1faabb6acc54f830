package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
)

// TestServeStdioFraming feeds whole inputs to ServeStdio and checks what it
// writes: line framing at the edges, and that requests still in flight when
// the input ends are answered before the session closes.
func TestServeStdioFraming(t *testing.T) {
	const limit = 512
	hs := `{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["echo"],"auth_token":"secret"}`
	ping := func(id string) string { return fmt.Sprintf(`{"type":"ping","id":%q,"proto":"1.0","ts":1}`, id) }
	tests := []struct {
		name  string
		input string
		want  []string // type:req_id of each output line
	}{
		{"last line without newline", hs + "\n" + ping("p1"), []string{"handshake/resp:hs", "pong:p1"}},
		{"CRLF and blank lines", hs + "\r\n\r\n   \n" + ping("p1") + "\r\n", []string{"handshake/resp:hs", "pong:p1"}},
		{"over-long line at the end without newline", hs + "\n" + strings.Repeat("z", limit+1), []string{"handshake/resp:hs", "error:"}},
		{"line of exactly limit+1 then more", hs + "\n" + strings.Repeat("z", limit+1) + "\n" + ping("p2") + "\n", []string{"handshake/resp:hs", "error:", "pong:p2"}},
		{"in flight at end of input is answered", hs + "\n" + `{"type":"echo/wait/req","id":"w1","proto":"1.0","ts":1,"ms":100}` + "\n",
			[]string{"handshake/resp:hs", "echo/wait/resp:w1"}},
		{"no handshake", ping("p1") + "\n", []string{"error:p1"}},
		{"empty input", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg := server.Defaults()
			cfg.Server.AuthToken = "secret"
			cfg.Server.Limits.MaxMessageBytes = limit
			reg := msg.Registry().Union(testproto.Registry())
			h, err := server.New(ctx, cfg, server.WithRegistry(reg),
				server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: &echoplug.Plugin{Name: "e1"}}))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(ctx)
			var out bytes.Buffer
			if err := server.ServeStdio(ctx, h, strings.NewReader(tc.input), &out); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range bytes.SplitAfter(out.Bytes(), []byte("\n")) {
				if len(line) == 0 {
					continue
				}
				if !bytes.HasSuffix(line, []byte("\n")) {
					t.Fatalf("unterminated output line %q", line)
				}
				p, err := client.DecodeHostLine(reg, bytes.TrimSuffix(line, []byte("\n")))
				if err != nil {
					t.Fatalf("output %q: %v", line, err)
				}
				got = append(got, p.Type+":"+p.ReqID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v\n%s", got, tc.want, out.String())
			}
			if n := h.LiveSessions(); n != 0 {
				t.Fatalf("%d sessions left after the input ended", n)
			}
		})
	}
}

// TestServeStdioEnds: ServeStdio returns when the agent shuts its session
// down, and when ctx is cancelled while the input is still open.
func TestServeStdioEnds(t *testing.T) {
	hs := `{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"a","agent_caps":[],"auth_token":"secret"}` + "\n"
	tests := []struct {
		name   string
		write  string
		cancel bool
	}{
		{"shutdown message", hs + `{"type":"shutdown","id":"x","proto":"1.0","ts":1}` + "\n", false},
		{"context cancelled", hs, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := server.Defaults()
			cfg.Server.AuthToken = "secret"
			h, err := server.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(context.Background())
			pr, pw := io.Pipe()
			defer pw.Close()
			done := make(chan error, 1)
			go func() { done <- server.ServeStdio(ctx, h, pr, io.Discard) }()
			if _, err := io.WriteString(pw, tc.write); err != nil {
				t.Fatal(err)
			}
			if tc.cancel {
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ServeStdio did not return while its input stayed open")
			}
		})
	}
}

// TestServeStdioStalledReader: an agent that never reads its replies blocks
// only its own writes; cancelling still ends ServeStdio and the host closes.
func TestServeStdioStalledReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := server.Defaults()
	cfg.Server.AuthToken = "secret"
	h, err := server.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := strings.NewReader(`{"type":"handshake/req","id":"hs","proto":"1.0","ts":1,"agent_id":"a","agent_caps":[],"auth_token":"secret"}` + "\n")
	_, out := io.Pipe() // nobody reads: the first reply blocks
	done := make(chan error, 1)
	go func() { done <- server.ServeStdio(ctx, h, in, out) }()
	time.Sleep(50 * time.Millisecond) // let the handshake reply block
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeStdio did not return while its output was stalled")
	}
	closed := make(chan error, 1)
	go func() { closed <- h.Close(context.Background()) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("host did not close while a stdio write was stalled")
	}
}
