package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/tools/txtar"
	"gopkg.in/yaml.v3"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// fuzzMaxLine is the fuzzed host's message limit, small so that fuzzed
// input reaches the oversized-line path too.
const fuzzMaxLine = 2048

// fuzzHandshake opens every fuzzed session.
const fuzzHandshake = `{"type":"handshake/req","id":"fuzz-hs","proto":"1.0","ts":1,"agent_id":"fuzz","agent_caps":["echo"],"auth_token":"secret"}`

// goldenAgentLines returns the agent lines of each server/testdata/golden
// script as one seed per script, with the script's steps that only drive
// the test (waits, releases, session switches) left out.
func goldenAgentLines(f *testing.F) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.txtar"))
	if err != nil {
		f.Fatal(err)
	}
	var seeds [][]byte
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, sec := range ar.Files {
			if sec.Name != "agent" {
				continue
			}
			var lines []string
			for _, l := range strings.Split(string(sec.Data), "\n") {
				verb, arg, _ := strings.Cut(strings.TrimSpace(l), " ")
				switch {
				case strings.HasPrefix(l, "{"):
					lines = append(lines, l)
				case strings.HasPrefix(l, "&{"):
					lines = append(lines, l[1:])
				case verb == "!send":
					if s, err := strconv.Unquote(arg); err == nil {
						lines = append(lines, s)
					}
				case verb == "!long":
					n, _ := strconv.Atoi(arg)
					head := `{"type":"echo/say/req","id":"long","proto":"1.0","ts":1,"text":"`
					lines = append(lines, head+strings.Repeat("x", max(n-len(head)-2, 0))+`"}`)
				}
			}
			seeds = append(seeds, []byte(strings.Join(lines, "\n")))
		}
	}
	if len(seeds) == 0 {
		f.Fatal("no golden agent scripts")
	}
	return seeds
}

// FuzzSession feeds any lines to a handshaken session of a host with the
// echo test plugin, through the in-process JSON pipe. The host must not
// panic; every line it sends conforms to schemas/; no request gets more
// than one answer that is not an event, and none gets an event after its
// answer; unless a shutdown was accepted, the session still answers a ping
// afterwards; and once closed the session is gone from the host. One host
// serves the whole run, a new session each input.
func FuzzSession(f *testing.F) {
	for _, s := range goldenAgentLines(f) {
		f.Add(s)
	}
	for _, s := range []string{
		`{"type":"echo/say/req","id":"1","proto":"1.0","ts":1,"text":"hi","mode":"upper"}`,
		"{\"type\":\"echo/wait/req\",\"id\":\"w\",\"proto\":\"1.0\",\"ts\":1,\"events\":2,\"gate\":\"g\"}\n{\"type\":\"cancel\",\"id\":\"c\",\"proto\":\"1.0\",\"ts\":1,\"req_id\":\"w\"}\n{\"type\":\"echo/wait/req\",\"id\":\"w\",\"proto\":\"1.0\",\"ts\":1,\"ms\":1}",
		"{\"type\":\"echo/wait/req\",\"id\":\"p\",\"proto\":\"1.0\",\"ts\":1,\"panic\":true}\n{\"type\":\"echo/list/req\",\"id\":\"l\",\"proto\":\"1.0\",\"ts\":1}\n{\"type\":\"echo/find/req\",\"id\":\"f\",\"proto\":\"1.0\",\"ts\":1,\"name\":\"x\"}",
		"{\"type\":\"echo/wait/req\",\"id\":\"s\",\"proto\":\"1.0\",\"ts\":1,\"ms\":100000}\n{\"type\":\"shutdown\",\"id\":\"x\",\"proto\":\"1.0\",\"ts\":1,\"timeout\":0.001}",
		`{"type":"shutdown","id":"x","proto":"1.0","ts":1,"timeout":-1}`,
		fuzzHandshake,
		`{"type":"session/snapshot/req","id":"s","proto":"1.0","ts":1,"target":"file"}`,
		`{"type":"session/restore/req","id":"r","proto":"1.0","ts":1,"snapshot_id":"file-0123"}`,
		`{"type":"echo/say/req","id":"1","proto":"1.0","ts":1,"text":"x","session_id":"s-0000000000000000"}`,
		`{"type":"pong","id":"1","proto":"1.0","ts":1}`, `{"type":"error","id":"1","proto":"1.0","ts":1,"code":"parse_error"}`, "", "\n\n", "{", "\xff",
		`{"type":"echo/say/req","id":"` + strings.Repeat("x", fuzzMaxLine) + `","proto":"1.0","ts":1,"text":"x"}`,
		`{"type":"ping","id":"fuzz-hs","proto":"1.0","ts":1}`,
	} {
		f.Add([]byte(s))
	}
	cfg, err := server.ParseConfig([]byte(fmt.Sprintf("server:\n  auth_token: secret\n  limits:\n    max_message_bytes: %d\n", fuzzMaxLine)))
	if err != nil {
		f.Fatal(err)
	}
	h, err := server.New(context.Background(), cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: &echoplug.Plugin{Name: "e1", Items: []string{"a"}, Owns: []string{"x"}}}))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Close(context.Background()) })
	var runs atomic.Int64
	f.Fuzz(func(t *testing.T, script []byte) {
		fuzzSession(t, h, script, fmt.Sprintf("fuzz-ping-%d", runs.Add(1)))
	})
}

// hostLine is what the checks need of a line the host sent.
type hostLine struct {
	raw   []byte
	typ   string
	reqID string
}

func fuzzSession(t *testing.T, h *server.Host, script []byte, pingID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := h.ConnectLines(256)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer p.Close()
	if err := p.WriteLine(ctx, []byte(fuzzHandshake)); err != nil {
		t.Fatal(err)
	}
	hs, err := p.ReadLine(ctx)
	if err != nil || !bytes.Contains(hs, []byte(`"ok":true`)) {
		t.Fatalf("handshake: %s, %v", hs, err)
	}
	sid := p.Session().ID()

	// The reader records every line until the session closes, so the host
	// never waits on a full queue.
	got := make(chan hostLine, 1<<16)
	readErr := make(chan error, 1)
	go func() {
		defer close(got)
		for {
			l, err := p.ReadLine(ctx)
			if err != nil {
				readErr <- err
				return
			}
			var sc wire.Scanned
			if err := wire.Scan(l, &sc); err != nil {
				readErr <- fmt.Errorf("host sent %q: %w", l, err)
				return
			}
			got <- hostLine{raw: l, typ: sc.Type, reqID: sc.ReqID}
		}
	}()

	// sent counts the lines that carry each id, as the session reads it.
	sent := map[string]int{"fuzz-hs": 1, pingID: 1}
	shutdown := false
	lines := bytes.Split(script, []byte("\n"))
	for _, l := range lines {
		id := ""
		if len(l) <= fuzzMaxLine {
			var sc wire.Scanned
			e, _, err := h.Registry().Decode(l, &sc)
			id = sc.ID
			shutdown = shutdown || (err == nil && e.Type == "shutdown")
		}
		sent[id]++
		if err := p.WriteLine(ctx, l); err != nil {
			if !shutdown {
				t.Fatalf("session ended without a shutdown: %v", err)
			}
			break
		}
	}
	pingErr := p.WriteLine(ctx, []byte(`{"type":"ping","id":"`+pingID+`","proto":"1.0","ts":1}`))

	var all []hostLine
	answered := false
	for !answered {
		l, ok := <-got
		if !ok {
			break
		}
		all = append(all, l)
		answered = l.reqID == pingID && !strings.HasSuffix(l.typ, "/event")
	}
	switch {
	case !answered && !shutdown:
		t.Fatalf("the session ended or fell silent instead of answering the ping (write: %v, read: %v)", pingErr, <-readErr)
	case answered && !shutdown && all[len(all)-1].typ != "pong":
		t.Fatalf("ping answered with %s", all[len(all)-1].raw)
	}
	p.Close()
	for l := range got {
		all = append(all, l)
	}
	if err := <-readErr; !errors.Is(err, server.ErrSessionClosed) {
		t.Fatalf("reading: %v", err)
	}
	if _, ok := h.Session(sid); ok {
		t.Fatalf("session %s is still on the host after it closed", sid)
	}

	answers := map[string]int{}
	for i, l := range all {
		if i < 1000 {
			checkHostLine(t, l.raw)
		}
		if strings.HasSuffix(l.typ, "/event") {
			if sent[l.reqID] == 0 {
				t.Fatalf("event for %q, which no line sent: %s", l.reqID, l.raw)
			}
			if sent[l.reqID] == 1 && answers[l.reqID] > 0 {
				t.Fatalf("event after the answer to %q: %s", l.reqID, l.raw)
			}
			continue
		}
		answers[l.reqID]++
		if answers[l.reqID] > sent[l.reqID] {
			t.Fatalf("%d answers to %q, sent on %d lines; the last: %s", answers[l.reqID], l.reqID, sent[l.reqID], l.raw)
		}
	}
}

// FuzzParseConfig parses any YAML as a host configuration. A refusal gives
// no configuration; an accepted one, written back as YAML, is accepted
// again and writes the same YAML (its defaults are filled, so a second
// round changes nothing).
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "server: {}\n", "server:\n  limits: {}\naudit: {}\n",
		"server:\n  max_parallel: 9\n  limits:\n    idle_timeout: 90s\n    queue_size: 3\n",
		"server:\n  auth_token: ${AEP_FUZZ_UNSET:-tok}\n  listen: ${AEP_FUZZ_UNSET:-127.0.0.1:9999}\n  allowed_origins: [\"x${AEP_FUZZ_UNSET:-d}y\", \"$HOME\"]\n",
		"server:\n  auth_token: x\n  max_paralel: 3\n", "server:\n  auth_token: x\nplugin: []\n", "server:\n  limits:\n    idle: 5s\n",
		"plugins:\n  - name: a\n    type: echo\n    cls: test.echo\n    metadata: {priorty: 1}\n", "server:\n  limits:\n    idle_timeout: soon\n",
		"plugins:\n  - {name: a, type: echo}\n", "plugins:\n  - {type: echo, cls: test.echo}\n",
		"plugins:\n  - {name: a, type: echo, cls: x}\n  - {name: a, type: echo, cls: y}\n", "transport: {type: carrier-pigeon}\n",
		"server:\n  auth_token: secret\n  max_parallel: 1\n  limits:\n    queue_size: 2\n    max_message_bytes: 512\n",
		"server:\n  tool_policy:\n    allow: [\"read_*\"]\n    deny: [\"*\"]\nstore: {dsn: \"postgres://u@h/db\"}\naudit: {enabled: false, path: a.jsonl, max_size_mb: 1, max_backups: 0}\n",
		"plugins:\n  - name: env\n    type: env\n    cls: aep.env.builtin\n    metadata: {enabled: false, priority: -3, exclusive: true}\n    config:\n      envs: []\n      step_timeout: 30s\n      data_root: /workspace/data\n",
		"plugins:\n  - name: a\n    type: echo\n    cls: test.echo\n    config: &shared {items: [x]}\n  - name: b\n    type: echo\n    cls: test.echo\n    config: *shared\n",
		"plugins:\n  - name: a\n    type: echo\n    cls: test.echo\n    config: {items: &i [x], owns: *i}\n",
		"server: &s {auth_token: t}\naudit: {path: \"${AEP_FUZZ_UNSET:-$}{HOME}\"}\n",
		"server:\n  limits:\n    request_timeout: -5s\n    handshake_timeout: 1ns\n    max_depth: 0\n", "[1, 2]", "server: [1]", "--- \n...\n", "\t",
	} {
		f.Add([]byte(s))
	}
	// The annotated example sets every section of the file.
	if example, err := os.ReadFile("../aep.example.yaml"); err == nil {
		f.Add(example)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := server.ParseConfig(data)
		if err != nil {
			if !reflect.DeepEqual(cfg, server.Config{}) {
				t.Fatalf("ParseConfig refused with %v but returned %+v", err, cfg)
			}
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("writing an accepted configuration: %v", err)
		}
		if bytes.Contains(out, []byte("${")) {
			// A value that reads ${NAME} after expansion would be expanded
			// again: the written form is not the configuration's source.
			return
		}
		again, err := server.ParseConfig(out)
		if err != nil {
			t.Fatalf("configuration written back is refused: %v\n%s", err, out)
		}
		out2, err := yaml.Marshal(again)
		if err != nil {
			t.Fatalf("writing it a second time: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("configuration changed on its way back:\n%s\n---\n%s", out, out2)
		}
	})
}
