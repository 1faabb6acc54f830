package all_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// Nothing crosses tenants (docs/SECURITY.md, Isolation): tenant B holds
// tenant A's ids and names, learned out of band as an attacker would, and
// asks for A's state with them. Each request is answered exactly as the
// same request with a made-up id of the same kind, and A's state is as it
// was. Two sessions of tenant A still share what is shared by design.

var crossTenantCaps = []string{"tools", "memory", "learn", "toolkits", "skills", "mcp", "session"}

type tenantRig struct {
	h       *server.Host
	dataDir string
	mcpURL  string
	secrets map[string]string
	ids     map[*client.Client]string // each session's transport id
}

func newTenantRig(t *testing.T) *tenantRig {
	t.Helper()
	ctx := context.Background()
	r := &tenantRig{dataDir: t.TempDir(), ids: map[*client.Client]string{}, secrets: map[string]string{"team-a": "cross-secret-a-5e4d3c2b", "team-b": "cross-secret-b-7a6b5c4d"}}
	mcpSrv := mcpserver.NewMCPServer("a-tools", "1.0.0", mcpserver.WithToolCapabilities(true))
	mcpSrv.AddTool(mcp.NewTool("echo", mcp.WithString("message", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("echo: " + req.GetString("message", "")), nil
		})
	hs := httptest.NewServer(mcpserver.NewStreamableHTTPServer(mcpSrv))
	t.Cleanup(hs.Close)
	r.mcpURL = hs.URL + "/mcp"
	st, err := store.Open(ctx, "", r.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := aeptest.Config(func(c *server.Config) {
		c.Server.AuthToken = ""
		for _, name := range []string{"team-a", "team-b"} {
			sum := sha256.Sum256([]byte(r.secrets[name]))
			c.Server.Tenants = append(c.Server.Tenants, server.TenantConfig{Name: name, SecretSHA256: []string{hex.EncodeToString(sum[:])}})
		}
		for _, p := range []string{"tools", "memory", "learn", "toolkits", "skills"} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
		c.Plugins = append(c.Plugins, server.PluginConfig{Name: "mcp", Type: "mcp", Cls: "aep.mcp.bridge"})
	})
	for i := range cfg.Plugins {
		switch cfg.Plugins[i].Name {
		case "skills":
			setConfig(t, &cfg.Plugins[i], map[string]any{"allow_register": true})
		case "learn":
			// Export of every record the reader may see: the tenant's.
			setConfig(t, &cfg.Plugins[i], map[string]any{"export_scope": "host"})
		case "mcp":
			setConfig(t, &cfg.Plugins[i], map[string]any{"allow_urls": []any{map[string]any{"prefix": r.mcpURL}}})
		}
	}
	h, err := server.New(ctx, cfg, server.WithDataDir(r.dataDir), server.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	r.h = h
	return r
}

// connect opens a session of the tenant.
func (r *tenantRig) connect(t *testing.T, tenant string) *client.Client {
	t.Helper()
	return r.connectRecording(t, tenant, false)
}

// connectRecording opens a session of the tenant that records its
// trajectory when record is set.
func (r *tenantRig) connectRecording(t *testing.T, tenant string, record bool) *client.Client {
	t.Helper()
	pipe, err := r.h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Lines(pipe, nil))
	r.ids[c] = pipe.Session().ID()
	t.Cleanup(func() { c.Close() })
	hs, err := c.Client.Handshake(aeptest.Context(t), &msg.HandshakeReq{AgentID: "agent-" + tenant, AuthToken: r.secrets[tenant],
		AgentCaps: crossTenantCaps, RecordTrajectory: &record})
	if err != nil || !hs.Ok {
		t.Fatalf("%s: %+v %v", tenant, hs, err)
	}
	return c
}

// sameReply fails unless the reply to a request naming another tenant's
// thing (got, gotErr) is the reply to the same request naming a made-up
// one (want, wantErr) once each name is replaced by a placeholder: same
// error code and message, or the same result.
func sameReply(t *testing.T, what string, got any, gotErr error, gotName string, want any, wantErr error, wantName string) {
	t.Helper()
	norm := func(v any, err error, name string) string {
		var b []byte
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("%s: not a protocol error: %v", what, err)
			}
			b, _ = json.Marshal(map[string]any{"code": we.Code, "message": we.Message, "detail": we.Detail})
		} else {
			b, _ = json.Marshal(v)
		}
		if name == "" {
			return string(b)
		}
		return strings.ReplaceAll(string(b), name, "<NAME>")
	}
	g, w := norm(got, gotErr, gotName), norm(want, wantErr, wantName)
	if g != w {
		t.Fatalf("%s: another tenant's %q is answered\n  %s\nbut a made-up %q\n  %s", what, gotName, g, wantName, w)
	}
}

func memInit(t *testing.T, c *client.Client, ns string) string {
	t.Helper()
	r, err := c.MemoryInit(aeptest.Context(t), &msg.MemoryInitReq{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return r.MemoryID
}

func memGet(t *testing.T, c *client.Client, id, key string) (*msg.MemoryRetrieveResp, error) {
	tier := msg.MemoryRetrieveReqTierSemantic
	return c.MemoryRetrieve(aeptest.Context(t), &msg.MemoryRetrieveReq{MemoryID: id, Keys: []string{key}, Tier: &tier})
}

func memText(t *testing.T, r *msg.MemoryRetrieveResp) string {
	t.Helper()
	if len(r.Entries) != 1 {
		return ""
	}
	var s string
	json.Unmarshal(r.Entries[0].Content, &s)
	return s
}

func TestNothingCrossesTenants(t *testing.T) {
	r := newTenantRig(t)
	a, a2, b := r.connect(t, "team-a"), r.connect(t, "team-a"), r.connect(t, "team-b")

	t.Run("memory", func(t *testing.T) {
		ctx := aeptest.Context(t)
		idA := memInit(t, a, "team-notes")
		if _, err := a.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: idA, Entries: []msg.MemoryEntry{
			{Key: "plan", Content: json.RawMessage(`"A's plan"`), Tier: msg.MemoryEntryTierSemantic}}}); err != nil {
			t.Fatal(err)
		}
		// Within the tenant a namespace is shared by design.
		got, err := memGet(t, a2, memInit(t, a2, "team-notes"), "plan")
		if err != nil || memText(t, got) != "A's plan" {
			t.Fatalf("a second session of team-a reads %+v %v", got, err)
		}
		// B names A's namespace and key: the reply is a never-used one's.
		idB := memInit(t, b, "team-notes")
		gotB, errB := memGet(t, b, idB, "plan")
		wantB, errW := memGet(t, b, memInit(t, b, "never-named-0f1e"), "plan")
		sameReply(t, "memory/retrieve", gotB, errB, "", wantB, errW, "")
		if errB != nil || len(gotB.Entries) != 0 {
			t.Fatalf("team-b reads team-a's namespace: %+v %v", gotB, errB)
		}
		recall, err := b.MemoryRecall(ctx, &msg.MemoryRecallReq{MemoryID: idB, Query: ptr("plan")})
		if err != nil || len(recall.Hits) != 0 {
			t.Fatalf("team-b recalls from team-a's namespace: %+v %v", recall, err)
		}
		// B's writes and forgets in the same name leave A's entry alone.
		if _, err := b.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: idB, Entries: []msg.MemoryEntry{
			{Key: "plan", Content: json.RawMessage(`"B's plan"`), Tier: msg.MemoryEntryTierSemantic}}}); err != nil {
			t.Fatal(err)
		}
		tier := msg.MemoryForgetReqTierSemantic
		if _, err := b.MemoryForget(ctx, &msg.MemoryForgetReq{MemoryID: idB, Keys: []string{"plan"}, Tier: &tier}); err != nil {
			t.Fatal(err)
		}
		if got, err := memGet(t, a, idA, "plan"); err != nil || memText(t, got) != "A's plan" {
			t.Fatalf("team-a's entry after team-b's requests: %+v %v", got, err)
		}
		// A memory_id is the session's own: B using A's id is refused as a
		// made-up one is.
		gotB, errB = memGet(t, b, idA, "plan")
		wantB, errW = memGet(t, b, "m-0123456789abcdef", "plan")
		sameReply(t, "memory/retrieve by id", gotB, errB, idA, wantB, errW, "m-0123456789abcdef")
		// A namespace cannot spell another tenant's storage prefix.
		_, err = b.MemoryInit(ctx, &msg.MemoryInitReq{Namespace: "\x1ft:team-a\x1fteam-notes"})
		aeptest.WantError(t, err, wire.CodeSchemaViolation, "control characters")
	})

	t.Run("learn", func(t *testing.T) {
		ctx := aeptest.Context(t)
		corr := "corr-a-" + wire.RandomHex(6)
		if res, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{}, CorrelationID: &corr}); err != nil || !res.Success {
			t.Fatalf("%+v %v", res, err)
		}
		ctxA := "ctx-a"
		fb, err := a.LearnFeedback(ctx, &msg.LearnFeedbackReq{Feedbacks: []msg.Feedback{
			{Type: msg.FeedbackTypePOSITIVE, CorrelationID: &corr, Context: &ctxA},
			{Type: msg.FeedbackTypePOSITIVE, Component: &msg.Component{Kind: "tool", Name: "secret-tool"}, Context: &ctxA},
		}})
		if err != nil || fb.Linked != 1 {
			t.Fatalf("team-a's feedback: %+v %v", fb, err)
		}
		if _, err := a.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: []msg.Experience{{EpisodeID: "ep-a", Step: 0,
			State: json.RawMessage(`{}`), Action: json.RawMessage(`"x"`), NextState: json.RawMessage(`{}`), Reward: 1}}}); err != nil {
			t.Fatal(err)
		}
		rankA := func() *msg.LearnRankResp {
			t.Helper()
			rk, err := a2.LearnRank(ctx, &msg.LearnRankReq{Context: &ctxA, Strategy: msg.LearnRankReqStrategyGreedy})
			if err != nil {
				t.Fatal(err)
			}
			return rk
		}
		before := rankA()
		// Within the tenant the aggregates are shared.
		if len(before.Ranked) != 2 {
			t.Fatalf("team-a's second session ranks %+v", before.Ranked)
		}

		// B: feedback naming A's correlation id links nothing, as a made-up id.
		made := "corr-never-0000"
		got, gotErr := b.LearnFeedback(ctx, &msg.LearnFeedbackReq{Feedbacks: []msg.Feedback{{Type: msg.FeedbackTypeNEGATIVE, CorrelationID: &corr}}})
		want, wantErr := b.LearnFeedback(ctx, &msg.LearnFeedbackReq{Feedbacks: []msg.Feedback{{Type: msg.FeedbackTypeNEGATIVE, CorrelationID: &made}}})
		sameReply(t, "learn/feedback correlation_id", got, gotErr, corr, want, wantErr, made)
		// B: stats, rank, export and adapt see nothing of A's.
		stats, err := b.LearnStats(ctx, &msg.LearnStatsReq{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range stats.Components {
			if c.Name == "list_dir" || c.Name == "secret-tool" {
				t.Fatalf("team-b's stats show team-a's component %+v", c)
			}
		}
		never := "ctx-never"
		gotRank, gotErr := b.LearnRank(ctx, &msg.LearnRankReq{Context: &ctxA, Strategy: msg.LearnRankReqStrategyGreedy})
		wantRank, wantErr := b.LearnRank(ctx, &msg.LearnRankReq{Context: &never, Strategy: msg.LearnRankReqStrategyGreedy})
		sameReply(t, "learn/rank", gotRank, gotErr, ctxA, wantRank, wantErr, never)
		for _, what := range []msg.LearnExportReqWhat{msg.LearnExportReqWhatFeedback, msg.LearnExportReqWhatExperience} {
			ex, err := b.LearnExport(ctx, &msg.LearnExportReq{What: what})
			if err != nil || ex.Count != 0 {
				t.Fatalf("team-b exports %d %s records: %v", ex.Count, what, err)
			}
		}
		for _, c := range []*string{nil, &ctxA} {
			if ad, err := b.LearnAdapt(ctx, &msg.LearnAdaptReq{Context: c}); err != nil || ad.Feedbacks != 0 {
				t.Fatalf("team-b's adapt read %+v %v", ad, err)
			}
		}
		// A's aggregates are as they were; A's export has its records.
		if after := rankA(); !equalJSON(before, after) {
			t.Fatalf("team-a's ranking changed under team-b's requests:\n%+v\n%+v", before, after)
		}
		ex, err := a2.LearnExport(ctx, &msg.LearnExportReq{What: msg.LearnExportReqWhatFeedback})
		if err != nil || ex.Count != 2 {
			t.Fatalf("team-a exports %+v %v", ex, err)
		}
		// A context cannot spell another tenant's storage prefix.
		spelled := "\x1ft:team-a\x1fctx-a"
		_, err = b.LearnRank(ctx, &msg.LearnRankReq{Context: &spelled})
		aeptest.WantError(t, err, wire.CodeSchemaViolation, "control characters")
	})

	t.Run("mcp registrations", func(t *testing.T) {
		ctx := aeptest.Context(t)
		reg, err := a.McpServerRegister(ctx, &msg.MCPServerRegisterReq{ServerID: "a-srv", URL: r.mcpURL})
		if err != nil || !reg.Ok {
			t.Fatalf("register: %+v %v", reg, err)
		}
		list, err := b.McpServerList(ctx, &msg.MCPServerListReq{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Servers {
			if s.ServerID == "a-srv" {
				t.Fatalf("team-b lists team-a's server %+v", s)
			}
		}
		got, gotErr := b.CallTool(ctx, &msg.ToolCallReq{ToolName: "a-srv__echo", Arguments: map[string]any{"message": "hi"}})
		want, wantErr := b.CallTool(ctx, &msg.ToolCallReq{ToolName: "zz-srv__echo", Arguments: map[string]any{"message": "hi"}})
		sameReply(t, "tool/call of a registered server's tool", got, gotErr, "a-srv", want, wantErr, "zz-srv")
		gotU, gotErr := b.McpServerUnregister(ctx, &msg.MCPServerUnregisterReq{ServerID: "a-srv"})
		wantU, wantErr := b.McpServerUnregister(ctx, &msg.MCPServerUnregisterReq{ServerID: "zz-srv"})
		sameReply(t, "mcp/server/unregister", gotU, gotErr, "a-srv", wantU, wantErr, "zz-srv")
		if res, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: "a-srv__echo", Arguments: map[string]any{"message": "hi"}}); err != nil || !res.Success {
			t.Fatalf("team-a's server after team-b's requests: %+v %v", res, err)
		}
	})

	t.Run("skill registrations", func(t *testing.T) {
		ctx := aeptest.Context(t)
		if _, err := a.SkillRegister(ctx, &msg.SkillRegisterReq{Manifest: msg.SkillRegisterReqManifest{
			"name": "a-skill", "version": "1.0.0", "description": "Answers.", "entrypoint": []any{"sh", "-c", `echo '{"v":1}'`}}}); err != nil {
			t.Fatal(err)
		}
		args := json.RawMessage(`{}`)
		got, gotErr := b.SkillCall(ctx, &msg.SkillCallReq{Name: "a-skill", Arguments: &args})
		want, wantErr := b.SkillCall(ctx, &msg.SkillCallReq{Name: "zz-skill", Arguments: &args})
		sameReply(t, "skill/call", got, gotErr, "a-skill", want, wantErr, "zz-skill")
		gotG, gotErr := b.SkillGet(ctx, &msg.SkillGetReq{Name: "a-skill"})
		wantG, wantErr := b.SkillGet(ctx, &msg.SkillGetReq{Name: "zz-skill"})
		sameReply(t, "skill/get", gotG, gotErr, "a-skill", wantG, wantErr, "zz-skill")
		disc, err := b.SkillDiscover(ctx, &msg.SkillDiscoverReq{})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(disc); strings.Contains(string(b), "a-skill") {
			t.Fatalf("team-b discovers team-a's skill: %s", b)
		}
		if res, err := a.SkillCall(ctx, &msg.SkillCallReq{Name: "a-skill", Arguments: &args}); err != nil || !res.Result.Success {
			t.Fatalf("team-a's skill after team-b's requests: %+v %v", res, err)
		}
	})

	t.Run("toolkit databases", func(t *testing.T) {
		ctx := aeptest.Context(t)
		if res, err := a.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
			"driver": "sqlite", "database": "a.db", "mode": "read_write"}}); err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
			t.Fatalf("configure %+v %v", res, err)
		}
		if res := sqlRun(t, ctx, a, "CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('A')"); !res.Success {
			t.Fatal(*res.Error)
		}
		handleA := aeptest.Handle(t, a)
		for _, tc := range []struct{ name, theirs, made string }{
			{"relative", "../" + handleA + "/a.db", "../s-never-00000000/a.db"},
			{"absolute", filepath.Join(r.dataDir, "sessions", handleA, "a.db"), filepath.Join(r.dataDir, "sessions", "s-never-00000000", "a.db")},
		} {
			configure := func(path string) (*msg.ToolkitConfigureResp, error) {
				return b.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
					"driver": "sqlite", "database": path, "mode": "read_write"}})
			}
			got, gotErr := configure(tc.theirs)
			want, wantErr := configure(tc.made)
			sameReply(t, "toolkit/configure "+tc.name, got, gotErr, handleA, want, wantErr, "s-never-00000000")
			if gotErr == nil && got.Status == msg.ToolkitConfigureRespStatusOk {
				t.Fatalf("team-b opens team-a's database by a %s path", tc.name)
			}
		}
		res := sqlRun(t, ctx, a, "SELECT v FROM t")
		if b, _ := json.Marshal(res); !res.Success || !strings.Contains(string(b), `"A"`) {
			t.Fatalf("team-a's database after team-b's requests: %s", b)
		}
	})
}

// TestNothingCrossesTenantsPersisted: snapshots (by id and by
// from_session), their listing and deletion, forks from them, the forks'
// sessions and recorded trajectories are kept to their tenant; within a
// tenant a snapshot id restores for any session that holds it, as before.
func TestNothingCrossesTenantsPersisted(t *testing.T) {
	r := newTenantRig(t)
	ctx := aeptest.Context(t)
	a, a2, b := r.connectRecording(t, "team-a", true), r.connect(t, "team-a"), r.connect(t, "team-b")
	if res, err := a.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "a.txt", "content": "A's"}}); err != nil || !res.Success {
		t.Fatalf("%+v %v", res, err)
	}
	snaps := map[string]string{}
	for _, target := range []msg.SessionSnapshotReqTarget{msg.SessionSnapshotReqTargetSQL, msg.SessionSnapshotReqTargetFile} {
		sr, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: target})
		if err != nil {
			t.Fatal(err)
		}
		snaps[string(target)] = sr.SnapshotID
	}
	aID := r.ids[a]
	madeID := "s-vm-" + strings.Repeat("0f", 16)

	t.Run("snapshots by id", func(t *testing.T) {
		for target, id := range snaps {
			made := target + "-" + strings.Repeat("ab", 16)
			got, gotErr := b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &id})
			want, wantErr := b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &made})
			sameReply(t, "session/restore "+target, got, gotErr, id, want, wantErr, made)
			gotF, gotErr := b.SessionFork(ctx, &msg.SessionForkReq{Count: 1, SnapshotID: &id})
			wantF, wantErr := b.SessionFork(ctx, &msg.SessionForkReq{Count: 1, SnapshotID: &made})
			sameReply(t, "session/fork from "+target, gotF, gotErr, id, wantF, wantErr, made)
			gotD, gotErr := b.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: id, SessionIds: []string{aID}})
			wantD, wantErr := b.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: made, SessionIds: []string{madeID}})
			sameReply(t, "session/snapshot/delete "+target, gotD, gotErr, id, wantD, wantErr, made)
			// Within the tenant the id restores, as a bearer secret does.
			if rr, err := a2.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &id}); err != nil || rr.SnapshotID != id {
				t.Fatalf("team-a's second session restores %s: %+v %v", id, rr, err)
			}
		}
	})

	t.Run("from_session and listing", func(t *testing.T) {
		got, gotErr := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: &aID})
		want, wantErr := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: &madeID})
		sameReply(t, "session/restore from_session", got, gotErr, aID, want, wantErr, madeID)
		gotL, gotErr := b.SessionSnapshotList(ctx, &msg.SessionSnapshotListReq{SessionIds: []string{aID}})
		wantL, wantErr := b.SessionSnapshotList(ctx, &msg.SessionSnapshotListReq{SessionIds: []string{madeID}})
		sameReply(t, "session/snapshot/list", gotL, gotErr, aID, wantL, wantErr, madeID)
		if gotErr != nil || len(gotL.Snapshots) != 0 {
			t.Fatalf("team-b lists team-a's snapshots: %+v %v", gotL, gotErr)
		}
		// A's own session lists both, and a second session of team-a
		// presenting A's id too.
		for _, c := range []*client.Client{a, a2} {
			l, err := c.SessionSnapshotList(ctx, &msg.SessionSnapshotListReq{SessionIds: []string{aID}})
			if err != nil || len(l.Snapshots) != 2 {
				t.Fatalf("team-a lists %+v %v", l, err)
			}
		}
		if rr, err := a2.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: &aID}); err != nil || rr.SnapshotID == "" {
			t.Fatalf("team-a restores from_session: %+v %v", rr, err)
		}
	})

	t.Run("trajectories", func(t *testing.T) {
		got, gotErr := b.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{aID}})
		want, wantErr := b.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{madeID}})
		sameReply(t, "session/trajectory/export", got, gotErr, aID, want, wantErr, madeID)
		if gotErr != nil || len(got.Lines) != 0 {
			t.Fatalf("team-b exports team-a's trajectory: %d lines, %v", len(got.Lines), gotErr)
		}
		own, err := a2.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{aID}})
		if err != nil || len(own.Lines) == 0 {
			t.Fatalf("team-a exports its own recorded session: %+v %v", own, err)
		}
	})

	// Lineage authorizes a root's exports of its forks, never across
	// tenants: team-a's recording root asking for team-b's fork group, or
	// for team-b's root's descendants by its id, gets what a made-up
	// group or id gets — nothing.
	t.Run("lineage exports", func(t *testing.T) {
		bRoot := r.connectRecording(t, "team-b", true)
		fr, err := bRoot.SessionFork(ctx, &msg.SessionForkReq{Count: 2})
		if err != nil || fr.Group == nil {
			t.Fatalf("fork: %+v %v", fr, err)
		}
		for _, f := range fr.Forks {
			tr, err := client.InProcessAttach(r.h, client.JSON, nil)(ctx, f.SessionID)
			if err != nil {
				t.Fatal(err)
			}
			c := client.New(tr)
			defer c.Close()
			if hs, err := c.Handshake(ctx, "agent-team-b", r.secrets["team-b"], crossTenantCaps...); err != nil || !hs.Ok || hs.RecordTrajectory == nil {
				t.Fatalf("team-b's fork: %+v %v", hs, err)
			}
			if res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": "b.txt", "content": "B's fork"}}); err != nil || !res.Success {
				t.Fatalf("%+v %v", res, err)
			}
		}
		bGroup, bRootID := *fr.Group, r.ids[bRoot]
		madeGroup := "g-" + strings.Repeat("5a", 16)
		aRoot := r.connectRecording(t, "team-a", true)
		for _, format := range []msg.SessionTrajectoryExportReqFormat{msg.SessionTrajectoryExportReqFormatJsonl, msg.SessionTrajectoryExportReqFormatChat} {
			got, gotErr := aRoot.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{Group: &bGroup, Format: format})
			want, wantErr := aRoot.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{Group: &madeGroup, Format: format})
			sameReply(t, "session/trajectory/export group", got, gotErr, bGroup, want, wantErr, madeGroup)
			if gotErr != nil || len(got.Lines) != 0 {
				t.Fatalf("team-a exports team-b's group: %d lines, %v", len(got.Lines), gotErr)
			}
			got, gotErr = aRoot.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{bRootID}, Descendants: true, Format: format})
			want, wantErr = aRoot.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{SessionIds: []string{madeID}, Descendants: true, Format: format})
			sameReply(t, "session/trajectory/export descendants", got, gotErr, bRootID, want, wantErr, madeID)
			if gotErr != nil || len(got.Lines) != 0 {
				t.Fatalf("team-a exports team-b's root's descendants: %d lines, %v", len(got.Lines), gotErr)
			}
			own, err := aRoot.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{Descendants: true, Format: format})
			if err != nil || len(own.Lines) == 0 || bytes.Contains(mustJSON(t, own), []byte("B's fork")) {
				t.Fatalf("team-a's root exports %+v %v", own, err)
			}
		}
		// Team-b's root reads its group: the records are there.
		mine, err := bRoot.SessionTrajectoryExport(ctx, &msg.SessionTrajectoryExportReq{Group: &bGroup})
		if err != nil || !bytes.Contains(mustJSON(t, mine), []byte("B's fork")) {
			t.Fatalf("team-b's root exports its group: %+v %v", mine, err)
		}
	})

	t.Run("forks", func(t *testing.T) {
		forks, err := a.SessionFork(ctx, &msg.SessionForkReq{Count: 2})
		if err != nil || len(forks.Forks) != 2 {
			t.Fatalf("fork: %+v %v", forks, err)
		}
		handshake := func(id, secret string) (*msg.HandshakeResp, error) {
			tr, err := client.InProcessAttach(r.h, client.JSON, nil)(ctx, id)
			if err != nil {
				return nil, err
			}
			c := client.New(tr)
			defer c.Close()
			return c.Handshake(ctx, "intruder", secret, "session")
		}
		// Team-b's own secret on team-a's fork is refused as a made-up
		// secret is: a fork is its source tenant's.
		got, gotErr := handshake(forks.Forks[0].SessionID, r.secrets["team-b"])
		want, wantErr := handshake(forks.Forks[0].SessionID, "made-up-secret-0000")
		sameReply(t, "handshake on another tenant's fork", got, gotErr, r.secrets["team-b"], want, wantErr, "made-up-secret-0000")
		if gotErr == nil && got.Ok {
			t.Fatal("team-b handshook into team-a's fork")
		}
		if hs, err := handshake(forks.Forks[1].SessionID, r.secrets["team-a"]); err != nil || !hs.Ok {
			t.Fatalf("team-a's fork with team-a's secret: %+v %v", hs, err)
		}
	})
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return slices.Equal(x, y)
}

func ptr[T any](v T) *T { return &v }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
