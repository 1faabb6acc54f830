package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/echoplug"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// auditFields are the documented fields of an audit line (spec §1.7, spec §8,
// issue: audit) with the JSON kind each must have.
var auditFields = map[string]string{
	"ts": "string", "session_id": "string", "req_id": "string", "correlation_id": "string",
	"type": "string", "capability": "string", "plugin": "string", "success": "bool",
	"error_code": "string", "duration_ms": "number", "input_bytes": "number", "output_bytes": "number",
}

// checkAuditLine fails unless line is one JSON object with every documented
// field of the right kind, and returns it.
func checkAuditLine(t *testing.T, where string, line []byte) map[string]any {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal(line, &rec); err != nil {
		t.Fatalf("%s: not JSON (%v): %.200q", where, err, line)
	}
	for f, kind := range auditFields {
		v, ok := rec[f]
		if !ok {
			t.Fatalf("%s: field %q missing: %s", where, f, line)
		}
		got := ""
		switch v.(type) {
		case string:
			got = "string"
		case bool:
			got = "bool"
		case float64:
			got = "number"
		}
		if got != kind {
			t.Fatalf("%s: field %q is %T, want %s", where, f, v, kind)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, rec["ts"].(string)); err != nil {
		t.Fatalf("%s: ts: %v", where, err)
	}
	return rec
}

// readAuditLines returns the lines of one audit file, checking that the file
// ends with a newline (no record cut in half by rotation).
func readAuditLines(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestAuditRotation writes well past 10 MB through the file auditor with the
// default settings and checks lumberjack's rotation: at most 5 backups, no
// file over 10 MB, and every line of every file a complete, valid record.
func TestAuditRotation(t *testing.T) {
	d := server.Defaults().Audit
	if d.MaxSizeMB != 10 || d.MaxBackups != 5 {
		t.Fatalf("defaults changed: %+v (spec §8: 10 MB, 5 backups)", d)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	a := server.NewFileAuditor(path, d.MaxSizeMB, d.MaxBackups, nil)

	// Fixed-width records, so the bytes written follow from the count; a
	// long correlation id makes them about 1 KB, so fewer are needed.
	pad := strings.Repeat("c", 700)
	rec := func(i int) server.AuditRecord {
		return server.AuditRecord{
			TS: time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC), SessionID: "s-0123456789abcdef",
			ReqID: fmt.Sprintf("r%09d", i), CorrelationID: fmt.Sprintf("%s%09d", pad, i), Type: "echo/say/req",
			Capability: "echo", Plugin: "e1", Success: i%7 != 0, ErrorCode: map[bool]string{true: "", false: "runtime_error"}[i%7 != 0],
			DurationMS: 1.5, InputBytes: 100, OutputBytes: 200,
		}
	}
	one, _ := json.Marshal(rec(0))
	size := len(one) + 1
	const target = 6*10<<20 + 5<<20 // more than max_backups+1 full files
	sent, lastAccepted := 0, -1
	for int64(sent)-a.Dropped() < int64(target/size+1) {
		// One producer: a record is accepted unless the drop count moved.
		before := a.Dropped()
		a.Record(rec(sent))
		if a.Dropped() == before {
			lastAccepted = sent
		} else {
			time.Sleep(time.Millisecond) // let the writer catch up; drops are counted, not written
		}
		sent++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Failures() != 0 {
		t.Fatalf("%d write failures", a.Failures())
	}
	written := int64(sent) - a.Dropped()
	t.Logf("sent %d records of %d bytes, %d dropped, %d MB written", sent, size, a.Dropped(), written*int64(size)>>20)

	// lumberjack removes old backups in the background after a rotation.
	var backups []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, err := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		backups = all
		if len(backups) <= d.MaxBackups || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(backups) != d.MaxBackups {
		t.Fatalf("%d backups after writing %d MB, want %d: %v", len(backups), written*int64(size)>>20, d.MaxBackups, backups)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != d.MaxBackups+1 {
		t.Fatalf("audit dir holds %d files, want the live file and %d backups", len(entries), d.MaxBackups)
	}
	var lastReq string
	total := 0
	// Backups sort by their timestamp; the live file is the newest.
	for _, p := range append(backups, path) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > int64(d.MaxSizeMB)<<20 {
			t.Fatalf("%s is %d bytes, over %d MB", filepath.Base(p), st.Size(), d.MaxSizeMB)
		}
		for i, line := range readAuditLines(t, p) {
			r := checkAuditLine(t, fmt.Sprintf("%s:%d", filepath.Base(p), i+1), line)
			if id := r["req_id"].(string); id <= lastReq {
				t.Fatalf("%s:%d: records out of order (%s after %s)", filepath.Base(p), i+1, id, lastReq)
			} else {
				lastReq = id
			}
			total++
		}
	}
	if lastReq != rec(lastAccepted).ReqID {
		t.Fatalf("last record %s, want %s", lastReq, rec(lastAccepted).ReqID)
	}
	if total < 5*(10<<20)/size {
		t.Fatalf("only %d records kept", total)
	}
}

// newEchoHost starts a host with the echo test plugin and the given auditor.
func newEchoHost(t *testing.T, a server.Auditor, log *slog.Logger) *server.Host {
	t.Helper()
	return newEchoHostWith(t, a, log, &echoplug.Plugin{Name: "e1"})
}

// newEchoHostWith is newEchoHost with a given echo plugin.
func newEchoHostWith(t *testing.T, a server.Auditor, log *slog.Logger, plug *echoplug.Plugin) *server.Host {
	t.Helper()
	cfg := server.Defaults()
	cfg.Server.AuthToken = "secret"
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h, err := server.New(context.Background(), cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithAuditor(a), server.WithLogger(log),
		server.WithPlugin(server.PluginSpec{Name: "echo", Type: "echo", Impl: plug}))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestAuditLinesFromTraffic runs requests through a host and checks the
// line each handler invocation leaves.
func TestAuditLinesFromTraffic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a := server.NewFileAuditor(path, 10, 5, nil)
	h := newEchoHost(t, a, nil)
	c, ec := connect(t, h)
	panicky := true
	tests := []struct {
		name    string
		do      func() error
		success bool
		code    string
		typ     string
	}{
		{"say", func() error { _, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "hi", Mode: "plain"}); return err }, true, "", "echo/say/req"},
		{"list", func() error { _, err := ec.EchoList(ctx, &testproto.EchoListReq{}); return err }, true, "", "echo/list/req"},
		{"panic", func() error {
			_, err := ec.EchoWait(ctx, &testproto.EchoWaitReq{Panic: &panicky})
			return err
		}, false, string(wire.CodeRuntimeError), "echo/wait/req"},
	}
	for _, tc := range tests {
		err := tc.do()
		if (err == nil) != tc.success {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	handle := aeptest.Handle(t, c)
	if err := h.Close(ctx); err != nil { // flushes the auditor
		t.Fatal(err)
	}
	lines := readAuditLines(t, path)
	lines = slices.DeleteFunc(lines, func(l []byte) bool { return bytes.Contains(l, []byte(`"session/info/req"`)) })
	if len(lines) != len(tests) {
		t.Fatalf("%d audit lines for %d requests:\n%s", len(lines), len(tests), bytes.Join(lines, []byte("\n")))
	}
	// A worker writes its record after the reply, so two requests in a row
	// may be recorded in either order: match records by type.
	byType := map[any][]byte{}
	for _, l := range lines {
		byType[checkAuditLine(t, "line", l)["type"]] = l
	}
	for _, tc := range tests {
		line := byType[tc.typ]
		if line == nil {
			t.Fatalf("%s: no %s record in\n%s", tc.name, tc.typ, bytes.Join(lines, []byte("\n")))
		}
		r := checkAuditLine(t, tc.name, line)
		// The public handle, never the transport id (server/handle.go).
		if r["session_id"] != handle || strings.Contains(string(line), c.SessionID()) || r["capability"] != "echo" || r["plugin"] != "echo" ||
			r["success"] != tc.success || r["error_code"] != tc.code || r["req_id"] == "" || r["input_bytes"].(float64) <= 0 {
			t.Fatalf("%s: record %s", tc.name, line)
		}
		if tc.success && r["output_bytes"].(float64) <= 0 {
			t.Fatalf("%s: no output size: %s", tc.name, line)
		}
		if strings.Contains(string(line), "secret") || strings.Contains(string(line), `"hi"`) {
			t.Fatalf("%s: a message body reached the audit line: %s", tc.name, line)
		}
	}
}

// syncBuffer is a log destination read while the host writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuditUnwritablePathFailsNoRequest: when the audit file cannot be
// written, every request still succeeds, the failures are counted, and the
// failure is logged once (spec §1.7: auditing never makes a handler fail).
// Tests run as root, so permissions cannot make a path unwritable; these
// paths fail for root too.
func TestAuditUnwritablePathFailsNoRequest(t *testing.T) {
	tests := []struct {
		name string
		path func(dir string) string
	}{
		{"parent is a regular file", func(dir string) string {
			f := filepath.Join(dir, "plain-file")
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f, "audit.jsonl")
		}},
		{"name too long", func(dir string) string {
			return filepath.Join(dir, strings.Repeat("a", 300)+".jsonl")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			logs := &syncBuffer{}
			log := slog.New(slog.NewTextHandler(logs, nil))
			a := server.NewFileAuditor(tc.path(t.TempDir()), 10, 5, log)
			h := newEchoHost(t, a, log)
			defer h.Close(ctx)
			c, err := client.InProcess(h, client.JSON, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Handshake(ctx, "agent", "secret", "echo"); err != nil {
				t.Fatal(err)
			}
			ec := testproto.Client{Requester: c}
			const n = 200
			for i := range n {
				r, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: fmt.Sprint(i), Mode: "plain"})
				if err != nil || r.Text != fmt.Sprint(i) {
					t.Fatalf("request %d failed with an unwritable audit log: %v", i, err)
				}
				if i%50 == 0 {
					time.Sleep(5 * time.Millisecond) // several batches, not one
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for a.Failures() < 2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if a.Failures() < 2 {
				t.Fatalf("failures counted: %d, want several", a.Failures())
			}
			if got := strings.Count(logs.String(), "audit write failed"); got != 1 {
				t.Fatalf("failure logged %d times, want once:\n%s", got, logs.String())
			}
			// The host still serves after the failures.
			if _, err := ec.EchoSay(ctx, &testproto.EchoSayReq{Text: "still", Mode: "plain"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCloseWaitsForHandlersAudit: a handler still finishing when the host
// closes gets its audit line written; Close does not close the auditor
// under it (spec §1.7: every handler invocation is audited).
func TestCloseWaitsForHandlersAudit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	p := &echoplug.Plugin{Name: "e1", Started: make(chan string, 1), CtxDone: make(chan string, 1), Scopes: make(chan wire.Scope)}
	h := newEchoHostWith(t, server.NewFileAuditor(path, 10, 5, nil), nil, p)
	_, ec := connect(t, h)
	gate := "late"
	go ec.EchoWait(ctx, &testproto.EchoWaitReq{Gate: &gate}) //nolint:errcheck // answered `cancelled` by Close
	<-p.Started
	closed := make(chan error, 1)
	go func() { closed <- h.Close(ctx) }()
	<-p.CtxDone // the handler saw the cancel and now blocks on Scopes
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a handler was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	<-p.Scopes // let the handler return
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	lines := readAuditLines(t, path)
	if len(lines) != 1 {
		t.Fatalf("%d audit lines, want the late handler's one:\n%s", len(lines), bytes.Join(lines, []byte("\n")))
	}
	if r := checkAuditLine(t, "late", lines[0]); r["type"] != "echo/wait/req" || r["success"] != false {
		t.Fatalf("record %s", lines[0])
	}
}

// replyWatchSink records, when a reply is sent, which request ids the audit
// subscriber had seen at that moment.
type replyWatchSink struct {
	seen    func() map[string]bool
	mu      sync.Mutex
	atReply map[string]bool // req_id of each reply → its record was seen first
	replies chan string
}

func (s *replyWatchSink) Send(p *wire.Packet) (int, error) {
	if p.ReqID != "" {
		s.mu.Lock()
		s.atReply[p.ReqID] = s.seen()[p.ReqID]
		s.mu.Unlock()
		s.replies <- p.Type + " " + p.ReqID
	}
	return 1, nil
}

func (s *replyWatchSink) Close() {}

// TestSubscribersSeeAnswerBeforeReply: an in-process audit subscriber has
// the answering plugin's record before the reply leaves, so a request the
// agent sends after reading a reply (learn feedback naming the call) finds
// the call.
func TestSubscribersSeeAnswerBeforeReply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := newEchoHost(t, server.NewFileAuditor(filepath.Join(t.TempDir(), "audit.log"), 1, 0, nil), nil)
	defer h.Close(ctx)
	var mu sync.Mutex
	seen := map[string]bool{}
	defer h.SubscribeAudit(func(r server.AuditRecord) {
		mu.Lock()
		seen[r.ReqID] = true
		mu.Unlock()
	})()
	sink := &replyWatchSink{atReply: map[string]bool{}, replies: make(chan string, 16), seen: func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}}
	s, err := h.NewSession(sink)
	if err != nil {
		t.Fatal(err)
	}
	s.ReceiveLine([]byte(`{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["echo"],"auth_token":"secret"}`))
	if got := <-sink.replies; got != "handshake/resp h" {
		t.Fatalf("handshake answered %s", got)
	}
	for i, line := range []string{
		`{"type":"echo/say/req","id":"r1","proto":"1.0","ts":1,"text":"hi"}`,
		`{"type":"echo/list/req","id":"r2","proto":"1.0","ts":1}`,
	} {
		s.ReceiveLine([]byte(line))
		want := fmt.Sprintf("r%d", i+1)
		select {
		case got := <-sink.replies:
			if !strings.HasSuffix(got, "/resp "+want) {
				t.Fatalf("got %s, want the reply to %s", got, want)
			}
		case <-ctx.Done():
			t.Fatal("no reply")
		}
		sink.mu.Lock()
		ok := sink.atReply[want]
		sink.mu.Unlock()
		if !ok {
			t.Fatalf("the reply to %s left before the subscriber saw its record", want)
		}
	}
}
