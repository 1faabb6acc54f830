package server_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

var update = flag.Bool("update", false, "rewrite the host sections of testdata/golden/*.txtar")

// TestGolden replays the agent lines of each testdata/golden/*.txtar file
// against a host through the in-process JSON pipe and compares what the host
// answers, with volatile fields replaced by placeholders, to the file's
// `host` section (the wire-level conformance tests of issue 2, in the style
// of go-sdk's mcp/testdata/conformance).
//
// An archive holds:
//   - config.yaml (optional): the host configuration; auth_token defaults
//     to "secret". One echoplug plugin named "echo" (Name e1) is always added.
//   - agent: a script, one step a line:
//     {json}          send the line, then record host lines up to and
//     including the first that is not an event;
//     &{json}         send the line and record nothing yet;
//     !send "quoted"  like {json}, for a Go-quoted line (invalid UTF-8);
//     !long N         send a valid echo/say line padded to N bytes, then
//     record one host line;
//     !wait ID        record host lines until the non-event answer to ID;
//     !started GATE   wait until an echo/wait on GATE runs in the plugin;
//     !release GATE   let every echo/wait on GATE finish;
//     !ctxdone GATE   wait until an echo/wait on GATE saw its context end;
//     !live           record the host's number of handshaken sessions;
//     !closed         record host lines until the pipe reports the session closed;
//     !session NAME   switch to (or open) the pipe NAME; the first is "A".
//     $SESSION in a sent line is replaced by the current session's id.
//   - host: the transcript of what the host sent, rewritten by -update.
//
// After the script every pipe must stay silent for a moment, so a late
// message (an event after its reply, a second reply) shows up as a diff.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			runGolden(t, file)
		})
	}
}

func runGolden(t *testing.T, file string) {
	ar, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var script, want []byte
	cfgText := []byte("server:\n  auth_token: secret\n")
	hostIdx := -1
	for i, f := range ar.Files {
		switch f.Name {
		case "config.yaml":
			cfgText = f.Data
		case "agent":
			script = f.Data
		case "host":
			want, hostIdx = f.Data, i
		default:
			t.Fatalf("unknown section %q", f.Name)
		}
	}
	cfg, err := server.ParseConfig(cfgText)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	plug := &echoplug.Plugin{Name: "e1", Started: make(chan string, 64), CtxDone: make(chan string, 64)}
	h, err := server.New(ctx, cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: plug}))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)

	r := &goldenRun{t: t, ctx: ctx, h: h, plug: plug, pipes: map[string]*server.LinePipe{}}
	r.use("A")
	for n, raw := range strings.Split(string(script), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := r.step(line); err != nil {
			t.Fatalf("%s: agent line %d %q: %v", file, n+1, line, err)
		}
	}
	for _, name := range r.order {
		r.cur = r.pipes[name]
		r.drainSilence(name)
	}
	got := r.out.Bytes()
	if *update {
		if hostIdx < 0 {
			ar.Files = append(ar.Files, txtar.File{Name: "host"})
			hostIdx = len(ar.Files) - 1
		}
		ar.Files[hostIdx].Data = got
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("host transcript differs (run with -update to accept)\n--- got\n%s--- want\n%s", got, want)
	}
}

type goldenRun struct {
	t     *testing.T
	ctx   context.Context
	h     *server.Host
	plug  *echoplug.Plugin
	pipes map[string]*server.LinePipe
	order []string
	cur   *server.LinePipe
	out   bytes.Buffer
}

func (r *goldenRun) use(name string) {
	p, ok := r.pipes[name]
	if !ok {
		var err error
		if p, err = r.h.ConnectLines(256); err != nil {
			r.t.Fatal(err)
		}
		r.pipes[name] = p
		r.order = append(r.order, name)
		r.t.Cleanup(func() { p.Close() })
	}
	r.cur = p
}

func (r *goldenRun) step(line string) error {
	verb, arg, _ := strings.Cut(line, " ")
	switch {
	case strings.HasPrefix(line, "{"):
		return r.sendAndRead(line)
	case strings.HasPrefix(line, "&{"):
		return r.send(line[1:])
	case verb == "!send":
		s, err := strconv.Unquote(arg)
		if err != nil {
			return err
		}
		return r.sendAndRead(s)
	case verb == "!long":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err
		}
		head := `{"type":"echo/say/req","id":"long","text":"`
		pad := max(n-len(head)-2, 0)
		return r.sendAndRead(head + strings.Repeat("x", pad) + `"}`)
	case verb == "!wait":
		for {
			l, err := r.read()
			if err != nil {
				return err
			}
			if !isEvent(l) && reqID(l) == arg {
				return nil
			}
		}
	case verb == "!started":
		return waitFor(r.ctx, r.plug.Started, arg)
	case verb == "!release":
		r.plug.Release(arg)
		return nil
	case verb == "!ctxdone":
		if err := waitFor(r.ctx, r.plug.CtxDone, arg); err != nil {
			return err
		}
		fmt.Fprintf(&r.out, "ctx done: %s\n", arg)
		return nil
	case verb == "!live":
		fmt.Fprintf(&r.out, "live sessions: %d\n", r.h.LiveSessions())
		return nil
	case verb == "!closed":
		for {
			_, err := r.read()
			if errors.Is(err, server.ErrSessionClosed) {
				fmt.Fprintf(&r.out, "closed\n")
				return nil
			}
			if err != nil {
				return err
			}
		}
	case verb == "!session":
		r.use(arg)
		fmt.Fprintf(&r.out, "session %s\n", arg)
		return nil
	}
	return fmt.Errorf("unknown step")
}

func (r *goldenRun) send(line string) error {
	line = strings.ReplaceAll(line, "$SESSION", r.cur.Session().ID())
	return r.cur.WriteLine(r.ctx, []byte(line))
}

func (r *goldenRun) sendAndRead(line string) error {
	if err := r.send(line); err != nil {
		return err
	}
	for {
		l, err := r.read()
		if err != nil {
			return err
		}
		if !isEvent(l) {
			return nil
		}
	}
}

// read records one host line after checking it against the schemas.
func (r *goldenRun) read() ([]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	l, err := r.cur.ReadLine(ctx)
	if err != nil {
		return nil, err
	}
	checkHostLine(r.t, l)
	r.out.Write(normalize(l))
	r.out.WriteByte('\n')
	return l, nil
}

// drainSilence records whatever a pipe still sends within a short while.
func (r *goldenRun) drainSilence(name string) {
	for {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Millisecond)
		l, err := r.cur.ReadLine(ctx)
		cancel()
		if err != nil {
			return
		}
		checkHostLine(r.t, l)
		fmt.Fprintf(&r.out, "late on %s: %s\n", name, normalize(l))
	}
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

var (
	reReqID   = regexp.MustCompile(`"req_id":"([^"]*)"`)
	reType    = regexp.MustCompile(`^\{"type":"([^"]*)"`)
	volatiles = []struct {
		re   *regexp.Regexp
		repl string
	}{
		{regexp.MustCompile(`^(\{"type":"[^"]*","id":)"[^"]*"`), `$1"<id>"`},
		{regexp.MustCompile(`"ts":[0-9.eE+-]+`), `"ts":"<ts>"`},
		{regexp.MustCompile(`"uptime_seconds":[0-9.eE+-]+`), `"uptime_seconds":"<uptime>"`},
		{regexp.MustCompile(`s-[0-9a-f]{16}`), `<session>`},
		{regexp.MustCompile(`err-[0-9a-f]{16}`), `err-<corr>`},
	}
)

// normalize replaces the fields that differ from run to run by placeholders:
// the host's message id and ts, session ids, uptime and correlation ids.
func normalize(line []byte) []byte {
	out := line
	for _, v := range volatiles {
		out = v.re.ReplaceAll(out, []byte(v.repl))
	}
	return out
}

func isEvent(line []byte) bool {
	m := reType.FindSubmatch(line)
	return m != nil && strings.HasSuffix(string(m[1]), "/event")
}

func reqID(line []byte) string {
	m := reReqID.FindSubmatch(line)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// testRegistry is the registry of every golden host: the core and session
// namespaces plus the echo test namespace.
func testRegistry() *wire.Registry { return msg.Registry().Union(testproto.Registry()) }
