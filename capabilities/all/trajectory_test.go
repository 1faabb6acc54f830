package all_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaptinlin/jsonschema"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
)

// startRecordingHost starts a host on dataDir's store with the
// capabilities a trajectory shows; the caller closes both.
func startRecordingHost(t *testing.T, ctx context.Context, dataDir string) (*server.Host, *store.Store) {
	t.Helper()
	st, err := store.Open(ctx, "", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := aeptest.Config(func(c *server.Config) {
		for _, p := range []string{"tools", "memory", "env", "toolkits"} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
	})
	h, err := server.New(ctx, cfg, server.WithDataDir(dataDir), server.WithStore(st))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return h, st
}

func connectRecorded(t *testing.T, ctx context.Context, h *server.Host, record bool) (*client.Client, *msg.HandshakeResp) {
	t.Helper()
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hs, err := c.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "trainer", AgentCaps: []string{"tools", "memory", "env", "toolkits"},
		AuthToken: aeptest.Token, RecordTrajectory: &record})
	if err != nil || !hs.Ok {
		t.Fatalf("handshake %+v %v", hs, err)
	}
	return c, hs
}

func trajectorySchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "schemas", "records", "trajectory.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	s, err := c.Compile(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The round trip: a session records its trajectory (a toolkit configured
// with a password, env steps, a tool call, memory), the host restarts, and
// the export — by the agent presenting its old session id, and by the
// operator by handle — is JSONL that validates against
// schemas/records/trajectory.json, holds the steps with their rewards and
// timing, and never holds the password, the host token or a session id.
func TestTrajectoryRoundTrip(t *testing.T) {
	const password = "pw-trajectory-canary-4c1d"
	ctx := aeptest.Context(t)
	dataDir := t.TempDir()
	h, st := startRecordingHost(t, ctx, dataDir)
	a, hs := connectRecorded(t, ctx, h, true)
	if hs.RecordTrajectory == nil || !*hs.RecordTrajectory {
		t.Fatalf("handshake/resp does not say the session is recorded: %+v", hs)
	}
	oldID, handle := *hs.SessionID, aeptest.Handle(t, a)
	unrecorded, _ := connectRecorded(t, ctx, h, false)
	emptySessionFile(t, dataDir, a, "app.db")
	res, err := a.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql",
		Config: msg.ToolkitConfigureReqConfig{"driver": "sqlite", "database": "app.db", "mode": "read_only", "password": password}})
	if err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure: %+v %v", res, err)
	}
	reset, err := a.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{50, 25, 12} {
		step(t, ctx, a, reset.EpisodeID, g)
	}
	writeFile(t, ctx, a, "notes.txt", "the password is "+password)
	writeFile(t, ctx, unrecorded, "other.txt", "not recorded")
	if _, err := a.SessionInfo(ctx, &msg.SessionInfoReq{}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// The restarted host.
	h2, st2 := startRecordingHost(t, ctx, dataDir)
	defer st2.Close()
	defer h2.Close(ctx)
	b, _ := connectRecorded(t, ctx, h2, false)
	schema := trajectorySchema(t)

	var lines []map[string]any
	after := 0
	for {
		page, err := b.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{oldID}, After: after, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Lines {
			lines = append(lines, l)
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	var operator bytes.Buffer
	exp, err2 := persist.ExportTrajectories(ctx, st2, persist.ExportOptions{Handle: handle, Format: "jsonl"}, &operator)
	if n := exp.Records; err2 != nil || n != len(lines) {
		t.Fatalf("operator export: %d records (%v), the agent's %d", exp.Records, err2, len(lines))
	}
	kinds := map[string]int{}
	var rewards []float64
	sc := bufio.NewScanner(&operator)
	sc.Buffer(nil, 1<<20)
	for i := 0; sc.Scan(); i++ {
		line := sc.Bytes()
		if r := schema.Validate(line); !r.IsValid() {
			t.Fatalf("record %d does not validate: %v\n%s", i, r.Errors, line)
		}
		var rec persist.TrajectoryRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Seq != int64(i) || rec.Session != handle {
			t.Fatalf("record %d: seq %d session %s", i, rec.Seq, rec.Session)
		}
		kinds[rec.Dir+" "+rec.Kind]++
		if (rec.Kind == "reply") != (rec.DurationMS != nil) {
			t.Fatalf("record %d (%s): duration_ms %v", i, rec.Type, rec.DurationMS)
		}
		if rec.Type == "env/step/resp" {
			rewards = append(rewards, rec.Message["reward"].(float64))
		}
	}
	if bytes.Contains(operator.Bytes(), []byte("other.txt")) {
		t.Fatal("the unrecorded session was recorded")
	}
	if len(rewards) != 3 || kinds["agent request"] != kinds["host reply"] || kinds["agent request"] < 8 {
		t.Fatalf("kinds %v rewards %v", kinds, rewards)
	}
	chat, err := b.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{oldID}, Format: "chat", Limit: 1000})
	if err != nil || len(chat.Lines) != 1 {
		t.Fatalf("chat export %+v %v", chat, err)
	}
	msgs := chat.Lines[0]["messages"].([]any)
	calls := 0
	for _, m := range msgs {
		mm := m.(map[string]any)
		if mm["role"] == "assistant" {
			calls++
			fn := mm["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
			if fn["name"] == "write_file" && !strings.Contains(fn["arguments"].(string), `"path":"notes.txt"`) {
				t.Fatalf("tool call %v", fn)
			}
		}
	}
	if calls == 0 || calls*2 != len(msgs) || len(chat.Lines[0]["rewards"].([]any)) != 3 {
		t.Fatalf("chat sample %v", chat.Lines[0])
	}
	all, _ := json.Marshal(lines)
	chatJSON, _ := json.Marshal(chat)
	for what, secret := range map[string]string{"the toolkit password": password, "the host token": aeptest.Token, "the session id": oldID} {
		if bytes.Contains(all, []byte(secret)) || bytes.Contains(operator.Bytes(), []byte(secret)) || bytes.Contains(chatJSON, []byte(secret)) {
			t.Errorf("%s is in the export", what)
		}
	}
	if !bytes.Contains(all, []byte(`the password is [redacted]`)) {
		t.Error("the copy of the password the agent wrote is not redacted in place")
	}
	// Nor is the password anywhere in the store's files.
	for _, f := range []string{"aep.db", "aep.db-wal"} {
		if b, err := os.ReadFile(filepath.Join(dataDir, f)); err == nil && bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the password", f)
		}
	}
	// Another session's export of its own holds none of these records.
	own, err := b.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{})
	if err != nil || own.Records != 0 {
		t.Fatalf("an unrecorded session exports %+v %v", own, err)
	}
}
