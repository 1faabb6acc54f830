package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
)

// startServeHTTP runs `aep serve` with its default configuration on a
// loopback port and returns its base URL; the process is killed at the end.
func startServeHTTP(t *testing.T, dataDir string) string {
	t.Helper()
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	cmd.Env = []string{"AEP_AUTH_TOKEN=" + token, "PATH=/usr/bin:/bin"}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `msg="HTTP transport serving"`) {
				_, a, _ := strings.Cut(l, "addr=")
				return "http://" + strings.Fields(a)[0]
			}
		}
	}
	t.Fatal("the HTTP transport did not report its address")
	return ""
}

// rawSession drives one session line by line over HTTP and keeps every
// line the host sent it.
type rawSession struct {
	t    *testing.T
	conn *client.HTTPConn
	got  [][]byte
}

// do sends one request and reads until its reply (events before it are
// kept too), returning the reply as a map.
func (r *rawSession) do(ctx context.Context, line string) map[string]any {
	r.t.Helper()
	var env struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(line), &env); err != nil {
		r.t.Fatalf("bad test line %s: %v", line, err)
	}
	if err := r.conn.WriteLine(ctx, []byte(line)); err != nil {
		r.t.Fatal(err)
	}
	for {
		got, err := r.conn.ReadLine(ctx)
		if err != nil {
			r.t.Fatalf("waiting for the reply to %s: %v", env.ID, err)
		}
		r.got = append(r.got, append([]byte(nil), got...))
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			r.t.Fatalf("host line %s: %v", got, err)
		}
		if m["req_id"] == env.ID && !strings.HasSuffix(fmt.Sprint(m["type"]), "/event") {
			return m
		}
	}
}

// strs collects every string of a JSON value (keys and values), and the
// tokens each string holds, so an id inside a message text or a path is
// found too.
func strs(v any, out map[string]bool) {
	add := func(s string) {
		out[s] = true
		for _, tok := range tokenRE.FindAllString(s, -1) {
			out[tok] = true
		}
	}
	switch x := v.(type) {
	case string:
		add(x)
	case map[string]any:
		for k, e := range x {
			add(k)
			strs(e, out)
		}
	case []any:
		for _, e := range x {
			strs(e, out)
		}
	case float64:
		add(fmt.Sprint(x))
	}
}

var tokenRE = regexp.MustCompile(`[A-Za-z0-9_.-]+`)

// A subagent must not be able to act in its parent's session with anything
// it can learn: session/info, subagent records (including a reason its
// parent wrote by terminating one of its own subagents), tool output that
// lists the workspace, learn records, process listings. Every string the
// child receives, and every token inside one, is tried as X-Session-Id on
// the real HTTP transport of `aep serve` in its default configuration:
// only the child's own id and the id of the subagent it spawned itself
// open a session (docs/SECURITY.md, Secrets and session ids).
func TestChildCannotReachParentSession(t *testing.T) {
	base := startServeHTTP(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	caps := []string{"tools", "memory", "env", "proc", "learn", "skills", "toolkits", "chains", "mcp", "subagents"}
	pconn, err := client.DialHTTP(ctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	parent := client.New(client.Lines(pconn, nil))
	defer parent.Close()
	if hs, err := parent.Handshake(ctx, "parent", token, caps...); err != nil || !hs.Ok {
		t.Fatalf("parent handshake: %+v %v", hs, err)
	}
	parentID := parent.SessionID()
	pinfo, err := parent.SessionInfo(ctx, &msg.SessionInfoReq{})
	if err != nil {
		t.Fatal(err)
	}
	// The parent leaves traces the child might read: a tool call (audit,
	// learn stats), working memory the shared child sees, a sibling.
	if _, err := parent.ToolCall(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{"path": "."}}); err != nil {
		t.Fatal(err)
	}
	mi, err := parent.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parent.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mi.MemoryID, Entries: []msg.MemoryEntry{{Key: "plan", Tier: "working", Content: json.RawMessage(`"find the bug"`)}}}); err != nil {
		t.Fatal(err)
	}
	sib, err := parent.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "sibling"})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := parent.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "child", MemoryScope: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if sp.SessionID == sp.SubagentID || sp.SubagentID == "" {
		t.Fatalf("spawn names the child by %q, transport id %q: want a handle distinct from the id", sp.SubagentID, sp.SessionID)
	}

	cconn, err := client.AttachHTTP(ctx, base, sp.SessionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cconn.Close()
	child := &rawSession{t: t, conn: cconn}
	capsJSON, _ := json.Marshal(caps)
	hs := child.do(ctx, `{"type":"handshake/req","id":"c0","proto":"1.0","ts":1,"agent_id":"child","auth_token":"`+sp.AuthToken+`","agent_caps":`+string(capsJSON)+`}`)
	if hs["ok"] != true {
		t.Fatalf("child handshake %v", hs)
	}
	info := child.do(ctx, `{"type":"session/info/req","id":"c1","proto":"1.0","ts":1}`)
	if info["parent_handle"] != pinfo.Handle || info["handle"] != sp.SubagentID || info["session_id"] != sp.SessionID {
		t.Fatalf("child session/info %v; parent handle %s", info, pinfo.Handle)
	}
	// A grandchild, which its parent (the child's parent) then terminates,
	// so the child's records carry a reason written in its parent's name.
	gs := child.do(ctx, `{"type":"subagent/spawn/req","id":"c2","proto":"1.0","ts":1,"name":"grandchild"}`)
	grandID, _ := gs["session_id"].(string)
	grandHandle, _ := gs["subagent_id"].(string)
	if grandID == "" || grandHandle == "" {
		t.Fatalf("grandchild spawn %v", gs)
	}
	if _, err := parent.SubagentTerminate(ctx, &msg.SubagentTerminateReq{SubagentID: grandHandle}); err != nil {
		t.Fatal(err)
	}
	mid := child.do(ctx, `{"type":"memory/init/req","id":"c3","proto":"1.0","ts":1}`)["memory_id"]
	for i, line := range []string{
		`{"type":"ping","id":"p","proto":"1.0","ts":1}`,
		`{"type":"subagent/list/req","id":"l","proto":"1.0","ts":1}`,
		`{"type":"subagent/status/req","id":"s","proto":"1.0","ts":1,"subagent_id":"` + grandHandle + `"}`,
		`{"type":"memory/retrieve/req","id":"m","proto":"1.0","ts":1,"memory_id":"` + fmt.Sprint(mid) + `","keys":["plan"]}`,
		`{"type":"memory/stats/req","id":"ms","proto":"1.0","ts":1,"memory_id":"` + fmt.Sprint(mid) + `"}`,
		`{"type":"tool/list/req","id":"tl","proto":"1.0","ts":1}`,
		`{"type":"tool/call/req","id":"t1","proto":"1.0","ts":1,"tool_name":"run_command","streaming":true,"arguments":{"argv":["sh","-c","pwd; ls -la .. ../.. 2>&1; env"]}}`,
		`{"type":"tool/call/req","id":"t2","proto":"1.0","ts":1,"tool_name":"list_dir","arguments":{"path":".."}}`,
		`{"type":"proc/spawn/req","id":"ps","proto":"1.0","ts":1,"argv":["sh","-c","pwd; ls .. ../.."]}`,
		`{"type":"proc/list/req","id":"pl","proto":"1.0","ts":1}`,
		`{"type":"learn/stats/req","id":"ls","proto":"1.0","ts":1}`,
		`{"type":"learn/export/req","id":"le","proto":"1.0","ts":1,"what":"feedback"}`,
		`{"type":"env/list/req","id":"el","proto":"1.0","ts":1}`,
		`{"type":"env/data/get/req","id":"eg","proto":"1.0","ts":1}`,
		`{"type":"mcp/server/list/req","id":"mc","proto":"1.0","ts":1}`,
		`{"type":"toolkit/list/req","id":"tk","proto":"1.0","ts":1}`,
		`{"type":"skill/discover/req","id":"sd","proto":"1.0","ts":1}`,
		`{"type":"session/snapshot/req","id":"sn","proto":"1.0","ts":1}`,
		// Requests that fail: their errors are things the child learns too.
		`{"type":"subagent/status/req","id":"e1","proto":"1.0","ts":1,"subagent_id":"` + pinfo.Handle + `"}`,
		`{"type":"proc/spawn/req","id":"e2","proto":"1.0","ts":1,"argv":["/no/such/binary"]}`,
		`{"type":"chain/run/req","id":"e3","proto":"1.0","ts":1,"session_id":"` + sp.SessionID + `x"}`,
	} {
		child.do(ctx, strings.Replace(line, `"id":"`, fmt.Sprintf(`"id":"q%d-`, i), 1))
	}

	candidates := map[string]bool{}
	for _, line := range child.got {
		if bytes.Contains(line, []byte(parentID)) || bytes.Contains(line, []byte(sib.SessionID)) {
			t.Fatalf("the child received a line holding another session's transport id:\n%s", line)
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		strs(v, candidates)
	}
	if len(candidates) < 50 {
		t.Fatalf("only %d strings collected; the walk saw too little", len(candidates))
	}
	opens := func(id string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/send", strings.NewReader(`{"type":"ping","id":"probe","proto":"1.0","ts":1}`))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("X-Session-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false // a value no header can carry
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusAccepted
	}
	allowed := map[string]bool{sp.SessionID: true, grandID: true}
	for c := range candidates {
		if len(c) > 256 || allowed[c] {
			continue
		}
		if opens(c) {
			t.Errorf("X-Session-Id %q, learnt by the child, opens a session", c)
		}
	}
	if !opens(sp.SessionID) || !opens(parentID) {
		t.Fatal("the probe itself does not work: a known id was refused")
	}
	t.Logf("%d strings the child received tried as X-Session-Id", len(candidates))
}
