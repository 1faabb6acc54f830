package learn_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"github.com/aephost/aep/internal/aeptest"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/learn"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// TestFeedbackWire sends feedback lines through the in-process JSON pipe and
// checks each answer at the wire level, every line also checked against
// schemas/ by the conformance recorder: each spec §2.11 type is recorded, and
// a CORRECTIVE without a correction is refused with schema_violation naming
// the field, by the decoder (generated from the schema's if/then) and by the
// schema itself.
func TestFeedbackWire(t *testing.T) {
	th, _ := startHost(t, t.TempDir())
	rec := conformance.NewRecorder(t)
	pipe, err := th.h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	ctx := aeptest.Context(t)
	// Agent lines are checked by the recorder where they are valid; the
	// invalid ones are checked against the schemas below.
	send := func(line string) map[string]any {
		t.Helper()
		if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
		out, err := pipe.ReadLine(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec.Host(out)
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if r := send(`{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["learning"],"auth_token":"` + aeptest.Token + `"}`); r["ok"] != true {
		t.Fatalf("handshake: %v", r)
	}
	checker, err := conformance.Module()
	if err != nil {
		t.Fatal(err)
	}
	const comp = `"component":{"kind":"tool","name":"grep"}`
	cases := []struct {
		name, body string
		code       string // "" for a recorded feedback
		field      string
		score      float64
	}{
		{"positive", `{"type":"POSITIVE",` + comp + `}`, "", "", 1},
		{"negative", `{"type":"NEGATIVE",` + comp + `}`, "", "", 0},
		{"neutral", `{"type":"NEUTRAL",` + comp + `}`, "", "", 0.5},
		{"corrective", `{"type":"CORRECTIVE",` + comp + `,"correction":"search src/ only"}`, "", "", 0.25},
		{"positive with score", `{"type":"POSITIVE","score":0.5,` + comp + `}`, "", "", 0.75},
		{"corrective without correction", `{"type":"CORRECTIVE",` + comp + `}`, "schema_violation", "feedbacks[0].correction", 0},
		{"corrective with empty correction", `{"type":"CORRECTIVE","correction":"",` + comp + `}`, "schema_violation", "feedbacks[0].correction", 0},
		{"lower-case type", `{"type":"positive",` + comp + `}`, "schema_violation", "feedbacks[0].type", 0},
		{"score above 1", `{"type":"POSITIVE","score":1.5,` + comp + `}`, "schema_violation", "feedbacks[0].score", 0},
		{"component without name", `{"type":"POSITIVE","component":{"kind":"tool"}}`, "schema_violation", "feedbacks[0].component.name", 0},
		{"no component and no call", `{"type":"POSITIVE","correlation_id":"nothing-has-this"}`, "runtime_error", "not_found", 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "f" + string(rune('a'+i))
			line := `{"type":"learn/feedback/req","id":"` + id + `","proto":"1.0","ts":1,"feedbacks":[` + tc.body + `]}`
			r := send(line)
			if r["req_id"] != id {
				t.Fatalf("reply to %s: %v", id, r)
			}
			if tc.code == "" {
				rec.Agent([]byte(line))
				if r["type"] != "learn/feedback/resp" || r["recorded"] != 1.0 {
					t.Fatalf("want recorded 1, got %v", r)
				}
				w := r["weights"].([]any)[0].(map[string]any)
				if w["name"] != "grep" || w["context"] != "" {
					t.Fatalf("weights: %v", r["weights"])
				}
				return
			}
			if r["type"] != "error" || r["code"] != tc.code || r["retryable"] != false {
				t.Fatalf("want %s, got %v", tc.code, r)
			}
			// A malformed feedback names its field; a correlation_id naming
			// no audited call is a condition of state, named by its reason.
			d, _ := r["detail"].(map[string]any)
			key := "field"
			if tc.code == "runtime_error" {
				key = "reason"
			}
			if d[key] != tc.field {
				t.Fatalf("want %s %s, got %v", key, tc.field, r)
			}
			// The schema files refuse what the decoder refuses (the if/then of
			// Feedback is schema-visible, not a handler rule), except the
			// component lookup that needs the store.
			if tc.name != "no component and no call" {
				if err := checker.CheckAgentLine([]byte(line)); err == nil {
					t.Fatalf("schemas accept %s", line)
				}
			}
		})
	}
	// A refused batch records nothing: the valid first feedback is rolled back.
	r := send(`{"type":"learn/feedback/req","id":"batch","proto":"1.0","ts":1,"feedbacks":[{"type":"POSITIVE",` + comp + `},{"type":"CORRECTIVE",` + comp + `}]}`)
	if r["code"] != "schema_violation" {
		t.Fatalf("batch: %v", r)
	}
	r = send(`{"type":"learn/export/req","id":"x","proto":"1.0","ts":1,"what":"feedback"}`)
	var types []string
	var scores []float64
	for _, l := range strings.Split(strings.TrimSpace(r["jsonl"].(string)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		types = append(types, m["type"].(string))
		scores = append(scores, m["score"].(float64))
		if m["type"] == "CORRECTIVE" && m["correction"] != "search src/ only" {
			t.Fatalf("correction not kept: %v", m)
		}
	}
	if want := []string{"POSITIVE", "NEGATIVE", "NEUTRAL", "CORRECTIVE", "POSITIVE"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("stored types %v, want %v", types, want)
	}
	if want := []float64{1, -1, 0, -0.5, 0.5}; !reflect.DeepEqual(scores, want) {
		t.Fatalf("stored scores %v, want %v (defaults by type)", scores, want)
	}
	// The weight adds up the rewards (score+1)/2 of the five feedbacks.
	r = send(`{"type":"learn/rank/req","id":"rk","proto":"1.0","ts":1,"strategy":"greedy"}`)
	got := r["ranked"].([]any)[0].(map[string]any)
	var sum float64
	for _, c := range cases[:5] {
		sum += c.score
	}
	if got["pulls"] != 5.0 || math.Abs(got["mean_reward"].(float64)-sum/5) > 1e-12 {
		t.Fatalf("weight after feedback: %v, want mean %v", got, sum/5)
	}
	if h, a := rec.Counts(); h == 0 || a == 0 {
		t.Fatal("recorder saw nothing")
	}
}

// TestExperienceBatches stores two batches of transitions and reads them
// back through paginated export and an episode filter.
func TestExperienceBatches(t *testing.T) {
	th, _ := startHost(t, t.TempDir())
	c := connect(t, th.h)
	ctx := aeptest.Context(t)
	tr := func(ep string, step int, reward float64, term, trunc bool) msg.Experience {
		return msg.Experience{
			State: json.RawMessage(`{"pos":` + itoa(step) + `}`), Action: json.RawMessage(`"right"`), Reward: reward,
			NextState: json.RawMessage(`{"pos":` + itoa(step+1) + `}`), Terminated: term, Truncated: trunc, EpisodeID: ep, Step: step,
		}
	}
	b1, err := c.LearnExperience(ctx, &msg.LearnExperienceReq{EnvName: aeptest.Ptr("counter"), Experiences: []msg.Experience{
		tr("ep1", 0, 0, false, false), tr("ep1", 1, 0.5, false, false), tr("ep1", 2, 1, true, false)}})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := c.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: []msg.Experience{
		tr("ep2", 0, -1, false, false), tr("ep2", 1, 0, false, true)}})
	if err != nil {
		t.Fatal(err)
	}
	if b1.Stored != 3 || b2.Stored != 2 || b1.BatchID == "" || b1.BatchID == b2.BatchID {
		t.Fatalf("batches: %+v %+v", b1, b2)
	}
	// An empty batch and a negative step are refused, and store nothing.
	_, err = c.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: []msg.Experience{}})
	aeptest.WantError(t, err, wire.CodeSchemaViolation, "experiences")
	_, err = c.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: []msg.Experience{tr("ep3", -1, 0, false, false)}})
	aeptest.WantError(t, err, wire.CodeSchemaViolation, "step")

	lines, pages := exportAll(t, c, "experience", 2)
	if len(lines) != 5 || pages != 3 {
		t.Fatalf("export: %d lines in %d pages, want 5 in 3", len(lines), pages)
	}
	for i, l := range lines {
		batch := b1.BatchID
		if i >= 3 {
			batch = b2.BatchID
		}
		if l["batch_id"] != batch {
			t.Fatalf("line %d batch %v, want %s", i, l["batch_id"], batch)
		}
	}
	last := lines[4]
	if last["episode_id"] != "ep2" || last["step"] != 1.0 || last["truncated"] != true || last["terminated"] != false ||
		!reflect.DeepEqual(last["next_state"], map[string]any{"pos": 2.0}) || last["action"] != "right" {
		t.Fatalf("last transition: %v", last)
	}
	if lines[2]["terminated"] != true || lines[2]["reward"] != 1.0 || lines[0]["env_name"] != "counter" {
		t.Fatalf("first batch: %v", lines[:3])
	}
	r, err := c.LearnExport(ctx, &msg.LearnExportReq{What: "experience", EpisodeID: aeptest.Ptr("ep1")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != 3 || strings.Count(*r.Jsonl, "\n") != 3 || r.NextCursor != nil {
		t.Fatalf("episode filter: %+v", r)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestRankingAdapts ranks tools on a fixed feedback set and checks that each
// strategy orders them as docs/learn.md says, and that further feedback
// moves the ranking in the expected direction.
func TestRankingAdapts(t *testing.T) {
	th, _ := startHost(t, t.TempDir())
	c := connect(t, th.h)
	ctx := aeptest.Context(t)
	var set []msg.Feedback
	set = append(set, fb(4, msg.FeedbackTypePOSITIVE, "grep", "search")...)
	set = append(set, fb(1, msg.FeedbackTypeNEGATIVE, "grep", "search")...)
	set = append(set, fb(2, msg.FeedbackTypePOSITIVE, "find", "search")...)
	set = append(set, fb(3, msg.FeedbackTypeNEGATIVE, "find", "search")...)
	set = append(set, fb(1, msg.FeedbackTypeNEUTRAL, "ls", "search")...)
	// In another context, find is the good one.
	set = append(set, fb(3, msg.FeedbackTypePOSITIVE, "find", "files")...)
	feedback(t, c, set...)

	rankIn := func(context string, strategy msg.LearnRankReqStrategy, extra func(*msg.LearnRankReq)) *msg.LearnRankResp {
		t.Helper()
		req := &msg.LearnRankReq{Context: aeptest.Ptr(context), Strategy: strategy}
		if extra != nil {
			extra(req)
		}
		r, err := c.LearnRank(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Means in "search": grep 4/5 = 0.8, ls 0.5, find 2/5 = 0.4.
	if got := rankNames(rankIn("search", "greedy", nil)); !reflect.DeepEqual(got, []string{"grep", "ls", "find"}) {
		t.Fatalf("greedy: %v", got)
	}
	// UCB1 adds c·sqrt(ln 11 / n): ls, tried once, gets the largest bonus.
	u := rankIn("search", "ucb1", nil)
	if got := rankNames(u); !reflect.DeepEqual(got, []string{"ls", "grep", "find"}) {
		t.Fatalf("ucb1: %v", got)
	}
	want := map[string]float64{
		"ls":   0.5 + math.Sqrt2*math.Sqrt(math.Log(11)/1),
		"grep": 0.8 + math.Sqrt2*math.Sqrt(math.Log(11)/5),
		"find": 0.4 + math.Sqrt2*math.Sqrt(math.Log(11)/5),
	}
	for _, r := range u.Ranked {
		if r.Score == nil || math.Abs(*r.Score-want[r.Name]) > 1e-9 {
			t.Fatalf("ucb1 score of %s: %v, want %v", r.Name, r.Score, want[r.Name])
		}
	}
	// Without exploration UCB1 is greedy.
	if got := rankNames(rankIn("search", "ucb1", func(r *msg.LearnRankReq) { r.Exploration = aeptest.Ptr(0.0) })); !reflect.DeepEqual(got, []string{"grep", "ls", "find"}) {
		t.Fatalf("ucb1 c=0: %v", got)
	}
	// An untried candidate comes first under UCB1 and last under greedy.
	cands := func(r *msg.LearnRankReq) {
		r.Candidates = []msg.Component{{Kind: "tool", Name: "find"}, {Kind: "tool", Name: "rg"}, {Kind: "tool", Name: "grep"}}
	}
	if got := rankIn("search", "ucb1", cands); got.Ranked[0].Name != "rg" || !got.Ranked[0].Untried || got.Ranked[0].Score != nil {
		t.Fatalf("ucb1 untried: %+v", got.Ranked)
	}
	if got := rankNames(rankIn("search", "greedy", cands)); !reflect.DeepEqual(got, []string{"grep", "find", "rg"}) {
		t.Fatalf("greedy candidates: %v", got)
	}
	// Contexts are separate: find leads in "files"; the global context
	// counts every feedback (find 5/8 > grep 4/5? no: 0.625 < 0.8).
	if got := rankNames(rankIn("files", "greedy", nil)); !reflect.DeepEqual(got, []string{"find"}) {
		t.Fatalf("files: %v", got)
	}
	if got := rankNames(rankIn("", "greedy", nil)); !reflect.DeepEqual(got, []string{"grep", "find", "ls"}) {
		t.Fatalf("global: %v", got)
	}
	// Thompson sampling: one seed gives one ranking; with clearly separated
	// arms the best is sampled first for every seed tried.
	seeded := func(seed int) func(*msg.LearnRankReq) {
		return func(r *msg.LearnRankReq) { r.Seed = aeptest.Ptr(seed) }
	}
	if a, b := rankIn("search", "thompson", seeded(7)), rankIn("search", "thompson", seeded(7)); !reflect.DeepEqual(a, b) {
		t.Fatalf("thompson with one seed differs: %v %v", a, b)
	}
	feedback(t, c, fb(40, msg.FeedbackTypePOSITIVE, "good", "ts")...)
	feedback(t, c, fb(40, msg.FeedbackTypeNEGATIVE, "bad", "ts")...)
	for seed := 0; seed < 20; seed++ {
		if got := rankNames(rankIn("ts", "thompson", seeded(seed))); !reflect.DeepEqual(got, []string{"good", "bad"}) {
			t.Fatalf("thompson seed %d: %v", seed, got)
		}
	}

	// Six more negatives for grep: its mean falls to 4/11 and it drops to last.
	feedback(t, c, fb(6, msg.FeedbackTypeNEGATIVE, "grep", "search")...)
	if got := rankNames(rankIn("search", "greedy", nil)); !reflect.DeepEqual(got, []string{"ls", "find", "grep"}) {
		t.Fatalf("greedy after negatives: %v", got)
	}
	if got := rankNames(rankIn("search", "ucb1", nil)); got[2] != "grep" {
		t.Fatalf("ucb1 after negatives: %v", got)
	}

	// learn/adapt rebuilds the same weights from the feedback log; with a
	// half-life, old feedback weighs less (pulls shrink below the count).
	ad, err := c.LearnAdapt(ctx, &msg.LearnAdaptReq{Context: aeptest.Ptr("search")})
	if err != nil {
		t.Fatal(err)
	}
	if ad.Feedbacks != 17 {
		t.Fatalf("adapt replayed %d feedbacks, want 17", ad.Feedbacks)
	}
	for _, w := range ad.Weights {
		if w.Name == "grep" && (w.Pulls != 11 || math.Abs(w.MeanReward-4.0/11) > 1e-12) {
			t.Fatalf("rebuilt grep weight: %+v", w)
		}
	}
	if got := rankNames(rankIn("search", "greedy", nil)); !reflect.DeepEqual(got, []string{"ls", "find", "grep"}) {
		t.Fatalf("greedy after adapt: %v", got)
	}
	time.Sleep(20 * time.Millisecond)
	ad, err = c.LearnAdapt(ctx, &msg.LearnAdaptReq{Context: aeptest.Ptr("search"), HalfLifeS: aeptest.Ptr(0.001)})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ad.Weights {
		if w.Pulls >= 0.01 {
			t.Fatalf("half-life did not discount %s: %+v", w.Name, w)
		}
	}
	// Bad input is refused.
	_, err = c.LearnRank(ctx, &msg.LearnRankReq{Strategy: "softmax"})
	aeptest.WantError(t, err, wire.CodeSchemaViolation, "strategy")
}

// TestStatsMatchAudit drives real tool calls through the built-in tools
// plugin and compares learn/stats with the audit records the host produced
// for them, and links feedback to a call by correlation_id.
func TestStatsMatchAudit(t *testing.T) {
	th, _ := startHost(t, t.TempDir())
	c := connect(t, th.h)
	ctx := aeptest.Context(t)
	call := func(name, corr string, args map[string]any) {
		t.Helper()
		req := &msg.ToolCallReq{ToolName: name, Arguments: args}
		if corr != "" {
			req.CorrelationID = aeptest.Ptr(corr)
		}
		if _, err := c.ToolCall(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		call("write_file", "", map[string]any{"path": "a.txt", "content": "hello"})
	}
	for i := 0; i < 5; i++ {
		call("read_file", "", map[string]any{"path": "a.txt"})
	}
	call("read_file", "", map[string]any{"path": "missing.txt"}) // a failed tool result is still an answered call
	for i := 0; i < 4; i++ {
		call("run_command", "run-"+itoa(i), map[string]any{"argv": []any{"sleep", "0.03"}})
	}
	call("list_dir", "", map[string]any{"path": "."})
	call("no_such_tool", "", nil) // answered by the kernel's fallback (UNKNOWN_TOOL): no call of a component
	const calls = 14

	// The audit record of a call is written after its reply, so wait until
	// the learn plugin has seen all of them.
	var got map[string]msg.ComponentStats
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = statsByName(t, c)
		n := 0
		for _, s := range got {
			n += s.Calls
		}
		if n == calls {
			break
		}
		if n > calls || time.Now().After(deadline) {
			t.Fatalf("stats count %d calls, want %d: %+v", n, calls, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	type figures struct {
		calls, ok int
		durs      []float64
		last      time.Time
	}
	want := map[string]*figures{}
	for _, r := range th.audit.all() {
		// A call of a component is one a plugin answered: not a decline,
		// nor the kernel's fallback (no plugin), which answers an unknown tool.
		if r.Type != "tool/call/req" || r.Declined || r.Plugin == "" {
			continue
		}
		f := want[r.Target]
		if f == nil {
			f = &figures{}
			want[r.Target] = f
		}
		f.calls++
		if r.Success {
			f.ok++
		}
		f.durs = append(f.durs, r.DurationMS)
		if r.TS.After(f.last) {
			f.last = r.TS
		}
	}
	if len(want) != 4 || want["read_file"].calls != 6 || want["run_command"].calls != 4 {
		t.Fatalf("audit records: %+v", want)
	}
	if _, ok := got["no_such_tool"]; ok {
		t.Fatal("a call of an unknown tool counted as a component call")
	}
	for name, w := range want {
		s := got[name]
		var sum float64
		for _, d := range w.durs {
			sum += d
		}
		sort.Float64s(w.durs)
		p95 := w.durs[int(math.Ceil(0.95*float64(len(w.durs))))-1]
		if s.Calls != w.calls || s.Successes != w.ok || s.Failures != w.calls-w.ok ||
			math.Abs(s.MeanDurationMs-sum/float64(w.calls)) > 1e-9 || s.P95DurationMs != p95 ||
			s.LastCalled == nil || math.Abs(*s.LastCalled-wire.Epoch(w.last)) > 1e-6 {
			t.Fatalf("%s: stats %+v, audit %d calls %d ok mean %v p95 %v", name, s, w.calls, w.ok, sum/float64(w.calls), p95)
		}
	}
	if got["run_command"].P95DurationMs < 30 {
		t.Fatalf("run_command p95 %v ms, the command sleeps 30 ms", got["run_command"].P95DurationMs)
	}

	// Feedback naming a call by correlation_id rates that call's component.
	r := feedback(t, c, msg.Feedback{Type: "NEGATIVE", CorrelationID: aeptest.Ptr("run-2")}, msg.Feedback{Type: "POSITIVE", Score: aeptest.Ptr(0.5), CorrelationID: aeptest.Ptr("run-3")})
	if r.Linked != 2 || len(r.Weights) != 1 || r.Weights[0].Name != "run_command" || r.Weights[0].Pulls != 2 {
		t.Fatalf("linked feedback: %+v", r)
	}
	s := statsByName(t, c)["run_command"]
	if s.Feedbacks != 2 || s.MeanScore == nil || math.Abs(*s.MeanScore-(-0.25)) > 1e-12 || s.Calls != 4 {
		t.Fatalf("run_command stats after feedback: %+v", s)
	}
	lines, _ := exportAll(t, c, "feedback", 10)
	var runReq string
	for _, rec := range th.audit.all() {
		if rec.CorrelationID == "run-2" {
			runReq = rec.ReqID
		}
	}
	if len(lines) != 2 || lines[0]["call_req_id"] != runReq || runReq == "" {
		t.Fatalf("feedback export does not link the call %s: %v", runReq, lines)
	}
}

// TestExportFile writes feedback and experience to JSON Lines files under
// the plugin's data directory.
func TestExportFile(t *testing.T) {
	dir := t.TempDir()
	th, _ := startHost(t, dir)
	c := connect(t, th.h)
	ctx := aeptest.Context(t)
	feedback(t, c, fb(7, msg.FeedbackTypePOSITIVE, "grep", "")...)
	exps := make([]msg.Experience, 1200)
	for i := range exps {
		exps[i] = msg.Experience{State: json.RawMessage(`[1]`), Action: json.RawMessage(`0`), NextState: json.RawMessage(`[2]`), EpisodeID: "e", Step: i, Reward: float64(i)}
	}
	if _, err := c.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: exps}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what msg.LearnExportReqWhat
		n    int
	}{{"feedback", 7}, {"experience", 1200}} {
		r, err := c.LearnExport(ctx, &msg.LearnExportReq{What: tc.what, ToFile: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Path == nil || r.Jsonl != nil || r.Count != tc.n || !strings.HasPrefix(*r.Path, "export/") {
			t.Fatalf("%s: %+v", tc.what, r)
		}
		f, err := os.Open(filepath.Join(dir, learn.ModuleID, filepath.FromSlash(*r.Path)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s line %d: %v", tc.what, n, err)
			}
			if tc.what == "experience" && m["step"] != float64(n) {
				t.Fatalf("line %d: %v", n, m)
			}
			n++
		}
		f.Close()
		if n != tc.n {
			t.Fatalf("%s file has %d lines, want %d", tc.what, n, tc.n)
		}
	}
	_, err := c.LearnExport(ctx, &msg.LearnExportReq{What: "feedback", Cursor: aeptest.Ptr("x")})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
}

// TestPersistsAcrossRestart records feedback, experience and calls, stops
// the host and its store, and starts a new host on the same data directory
// and store: SQLite, and PostgreSQL in a fresh schema when one is available
// (internal/pgtest; required under CI).
func TestPersistsAcrossRestart(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testRestart(t, "") })
	t.Run("postgres", func(t *testing.T) {
		schema := "aep_learn_test_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		dsn := pgtest.DSN(t, schema)
		t.Cleanup(func() {
			db, err := sql.Open("pgx", dsn)
			if err == nil {
				_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
				db.Close()
			}
		})
		testRestart(t, dsn)
	})
}

func testRestart(t *testing.T, dsn string) {
	dir := t.TempDir()
	th, stop := startHostDSN(t, dir, dsn)
	c := connect(t, th.h)
	ctx := aeptest.Context(t)
	feedback(t, c, append(fb(3, msg.FeedbackTypePOSITIVE, "grep", "search"), fb(2, msg.FeedbackTypeCORRECTIVE, "find", "search")...)...)
	if _, err := c.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: []msg.Experience{
		{State: json.RawMessage(`1`), Action: json.RawMessage(`2`), NextState: json.RawMessage(`3`), EpisodeID: "e", Reward: 1, Terminated: true}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.ToolCall(ctx, &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{"path": "."}}); err != nil {
			t.Fatal(err)
		}
	}
	rank := func(c interface {
		LearnRank(context.Context, *msg.LearnRankReq) (*msg.LearnRankResp, error)
	}) *msg.LearnRankResp {
		r, err := c.LearnRank(ctx, &msg.LearnRankReq{Context: aeptest.Ptr("search"), Strategy: "ucb1"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := rank(c)
	c.Close()
	stop() // the plugin stores the calls still queued before the store closes

	// A new session sees only its own records (TestExportScope); the
	// operator's host-wide scope shows what survived.
	th2, _ := startHostWith(t, dir, dsn, &learn.Plugin{Settings: learn.Settings{ExportScope: learn.ExportHost}})
	c2 := connect(t, th2.h)
	if after := rank(c2); !reflect.DeepEqual(before, after) || len(after.Ranked) != 2 {
		t.Fatalf("ranking before %+v, after restart %+v", before, after)
	}
	fbs, _ := exportAll(t, c2, "feedback", 100)
	exps, _ := exportAll(t, c2, "experience", 100)
	if len(fbs) != 5 || len(exps) != 1 || fbs[4]["correction"] != "use a narrower pattern" || exps[0]["terminated"] != true {
		t.Fatalf("after restart: %d feedback, %d experience: %v %v", len(fbs), len(exps), fbs, exps)
	}
	if s := statsByName(t, c2)["list_dir"]; s.Calls != 3 {
		t.Fatalf("list_dir stats after restart: %+v", s)
	}
}

// TestNeedsStore checks that the plugin refuses to start on a host without
// a store rather than losing what it learns.
func TestNeedsStore(t *testing.T) {
	cfg := aeptest.Config(nil)
	_, err := server.New(context.Background(), cfg, server.WithPlugin(server.PluginSpec{Name: "learn", Type: "learn", Impl: &learn.Plugin{}}))
	if err == nil || !strings.Contains(err.Error(), "store") {
		t.Fatalf("want a store error, got %v", err)
	}
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bad := -1.0
	_, err = server.New(context.Background(), cfg, server.WithStore(st), server.WithPlugin(server.PluginSpec{Name: "learn", Type: "learn", Impl: &learn.Plugin{Settings: learn.Settings{Exploration: &bad}}}))
	if err == nil || !strings.Contains(err.Error(), "exploration") {
		t.Fatalf("negative exploration: %v", err)
	}
}

// TestExportScope: learn/export gives a session the feedback and experience
// it wrote and nothing of another session's, paged or to a file, unless the
// operator set export_scope host; learning itself (rank) stays host-wide.
func TestExportScope(t *testing.T) {
	for _, scope := range []string{"", learn.ExportSession, learn.ExportHost} {
		t.Run("scope="+scope, func(t *testing.T) {
			dir := t.TempDir()
			th, _ := startHostWith(t, dir, "", &learn.Plugin{Settings: learn.Settings{ExportScope: scope}})
			ctx := aeptest.Context(t)
			first, second := connect(t, th.h), connect(t, th.h)
			feedback(t, first, fb(3, msg.FeedbackTypeCORRECTIVE, "grep", "search")...)
			if _, err := first.LearnExperience(ctx, &msg.LearnExperienceReq{Experiences: []msg.Experience{
				{State: json.RawMessage(`1`), Action: json.RawMessage(`2`), NextState: json.RawMessage(`3`), EpisodeID: "secret-episode", Reward: 1}}}); err != nil {
				t.Fatal(err)
			}
			feedback(t, second, fb(1, msg.FeedbackTypePOSITIVE, "find", "search")...)
			count := func(c *client.Client, what msg.LearnExportReqWhat) (paged, filed int) {
				lines, _ := exportAll(t, c, what, 2)
				r, err := c.LearnExport(ctx, &msg.LearnExportReq{What: what, ToFile: true})
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(dir, learn.ModuleID, filepath.FromSlash(*r.Path)))
				if err != nil {
					t.Fatal(err)
				}
				if n := strings.Count(string(b), "\n"); n != r.Count {
					t.Fatalf("file of %d lines, count %d", n, r.Count)
				}
				return len(lines), r.Count
			}
			wantSecond := [2]int{1, 0} // its feedback, no experience
			if scope == learn.ExportHost {
				wantSecond = [2]int{4, 1}
			}
			for _, tc := range []struct {
				who  string
				c    *client.Client
				want [2]int
			}{{"first", first, [2]int{3, 1}}, {"second", second, wantSecond}} {
				if tc.who == "first" && scope == learn.ExportHost {
					tc.want = [2]int{4, 1}
				}
				for i, what := range []msg.LearnExportReqWhat{"feedback", "experience"} {
					paged, filed := count(tc.c, what)
					if paged != tc.want[i] || filed != tc.want[i] {
						t.Errorf("%s session exports %d %s (file %d), want %d", tc.who, paged, what, filed, tc.want[i])
					}
				}
			}
			// What the first session taught still ranks for the second.
			r, err := second.LearnRank(ctx, &msg.LearnRankReq{Context: aeptest.Ptr("search"), Strategy: "greedy"})
			if err != nil || len(r.Ranked) != 2 {
				t.Fatalf("rank from the second session: %+v %v", r, err)
			}
		})
	}
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = server.New(context.Background(), aeptest.Config(nil), server.WithStore(st),
		server.WithPlugin(server.PluginSpec{Name: "learn", Type: "learn", Impl: &learn.Plugin{Settings: learn.Settings{ExportScope: "agent"}}}))
	if err == nil || !strings.Contains(err.Error(), "export_scope") {
		t.Fatalf("unknown export_scope: %v", err)
	}
}
