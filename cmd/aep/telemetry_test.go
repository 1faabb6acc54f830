package main_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The version and commit the test binary is stamped with, through the
// Dockerfile's own -ldflags (TestMain, dockerfileLdflags).
const (
	stampedVersion = "v0.0.0-stamped-test"
	stampedCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// dockerfileLdflags returns the -ldflags of the Dockerfile's go build,
// with its VERSION and COMMIT build arguments given the values above: the
// test binary is stamped as the image's is, so what `aep version` and
// aep_build_info report of a stamped build is tested.
func dockerfileLdflags() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^RUN .*go build .*-ldflags="([^"]*)"`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("Dockerfile: no go build with -ldflags=\"…\"")
	}
	flags := strings.NewReplacer("${VERSION}", stampedVersion, "${COMMIT}", stampedCommit).Replace(string(m[1]))
	if !strings.Contains(flags, stampedVersion) || !strings.Contains(flags, stampedCommit) {
		return "", fmt.Errorf("Dockerfile: the -ldflags %q stamp no ${VERSION} and ${COMMIT}", m[1])
	}
	return flags, nil
}

// otlpReceiver is an OTLP/HTTP trace receiver on loopback: it takes the
// exporter's protobuf ExportTraceServiceRequest at /v1/traces, as a
// collector does, and keeps every span with its resource.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	resource map[string]string
	span     *tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf at /v1/traces", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var in coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &in)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range in.GetResourceSpans() {
			res := attrs(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					r.spans = append(r.spans, receivedSpan{resource: res, span: sp})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[kv.GetKey()] = v.GetStringValue()
		default:
			out[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		}
	}
	return out
}

// await returns the span named name in trace traceID, waiting for it.
func (r *otlpReceiver) await(t *testing.T, name, traceID string) receivedSpan {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		for _, s := range r.spans {
			if s.span.GetName() == name && hex.EncodeToString(s.span.GetTraceId()) == traceID {
				r.mu.Unlock()
				return s
			}
		}
		r.mu.Unlock()
	}
	t.Fatalf("no span %s in trace %s reached the receiver", name, traceID)
	return receivedSpan{}
}

// traceparent makes a sampled traceparent of a trace and span of n.
func traceparent(n int) (tp, traceID, spanID string) {
	traceID = fmt.Sprintf("%032x", 0xabc000+n)
	spanID = fmt.Sprintf("%016x", 0xdef000+n)
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// checkSpan: the span is the caller's span's child in the caller's
// trace, its resource names this host's instance and host id, and an
// unknown tool's call has error status with UNKNOWN_TOOL.
func checkSpan(t *testing.T, how string, s receivedSpan, spanID, instanceID string) {
	t.Helper()
	if got := hex.EncodeToString(s.span.GetParentSpanId()); got != spanID {
		t.Errorf("%s: parent span %s, want the caller's %s", how, got, spanID)
	}
	if s.resource["service.instance.id"] != instanceID || s.resource["aep.host_id"] != "aep-otlp-1" || s.resource["service.name"] != "aep" {
		t.Errorf("%s: resource %v, want service.instance.id %s and aep.host_id aep-otlp-1", how, s.resource, instanceID)
	}
	if s.resource["service.version"] != stampedVersion {
		t.Errorf("%s: service.version %q, want %q", how, s.resource["service.version"], stampedVersion)
	}
	if s.span.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || attrs(s.span.GetAttributes())["aep.code"] != "UNKNOWN_TOOL" {
		t.Errorf("%s: unknown tool's span status %v, attributes %v; want an error with aep.code UNKNOWN_TOOL", how, s.span.GetStatus(), attrs(s.span.GetAttributes()))
	}
}

// logValue returns the value of key in the first text log line of stderr
// with msg, waiting for it.
func logValue(t *testing.T, stderr *lockedBuffer, msg, key string) string {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `msg="`+msg+`"`) || strings.Contains(l, "msg="+msg+" ") {
				if _, v, ok := strings.Cut(l, " "+key+"="); ok {
					return strings.Fields(v)[0]
				}
			}
		}
	}
	t.Fatalf("no log line %q with %s:\n%s", msg, key, stderr)
	return ""
}

// TestTelemetryOfServe runs `aep serve` as an operator would — over HTTP,
// WebSocket and stdio, exporting spans to an OTLP/HTTP receiver, with
// /metrics on the operator address — and checks what reaches each end:
// spans that join the caller's trace from a traceparent header (POST
// /send, the WebSocket upgrade) and envelope field (stdio), carrying the
// host's instance id; /metrics that `promtool check metrics` passes, with
// the runtime, process and build-info series; and aep_build_info and
// `aep version` agreeing on the stamped build.
func TestTelemetryOfServe(t *testing.T) {
	recv := newOTLPReceiver(t)
	cfgPath := filepath.Join(t.TempDir(), "aep.yaml")
	cfg := fmt.Sprintf("server:\n  host_id: aep-otlp-1\noperator:\n  listen: 127.0.0.1:0\n  otlp_endpoint: %s\n", recv.srv.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The exporter's batches go out every 50 ms instead of every 5 s.
	env := []string{"AEP_AUTH_TOKEN=" + token, "OTEL_BSP_SCHEDULE_DELAY=50"}

	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	cmd.Env = env
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr)
		}
	}()
	addr := logValue(t, stderr, "HTTP transport serving", "addr")
	opAddr := logValue(t, stderr, "operator endpoint serving /metrics", "addr")
	instanceID := logValue(t, stderr, "traces exported over OTLP/HTTP", "instance_id")

	// /metrics at idle: promtool, the series wanted, the build.
	metrics := httpGet(t, "http://"+opAddr+"/metrics")
	series := 0
	for _, l := range strings.Split(metrics, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			series++
		}
	}
	t.Logf("series at idle: %d", series)
	promtoolCheck(t, metrics)
	for _, want := range []string{"\ngo_goroutines ", "\ngo_gc_duration_seconds{", "\ngo_memstats_heap_inuse_bytes ", "\nprocess_resident_memory_bytes ",
		"\nprocess_open_fds ", "\nprocess_cpu_seconds_total ", "\naep_store_operation_duration_seconds_bucket{",
		fmt.Sprintf("\naep_build_info{commit=%q,go=", stampedCommit)} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
	if !strings.Contains(metrics, fmt.Sprintf("version=%q} 1\n", stampedVersion)) {
		t.Errorf("aep_build_info does not carry version %s", stampedVersion)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("aep %s (commit %s, ", stampedVersion, stampedCommit); !strings.HasPrefix(string(out), want) {
		t.Errorf("aep version: %q, want it to begin %q", out, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// POST /send: the traceparent header.
	tpHTTP, traceHTTP, spanHTTP := traceparent(1)
	sid := createSession(t, addr)
	postSend(t, addr, sid, "", handshakeLine("h1", token))
	postSend(t, addr, sid, tpHTTP, `{"type":"tool/call/req","id":"u1","proto":"1.0","ts":1,"tool_name":"no_such_tool","arguments":{}}`)
	checkSpan(t, "POST /send", recv.await(t, "tool/call/req", traceHTTP), spanHTTP, instanceID)

	// GET /ws: the upgrade's traceparent header.
	tpWS, traceWS, spanWS := traceparent(2)
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Traceparent": {tpWS}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, line := range []string{handshakeLine("h2", token), `{"type":"tool/call/req","id":"u2","proto":"1.0","ts":1,"tool_name":"no_such_tool","arguments":{}}`} {
		if err := c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkSpan(t, "GET /ws", recv.await(t, "tool/call/req", traceWS), spanWS, instanceID)

	// stdio: the envelope's traceparent field.
	tpStdio, traceStdio, spanStdio := traceparent(3)
	h := startHost(t, env, "--config", cfgPath)
	handshake(t, h)
	h.send(`{"type":"tool/call/req","id":"u3","proto":"1.0","ts":1,"tool_name":"no_such_tool","arguments":{},"traceparent":"` + tpStdio + `"}`)
	h.recv()
	stdioInstance := logValue(t, h.stderr, "traces exported over OTLP/HTTP", "instance_id")
	checkSpan(t, "stdio", recv.await(t, "tool/call/req", traceStdio), spanStdio, stdioInstance)
	if stdioInstance == instanceID {
		t.Errorf("two processes share the instance id %s", instanceID)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("aep serve did not stop on SIGTERM")
	}
	if v := logValue(t, stderr, "drained", "sessions_not_saved"); v != "2" {
		t.Errorf("drained with sessions_not_saved=%s, want 2 (the HTTP and WebSocket sessions, no snapshot_on_drain)", v)
	}
}

// promtoolCheck runs `promtool check metrics` on an exposition. promtool
// comes from Debian's prometheus package (.ci/run installs it); without
// it the check is skipped, except under CI.
func promtoolCheck(t *testing.T, exposition string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (.ci/run installs Debian's prometheus package)")
		}
		t.Log("promtool not installed: `promtool check metrics` skipped")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func createSession(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/session", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.SessionID == "" {
		t.Fatalf("POST /session: %d %v", resp.StatusCode, err)
	}
	return out.SessionID
}

// postSend sends one line as a single exchange and returns the reply.
func postSend(t *testing.T, addr, sid, tp, line string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/send", strings.NewReader(line))
	req.Header.Set("X-Session-Id", sid)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	if tp != "" {
		req.Header.Set("Traceparent", tp)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /send: %d %s", resp.StatusCode, b)
	}
	return string(b)
}
