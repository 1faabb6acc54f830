package persist_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// startRigServer is startRigDSN with extra YAML under `server:`.
func startRigServer(t *testing.T, ctx context.Context, dsn, dir string, names []string, serverExtra string) *rig {
	t.Helper()
	var y strings.Builder
	fmt.Fprintf(&y, "server:\n  auth_token: %s\n%splugins:\n", hostCanary, serverExtra)
	for _, n := range names {
		fmt.Fprintf(&y, "  - name: %s\n    type: echo\n    cls: aep.test.snapnotes\n    config:\n      secret: %s\n", n, pluginCanary)
	}
	cfg, err := server.ParseConfig([]byte(y.String()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := server.New(ctx, cfg, server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithDataDir(dir), server.WithStore(st), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	r := &rig{dir: dir, st: st, h: h, log: &lockedBuffer{}}
	t.Cleanup(func() { r.close(context.Background()) })
	return r
}

func snap(t *testing.T, ctx context.Context, a *agent, target string) string {
	t.Helper()
	r, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
	if err != nil {
		t.Fatal(err)
	}
	return r.SnapshotID
}

func listSnaps(t *testing.T, ctx context.Context, a *agent, proof ...string) []msg.SnapshotInfo {
	t.Helper()
	r, err := a.SessionSnapshotList(ctx, &msg.SessionSnapshotListReq{SessionIds: proof})
	if err != nil {
		t.Fatal(err)
	}
	return r.Snapshots
}

func snapIDs(l []msg.SnapshotInfo) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = s.SnapshotID
	}
	slices.Sort(out)
	return out
}

func sorted(ids ...string) []string { slices.Sort(ids); return ids }

// TestRestoreAfterRename: a plugin renamed in the config gets its state
// back from a snapshot taken under the old name (file and sql), and its
// data directory, named by module, is the same; a directory of an earlier
// release named after the plugin is moved there.
func TestRestoreAfterRename(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "notes"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes", "kept.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	r1 := startRigServer(t, ctx, "", dir, []string{"notes"}, "")
	if _, err := os.Stat(filepath.Join(dir, "aep.test.snapnotes", "kept.txt")); err != nil {
		t.Fatalf("the old data directory was not moved to the module's: %v", err)
	}
	a1 := r1.connect(t, ctx)
	a1.say(t, ctx, "one")
	ids := []string{snap(t, ctx, a1, "file"), snap(t, ctx, a1, "sql")}
	r1.close(ctx)

	r2 := startRigServer(t, ctx, "", dir, []string{"renamed"}, "")
	for _, id := range ids {
		a2 := r2.connect(t, ctx)
		res, err := a2.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(id)})
		if err != nil {
			t.Fatalf("restore %s after a rename: %v", id, err)
		}
		if !slices.Equal(res.Restored, []string{"renamed"}) || !slices.Equal(a2.notes(t, ctx), []string{"one"}) {
			t.Fatalf("restore %s after a rename: %+v, notes %v", id, res, a2.notes(t, ctx))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "aep.test.snapnotes", "kept.txt")); err != nil {
		t.Fatalf("data directory after a rename: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "renamed")); !os.IsNotExist(err) {
		t.Fatalf("a directory named after the new instance name: %v", err)
	}
	// Two instances of one module keep their states apart by config order.
	r2.close(ctx)
	r3 := startRigServer(t, ctx, "", dir, []string{"first", "second"}, "")
	a3 := r3.connect(t, ctx)
	r3.plugin(t, "first").state(aeptest.Handle(t, a3.Client)).Notes = []string{"first"}
	r3.plugin(t, "second").state(aeptest.Handle(t, a3.Client)).Notes = []string{"second"}
	id := snap(t, ctx, a3, "file")
	r3.close(ctx)
	r4 := startRigServer(t, ctx, "", dir, []string{"uno", "dos"}, "")
	a4 := r4.connect(t, ctx)
	res, err := a4.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(id)})
	if err != nil || !slices.Equal(res.Restored, []string{"uno", "dos"}) {
		t.Fatalf("restore of two instances: %+v %v", res, err)
	}
	if got := r4.plugin(t, "uno").state(aeptest.Handle(t, a4.Client)).Notes; !slices.Equal(got, []string{"first"}) {
		t.Fatalf("first instance notes %v", got)
	}
	if got := r4.plugin(t, "dos").state(aeptest.Handle(t, a4.Client)).Notes; !slices.Equal(got, []string{"second"}) {
		t.Fatalf("second instance notes %v", got)
	}
}

// TestSnapshotListAndDelete: a session lists and deletes its own snapshots,
// those of an earlier session whose id it presents, and those of the
// session whose snapshot it restored; nothing else, and a snapshot it may
// not see is answered like one that does not exist.
func TestSnapshotListAndDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := startRigServer(t, ctx, "", t.TempDir(), []string{"notes"}, "")
	a, b := r.connect(t, ctx), r.connect(t, ctx)
	a.say(t, ctx, "from-a")
	aFile, aSQL := snap(t, ctx, a, "file"), snap(t, ctx, a, "sql")
	bFile := snap(t, ctx, b, "file")

	listsOwned(t, ctx, a, b, aFile, aSQL, bFile)
	deletesOwned(t, ctx, a, b, aFile, aSQL)
	ownedThroughRestores(t, ctx, r, a, b, bFile)
}

// listsOwned: a session lists its own snapshots, newest first, and those
// of a session whose id it presents.
func listsOwned(t *testing.T, ctx context.Context, a, b *agent, aFile, aSQL, bFile string) {
	la := listSnaps(t, ctx, a)
	if !slices.Equal(snapIDs(la), sorted(aFile, aSQL)) || !la[0].Own || la[0].Bytes <= 0 || la[0].Created <= 0 || la[0].AgentID == nil {
		t.Fatalf("a lists %+v", la)
	}
	if la[0].SnapshotID != aSQL {
		t.Fatalf("not newest first: %+v", la)
	}
	if got := snapIDs(listSnaps(t, ctx, b)); !slices.Equal(got, []string{bFile}) {
		t.Fatalf("b lists %v", got)
	}
	withProof := listSnaps(t, ctx, b, a.SessionID())
	if !slices.Equal(snapIDs(withProof), sorted(aFile, aSQL, bFile)) {
		t.Fatalf("b with a's id lists %v", snapIDs(withProof))
	}
	for _, s := range withProof {
		if s.Own != (s.SnapshotID == bFile) {
			t.Fatalf("own flag of %+v", s)
		}
	}
	if got := snapIDs(listSnaps(t, ctx, b, "not-a-session")); !slices.Equal(got, []string{bFile}) {
		t.Fatalf("b with a made-up id lists %v", got)
	}
}

// deletesOwned: a session deletes only the snapshots it may list.
func deletesOwned(t *testing.T, ctx context.Context, a, b *agent, aFile, aSQL string) {
	// Delete: b cannot delete a's snapshot without proof; the answer is
	// the unknown snapshot's.
	_, err := b.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: aFile})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
	if got := snapIDs(listSnaps(t, ctx, a)); !slices.Equal(got, sorted(aFile, aSQL)) {
		t.Fatalf("a's snapshots after b's refused delete: %v", got)
	}
	del, err := b.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: aFile, SessionIds: []string{a.SessionID()}})
	if err != nil || !del.Deleted {
		t.Fatalf("delete with proof: %+v %v", del, err)
	}
	del, err = a.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: aSQL})
	if err != nil || !del.Deleted {
		t.Fatalf("delete own sql snapshot: %+v %v", del, err)
	}
	if got := listSnaps(t, ctx, a); len(got) != 0 {
		t.Fatalf("a lists after deletes: %v", snapIDs(got))
	}
	for _, id := range []string{aFile, aSQL} {
		_, err = a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(id)})
		aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
	}
	_, err = a.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: "../etc/passwd"})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")

}

// ownedThroughRestores: ownership passes through restores, and on by the
// snapshots taken after.
func ownedThroughRestores(t *testing.T, ctx context.Context, r *rig, a, b *agent, bFile string) {
	a2 := snap(t, ctx, a, "file")
	c := r.connect(t, ctx)
	if _, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(a2)}); err != nil {
		t.Fatal(err)
	}
	c2 := snap(t, ctx, c, "sql")
	if got := snapIDs(listSnaps(t, ctx, c)); !slices.Equal(got, sorted(a2, c2)) {
		t.Fatalf("c, restored from a's snapshot, lists %v", got)
	}
	d := r.connect(t, ctx)
	if _, err := d.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(c2)}); err != nil {
		t.Fatal(err)
	}
	if got := snapIDs(listSnaps(t, ctx, d)); !slices.Equal(got, sorted(a2, c2)) {
		t.Fatalf("d, restored from c's snapshot, lists %v", got)
	}
	if got := snapIDs(listSnaps(t, ctx, b)); !slices.Equal(got, []string{bFile}) {
		t.Fatalf("b lists after the restores %v", got)
	}
}

// TestSnapshotRetention: server.snapshots.keep_per_session keeps a
// session's newest snapshots of a target; max_age drops older ones but
// never the snapshot just taken.
func TestSnapshotRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := startRigServer(t, ctx, "", t.TempDir(), []string{"notes"}, "  snapshots:\n    keep_per_session: 2\n")
	a, b := r.connect(t, ctx), r.connect(t, ctx)
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, snap(t, ctx, a, "file"))
	}
	bID := snap(t, ctx, b, "file")
	sqlID := snap(t, ctx, a, "sql")
	if got := snapIDs(listSnaps(t, ctx, a)); !slices.Equal(got, sorted(ids[2], ids[3], sqlID)) {
		t.Fatalf("kept %v, want the 2 newest file snapshots and the sql one", got)
	}
	if got := snapIDs(listSnaps(t, ctx, b)); !slices.Equal(got, []string{bID}) {
		t.Fatalf("b kept %v", got)
	}
	r.close(ctx)

	r2 := startRigServer(t, ctx, "", t.TempDir(), []string{"notes"}, "  snapshots:\n    max_age: 1ms\n")
	a2 := r2.connect(t, ctx)
	old := snap(t, ctx, a2, "file")
	time.Sleep(5 * time.Millisecond)
	last := snap(t, ctx, a2, "sql")
	if got := snapIDs(listSnaps(t, ctx, a2)); !slices.Equal(got, []string{last}) {
		t.Fatalf("max_age kept %v, want only %s (not %s)", got, last, old)
	}
	if _, err := server.ParseConfig([]byte("server:\n  auth_token: x\n  snapshots:\n    keep_per_session: -1\n")); err == nil {
		t.Fatal("negative keep_per_session accepted")
	}
}

// TestSnapshotRestoresOnAnotherHost: two hosts with their own data
// directories share one SQL store (a SQLite file, and PostgreSQL when
// there is one; under CI always): a sql snapshot taken on one restores on
// the other, which may list and delete it with the first session's id.
func TestSnapshotRestoresOnAnotherHost(t *testing.T) {
	for _, tc := range sharedStores("aep_server_crosshost_test") {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dsn := tc.dsn(t)
			h1 := startRigServer(t, ctx, dsn, t.TempDir(), []string{"notes"}, "")
			h2 := startRigServer(t, ctx, dsn, t.TempDir(), []string{"notes-on-h2"}, "")
			a := h1.connect(t, ctx)
			a.say(t, ctx, "made on h1")
			id := snap(t, ctx, a, "sql")
			b := h2.connect(t, ctx)
			res, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(id)})
			if err != nil || !slices.Equal(res.Restored, []string{"notes-on-h2"}) {
				t.Fatalf("restore on the other host: %+v %v", res, err)
			}
			if got := b.notes(t, ctx); !slices.Equal(got, []string{"made on h1"}) {
				t.Fatalf("notes on the other host %v", got)
			}
			if got := snapIDs(listSnaps(t, ctx, b)); !slices.Contains(got, id) {
				t.Fatalf("h2 session lists %v, want %s", got, id)
			}
			// from_session: the newest snapshot of the session whose id is
			// presented, on either host; an id that took none is unknown.
			a.say(t, ctx, "later on h1")
			newest := snap(t, ctx, a, "sql")
			c := h2.connect(t, ctx)
			res, err = c.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(a.SessionID())})
			if err != nil || res.SnapshotID != newest {
				t.Fatalf("restore from_session: %+v %v, want %s", res, err, newest)
			}
			if got := c.notes(t, ctx); !slices.Equal(got, []string{"made on h1", "later on h1"}) {
				t.Fatalf("notes restored from_session %v", got)
			}
			_, err = c.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(b.SessionID())})
			aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
			_, err = c.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(a.SessionID()), SnapshotID: new(id)})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "")
			_, err = c.SessionRestore(ctx, &msg.SessionRestoreReq{})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "")
			if _, err := b.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: newest, SessionIds: []string{a.SessionID()}}); err != nil {
				t.Fatal(err)
			}
			del, err := b.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: id, SessionIds: []string{a.SessionID()}})
			if err != nil || !del.Deleted {
				t.Fatalf("delete on the other host: %+v %v", del, err)
			}
			_, err = a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(id)})
			aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
		})
	}
}

// sharedStore is a store several hosts of a test share: its DSN, made for
// the test that asks.
type sharedStore struct {
	name string
	dsn  func(t *testing.T) string
}

// sharedStores are a SQLite file and the PostgreSQL database pgDatabase
// (skipped without PostgreSQL unless under CI).
func sharedStores(pgDatabase string) []sharedStore {
	return []sharedStore{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "shared.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t, pgDatabase) }},
	}
}
