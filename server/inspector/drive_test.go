package inspector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
)

// post calls the drive API as the page does: JSON, with the listener's
// Origin and the operator token, unless header says otherwise.
func (r *rig) post(t *testing.T, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(aeptest.Context(t), "POST", r.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", r.srv.URL)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestDriveAPI: a session the inspector opens is the tenant's, marked
// operator-opened and audited as the admin API's session.open; its
// handshake's token and transport id never reach the caller; a call that
// acts is refused without the operator token, from another origin or
// without an Origin (a form of another site), or with a body that is not
// JSON; a message is sent with its envelope filled and its answer
// returned, cut of every secret the host knows; a handle the inspector
// does not drive is refused; closing it ends the session.
func TestDriveAPI(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		want   int
	}{
		{"no token", map[string]string{"Authorization": ""}, `{"tenant":"acme"}`, 401},
		{"wrong token", map[string]string{"Authorization": "Bearer " + hostToken}, `{"tenant":"acme"}`, 401},
		{"no origin", map[string]string{"Origin": ""}, `{"tenant":"acme"}`, 403},
		{"foreign origin", map[string]string{"Origin": "https://evil.example"}, `{"tenant":"acme"}`, 403},
		{"another loopback port", map[string]string{"Origin": "http://127.0.0.1:1"}, `{"tenant":"acme"}`, 403},
		{"a form, not JSON", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, `tenant=acme`, 415},
		{"not JSON", nil, `{"tenant":`, 400},
		{"no tenant", nil, `{}`, 400},
		{"unknown tenant", nil, `{"tenant":"nobody"}`, 409},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := r.post(t, "/inspector/api/drive/open", tc.body, tc.header); code != tc.want {
				t.Fatalf("%d %s, want %d", code, body, tc.want)
			}
		})
	}
	if list, _, _ := r.h.Operator().Sessions(0); len(list) != 0 {
		t.Fatalf("refused calls opened %d sessions", len(list))
	}

	code, body := r.post(t, "/inspector/api/drive/open", `{"tenant":"acme","capabilities":["memory","env"]}`, nil)
	if code != 200 {
		t.Fatalf("open: %d %s", code, body)
	}
	var opened struct {
		Handle, Tenant string
		Capabilities   []json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &opened); err != nil || opened.Tenant != "acme" || len(opened.Capabilities) < 2 {
		t.Fatalf("open answered %s", body)
	}
	rep, err := r.h.Operator().Session(opened.Handle)
	if err != nil || !rep.OperatorOpened || rep.Tenant != "acme" || rep.State != "live" || rep.AgentID != "inspector" {
		t.Fatalf("the session opened: %+v %v", rep, err)
	}
	for _, c := range rep.Capabilities {
		if c == "tools" || c == "proc" {
			t.Fatalf("capabilities %v: not narrowed to memory and env", rep.Capabilities)
		}
	}

	send := func(msg string) (int, string) {
		return r.post(t, "/inspector/api/drive/send", `{"handle":"`+opened.Handle+`","message":`+msg+`}`, nil)
	}
	code, body = send(`{"type":"memory/init/req"}`)
	if code != 200 || !strings.Contains(body, `"type":"memory/init/resp"`) {
		t.Fatalf("memory/init: %d %s", code, body)
	}
	// What the agent's own data holds is cut like any page's view.
	code, body = send(`{"type":"session/info/req"}`)
	if code != 200 || !strings.Contains(body, `"type":"session/info/resp"`) {
		t.Fatalf("session/info: %d %s", code, body)
	}
	// Refused by the host, not the inspector: its error is the answer.
	code, body = send(`{"type":"tool/list/req"}`)
	if code != 200 || !strings.Contains(body, `capability_missing`) {
		t.Fatalf("tool/list without tools: %d %s", code, body)
	}
	if code, body = send(`{"type":"handshake/req","auth_token":"x"}`); code != 400 {
		t.Fatalf("a second handshake: %d %s", code, body)
	}
	if code, body = r.post(t, "/inspector/api/drive/send", `{"handle":"h-00000000000000000000000000000000","message":{"type":"ping"}}`, nil); code != 404 {
		t.Fatalf("a handle not driven: %d %s", code, body)
	}
	// No secret the host holds in any answer: the session's own token and
	// transport id among them.
	code, info := r.post(t, "/inspector/api/drive/send", `{"handle":"`+opened.Handle+`","message":{"type":"ping"}}`, nil)
	if code != 200 {
		t.Fatalf("ping: %d %s", code, info)
	}
	known := r.h.Operator().Inspect().Secrets().Values
	all := body + info
	for _, s := range append(known, tenantSecret, operatorToken, hostToken) {
		if strings.Contains(all, s) {
			t.Fatalf("an answer holds the secret %q", s)
		}
	}

	if code, body = r.post(t, "/inspector/api/drive/close", `{"handle":"`+opened.Handle+`"}`, nil); code != 200 {
		t.Fatalf("close: %d %s", code, body)
	}
	if _, err := r.h.Operator().Session(opened.Handle); err == nil {
		if rep, _ := r.h.Operator().Session(opened.Handle); rep.State == "live" {
			t.Fatalf("the session lives on after its close: %+v", rep)
		}
	}
	if code, _ = send(`{"type":"ping"}`); code != 404 {
		t.Fatalf("a send after the close: %d", code)
	}
	_ = r.h.Close(context.Background()) // writes the audit lines
	raw, err := os.ReadFile(r.audit)
	if err != nil {
		t.Fatal(err)
	}
	audit := string(raw)
	if !strings.Contains(audit, `"admin/session.open"`) || !strings.Contains(audit, `"inspector/drive"`) {
		t.Fatalf("audit lacks the open and the drive:\n%s", audit)
	}
}

// TestLineageAndExportAPI: a recorded session that forks 3 ways after a
// step of guess; each fork steps once. The lineage feed lists the root
// and its 3 forks under one group with their fork point and returns; the
// group's export is, byte for byte, persist.ExportTrajectories' (what
// `aep export trajectories --group` writes); a malformed group or handle
// is refused, and each view is audited.
func TestLineageAndExportAPI(t *testing.T) {
	r := newRig(t)
	ctx := aeptest.Context(t)
	root, _ := r.agent(t, "grpo", tenantSecret)
	handle := aeptest.Handle(t, root)
	ep, err := root.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(7)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage("50")}); err != nil {
		t.Fatal(err)
	}
	fr, err := root.SessionFork(ctx, &msg.SessionForkReq{Count: 3})
	if err != nil || len(fr.Forks) != 3 || fr.Group == nil {
		t.Fatalf("fork %+v %v", fr, err)
	}
	for _, f := range fr.Forks {
		pipe, err := r.h.ConnectLinesTo(f.SessionID, 64)
		if err != nil {
			t.Fatal(err)
		}
		fc := client.New(client.Lines(pipe, nil))
		t.Cleanup(func() { fc.Close() })
		if hs, err := fc.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "grpo", AgentCaps: rigCaps, AuthToken: tenantSecret}); err != nil || !hs.Ok {
			t.Fatalf("fork handshake %+v %v", hs, err)
		}
		if _, err := fc.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage("25")}); err != nil {
			t.Fatal(err)
		}
	}
	res := r.get(t, ctx, "/inspector/api/lineage?handle="+handle)
	var tree struct {
		Nodes []struct {
			Handle, Parent, Group string
			ForkPoint             *int64 `json:"fork_point"`
			Steps                 int
		}
	}
	err = json.NewDecoder(res.Body).Decode(&tree)
	res.Body.Close()
	if err != nil || len(tree.Nodes) != 4 || tree.Nodes[0].Handle != handle || tree.Nodes[0].Steps != 1 {
		t.Fatalf("lineage %+v %v", tree, err)
	}
	for _, n := range tree.Nodes[1:] {
		if n.Parent != handle || n.Group != *fr.Group || n.ForkPoint == nil || *n.ForkPoint == 0 || n.Steps != 1 {
			t.Fatalf("fork node %+v", n)
		}
	}
	res = r.get(t, ctx, "/inspector/api/export?group="+*fr.Group+"&format=jsonl&prefix=repeat")
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var want bytes.Buffer
	st, err := store.Open(ctx, "", r.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := persist.ExportTrajectories(ctx, st, persist.ExportOptions{Group: *fr.Group}, &want); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || want.Len() == 0 || !bytes.Equal(page, want.Bytes()) {
		t.Fatalf("export %d: %d bytes, the store's %d:\n%.1000s", res.StatusCode, len(page), want.Len(), page)
	}
	for _, bad := range []string{"/inspector/api/export?group=g-x", "/inspector/api/export", "/inspector/api/export?group=" + *fr.Group + "&handle=" + handle,
		"/inspector/api/lineage?handle=h-x", "/inspector/api/export?group=" + *fr.Group + "&format=csv"} {
		res := r.get(t, ctx, bad)
		res.Body.Close()
		if res.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", bad, res.StatusCode)
		}
	}
	_ = r.h.Close(context.Background()) // writes the audit lines
	raw, err := os.ReadFile(r.audit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"inspector/lineage"`) || !strings.Contains(string(raw), `"inspector/export"`) {
		t.Fatal("the lineage and export views were not audited")
	}
}
