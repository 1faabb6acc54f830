package persist_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/wire"
)

// TestPointsOnTheWire: every reply carries the session's point, which
// only state-changing requests move; a snapshot records the point it
// covers, and its listing says it (docs/DECISIONS.md, Points).
func TestPointsOnTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"notes"}, "")
	a := r.connect(t, ctx)
	if got := a.Point(); got != 0 {
		t.Fatalf("a new session's point %d, want 0", got)
	}
	for i, text := range []string{"one", "two", "three"} {
		a.say(t, ctx, text)
		if got := a.Point(); got != uint64(i+1) {
			t.Fatalf("after %d state-changing requests the point is %d", i+1, got)
		}
	}
	a.notes(t, ctx) // a read: the point stays
	if got := a.Point(); got != 3 {
		t.Fatalf("a read moved the point to %d", got)
	}
	for _, target := range []string{"file", "sql"} {
		snap, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
		if err != nil {
			t.Fatal(err)
		}
		if snap.CoversPoint == nil || *snap.CoversPoint != 3 {
			t.Errorf("%s snapshot covers %v, want 3", target, snap.CoversPoint)
		}
	}
	list, err := a.SessionSnapshotList(ctx, &msg.SessionSnapshotListReq{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Snapshots) != 2 {
		t.Fatalf("%d snapshots listed, want 2", len(list.Snapshots))
	}
	for _, s := range list.Snapshots {
		if s.CoversPoint == nil || *s.CoversPoint != 3 {
			t.Errorf("listed %s covers %v, want 3", s.SnapshotID, s.CoversPoint)
		}
	}
}

// TestRestoreNeverHidesAGap: a restore that would resume a client from an
// earlier point than it saw is refused, runtime_error point_gap naming
// what would be lost, and changes nothing; accept_gap restores it and the
// reply says what was lost; without last_point nothing is checked. The
// session resumes from the snapshot's point.
func TestRestoreNeverHidesAGap(t *testing.T) {
	for _, target := range []string{"file", "sql"} {
		t.Run(target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"notes"}, "")
			a := r.connect(t, ctx)
			a.say(t, ctx, "one")
			a.say(t, ctx, "two")
			snap, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
			if err != nil {
				t.Fatal(err)
			}
			a.say(t, ctx, "three")
			a.say(t, ctx, "four")
			last := int(a.Point())
			if last != 4 {
				t.Fatalf("point %d, want 4", last)
			}

			_, err = a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID, LastPoint: &last})
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeRuntimeError || wire.ReasonOf(we.Detail) != "point_gap" {
				t.Fatalf("restore below the last seen point: %v, want runtime_error point_gap", err)
			}
			d := we.Detail.(map[string]any)
			if d["point"] != float64(2) || d["last_point"] != float64(4) || d["lost"] != float64(2) || d["snapshot_id"] != snap.SnapshotID {
				t.Errorf("gap detail %v, want point 2, last_point 4, lost 2 and the snapshot", d)
			}
			if !strings.Contains(we.Message, "lose 2 acknowledged") {
				t.Errorf("message %q does not say what would be lost", we.Message)
			}
			if got := strings.Join(a.notes(t, ctx), ","); got != "one,two,three,four" {
				t.Fatalf("a refused restore changed the state: %s", got)
			}
			if got := a.Point(); got != 4 {
				t.Fatalf("a refused restore moved the point to %d", got)
			}

			// The same snapshot, covering the last seen point: restored.
			two := 2
			resp, err := a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID, LastPoint: &two})
			if err != nil {
				t.Fatal(err)
			}
			if resp.FromPoint == nil || *resp.FromPoint != 2 || resp.Gap != nil {
				t.Errorf("restore covering the point: from %v, gap %+v", resp.FromPoint, resp.Gap)
			}
			if got := a.Point(); got != 2 {
				t.Errorf("after the restore the client's point is %d, want the snapshot's 2", got)
			}
			a.say(t, ctx, "three-again")
			if got := a.Point(); got != 3 {
				t.Errorf("the next state-changing request after the restore took point %d, want 3", got)
			}

			// accept_gap: restored, and the reply says what was lost.
			a.say(t, ctx, "four-again")
			last = int(a.Point())
			yes := true
			resp, err = a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID, LastPoint: &last, AcceptGap: &yes})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Gap == nil || resp.Gap.Point != 2 || resp.Gap.LastPoint != 4 || resp.Gap.Lost != 2 {
				t.Errorf("accepted gap %+v, want point 2, last_point 4, lost 2", resp.Gap)
			}
			if got := strings.Join(a.notes(t, ctx), ","); got != "one,two" {
				t.Errorf("after the accepted restore: %s", got)
			}

			// No last_point: the caller rolls back on purpose, unchecked.
			a.say(t, ctx, "x")
			a.say(t, ctx, "y")
			if _, err := a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID}); err != nil {
				t.Fatalf("restore without last_point: %v", err)
			}
			if got := a.Point(); got != 2 {
				t.Errorf("point %d after a plain restore, want 2", got)
			}
		})
	}
}

// TestRestoreFromSessionChecksThePoint: a session that moves restores
// from_session with the point its client saw; a newest snapshot older
// than that is refused until one that covers it is written.
func TestRestoreFromSessionChecksThePoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"notes"}, "")
	a := r.connect(t, ctx)
	a.say(t, ctx, "one")
	if _, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"}); err != nil {
		t.Fatal(err)
	}
	a.say(t, ctx, "two")
	last, from := int(a.Point()), a.SessionID()

	b := r.connect(t, ctx)
	_, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: &from, LastPoint: &last})
	if wire.ReasonOf(wireDetail(err)) != "point_gap" {
		t.Fatalf("from_session whose newest snapshot is older than the last seen point: %v, want point_gap", err)
	}
	if got := b.notes(t, ctx); len(got) != 0 {
		t.Fatalf("a refused restore changed the new session: %v", got)
	}
	if _, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"}); err != nil {
		t.Fatal(err)
	}
	resp, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: &from, LastPoint: &last})
	if err != nil {
		t.Fatal(err)
	}
	if resp.FromPoint == nil || *resp.FromPoint != 2 || b.Point() != 2 {
		t.Errorf("resumed from %v (client point %d), want 2", resp.FromPoint, b.Point())
	}
	if got := strings.Join(b.notes(t, ctx), ","); got != "one,two" {
		t.Errorf("restored %s", got)
	}
}

// TestForkSaysItsPoint: forks start at the point their state was taken,
// which the fork reply says and each fork's handshake reply carries.
func TestForkSaysItsPoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"notes"}, "")
	a := r.connect(t, ctx)
	a.say(t, ctx, "one")
	a.say(t, ctx, "two")
	reg := msg.Registry().Union(testproto.Registry())
	forks, err := a.Fork(ctx, 1, client.ForkAttach(client.InProcessAttach(r.h, client.JSON, reg)))
	if err != nil {
		t.Fatal(err)
	}
	defer forks.Close()
	resp := forks.Reply
	if resp.FromPoint == nil || *resp.FromPoint != 2 {
		t.Fatalf("fork from point %v, want 2", resp.FromPoint)
	}
	if got := a.Point(); got != 2 {
		t.Errorf("forking moved the sender's point to %d", got)
	}
	fk := &agent{Client: forks.Clients[0], echo: testproto.Client{Requester: forks.Clients[0]}}
	if got := fk.Point(); got != 2 {
		t.Errorf("the fork's handshake carried point %d, want 2", got)
	}
	fk.say(t, ctx, "three")
	if got := fk.Point(); got != 3 {
		t.Errorf("the fork's next state-changing request took point %d, want 3", got)
	}
}

func wireDetail(err error) any {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Detail
	}
	return nil
}
