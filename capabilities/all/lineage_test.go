package all_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
)

var lineageCaps = []string{"tools", "env", "learn"}

// lineageRig is a fork rig with the learn capability, whose feedback the
// export turns into rewards.
func lineageRig(t *testing.T) *forkRig {
	return newForkRig(t, func(c *server.Config) {
		c.Plugins = append(c.Plugins, server.PluginConfig{Name: "learn", Type: "learn", Cls: "aep.learn.builtin"})
	})
}

func (r *forkRig) root(t *testing.T, ctx context.Context, record bool) (*client.Client, string) {
	t.Helper()
	c, err := client.InProcess(r.h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hs, err := c.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "grpo", AgentCaps: lineageCaps, AuthToken: aeptest.Token, RecordTrajectory: &record})
	if err != nil || !hs.Ok || (hs.RecordTrajectory != nil) != record {
		t.Fatalf("handshake %+v %v", hs, err)
	}
	return c, *hs.SessionID
}

// forkAll forks c n ways and attaches to each fork with a handshake that
// does not ask for recording: a fork records as its parent does.
func (r *forkRig) forkAll(t *testing.T, ctx context.Context, c *client.Client, n int, recorded bool) ([]*client.Client, string) {
	t.Helper()
	fr, err := c.SessionFork(ctx, &msg.SessionForkReq{Count: n})
	if err != nil || len(fr.Forks) != n || fr.Group == nil {
		t.Fatalf("fork %+v %v", fr, err)
	}
	var out []*client.Client
	for _, f := range fr.Forks {
		pipe, err := r.h.ConnectLinesTo(f.SessionID, 64)
		if err != nil {
			t.Fatal(err)
		}
		fc := client.New(client.Lines(pipe, nil))
		t.Cleanup(func() { fc.Close() })
		hs, err := fc.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "grpo", AgentCaps: lineageCaps, AuthToken: aeptest.Token})
		if err != nil || !hs.Ok || (hs.RecordTrajectory != nil && *hs.RecordTrajectory) != recorded {
			t.Fatalf("fork handshake (parent recorded %v): %+v %v", recorded, hs, err)
		}
		out = append(out, fc)
	}
	return out, *fr.Group
}

func exportAll(t *testing.T, ctx context.Context, c *client.Client, req msg.SessionTrajectoryExportReq) ([]map[string]any, *msg.SessionTrajectoryExportResp) {
	t.Helper()
	var lines []map[string]any
	var last *msg.SessionTrajectoryExportResp
	for {
		page, err := c.SessionTrajectoryExport(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Lines {
			lines = append(lines, l)
		}
		last = page
		if page.Next == nil {
			return lines, last
		}
		req.After = *page.Next
	}
}

func stepIDs(lines []map[string]any, session string) []string {
	var ids []string
	for _, l := range lines {
		if l["session"] == session && l["type"] == "env/step/req" && l["episode"] == nil {
			ids = append(ids, l["message"].(map[string]any)["id"].(string))
		}
	}
	return ids
}

// A GRPO group from a recorded root: reset and three steps, a fork four
// ways, each fork to the end of the episode, rated per step and per
// episode. The group's export holds four complete episodes — the root's
// prefix repeated in each, every line tagged with its episode, every
// fork's record with the group — and the chat samples carry env rewards,
// feedback rewards and their sums, and the correction. The operator's
// export of the group is the same bytes. With prefix once the prefix
// comes once; the root exports its descendants; a sibling exports no
// sibling's episode.
func TestLineageGroupExport(t *testing.T) {
	ctx := aeptest.Context(t)
	r := lineageRig(t)
	root, rootID := r.root(t, ctx, true)
	rootHandle := aeptest.Handle(t, root)
	reset, err := root.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(4)})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{50, 25, 75} {
		step(t, ctx, root, reset.EpisodeID, g)
	}
	forks, group := r.forkAll(t, ctx, root, 4, true)
	handles := make([]string, len(forks))
	component := &msg.Component{Kind: "env", Name: "guess"}
	for i, f := range forks {
		handles[i] = aeptest.Handle(t, f)
		solve(t, ctx, f, reset.EpisodeID, 0, 100)
		own, _ := exportAll(t, ctx, f, msg.SessionTrajectoryExportReq{Prefix: persist.PrefixNone})
		ids := stepIDs(own, handles[i])
		// The last step rated by its id; the episode as a whole, fork 0
		// corrected.
		fbs := []msg.Feedback{{Type: msg.FeedbackTypePOSITIVE, CorrelationID: &ids[len(ids)-1], Component: component},
			{Type: msg.FeedbackTypeNEGATIVE, Score: aeptest.Ptr(-0.25), Component: component}}
		if i == 0 {
			fbs = append(fbs, msg.Feedback{Type: msg.FeedbackTypeCORRECTIVE, CorrelationID: &ids[0], Component: component, Correction: aeptest.Ptr(`{"action":42}`)})
		}
		if _, err := f.LearnFeedback(ctx, &msg.LearnFeedbackReq{Feedbacks: fbs}); err != nil {
			t.Fatal(err)
		}
	}

	lines, resp := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: &group})
	if resp.Prefix == nil || *resp.Prefix != msg.SessionTrajectoryExportRespPrefixComplete {
		t.Fatalf("prefix %v %v", resp.Prefix, resp.PrefixMissing)
	}
	schema := trajectorySchema(t)
	byEpisode := map[string][]map[string]any{}
	for _, l := range lines {
		data, _ := json.Marshal(l)
		if res := schema.Validate(data); !res.IsValid() {
			t.Fatalf("line does not validate: %v\n%s", res.Errors, data)
		}
		if l["root"] != rootHandle {
			t.Fatalf("line without its root: %s", data)
		}
		byEpisode[l["episode"].(string)] = append(byEpisode[l["episode"].(string)], l)
	}
	if len(byEpisode) != 4 {
		t.Fatalf("%d episodes", len(byEpisode))
	}
	var prefixLen int
	for i, h := range handles {
		ep := byEpisode[h]
		if ep[0]["session"] != rootHandle || ep[0]["type"] != "handshake/req" {
			t.Fatalf("episode %s does not start at the root's handshake: %v", h, ep[0])
		}
		n := 0
		for n < len(ep) && ep[n]["session"] == rootHandle {
			n++
		}
		if i == 0 {
			prefixLen = n
		}
		fp := ep[n]["fork_point"].(float64)
		if n != prefixLen || float64(n) != fp || ep[n]["parent"] != rootHandle || ep[n]["group"] != group {
			t.Fatalf("episode %s: prefix of %d records, fork point %v, parent %v, group %v", h, n, fp, ep[n]["parent"], ep[n]["group"])
		}
		types := []string{}
		for _, l := range ep[:n] {
			types = append(types, l["type"].(string))
		}
		if !slices.Contains(types, "env/reset/resp") || slices.Contains(types, "session/fork/req") {
			t.Fatalf("prefix types %v", types)
		}
	}

	// The chat samples: one per fork, the prefix first, rewards joined.
	chat, _ := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: &group, Format: msg.SessionTrajectoryExportReqFormatChat})
	if len(chat) != 4 {
		t.Fatalf("%d chat samples", len(chat))
	}
	for i, s := range chat {
		if s["session"] != handles[i] || s["group"] != group || s["root"] != rootHandle || s["prefix"] != nil {
			t.Fatalf("sample %d: %v", i, s)
		}
		env, fb, rw := s["env_rewards"].([]any), s["feedback_rewards"].([]any), s["rewards"].([]any)
		if len(env) < 4 || len(env) != len(fb) || len(env) != len(rw) {
			t.Fatalf("sample %d rewards %v %v %v", i, env, fb, rw)
		}
		last := len(env) - 1
		if env[last].(float64) != 1 || fb[last].(float64) != 1 || rw[last].(float64) != 2 {
			t.Fatalf("sample %d: the last step's rewards env %v feedback %v sum %v", i, env[last], fb[last], rw[last])
		}
		for j := 0; j < 3; j++ {
			if fb[j].(float64) != 0 {
				t.Fatalf("sample %d: prefix step %d has feedback %v", i, j, fb[j])
			}
		}
		ep := s["episode_rewards"].([]any)
		if i == 0 && fb[3].(float64) != -0.5 {
			t.Fatalf("the correction of fork 0's first step weighs %v, not CORRECTIVE's -0.5", fb[3])
		}
		total := 0.0
		for _, x := range rw {
			total += x.(float64)
		}
		for _, x := range ep {
			total += x.(float64)
		}
		if len(ep) != 1 || ep[0].(float64) != -0.25 || s["total_reward"].(float64) != total {
			t.Fatalf("sample %d: episode rewards %v total %v (sum %v)", i, ep, s["total_reward"], total)
		}
		if pm := s["prefix_messages"].(float64); pm != 10 { // reset, session/info (aeptest.Handle) and three steps, each a call and its result
			t.Fatalf("sample %d: prefix_messages %v", i, pm)
		}
		if i == 0 {
			cs := s["corrections"].([]any)
			c := cs[0].(map[string]any)
			msgs := s["messages"].([]any)
			at := int(c["message_index"].(float64))
			call := msgs[at].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
			if c["preferred"] != `{"action":42}` || call["id"] != c["tool_call_id"] {
				t.Fatalf("correction %v at %v", c, call)
			}
		} else if s["corrections"] != nil {
			t.Fatalf("sample %d has corrections", i)
		}
	}

	// The Go client's export (paged) and the operator's are the same
	// bytes.
	var mine, operator bytes.Buffer
	if sum, err := root.ExportTrajectories(ctx, msg.SessionTrajectoryExportReq{Group: &group, Limit: 7}, &mine); err != nil || sum.Lines != len(lines) || sum.Prefix != "complete" {
		t.Fatalf("the Go client's export: %+v %v", sum, err)
	}
	st, err := store.Open(ctx, "", r.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	res, err := persist.ExportTrajectories(ctx, st, persist.ExportOptions{Group: group}, &operator)
	if err != nil || res.Records != len(lines) || !bytes.Equal(mine.Bytes(), operator.Bytes()) {
		t.Fatalf("operator export: %+v %v\n%s\n---\n%s", res, err, operator.Bytes(), mine.Bytes())
	}

	// Once: the prefix once, then each fork's own records.
	once, _ := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: &group, Prefix: msg.SessionTrajectoryExportReqPrefixOnce})
	if len(once) != len(lines)-3*prefixLen || once[0]["session"] != rootHandle || once[prefixLen]["session"] != handles[0] {
		t.Fatalf("once: %d lines, repeat %d, prefix %d", len(once), len(lines), prefixLen)
	}
	// Paged by whole episodes, the prefix once over all the pages too.
	paged, _ := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: &group, Limit: 1})
	if !equalJSON(paged, lines) {
		t.Fatal("the paged export differs")
	}
	if pagedOnce, _ := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: &group, Limit: 1, Prefix: msg.SessionTrajectoryExportReqPrefixOnce}); !equalJSON(pagedOnce, once) {
		t.Fatal("the paged export with the prefix once differs")
	}
	chatOnce, _ := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: &group, Format: msg.SessionTrajectoryExportReqFormatChat, Prefix: msg.SessionTrajectoryExportReqPrefixOnce})
	if len(chatOnce) != 5 || chatOnce[0]["part"] != "prefix" || chatOnce[0]["session"] != rootHandle || chatOnce[1]["prefix_messages"] != nil ||
		len(chatOnce[0]["messages"].([]any))+len(chatOnce[1]["messages"].([]any)) != len(chat[0]["messages"].([]any)) {
		t.Fatalf("chat with the prefix once: %d samples, the first %v", len(chatOnce), chatOnce[0])
	}
	// The root with its descendants: its own episode and the forks'.
	desc, _ := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Descendants: true, Format: msg.SessionTrajectoryExportReqFormatChat})
	if len(desc) != 5 || desc[0]["session"] != rootHandle || desc[4]["session"] != handles[3] {
		t.Fatalf("descendants: %d samples", len(desc))
	}
	// A fork alone exports its own whole episode; a sibling's group or
	// descendants are not its to read, nor is the root's id enough
	// without being presented.
	self, _ := exportAll(t, ctx, forks[1], msg.SessionTrajectoryExportReq{})
	if !equalJSON(self, byEpisode[handles[1]]) {
		t.Fatal("a fork's own export is not its episode in the group export")
	}
	if sib, _ := exportAll(t, ctx, forks[1], msg.SessionTrajectoryExportReq{Group: &group}); len(sib) != len(byEpisode[handles[1]]) {
		t.Fatalf("a fork exporting its group gets %d lines, its own episode has %d", len(sib), len(byEpisode[handles[1]]))
	}
	// A later session presenting the root's id reads what the root reads.
	later, _ := r.root(t, ctx, false)
	if pres, _ := exportAll(t, ctx, later, msg.SessionTrajectoryExportReq{SessionIds: []string{rootID}, Group: &group}); !equalJSON(pres, lines) {
		t.Fatal("the root's id presented does not export its group")
	}
	if none, _ := exportAll(t, ctx, later, msg.SessionTrajectoryExportReq{Group: &group}); len(none) != 0 {
		t.Fatalf("an unrelated session exports %d lines of the group", len(none))
	}
}

// A fork of a session that does not record, recorded because it asked:
// its export says prefix missing, in the reply and on every line.
func TestLineagePrefixMissing(t *testing.T) {
	ctx := aeptest.Context(t)
	r := lineageRig(t)
	root, _ := r.root(t, ctx, false)
	reset, err := root.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(4)})
	if err != nil {
		t.Fatal(err)
	}
	step(t, ctx, root, reset.EpisodeID, 50)
	fr, err := root.SessionFork(ctx, &msg.SessionForkReq{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	on := true
	for _, f := range fr.Forks {
		pipe, err := r.h.ConnectLinesTo(f.SessionID, 64)
		if err != nil {
			t.Fatal(err)
		}
		fc := client.New(client.Lines(pipe, nil))
		t.Cleanup(func() { fc.Close() })
		if hs, err := fc.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "grpo", AgentCaps: lineageCaps, AuthToken: aeptest.Token, RecordTrajectory: &on}); err != nil || hs.RecordTrajectory == nil {
			t.Fatalf("%+v %v", hs, err)
		}
		step(t, ctx, fc, reset.EpisodeID, 25)
	}
	for _, format := range []msg.SessionTrajectoryExportReqFormat{msg.SessionTrajectoryExportReqFormatJsonl, msg.SessionTrajectoryExportReqFormatChat} {
		lines, resp := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: fr.Group, Format: format})
		if resp.Prefix == nil || *resp.Prefix != msg.SessionTrajectoryExportRespPrefixMissing || len(resp.PrefixMissing) != 2 || len(lines) == 0 {
			t.Fatalf("%s: prefix %v %v, %d lines", format, resp.Prefix, resp.PrefixMissing, len(lines))
		}
		for _, l := range lines {
			if l["prefix"] != "missing" {
				t.Fatalf("%s: a line of an episode without its prefix: %v", format, l)
			}
		}
	}
}

// A fork made from a snapshot of a recorded session records as its parent
// does, but which of the parent's records led to the snapshot is not
// known: its prefix is missing, and the export says so.
func TestLineageForkFromSnapshot(t *testing.T) {
	ctx := aeptest.Context(t)
	r := lineageRig(t)
	root, _ := r.root(t, ctx, true)
	reset, err := root.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(4)})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := root.SessionSnapshot(ctx, &msg.SessionSnapshotReq{})
	if err != nil {
		t.Fatal(err)
	}
	step(t, ctx, root, reset.EpisodeID, 50)
	fr, err := root.SessionFork(ctx, &msg.SessionForkReq{Count: 1, SnapshotID: &snap.SnapshotID})
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := r.h.ConnectLinesTo(fr.Forks[0].SessionID, 64)
	if err != nil {
		t.Fatal(err)
	}
	fc := client.New(client.Lines(pipe, nil))
	defer fc.Close()
	if hs, err := fc.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "grpo", AgentCaps: lineageCaps, AuthToken: aeptest.Token}); err != nil || hs.RecordTrajectory == nil {
		t.Fatalf("the fork of a recorded session does not record: %+v %v", hs, err)
	}
	step(t, ctx, fc, reset.EpisodeID, 25)
	lines, resp := exportAll(t, ctx, root, msg.SessionTrajectoryExportReq{Group: fr.Group})
	if resp.Prefix == nil || *resp.Prefix != msg.SessionTrajectoryExportRespPrefixMissing || len(lines) == 0 {
		t.Fatalf("prefix %v, %d lines", resp.Prefix, len(lines))
	}
	for _, l := range lines {
		if l["prefix"] != "missing" || l["fork_point"] != nil || l["session"] != fr.Forks[0].Handle {
			t.Fatalf("a line of the snapshot fork's episode: %v", l)
		}
	}
}
