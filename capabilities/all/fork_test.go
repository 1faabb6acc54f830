package all_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// forkRig is a host with every capability a fork copies, on a real data
// directory and SQLite store, its log and audit file kept for inspection.
type forkRig struct {
	h       *server.Host
	dataDir string
	logs    *syncBuffer
	audit   string
}

func newForkRig(t *testing.T, edit func(*server.Config)) *forkRig {
	t.Helper()
	ctx := context.Background()
	r := &forkRig{dataDir: t.TempDir(), logs: &syncBuffer{}}
	st, err := store.Open(ctx, "", r.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.audit = filepath.Join(r.dataDir, "audit.jsonl")
	cfg := aeptest.Config(func(c *server.Config) {
		for _, p := range []string{"tools", "memory", "env", "proc", "toolkits"} {
			c.Plugins = append(c.Plugins, server.PluginConfig{Name: p, Type: p, Cls: "aep." + p + ".builtin"})
		}
		if edit != nil {
			edit(c)
		}
	})
	r.h, err = server.New(ctx, cfg, server.WithDataDir(r.dataDir), server.WithStore(st), server.WithLogger(log),
		server.WithAuditor(server.NewFileAuditor(r.audit, 10, 1, log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.h.Close(context.Background()) })
	return r
}

var forkCaps = []string{"tools", "memory", "env", "proc", "toolkits"}

// attach connects to a fork by its transport id and handshakes with the
// host token, as an agent reaching a fork does.
func (r *forkRig) attach(t *testing.T, ctx context.Context, id string) *client.Client {
	t.Helper()
	pipe, err := r.h.ConnectLinesTo(id, 64)
	if err != nil {
		t.Fatalf("attach to fork: %v", err)
	}
	c := client.New(client.Lines(pipe, nil))
	t.Cleanup(func() { c.Close() })
	hs, err := c.Handshake(ctx, "grpo-agent", aeptest.Token, forkCaps...)
	if err != nil || !hs.Ok {
		t.Fatalf("fork handshake: %+v %v", hs, err)
	}
	return c
}

func step(t *testing.T, ctx context.Context, c *client.Client, ep string, guess int) *msg.EnvStepResp {
	t.Helper()
	r, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: json.RawMessage(fmt.Sprint(guess))})
	if err != nil {
		t.Fatalf("step %d: %v", guess, err)
	}
	return r
}

type guessObs struct {
	Hint    int `json:"hint"`
	Guesses int `json:"guesses"`
	High    int `json:"high"`
}

func hintOf(t *testing.T, raw json.RawMessage) guessObs {
	t.Helper()
	var o guessObs
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// solve bisects [lo, hi) until the episode terminates and returns the
// secret: the environment's random draw.
func solve(t *testing.T, ctx context.Context, c *client.Client, ep string, lo, hi int) int {
	t.Helper()
	for i := 0; i < 64; i++ {
		g := (lo + hi) / 2
		r := step(t, ctx, c, ep, g)
		switch o := hintOf(t, r.Observation); {
		case r.Terminated:
			return g
		case r.Truncated:
			t.Fatalf("truncated before the secret was found")
		case o.Hint < 0:
			hi = g
		default:
			lo = g + 1
		}
	}
	t.Fatal("no end")
	return 0
}

func writeFile(t *testing.T, ctx context.Context, c *client.Client, path, content string) {
	t.Helper()
	res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "write_file", Arguments: map[string]any{"path": path, "content": content}})
	if err != nil || !res.Success {
		t.Fatalf("write_file: %+v %v", res, err)
	}
}

func readFile(t *testing.T, ctx context.Context, c *client.Client, path string) string {
	t.Helper()
	res, err := c.CallTool(ctx, &msg.ToolCallReq{ToolName: "read_file", Arguments: map[string]any{"path": path}})
	if err != nil || !res.Success {
		t.Fatalf("read_file: %+v %v", res, err)
	}
	d, _ := res.Data.(map[string]any)
	s, _ := d["content"].(string)
	return s
}

func remember(t *testing.T, ctx context.Context, c *client.Client, mem, key, text string) {
	t.Helper()
	raw, _ := json.Marshal(text)
	if _, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mem, Entries: []msg.MemoryEntry{{Key: key, Tier: "working", Content: raw}}}); err != nil {
		t.Fatal(err)
	}
}

func recall(t *testing.T, ctx context.Context, c *client.Client, mem, key string) string {
	t.Helper()
	r, err := c.MemoryRetrieve(ctx, &msg.MemoryRetrieveReq{MemoryID: mem, Keys: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 1 {
		return ""
	}
	var s string
	json.Unmarshal(r.Entries[0].Content, &s)
	return s
}

// The GRPO shape: one session advances an episode 5 steps, forks 8 ways,
// and each fork continues with its own actions. All forks start exactly
// where the parent stood (observation, step, reward) and hold the same
// random state: each finds the same secret, and a reset without a seed
// draws the same next secret in every fork and in the parent. The
// parent's episode is unchanged by what the forks did.
func TestForkGRPO(t *testing.T) {
	ctx := aeptest.Context(t)
	r := newForkRig(t, nil)
	parent := aeptest.Connect(t, r.h, forkCaps...)
	opts := json.RawMessage(`{"high": 1000000, "max_steps": 60}`)
	reset, err := parent.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(11), Options: &opts})
	if err != nil {
		t.Fatal(err)
	}
	ep := reset.EpisodeID
	lo, hi := 0, 1000000
	var prefix []string
	for i := 0; i < 5; i++ {
		// A fixed, poor policy keeps the episode open after 5 steps.
		g := lo + (hi-lo)/7
		s := step(t, ctx, parent, ep, g)
		prefix = append(prefix, string(s.Observation))
		if hintOf(t, s.Observation).Hint < 0 {
			hi = g
		} else {
			lo = g + 1
		}
	}
	at5, err := parent.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep})
	if err != nil || at5.Step != 5 {
		t.Fatalf("parent at 5: %+v %v", at5, err)
	}

	fork, err := parent.SessionFork(ctx, &msg.SessionForkReq{Count: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(fork.Forks) != 8 || fork.HandshakeTimeout <= 0 {
		t.Fatalf("fork reply %+v", fork)
	}
	secrets := map[int]int{}
	nexts := map[int]int{}
	afterFirst := map[string]bool{}
	for i, f := range fork.Forks {
		c := r.attach(t, ctx, f.SessionID)
		if aeptest.Handle(t, c) != f.Handle {
			t.Fatalf("fork %d: handle %s, reply said %s", i, aeptest.Handle(t, c), f.Handle)
		}
		o, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep})
		if err != nil {
			t.Fatalf("fork %d observe: %v", i, err)
		}
		if o.Step != 5 || string(o.Observation) != string(at5.Observation) || o.TotalReward != at5.TotalReward || o.Status != at5.Status {
			t.Fatalf("fork %d starts at %+v, the parent stood at %+v", i, o, at5)
		}
		// Each fork continues differently: its first guess is its own.
		g := lo + (i+1)*(hi-lo)/10
		s := step(t, ctx, c, ep, g)
		if s.Step != 6 {
			t.Fatalf("fork %d: step %d after its first own action", i, s.Step)
		}
		afterFirst[string(s.Observation)+fmt.Sprint(g)] = true
		flo, fhi := lo, hi
		if hintOf(t, s.Observation).Hint < 0 {
			fhi = g
		} else if !s.Terminated {
			flo = g + 1
		}
		if s.Terminated {
			secrets[i] = g
		} else {
			secrets[i] = solve(t, ctx, c, ep, flo, fhi)
		}
		// The random state came along: the next draw is the same too.
		nr, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", EpisodeID: &ep})
		if err != nil {
			t.Fatal(err)
		}
		nexts[i] = solve(t, ctx, c, nr.EpisodeID, 0, hintOf(t, nr.Observation).High)
	}
	if len(afterFirst) != 8 {
		t.Fatalf("the forks did not diverge: %d distinct continuations", len(afterFirst))
	}
	for i := range 8 {
		if secrets[i] != secrets[0] || nexts[i] != nexts[0] {
			t.Fatalf("forks drew differently: secrets %v, next secrets %v", secrets, nexts)
		}
	}
	// The parent is where it was, and its random state is the forks'.
	o, err := parent.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep})
	if err != nil || o.Step != 5 || string(o.Observation) != string(at5.Observation) {
		t.Fatalf("parent after the forks: %+v %v", o, err)
	}
	if got := solve(t, ctx, parent, ep, lo, hi); got != secrets[0] {
		t.Fatalf("parent's secret %d, forks' %d", got, secrets[0])
	}
	nr, err := parent.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", EpisodeID: &ep})
	if err != nil {
		t.Fatal(err)
	}
	if got := solve(t, ctx, parent, nr.EpisodeID, 0, hintOf(t, nr.Observation).High); got != nexts[0] {
		t.Fatalf("parent's next secret %d, forks' %d", got, nexts[0])
	}
	if len(prefix) != 5 {
		t.Fatal(prefix)
	}
}

// Forks are isolated from each other and from their parent: files,
// working memory and episodes each fork changes stay its own; a running
// process is listed as not forked; a toolkit configured without a secret
// is configured in the fork, one configured with a secret is not.
func TestForkIsolation(t *testing.T) {
	ctx := aeptest.Context(t)
	r := newForkRig(t, nil)
	parent := aeptest.Connect(t, r.h, forkCaps...)
	writeFile(t, ctx, parent, "notes/plan.txt", "parent plan")
	mem, err := parent.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	remember(t, ctx, parent, mem.MemoryID, "goal", "parent goal")
	reset, err := parent.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(3)})
	if err != nil {
		t.Fatal(err)
	}
	step(t, ctx, parent, reset.EpisodeID, 50)
	sp, err := parent.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	emptySessionFile(t, r.dataDir, parent, "app.db")
	res, err := parent.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql",
		Config: msg.ToolkitConfigureReqConfig{"driver": "sqlite", "database": "app.db", "mode": "read_only"}})
	if err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure: %+v %v", res, err)
	}

	fork, err := parent.SessionFork(ctx, &msg.SessionForkReq{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Copy == nil || *fork.Copy == msg.SessionForkRespCopyNone {
		t.Fatalf("copy %v, want the parent's file copied", fork.Copy)
	}
	if len(fork.NotForked) != 1 || fork.NotForked[0].Kind != "process" || fork.NotForked[0].ID != sp.Process.ProcID || fork.NotForked[0].Plugin != "proc" {
		t.Fatalf("not_forked %+v, want the running process", fork.NotForked)
	}
	a, b := r.attach(t, ctx, fork.Forks[0].SessionID), r.attach(t, ctx, fork.Forks[1].SessionID)

	for name, c := range map[string]*client.Client{"fork a": a, "fork b": b} {
		if got := readFile(t, ctx, c, "notes/plan.txt"); got != "parent plan" {
			t.Fatalf("%s reads %q", name, got)
		}
		if got := recall(t, ctx, c, mem.MemoryID, "goal"); got != "parent goal" {
			t.Fatalf("%s recalls %q", name, got)
		}
		tl, err := c.ListTools(ctx, &msg.ToolListReq{})
		if err != nil {
			t.Fatal(err)
		}
		configured := false
		for _, d := range tl.Tools {
			configured = configured || (d.Toolkit != nil && *d.Toolkit == "sql")
		}
		if !configured {
			t.Fatalf("%s: the sql toolkit (configured without a secret) is not configured", name)
		}
	}
	writeFile(t, ctx, a, "notes/plan.txt", "a's plan")
	remember(t, ctx, a, mem.MemoryID, "goal", "a's goal")
	step(t, ctx, a, reset.EpisodeID, 10)
	step(t, ctx, a, reset.EpisodeID, 20)

	for _, tc := range []struct {
		name      string
		c         *client.Client
		file, mem string
		steps     int
	}{
		{"fork a", a, "a's plan", "a's goal", 3},
		{"fork b", b, "parent plan", "parent goal", 1},
		{"parent", parent, "parent plan", "parent goal", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readFile(t, ctx, tc.c, "notes/plan.txt"); got != tc.file {
				t.Errorf("file %q, want %q", got, tc.file)
			}
			if got := recall(t, ctx, tc.c, mem.MemoryID, "goal"); got != tc.mem {
				t.Errorf("memory %q, want %q", got, tc.mem)
			}
			o, err := tc.c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: reset.EpisodeID})
			if err != nil || o.Step != tc.steps {
				t.Errorf("episode %+v %v, want step %d", o, err, tc.steps)
			}
		})
	}
	// The fork's process table lists the process as lost; the parent's still runs it.
	pl, err := a.ProcList(ctx, &msg.ProcListReq{})
	if err != nil || len(pl.Processes) != 1 || pl.Processes[0].State != msg.ProcRecordStateLost {
		t.Fatalf("fork's processes %+v %v", pl, err)
	}
	pp, err := parent.ProcList(ctx, &msg.ProcListReq{})
	if err != nil || len(pp.Processes) != 1 || pp.Processes[0].State != msg.ProcRecordStateRunning {
		t.Fatalf("parent's processes %+v %v", pp, err)
	}
}

// A toolkit configured with a secret is not configured in a fork, and the
// reply says so; the secret is nowhere in the fork's state.
func TestForkToolkitWithSecret(t *testing.T) {
	ctx := aeptest.Context(t)
	r := newForkRig(t, nil)
	parent := aeptest.Connect(t, r.h, forkCaps...)
	emptySessionFile(t, r.dataDir, parent, "app.db")
	const password = "pw-fork-canary-91b2"
	res, err := parent.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql",
		Config: msg.ToolkitConfigureReqConfig{"driver": "sqlite", "database": "app.db", "mode": "read_only", "password": password}})
	if err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure: %+v %v", res, err)
	}
	fork, err := parent.SessionFork(ctx, &msg.SessionForkReq{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(fork.NotForked) != 1 || fork.NotForked[0].Kind != "toolkit" || fork.NotForked[0].ID != "sql" {
		t.Fatalf("not_forked %+v", fork.NotForked)
	}
	c := r.attach(t, ctx, fork.Forks[0].SessionID)
	kit, err := c.GetToolkit(ctx, "sql")
	if err != nil || kit.Configured {
		t.Fatalf("fork's sql toolkit %+v %v, want not configured", kit, err)
	}
	snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(r.dataDir, "snapshots", snap.SnapshotID+".json"))
	if err != nil || strings.Contains(string(b), password) {
		t.Fatalf("fork snapshot holds the password (%v)", err)
	}
}

// A fork's transport id goes to the sender in the reply and nowhere else:
// not to the other forks, not to the log, the audit file or the names of
// the data directory; once a fork has handshaken nobody else can attach
// to it by its id.
func TestForkIDReachesNoOtherSession(t *testing.T) {
	ctx := aeptest.Context(t)
	r := newForkRig(t, nil)
	parent := aeptest.Connect(t, r.h, forkCaps...)
	writeFile(t, ctx, parent, "f.txt", "x")
	fork, err := parent.SessionFork(ctx, &msg.SessionForkReq{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for i, f := range fork.Forks {
		c := r.attach(t, ctx, f.SessionID)
		info, err := c.SessionInfo(ctx, &msg.SessionInfoReq{})
		if err != nil {
			t.Fatal(err)
		}
		if info.SessionID != f.SessionID || info.ParentHandle != nil {
			t.Fatalf("fork %d info %+v", i, info)
		}
		b, _ := json.Marshal(info)
		seen = append(seen, string(b))
		if _, err := r.h.ConnectLinesTo(f.SessionID, 8); err == nil {
			t.Fatalf("fork %d: attached twice", i)
		}
	}
	pinfo, err := parent.SessionInfo(ctx, &msg.SessionInfoReq{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(pinfo)
	seen = append(seen, string(b))
	if err := r.h.Close(ctx); err != nil { // flushes the audit file
		t.Fatal(err)
	}
	audit, _ := os.ReadFile(r.audit)
	var names []string
	filepath.WalkDir(r.dataDir, func(p string, d os.DirEntry, err error) error {
		names = append(names, p)
		return nil
	})
	for i, f := range fork.Forks {
		for j, s := range seen {
			if j != i && strings.Contains(s, f.SessionID) {
				t.Errorf("fork %d's id reached session %d", i, j)
			}
		}
		if strings.Contains(string(r.logs.Bytes()), f.SessionID) || strings.Contains(string(audit), f.SessionID) {
			t.Errorf("fork %d's id is in the log or the audit file", i)
		}
		if strings.Contains(strings.Join(names, "\n"), f.SessionID) {
			t.Errorf("fork %d's id names a file", i)
		}
		if !strings.Contains(string(r.logs.Bytes()), f.Handle) {
			t.Errorf("fork %d's handle is not in the log", i)
		}
	}
}

// Forks count against max_sessions from their creation, and a fork
// that cannot be made in full leaves none behind; a fork from a snapshot
// starts from the snapshot's state; a fork that never handshakes is closed
// like any pending session.
func TestForkLimitsAndSnapshots(t *testing.T) {
	ctx := aeptest.Context(t)
	r := newForkRig(t, func(c *server.Config) {
		c.Server.Limits.MaxSessions = 4
		c.Server.Limits.HandshakeTimeout = server.Duration(300 * time.Millisecond)
	})
	parent := aeptest.Connect(t, r.h, forkCaps...)
	mem, err := parent.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	remember(t, ctx, parent, mem.MemoryID, "goal", "at the snapshot")
	snap, err := parent.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	remember(t, ctx, parent, mem.MemoryID, "goal", "after the snapshot")

	for _, tc := range []struct {
		name   string
		req    msg.SessionForkReq
		code   wire.Code
		reason string
	}{
		{"beyond max_sessions", msg.SessionForkReq{Count: 4}, wire.CodeRuntimeError, "too_many_sessions"},
		{"unknown snapshot", msg.SessionForkReq{Count: 1, SnapshotID: aeptest.Ptr("sql-00000000000000000000000000000000")}, wire.CodeRuntimeError, "not_found"},
		{"not a snapshot id", msg.SessionForkReq{Count: 1, SnapshotID: aeptest.Ptr("../x")}, wire.CodeRuntimeError, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parent.SessionFork(ctx, &tc.req)
			if tc.reason != "" {
				we := aeptest.WantReason(t, err, tc.code, tc.reason)
				if we.Retryable() != (tc.reason == "too_many_sessions") {
					t.Fatalf("retryable %v", we.Retryable())
				}
			} else {
				aeptest.WantError(t, err, tc.code, "")
			}
			if n := r.h.LiveSessions(); n != 1 {
				t.Fatalf("%d live sessions after a refused fork", n)
			}
		})
	}
	// A subagent's session cannot fork (its forks would shed its limits).
	sub := newForkRig(t, func(c *server.Config) {
		c.Plugins = append(c.Plugins, server.PluginConfig{Name: "subagents", Type: "subagents", Cls: "aep.subagents.builtin"})
	})
	top := aeptest.Connect(t, sub.h, "memory", "subagents")
	sp, err := top.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "helper", MemoryScope: "isolated"})
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := sub.h.ConnectLinesTo(sp.SessionID, 64)
	if err != nil {
		t.Fatal(err)
	}
	kid := client.New(client.Lines(pipe, nil))
	defer kid.Close()
	if hs, err := kid.Handshake(ctx, "helper", sp.AuthToken, "memory"); err != nil || !hs.Ok {
		t.Fatalf("child handshake %+v %v", hs, err)
	}
	_, err = kid.SessionFork(ctx, &msg.SessionForkReq{Count: 1})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "denied")

	// None was kept: three fit now.
	fork, err := parent.SessionFork(ctx, &msg.SessionForkReq{Count: 3, SnapshotID: &snap.SnapshotID})
	if err != nil {
		t.Fatal(err)
	}
	c := r.attach(t, ctx, fork.Forks[0].SessionID)
	if got := recall(t, ctx, c, mem.MemoryID, "goal"); got != "at the snapshot" {
		t.Fatalf("fork from the snapshot recalls %q", got)
	}
	// The two never attached are closed after the handshake timeout.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ok1 := r.h.Session(fork.Forks[1].SessionID)
		_, ok2 := r.h.Session(fork.Forks[2].SessionID)
		if !ok1 && !ok2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unattached forks were not closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// emptySessionFile makes an empty file in the directory of c's session,
// where the sql toolkit's databases live.
func emptySessionFile(t *testing.T, dataDir string, c *client.Client, name string) {
	t.Helper()
	dir := filepath.Join(dataDir, "sessions", aeptest.Handle(t, c))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
