package persist_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
)

// crashWindow is the window these tests run with: short, so they are
// quick; liveness is the generous bound within which a save must show.
const (
	crashWindow = 400 * time.Millisecond
	liveness    = 15 * time.Second
)

// startWindowRig starts a host with a notes plugin named notes on dsn,
// logging at debug level to its log, with serverExtra under server:.
func startWindowRig(t *testing.T, ctx context.Context, dsn, serverExtra string) *rig {
	t.Helper()
	dir := t.TempDir()
	y := fmt.Sprintf("server:\n  auth_token: %s\n%splugins:\n  - name: notes\n    type: echo\n    cls: aep.test.snapnotes\n    config:\n      secret: %s\n",
		hostCanary, serverExtra, pluginCanary)
	cfg, err := server.ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	h, err := server.New(ctx, cfg, server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithDataDir(dir), server.WithStore(st),
		server.WithLogger(slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	r := &rig{dir: dir, st: st, h: h, log: log}
	t.Cleanup(func() { r.close(context.Background()) })
	return r
}

// autoRowOf waits until the store holds an automatic snapshot of a
// written after after, and returns the row's id, when it was taken and
// its files archive.
func autoRowOf(t *testing.T, ctx context.Context, st *store.Store, after time.Time) (string, time.Time, []byte) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		rows, err := st.Client.Snapshot.Query().Where(snapshot.Kind("auto")).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) > 1 {
			t.Fatalf("%d automatic snapshots of one session", len(rows))
		}
		if len(rows) == 1 && rows[0].CreatedAt.After(after) {
			return rows[0].ID, rows[0].CreatedAt, rows[0].Files
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic snapshot written after %v within %s", after, liveness)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashWindow: with server.snapshots.crash_window a session is in the
// store within the window of its handshake, before any request (a
// session younger than any round); every acknowledged request is in its
// automatic snapshot a window later, which another host restores
// from_session; the snapshot is written over in place, its files
// archive re-made only when the directory changed; the session's end on
// a running host deletes it; a closed host writes no more. On SQLite and
// on PostgreSQL.
func TestCrashWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "shared.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t, "aep_persist_crashwin") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dsn := tc.dsn(t)
			h1 := startWindowRig(t, ctx, dsn, fmt.Sprintf("  snapshots:\n    crash_window: %s\n", crashWindow))
			h2 := startWindowRig(t, ctx, dsn, "")
			// A PostgreSQL schema outlives the run before.
			if _, err := h1.st.Client.Snapshot.Delete().Exec(ctx); err != nil {
				t.Fatal(err)
			}

			t0 := time.Now()
			a := h1.connect(t, ctx)
			id, at, _ := autoRowOf(t, ctx, h1.st, time.Time{})
			t.Logf("a session that did nothing yet: saved %s after its handshake began", at.Sub(t0).Round(time.Millisecond))

			// Requests in a burst: each acknowledged before the next; the
			// one automatic row covers all of them a window later.
			var want []string
			for i := range 50 {
				want = append(want, fmt.Sprintf("n%d", i))
				a.say(t, ctx, want[i])
			}
			acked := time.Now()
			id2, at, _ := autoRowOf(t, ctx, h1.st, acked)
			t.Logf("the last acknowledged request: saved %s after its reply", at.Sub(acked).Round(time.Millisecond))
			if id2 != id {
				t.Fatalf("the automatic snapshot changed id: %s, then %s", id, id2)
			}
			b := h2.connect(t, ctx)
			res, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(a.SessionID())})
			if err != nil || res.SnapshotID != id {
				t.Fatalf("from_session: %+v %v", res, err)
			}
			// It resumed from the point of the last acknowledged request.
			if res.FromPoint == nil || *res.FromPoint != len(want) {
				t.Fatalf("from_session resumed from point %v, want %d", res.FromPoint, len(want))
			}
			if got := b.notes(t, ctx); !slices.Equal(got, want) {
				t.Fatalf("restored %v, want %v", got, want)
			}

			// Files: archived once, re-used while the directory is
			// unchanged, archived again when it changes.
			writeTree(t, h1.sessionDir(t, a), map[string]string{"w.txt": "v1"})
			a.say(t, ctx, "files")
			_, at, files1 := autoRowOf(t, ctx, h1.st, time.Now())
			if len(files1) == 0 {
				t.Fatal("no files archive")
			}
			a.say(t, ctx, "no file changed")
			_, at, files2 := autoRowOf(t, ctx, h1.st, at)
			if !bytes.Equal(files1, files2) || !strings.Contains(h1.log.String(), `"files_reused":true`) {
				t.Fatalf("the unchanged directory was not re-used: %d then %d bytes\n%s", len(files1), len(files2), h1.log.String())
			}
			writeTree(t, h1.sessionDir(t, a), map[string]string{"w.txt": "v2, longer than v1"})
			a.say(t, ctx, "file changed")
			_, _, files3 := autoRowOf(t, ctx, h1.st, at)
			if bytes.Equal(files2, files3) {
				t.Fatal("a changed directory kept the old archive")
			}
			c := h2.connect(t, ctx)
			if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(a.SessionID())}); err != nil {
				t.Fatal(err)
			}
			if got := readTree(t, h2.sessionDir(t, c)); !slices.Equal(got, []string{"w.txt=v2, longer than v1"}) {
				t.Fatalf("files %q", got)
			}

			// The session ends on a running host: its row goes, and no
			// save brings it back.
			a.Close()
			deadline := time.Now().Add(liveness)
			for n := countAutos(t, ctx, h1.st); n != 0; n = countAutos(t, ctx, h1.st) {
				if time.Now().After(deadline) {
					t.Fatalf("%d automatic snapshots of an ended session", n)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(2 * crashWindow)
			if n := countAutos(t, ctx, h1.st); n != 0 {
				t.Fatalf("an ended session was saved again: %d rows", n)
			}
			// Closed, the host saves no more.
			d := h1.connect(t, ctx)
			d.say(t, ctx, "last")
			autoRowOf(t, ctx, h1.st, time.Time{})
			h1.h.Close(ctx)
			_, at, _ = autoRowOf(t, ctx, h1.st, time.Time{})
			time.Sleep(2 * crashWindow)
			if _, at2, _ := autoRowOf(t, ctx, h1.st, time.Time{}); !at2.Equal(at) {
				t.Fatalf("a closed host saved: %v, then %v", at, at2)
			}
		})
	}
}

func countAutos(t *testing.T, ctx context.Context, st *store.Store) int {
	t.Helper()
	n, err := st.Client.Snapshot.Query().Where(snapshot.Kind("auto")).Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCrashWindowHoldsBack: while a session's save does not finish (the
// plugin's Snapshot waits, as a slow store would), a request that comes
// more than a window after the oldest unsaved change waits for the save
// instead of running: the window is kept by slowing the session down.
// Once the save ends, the request runs.
func TestCrashWindowHoldsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := startWindowRig(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "s.db"),
		fmt.Sprintf("  snapshots:\n    crash_window: %s\n    store_wait: 30s\n", crashWindow))
	a := h.connect(t, ctx)
	autoRowOf(t, ctx, h.st, time.Time{})
	release := make(chan struct{})
	h.plugin(t, "notes").hold.Store(&release)
	a.say(t, ctx, "one") // its save starts half a window later, and waits
	time.Sleep(crashWindow + crashWindow/2)

	done := make(chan time.Time, 1)
	go func() {
		a.say(t, ctx, "two")
		done <- time.Now()
	}()
	select {
	case <-done:
		t.Fatal("a request ran while its session's oldest unsaved change was older than the window")
	case <-time.After(2 * time.Second):
	}
	released := time.Now()
	close(release)
	select {
	case ran := <-done:
		if ran.Before(released) {
			t.Fatal("ran before the save")
		}
	case <-time.After(liveness):
		t.Fatal("the request stayed held after the save ended")
	}
}

// autoRowsByCreated returns the automatic snapshot rows by id, each with
// when it was last written.
func autoRowsByCreated(t *testing.T, ctx context.Context, st *store.Store) map[string]time.Time {
	t.Helper()
	rows, err := st.Client.Snapshot.Query().Where(snapshot.Kind("auto")).All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, r := range rows {
		out[r.ID] = r.CreatedAt
	}
	return out
}

// TestCrashWindowFailingSave: a session whose state cannot be saved
// neither holds back the saves of the others (its retries wait longer
// each time, in a queue by due time) nor has its own requests held for a
// save that keeps failing; the failures are logged, fewer as they go on,
// and once its state can be saved again it is.
func TestCrashWindowFailingSave(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := startWindowRig(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "s.db"),
		fmt.Sprintf("  snapshots:\n    crash_window: %s\n    store_wait: 30s\n", crashWindow))
	notes := h.plugin(t, "notes")
	notes.poison.Store(true)
	a, b := h.connect(t, ctx), h.connect(t, ctx)
	deadline := time.Now().Add(liveness)
	for len(autoRowsByCreated(t, ctx, h.st)) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two sessions were not saved")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := autoRowsByCreated(t, ctx, h.st)
	a.say(t, ctx, "poison")
	time.Sleep(3 * crashWindow) // a's saves fail a few times
	// b is saved within the window, a never.
	b.say(t, ctx, "fine")
	acked := time.Now()
	deadline = time.Now().Add(liveness)
	for {
		rows := autoRowsByCreated(t, ctx, h.st)
		saved := 0
		for id, at := range rows {
			if at.After(acked) {
				saved++
			} else if !at.Equal(before[id]) {
				t.Fatalf("a row was written with a state that cannot be saved: %s", id)
			}
		}
		if saved == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other session was not saved while one failed: %v", rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// a's requests are not held for a save that keeps failing.
	t0 := time.Now()
	a.say(t, ctx, "still answered")
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("a request of a session whose saves fail was held %s", d)
	}
	if !strings.Contains(h.log.String(), `"failures_in_a_row":1`) || !strings.Contains(h.log.String(), `"failures_in_a_row":2`) {
		t.Fatalf("the failures were not logged:\n%s", h.log.String())
	}
	// Saveable again: a is saved.
	notes.poison.Store(false)
	healed := time.Now()
	deadline = time.Now().Add(liveness)
	for {
		n := 0
		for _, at := range autoRowsByCreated(t, ctx, h.st) {
			if at.After(healed) {
				n++
			}
		}
		if n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session was not saved once its state could be")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
