package subagents_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"reflect"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aephost/aep/capabilities/subagents"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// Each memory scope, proven by working-tier reads and writes from both the
// parent's and the child's session, through the memory capability.
func TestMemoryScopes(t *testing.T) {
	for _, tc := range []struct {
		scope string
		// What the child reads for "plan" after the parent changed it from
		// "one" to "two" after the spawn.
		childReads string
		// Whether the child's write succeeds and whether the parent sees it.
		childWrites, parentSees bool
	}{
		{"shared", "two", true, true},
		{"restricted", "two", false, false},
		{"isolated", "", true, false},
		{"snapshot", "one", true, false},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			h := newHost(t, nil, nil)
			p := root(t, h)
			pm := initMem(t, p)
			if err := put(p, t, pm, "plan", "one"); err != nil {
				t.Fatal(err)
			}
			r := spawn(t, p, &msg.SubagentSpawnReq{Name: "w", MemoryScope: msg.SubagentSpawnReqMemoryScope(tc.scope)})
			if string(r.Subagent.MemoryScope) != tc.scope {
				t.Fatalf("record scope %q", r.Subagent.MemoryScope)
			}
			if err := put(p, t, pm, "plan", "two"); err != nil {
				t.Fatal(err)
			}
			c := child(t, h, inprocJSON, r)
			cm := initMem(t, c)
			if got := get(t, c, cm, "plan"); got != tc.childReads {
				t.Fatalf("child reads plan %q, want %q", got, tc.childReads)
			}
			err := put(c, t, cm, "note", "from child")
			if tc.childWrites && err != nil {
				t.Fatalf("child write: %v", err)
			}
			if !tc.childWrites {
				// Refused by the scope, not by the message's shape.
				aeptest.WantError(t, err, wire.CodeRuntimeError, "read-only")
			}
			want := ""
			if tc.parentSees {
				want = "from child"
			}
			if got := get(t, p, pm, "note"); got != want {
				t.Fatalf("parent reads note %q, want %q", got, want)
			}
			if tc.childWrites {
				if got := get(t, c, cm, "note"); got != "from child" {
					t.Fatalf("child reads its own note %q", got)
				}
			}
			// The parent's later write: seen by shared and restricted only.
			if err := put(p, t, pm, "plan", "three"); err != nil {
				t.Fatal(err)
			}
			later := map[string]string{"shared": "three", "restricted": "three", "isolated": "", "snapshot": "one"}[tc.scope]
			if got := get(t, c, cm, "plan"); got != later {
				t.Fatalf("child reads plan %q after the parent's write, want %q", got, later)
			}
			// A snapshot or isolated child's write of plan never reaches the parent.
			if tc.scope == "snapshot" || tc.scope == "isolated" {
				if err := put(c, t, cm, "plan", "child's plan"); err != nil {
					t.Fatal(err)
				}
				if got := get(t, p, pm, "plan"); got != "three" {
					t.Fatalf("parent's plan became %q", got)
				}
			}
		})
	}
}

// The default scope is isolated: a spawn that names none sees nothing.
func TestDefaultScopeIsolated(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	pm := initMem(t, p)
	if err := put(p, t, pm, "k", "parent"); err != nil {
		t.Fatal(err)
	}
	r := spawn(t, p, &msg.SubagentSpawnReq{Name: "d"})
	if r.Subagent.MemoryScope != "isolated" || r.Subagent.MaxSteps != subagents.DefaultDefaultMaxSteps || r.Subagent.Status != "waiting" {
		t.Fatalf("defaults: %+v", r.Subagent)
	}
	c := child(t, h, inprocDirect, r)
	if got := get(t, c, initMem(t, c), "k"); got != "" {
		t.Fatalf("default-scope child reads %q", got)
	}
}

// Depth: the plugin's max_depth and a spawn's own max_depth bound how deep
// a tree grows; a spawn past either is refused with depth_limit.
func TestDepthLimit(t *testing.T) {
	h := newHost(t, &subagents.Plugin{Settings: subagents.Settings{MaxDepth: 2}}, nil)
	p := root(t, h)
	r1 := spawn(t, p, &msg.SubagentSpawnReq{Name: "d1"})
	c1 := child(t, h, inprocJSON, r1)
	r2 := spawn(t, c1, &msg.SubagentSpawnReq{Name: "d2"})
	if r2.Subagent.Depth != 2 || r2.Subagent.ParentID != r1.SubagentID {
		t.Fatalf("grandchild record %+v", r2.Subagent)
	}
	c2 := child(t, h, inprocJSON, r2)
	_, err := c2.SubagentSpawn(aeptest.Context(t), &msg.SubagentSpawnReq{Name: "d3"})
	we := aeptest.WantReason(t, err, wire.CodeRuntimeError, "depth_limit")
	if d := we.Detail.(map[string]any); fmt.Sprint(d["depth"]) != "3" || fmt.Sprint(d["limit"]) != "2" {
		t.Fatalf("detail %v", we.Detail)
	}

	// max_depth 0: the child may spawn none, though the plugin allows more.
	r0 := spawn(t, p, &msg.SubagentSpawnReq{Name: "leaf", MaxDepth: aeptest.Ptr(0)})
	if r0.Subagent.MaxDepth != 1 {
		t.Fatalf("leaf max_depth %d", r0.Subagent.MaxDepth)
	}
	c0 := child(t, h, inprocJSON, r0)
	_, err = c0.SubagentSpawn(aeptest.Context(t), &msg.SubagentSpawnReq{Name: "no"})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "depth_limit")
	// Nothing was created by the refused spawns.
	if n := len(list(t, p, false)); n != 3 {
		t.Fatalf("root lists %d subagents, want 3", n)
	}
}

func list(t testing.TB, c *client.Client, runningOnly bool) []msg.SubagentRecord {
	t.Helper()
	r, err := c.SubagentList(aeptest.Context(t), &msg.SubagentListReq{RunningOnly: runningOnly})
	if err != nil {
		t.Fatal(err)
	}
	return r.Subagents
}

// Steps: a child may make max_steps requests; the next gets step_limit.
// Handshake and ping do not count; the parent sees the count.
func TestStepLimit(t *testing.T) {
	for _, tr := range []transport{inprocJSON, inprocDirect} {
		t.Run(tr.name, func(t *testing.T) {
			h := newHost(t, nil, nil)
			p := root(t, h)
			r := spawn(t, p, &msg.SubagentSpawnReq{Name: "s", MaxSteps: aeptest.Ptr(3)})
			c := child(t, h, tr, r)
			if _, err := c.Ping(aeptest.Context(t), &msg.Ping{}); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{}); err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
			}
			_, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{})
			we := aeptest.WantReason(t, err, wire.CodeRuntimeError, "step_limit")
			if fmt.Sprint(we.Detail.(map[string]any)["limit"]) != "3" {
				t.Fatalf("detail %v", we.Detail)
			}
			_, err = c.MemoryInit(aeptest.Context(t), &msg.MemoryInitReq{})
			aeptest.WantReason(t, err, wire.CodeRuntimeError, "step_limit")
			if st := status(t, p, r.SubagentID); st.Steps != 3 || st.Status != "running" {
				t.Fatalf("status %+v", st)
			}
			// The parent itself has no step limit.
			for range 5 {
				if _, err := p.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Bad spawns get clear errors and create nothing.
func TestSpawnRefused(t *testing.T) {
	h := newHost(t, &subagents.Plugin{Settings: subagents.Settings{MaxSteps: 100, DefaultMaxSteps: 10, MaxChildren: 2}}, nil)
	p := root(t, h)
	for _, tc := range []struct {
		name string
		req  *msg.SubagentSpawnReq
		code wire.Code
	}{
		{"capability not held", &msg.SubagentSpawnReq{Name: "x", Capabilities: []string{"memory", "proc"}}, wire.CodeRuntimeError},
		{"steps over ceiling", &msg.SubagentSpawnReq{Name: "x", MaxSteps: aeptest.Ptr(101)}, wire.CodeSchemaViolation},
		{"empty name", &msg.SubagentSpawnReq{Name: ""}, wire.CodeSchemaViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.SubagentSpawn(aeptest.Context(t), tc.req)
			aeptest.WantError(t, err, tc.code, "")
		})
	}
	spawn(t, p, &msg.SubagentSpawnReq{Name: "a"})
	spawn(t, p, &msg.SubagentSpawnReq{Name: "b"})
	_, err := p.SubagentSpawn(aeptest.Context(t), &msg.SubagentSpawnReq{Name: "c"})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "children_limit")
	if n := len(list(t, p, false)); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// Capabilities: a child enables only its subset, and aliases are accepted.
func TestCapabilitySubset(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	r := spawn(t, p, &msg.SubagentSpawnReq{Name: "m", Capabilities: []string{"memory"}})
	if !reflect.DeepEqual(r.Subagent.Capabilities, []string{"memory"}) {
		t.Fatalf("caps %v", r.Subagent.Capabilities)
	}
	c := inprocJSON.dial(t, h, r.SessionID)
	hs, err := c.Handshake(aeptest.Context(t), "m", r.AuthToken, "memory", "subagents", "session")
	if err != nil {
		t.Fatal(err)
	}
	// session is always on, a child's too: reported enabled, as it is
	// served (docs/DECISIONS.md, Capability gating).
	want := []msg.CapabilityEntry{{Name: "memory", Enabled: true}, {Name: "subagents", Enabled: false}, {Name: "session", Enabled: true}}
	if !reflect.DeepEqual(hs.AcceptedCaps, want) {
		t.Fatalf("accepted %+v", hs.AcceptedCaps)
	}
	_, err = c.SubagentList(aeptest.Context(t), &msg.SubagentListReq{})
	aeptest.WantError(t, err, wire.CodeCapabilityMissing, "")
	if _, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{}); err != nil {
		t.Fatalf("session/info of a child: %v", err)
	}
}

// A child whose parent never asked for session, and which does not ask
// for it either, is still served session/*, and a child that asks is told
// it is enabled: the namespace is always on, and accepted_caps says what
// is served (spec §2.2, §7 condition 3).
func TestSessionAlwaysOn(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h, "memory", "subagents")
	for _, caps := range [][]string{{"memory"}, {"memory", "session"}} {
		r := spawn(t, p, &msg.SubagentSpawnReq{Name: "s"})
		if !slices.Contains(r.Subagent.Capabilities, "session") {
			t.Errorf("record capabilities %v: session is always on", r.Subagent.Capabilities)
		}
		c := inprocJSON.dial(t, h, r.SessionID)
		hs, err := c.Handshake(aeptest.Context(t), "s", r.AuthToken, caps...)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hs.AcceptedCaps {
			if !e.Enabled {
				t.Errorf("caps %v: %s reported disabled", caps, e.Name)
			}
		}
		info, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{})
		if err != nil {
			t.Fatalf("caps %v: session/info: %v", caps, err)
		}
		if !reflect.DeepEqual(info.AcceptedCaps, hs.AcceptedCaps) {
			t.Errorf("session/info accepted_caps %+v, handshake %+v", info.AcceptedCaps, hs.AcceptedCaps)
		}
	}
	// A subagent may be granted session by name, though its parent never
	// asked for it.
	r := spawn(t, p, &msg.SubagentSpawnReq{Name: "n", Capabilities: []string{"session"}})
	if !reflect.DeepEqual(r.Subagent.Capabilities, []string{"session"}) {
		t.Fatalf("caps %v", r.Subagent.Capabilities)
	}
}

// Tokens: a child's token opens that child only — not a top-level session
// (whose token is the parent's, the host's), not a sibling; the host's
// token does not open a child; and it works once.
func TestChildTokens(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	a := spawn(t, p, &msg.SubagentSpawnReq{Name: "a"})
	b := spawn(t, p, &msg.SubagentSpawnReq{Name: "b"})
	if a.AuthToken == "" || a.AuthToken == b.AuthToken || a.AuthToken == token {
		t.Fatalf("tokens not distinct: %q %q", a.AuthToken, b.AuthToken)
	}
	refused := func(c *client.Client, tok, what string) {
		t.Helper()
		hs, err := c.Handshake(aeptest.Context(t), "x", tok, "memory")
		if hs == nil || hs.Ok {
			t.Fatalf("%s: handshake accepted (%v)", what, err)
		}
		aeptest.WantError(t, err, wire.CodeUnauthorized, "")
	}
	top, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	refused(top, a.AuthToken, "child token on a top-level session")
	// The parent's own (live) session does not take it either.
	_, err = p.Handshake(aeptest.Context(t), "x", a.AuthToken, "memory")
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "already_handshaken")

	cb := inprocJSON.dial(t, h, b.SessionID)
	refused(cb, a.AuthToken, "sibling's token")
	refused(cb, token, "host token on a child")
	child(t, h, inprocJSON, a)
	// b still waits and still takes its own token after the refusals.
	if hs, err := cb.Handshake(aeptest.Context(t), "b", b.AuthToken, "memory"); err != nil || !hs.Ok {
		t.Fatalf("b's own token: %+v %v", hs, err)
	}
	// A live child cannot be attached to again.
	if _, err := h.ConnectLinesTo(a.SessionID, 8); !errors.Is(err, server.ErrNotWaitingChild) {
		t.Fatalf("attach to a live child: %v", err)
	}
	if _, err := h.ConnectLinesTo(p.SessionID(), 8); !errors.Is(err, server.ErrNotWaitingChild) {
		t.Fatalf("attach to a top-level session: %v", err)
	}
}

// Terminate cascades to descendants and leaves siblings running; a
// subagent cannot see or terminate its sibling or its parent.
func TestTerminateCascade(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	ra := spawn(t, p, &msg.SubagentSpawnReq{Name: "a"})
	ca := child(t, h, inprocJSON, ra)
	rb := spawn(t, ca, &msg.SubagentSpawnReq{Name: "b"})
	cb := child(t, h, inprocDirect, rb)
	rw := spawn(t, ca, &msg.SubagentSpawnReq{Name: "waiting"}) // never connected
	rc := spawn(t, p, &msg.SubagentSpawnReq{Name: "c"})
	cc := child(t, h, inprocJSON, rc)

	// Visibility: c knows neither its sibling nor its parent.
	for _, id := range []string{ra.SubagentID, rb.SubagentID, p.SessionID(), handle(t, p), ra.SessionID} {
		_, err := cc.SubagentTerminate(aeptest.Context(t), &msg.SubagentTerminateReq{SubagentID: id})
		aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
		_, err = cc.SubagentStatus(aeptest.Context(t), &msg.SubagentStatusReq{SubagentID: id})
		aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
	}
	if got := len(list(t, ca, false)); got != 2 {
		t.Fatalf("a lists %d, want its 2", got)
	}
	st, err := p.SubagentStatus(aeptest.Context(t), &msg.SubagentStatusReq{SubagentID: ra.SubagentID})
	if err != nil || !reflect.DeepEqual(st.Children, []string{rb.SubagentID, rw.SubagentID}) {
		t.Fatalf("status of a: %+v %v", st, err)
	}

	tr, err := p.SubagentTerminate(aeptest.Context(t), &msg.SubagentTerminateReq{SubagentID: ra.SubagentID, Reason: aeptest.Ptr("done")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ra.SubagentID, rb.SubagentID, rw.SubagentID}; !reflect.DeepEqual(tr.Terminated, want) {
		t.Fatalf("terminated %v, want %v", tr.Terminated, want)
	}
	for _, id := range tr.Terminated {
		waitGone(t, h, id)
		if s := status(t, p, id); s.Status != "terminated" || s.Reason == nil || *s.Reason != "done" || s.EndedAt == nil {
			t.Fatalf("status of %s: %+v", id, s)
		}
	}
	waitDone(t, ca, "a")
	waitDone(t, cb, "b")
	// The sibling runs on.
	if _, err := cc.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{}); err != nil {
		t.Fatalf("sibling: %v", err)
	}
	if s := status(t, p, rc.SubagentID); s.Status != "running" {
		t.Fatalf("sibling status %s", s.Status)
	}
	running := list(t, p, true)
	if len(running) != 1 || running[0].SubagentID != rc.SubagentID {
		t.Fatalf("running %+v", running)
	}
	// Terminating again changes nothing.
	tr, err = p.SubagentTerminate(aeptest.Context(t), &msg.SubagentTerminateReq{SubagentID: ra.SubagentID})
	if err != nil || len(tr.Terminated) != 0 {
		t.Fatalf("second terminate: %+v %v", tr, err)
	}
}

// Closing a parent session closes its subagents and theirs; so does its
// expiry, and a subagent that works keeps its parent from expiring.
func TestParentCloseCascades(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		h := newHost(t, nil, nil)
		p := root(t, h)
		ra := spawn(t, p, &msg.SubagentSpawnReq{Name: "a"})
		ca := child(t, h, overHTTP(t, h), ra)
		rb := spawn(t, ca, &msg.SubagentSpawnReq{Name: "b"})
		cb := child(t, h, inprocJSON, rb)
		rw := spawn(t, ca, &msg.SubagentSpawnReq{Name: "w"})
		p.Close()
		for _, id := range []string{p.SessionID(), ra.SubagentID, rb.SubagentID, rw.SubagentID} {
			waitGone(t, h, id)
		}
		waitDone(t, cb, "grandchild")
		waitDone(t, ca, "child over HTTP")
	})
	// In a bubble of its own (testing/synctest) the host's clock is
	// fake: the child's requests every 100 ms and the 300 ms idle
	// expiry are exactly that, however loaded the machine.
	t.Run("expiry", func(t *testing.T) { synctest.Test(t, testExpiryCascades) })
}

func testExpiryCascades(t *testing.T) {
	{
		h := newHost(t, nil, func(c *server.Config) {
			c.Server.Limits.IdleTimeout = server.Duration(300 * time.Millisecond)
			c.Server.Limits.HandshakeTimeout = server.Duration(time.Minute)
			// No process runs here, and none is made ready: a spare
			// sandbox init's I/O is no event a fake clock can wait for.
			c.Server.Isolation.Sandbox = sandbox.ModeSupervised
		})
		p := root(t, h)
		ra := spawn(t, p, &msg.SubagentSpawnReq{Name: "busy"})
		ca := child(t, h, inprocJSON, ra)
		rw := spawn(t, p, &msg.SubagentSpawnReq{Name: "waiting"})
		// The child works for longer than the idle timeout; the parent is
		// silent meanwhile and stays, because its child's requests count.
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			if _, err := ca.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{}); err != nil {
				t.Fatalf("child request: %v", err)
			}
		}
		if _, ok := h.Session(p.SessionID()); !ok {
			t.Fatal("parent expired while its child worked")
		}
		// Then everyone is silent: the parent expires and takes both children.
		waitGone(t, h, p.SessionID())
		waitGone(t, h, ra.SubagentID)
		waitGone(t, h, rw.SubagentID)
		waitDone(t, ca, "child")
	}
}

// A subagent reached over HTTP (a real loopback server, X-Session-Id) and
// in process with both codecs: it handshakes with its token, reports its
// parent, and uses its capabilities.
func TestReachChild(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	pm := initMem(t, p)
	if err := put(p, t, pm, "goal", "ship"); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []transport{overHTTP(t, h), inprocJSON, inprocDirect} {
		t.Run(tr.name, func(t *testing.T) {
			r := spawn(t, p, &msg.SubagentSpawnReq{Name: tr.name, MemoryScope: "shared"})
			c := child(t, h, tr, r)
			info, err := c.SessionInfo(aeptest.Context(t), &msg.SessionInfoReq{})
			if err != nil {
				t.Fatal(err)
			}
			if info.SessionID != r.SessionID || info.Handle != r.SubagentID || info.ParentHandle == nil || *info.ParentHandle != handle(t, p) || info.AgentID != tr.name {
				t.Fatalf("info %+v", info)
			}
			cm := initMem(t, c)
			if got := get(t, c, cm, "goal"); got != "ship" {
				t.Fatalf("shared child reads %q", got)
			}
			if err := put(c, t, cm, "by-"+tr.name, "hi"); err != nil {
				t.Fatal(err)
			}
			if got := get(t, p, pm, "by-"+tr.name); got != "hi" {
				t.Fatalf("parent reads %q", got)
			}
			if s := status(t, p, r.SubagentID); s.Status != "running" || s.Steps != 4 {
				t.Fatalf("status %+v", s)
			}
			// Shutdown of the child ends it; the record says so.
			if err := c.Shutdown(aeptest.Context(t), 1); err != nil {
				t.Fatal(err)
			}
			waitGone(t, h, r.SubagentID)
			if s := status(t, p, r.SubagentID); s.Status != "ended" || s.Steps != 4 {
				t.Fatalf("after shutdown %+v", s)
			}
		})
	}
}

// Snapshots record the subagent tree; a restore brings the records back as
// ended (their sessions did not survive) under the session restored into,
// and never holds a token.
func TestSnapshotRecordsTree(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	ra := spawn(t, p, &msg.SubagentSpawnReq{Name: "a", MemoryScope: "snapshot"})
	ca := child(t, h, inprocJSON, ra)
	rb := spawn(t, ca, &msg.SubagentSpawnReq{Name: "b"})
	rt := spawn(t, p, &msg.SubagentSpawnReq{Name: "t"})
	if _, err := p.SubagentTerminate(aeptest.Context(t), &msg.SubagentTerminateReq{SubagentID: rt.SubagentID, Reason: aeptest.Ptr("not needed")}); err != nil {
		t.Fatal(err)
	}
	snap, err := p.SessionSnapshot(aeptest.Context(t), &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatalf("snapshot: %v", err) // the kernel refuses one holding a child's token
	}

	p2 := root(t, h)
	live := spawn(t, p2, &msg.SubagentSpawnReq{Name: "live"})
	if _, err := p2.SessionRestore(aeptest.Context(t), &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]msg.SubagentRecord{}
	for _, r := range list(t, p2, false) {
		got[r.Name] = r
	}
	if len(got) != 4 {
		t.Fatalf("restored list %+v", got)
	}
	if got["live"].Status != "waiting" || got["live"].SubagentID != live.SubagentID {
		t.Fatalf("live subagent changed: %+v", got["live"])
	}
	for name, want := range map[string]struct{ status, parent, reason string }{
		"a": {"ended", handle(t, p2), subagents.RestoredReason},
		"b": {"ended", ra.SubagentID, subagents.RestoredReason},
		"t": {"terminated", handle(t, p2), "not needed"},
	} {
		r := got[name]
		if string(r.Status) != want.status || r.ParentID != want.parent || r.Reason == nil || *r.Reason != want.reason {
			t.Errorf("%s: %+v, want %+v", name, r, want)
		}
	}
	if got["a"].MemoryScope != "snapshot" || got["b"].Depth != 2 {
		t.Errorf("fields lost: %+v %+v", got["a"], got["b"])
	}
	// A restored record cannot be terminated into anything, and is not a session.
	tr, err := p2.SubagentTerminate(aeptest.Context(t), &msg.SubagentTerminateReq{SubagentID: ra.SubagentID})
	if err != nil || len(tr.Terminated) != 0 {
		t.Fatalf("terminate restored: %+v %v", tr, err)
	}
	// The original tree is untouched by the restore elsewhere.
	if s := status(t, p, ra.SubagentID); s.Status != "running" {
		t.Fatalf("original a: %+v", s)
	}
	if s := status(t, p, rb.SubagentID); s.Status != "waiting" {
		t.Fatalf("original b: %+v", s)
	}
}

// A memory plugin that refuses the scope aborts the spawn through the
// kernel's ChildObserver, and no session is left behind.
func TestSpawnAbortedByObserver(t *testing.T) {
	h := newHost(t, nil, nil)
	p := root(t, h)
	ps, _ := h.Session(p.SessionID())
	_, _, err := h.SpawnChild(context.Background(), ps, server.ChildOptions{Name: "x", MemoryScope: "bogus"})
	if !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("bad scope: %v", err)
	}
	// The refuser serves no capability, so its entry has no type: the
	// kernel refuses a type that no handler of the module serves.
	obs := &refuser{}
	h2 := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		aeptest.Plugin("subagents", &subagents.Plugin{}),
		{Name: "refuser", Impl: obs},
	})
	c := root(t, h2, "subagents")
	_, err = c.SubagentSpawn(aeptest.Context(t), &msg.SubagentSpawnReq{Name: "x"})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "")
	if obs.child == "" {
		t.Fatal("observer not called")
	}
	if _, ok := h2.Session(obs.child); ok {
		t.Fatal("aborted child still exists")
	}
	if n := len(list(t, c, false)); n != 0 {
		t.Fatalf("%d records after an aborted spawn", n)
	}
}

type refuser struct{ child string }

func (r *refuser) ChildSpawned(ctx context.Context, childID, parentID, scope string) error {
	r.child = childID
	return errors.New("no children today")
}

func (*refuser) Module() server.ModuleInfo { return server.ModuleInfo{ID: "test.refuser"} }
