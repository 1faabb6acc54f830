package persist_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/wire"
)

// logLines returns the JSON log lines whose msg is what, in order.
func logLines(t *testing.T, log *lockedBuffer, what string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == what {
			out = append(out, m)
		}
	}
	return out
}

// gauge reads an unlabelled gauge of r's host.
func gauge(t *testing.T, r *rig, name string) float64 {
	t.Helper()
	fams, err := r.h.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// handleOf is the public handle of a's session on r's host.
func (r *rig) handleOf(t *testing.T, a *agent) string {
	t.Helper()
	s, ok := r.h.Session(a.SessionID())
	if !ok {
		t.Fatal("session not found")
	}
	return s.Handle()
}

// TestDrainNamesTheSnapshot: a drain snapshots before it tells a client
// to move. A request refused as shutting_down names the snapshot its
// session moves with and the point it covers, which is the last point
// the client saw; restoring it from_session with that point resumes
// everything acknowledged.
func TestDrainNamesTheSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"notes"}, "")
	a := r.connect(t, ctx)
	for _, s := range []string{"one", "two", "three"} {
		a.say(t, ctx, s)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := r.h.Drain(dctx, true)
	dcancel()
	if err != nil || len(res.Snapshots) != 1 || res.NotSaved != 0 {
		t.Fatalf("drain: %+v %v", res, err)
	}
	_, err = a.echo.EchoSay(ctx, &testproto.EchoSayReq{Text: "four"})
	var we *wire.Error
	if !errors.As(err, &we) || wire.ReasonOf(we.Detail) != "shutting_down" {
		t.Fatalf("a request after the seal: %v, want shutting_down", err)
	}
	d := we.Detail.(map[string]any)
	if d["snapshot_id"] != res.Snapshots[r.handleOf(t, a)] || d["point"] != float64(3) {
		t.Errorf("shutting_down detail %v, want the drain's snapshot %s at point 3", d, res.Snapshots[r.handleOf(t, a)])
	}
	if a.Point() != 3 {
		t.Fatalf("client point %d", a.Point())
	}
	r.h.Operator().Undrain()
	b := r.connect(t, ctx)
	from, last := a.SessionID(), int(a.Point())
	resp, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: &from, LastPoint: &last})
	if err != nil {
		t.Fatal(err)
	}
	if resp.SnapshotID != d["snapshot_id"] || strings.Join(b.notes(t, ctx), ",") != "one,two,three" {
		t.Errorf("moved with %s: %v", resp.SnapshotID, b.notes(t, ctx))
	}
}

// TestDrainOrderAndDeadline: a drain snapshots the most recently active
// sessions first, drain_parallel at once, and its snapshot phase ends by
// its deadline: every session is saved, or logged and counted as not
// saved (aep_drain_sessions_not_saved).
func TestDrainOrderAndDeadline(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		log := &lockedBuffer{}
		r := startRigWith(t, ctx, t.TempDir(), log, "  snapshots:\n    drain_parallel: 1\n")
		var want []string
		for i := range 5 {
			a := r.connect(t, ctx)
			a.say(t, ctx, fmt.Sprint(i))
			want = append([]string{r.handleOf(t, a)}, want...) // the newest first
			time.Sleep(2 * time.Millisecond)                   // activity times apart
		}
		res, err := r.h.Drain(ctx, true)
		if err != nil || len(res.Snapshots) != 5 {
			t.Fatalf("drain: %+v %v", res, err)
		}
		var got []string
		for _, l := range logLines(t, log, "session snapshotted on drain") {
			got = append(got, l["session"].(string))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("drain order\n got %v\nwant %v (most recently active first)", got, want)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		log := &lockedBuffer{}
		r := startRigWith(t, ctx, t.TempDir(), log, "  snapshots:\n    drain_parallel: 2\n")
		const n = 150
		for i := range n {
			a := r.connect(t, ctx)
			a.say(t, ctx, fmt.Sprint(i))
		}
		const timeout = 150 * time.Millisecond
		dctx, dcancel := context.WithTimeout(ctx, timeout)
		t0 := time.Now()
		res, _ := r.h.Drain(dctx, true)
		took := time.Since(t0)
		dcancel()
		// The bound is the drain's deadline; what is in flight at it
		// answers its context at once (a second of slack for a loaded
		// machine, far below a snapshot per session).
		if took > timeout+time.Second {
			t.Errorf("the drain took %v with a %v deadline", took, timeout)
		}
		if len(res.Snapshots)+res.NotSaved != n {
			t.Errorf("%d saved + %d not saved, want %d sessions accounted for", len(res.Snapshots), res.NotSaved, n)
		}
		if got := len(logLines(t, log, "session not saved on drain")); got != res.NotSaved {
			t.Errorf("%d sessions logged as not saved, %d counted", got, res.NotSaved)
		}
		if got := gauge(t, r, "aep_drain_sessions_not_saved"); int(got) != res.NotSaved {
			t.Errorf("aep_drain_sessions_not_saved %v, want %d", got, res.NotSaved)
		}
		t.Logf("%d of %d sessions saved within %v (took %v)", len(res.Snapshots), n, timeout, took)
	})
}
