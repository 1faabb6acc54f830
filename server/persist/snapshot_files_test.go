package persist_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// sessionDir is the directory of agent a's session on rig r.
func (r *rig) sessionDir(t *testing.T, a *agent) string {
	t.Helper()
	d, err := r.h.SessionDir(aeptest.Handle(t, a.Client))
	if err != nil {
		t.Fatal(err)
	}
	return d.Path
}

// writeTree writes files (path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns "path=content" of every regular file under dir, sorted.
func readTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel+"="+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func sqlSnap(t *testing.T, ctx context.Context, a *agent) *msg.SessionSnapshotResp {
	t.Helper()
	r, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTargetSQL})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSnapshotFilesMoveToAnotherHost: a sql snapshot carries the session
// directory as it was when taken; a session on another host with its own
// data directory (one store: a SQLite file, and PostgreSQL when there is
// one) gets those files by snapshot_id and by from_session, in place of
// its own. A directory past files_max_bytes is omitted and said so; a
// restore past the restoring host's quota, or of a damaged archive,
// changes nothing.
func TestSnapshotFilesMoveToAnotherHost(t *testing.T) {
	for _, tc := range sharedStores("aep_server_files_test") {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			m := &filesMove{dsn: tc.dsn(t)}
			m.h1 = startRigServer(t, ctx, m.dsn, t.TempDir(), []string{"notes"}, "")
			m.h2 = startRigServer(t, ctx, m.dsn, t.TempDir(), []string{"notes"}, "")
			m.take(t, ctx)
			m.restoreElsewhere(t, ctx)
			m.restoreFromSession(t, ctx)
			m.refusedPastQuota(t, ctx)
			m.refusedDamaged(t, ctx)
			m.omittedPastBound(t, ctx)
		})
	}
}

// filesMove is TestSnapshotFilesMoveToAnotherHost's state from one step
// to the next: two hosts on one store, session a on the first with the
// snapshot it took, session b on the second that restored it.
type filesMove struct {
	dsn        string
	h1, h2     *rig
	a, b       *agent
	dirA, dirB string
	taken      *msg.SessionSnapshotResp
	want       []string // b's files after the restore
}

// take snapshots a session with files, a symlink among them, to sql.
func (m *filesMove) take(t *testing.T, ctx context.Context) {
	m.a = m.h1.connect(t, ctx)
	m.a.say(t, ctx, "with files")
	m.dirA = m.h1.sessionDir(t, m.a)
	writeTree(t, m.dirA, map[string]string{"work/result.txt": "42", "data/in.csv": "x,y\n1,2\n"})
	if err := os.Symlink("/etc/passwd", filepath.Join(m.dirA, "work", "link")); err != nil {
		t.Fatal(err)
	}
	m.taken = sqlSnap(t, ctx, m.a)
	f := m.taken.Files
	if f == nil || f.State != msg.SnapshotFilesStateStored || f.Entries != 4 || f.Bytes != 2+8 ||
		deref(f.SkippedCount) != 1 || !slices.Equal(f.Skipped, []string{"symlink work/link"}) {
		t.Fatalf("snapshot files: %+v", f)
	}
	// Changed after the snapshot: the restore brings the files as they were.
	writeTree(t, m.dirA, map[string]string{"work/result.txt": "changed later"})
}

// restoreElsewhere restores the snapshot into a session of the other host,
// whose files it replaces.
func (m *filesMove) restoreElsewhere(t *testing.T, ctx context.Context) {
	m.b = m.h2.connect(t, ctx)
	m.dirB = m.h2.sessionDir(t, m.b)
	writeTree(t, m.dirB, map[string]string{"mine.txt": "replaced by the restore"})
	res, err := m.b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(m.taken.SnapshotID)})
	if err != nil {
		t.Fatal(err)
	}
	m.want = []string{"data/in.csv=x,y\n1,2\n", "work/result.txt=42"}
	if got := readTree(t, m.dirB); !slices.Equal(got, m.want) {
		t.Fatalf("files on the other host %q, want %q", got, m.want)
	}
	if res.Files == nil || res.Files.State != msg.SnapshotFilesStateRestored || res.Files.Entries != 4 || res.Files.Bytes != 10 {
		t.Fatalf("restore files: %+v", res.Files)
	}
	if _, err := os.Lstat(filepath.Join(m.dirB, "work", "link")); !os.IsNotExist(err) {
		t.Fatalf("a symlink came along: %v", err)
	}
	if got := m.b.notes(t, ctx); !slices.Equal(got, []string{"with files"}) {
		t.Fatalf("notes %v", got)
	}
	ents, _ := os.ReadDir(filepath.Dir(m.dirB))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".restore-") {
			t.Fatalf("staging left behind: %s", e.Name())
		}
	}
}

// restoreFromSession: from_session restores the newest snapshot, files
// included.
func (m *filesMove) restoreFromSession(t *testing.T, ctx context.Context) {
	c := m.h2.connect(t, ctx)
	res, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(m.a.SessionID())})
	if err != nil || res.SnapshotID != m.taken.SnapshotID || res.Files.State != msg.SnapshotFilesStateRestored {
		t.Fatalf("from_session: %+v %v", res, err)
	}
	if got := readTree(t, m.h2.sessionDir(t, c)); !slices.Equal(got, m.want) {
		t.Fatalf("files from_session %q", got)
	}
}

// refusedPastQuota: the restoring host's quota bounds what it extracts:
// refused whole.
func (m *filesMove) refusedPastQuota(t *testing.T, ctx context.Context) {
	h3 := startRigServer(t, ctx, m.dsn, t.TempDir(), []string{"notes"}, "  isolation:\n    session_quota_bytes: 5\n")
	d := h3.connect(t, ctx)
	d.say(t, ctx, "before")
	dirD := h3.sessionDir(t, d)
	writeTree(t, dirD, map[string]string{"keep.txt": "k"})
	_, err := d.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(m.taken.SnapshotID)})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "denied")
	if got := readTree(t, dirD); !slices.Equal(got, []string{"keep.txt=k"}) || !slices.Equal(d.notes(t, ctx), []string{"before"}) {
		t.Fatalf("a refused restore changed the session: %q %v", got, d.notes(t, ctx))
	}
}

// refusedDamaged: a damaged archive in the store is refused, nothing
// changed.
func (m *filesMove) refusedDamaged(t *testing.T, ctx context.Context) {
	other := sqlSnap(t, ctx, m.a)
	if _, err := m.h1.st.DB().ExecContext(ctx, rebind(m.h1.st.Dialect(), "UPDATE snapshots SET files = ? WHERE id = ?"), []byte("not an archive"), other.SnapshotID); err != nil {
		t.Fatal(err)
	}
	_, err := m.b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(other.SnapshotID)})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "corrupt_snapshot")
	if got := readTree(t, m.dirB); !slices.Equal(got, m.want) {
		t.Fatalf("a corrupt archive changed the files: %q", got)
	}
}

// omittedPastBound: past files_max_bytes the files are omitted, said so,
// and a restore leaves the directory as it is, saying omitted; a file
// snapshot carries its files as a sql one does.
func (m *filesMove) omittedPastBound(t *testing.T, ctx context.Context) {
	h4 := startRigServer(t, ctx, m.dsn, t.TempDir(), []string{"notes"}, "  snapshots:\n    files_max_bytes: 1024\n")
	e := h4.connect(t, ctx)
	writeTree(t, h4.sessionDir(t, e), map[string]string{"big.bin": strings.Repeat("z", 4096)})
	big := sqlSnap(t, ctx, e)
	if big.Files == nil || big.Files.State != msg.SnapshotFilesStateOmitted || deref(big.Files.Reason) != "too_large" || deref(big.Files.Limit) != 1024 {
		t.Fatalf("oversized files: %+v", big.Files)
	}
	res, err := m.b.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(big.SnapshotID)})
	if err != nil || res.Files.State != msg.SnapshotFilesStateOmitted || deref(res.Files.Reason) != "too_large" {
		t.Fatalf("restore of a snapshot without files: %+v %v", res, err)
	}
	if got := readTree(t, m.dirB); !slices.Equal(got, m.want) {
		t.Fatalf("a snapshot without files changed the files: %q", got)
	}
	fid := snap(t, ctx, m.a, "file")
	res, err = m.a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(fid)})
	if err != nil || res.Files.State != msg.SnapshotFilesStateRestored {
		t.Fatalf("restore of a file snapshot: %+v %v", res, err)
	}
}

// TestForkFromSnapshotWithFiles: a fork from a sql snapshot gets the files
// it carries, after its session ended and its directory is gone.
func TestForkFromSnapshotWithFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := startRigServer(t, ctx, "", t.TempDir(), []string{"notes"}, "")
	a := r.connect(t, ctx)
	dirA := r.sessionDir(t, a)
	writeTree(t, dirA, map[string]string{"f.txt": "from the snapshot"})
	id := sqlSnap(t, ctx, a).SnapshotID
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(dirA); os.IsNotExist(err) {
			break // carried by the snapshot, the directory is not kept
		}
		if time.Now().After(deadline) {
			t.Fatal("the directory of an ended session whose sql snapshot carries its files was kept")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := r.connect(t, ctx)
	res, err := b.SessionFork(ctx, &msg.SessionForkReq{Count: 1, SnapshotID: new(id)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := r.h.SessionDir(res.Forks[0].Handle)
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, d.Path); !slices.Equal(got, []string{"f.txt=from the snapshot"}) {
		t.Fatalf("fork files %q", got)
	}
}

// TestAutoSnapshots: with server.snapshots.auto_interval every live
// session is snapshotted to the store with its files; an unchanged
// session is not snapshotted again; a session has one automatic
// snapshot, written over in place (the same id, newer contents);
// from_session on another host restores it; a session that ends on a
// running host takes its automatic snapshot with it; and the host stops
// taking them when it closes.
func TestAutoSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "shared.db")
	h1 := startRigServer(t, ctx, dsn, t.TempDir(), []string{"notes"}, "  snapshots:\n    auto_interval: 1s\n")
	h2 := startRigServer(t, ctx, dsn, t.TempDir(), []string{"notes"}, "")
	a := h1.connect(t, ctx)
	a.say(t, ctx, "one")
	writeTree(t, h1.sessionDir(t, a), map[string]string{"w.txt": "v1"})
	since := time.Now()

	w := autoWatch{st: h1.st}
	autos := func() []string { return w.autos(t, ctx) }
	waitAuto := func(after time.Time) string { return w.wait(t, ctx, after) }
	first := waitAuto(time.Time{})
	firstAt := w.created(t, ctx, first)
	// Unchanged: the next rounds take none.
	time.Sleep(2500 * time.Millisecond)
	if ids := autos(); !slices.Equal(ids, []string{first}) || !w.created(t, ctx, first).Equal(firstAt) {
		t.Fatalf("an unchanged session was snapshotted again: %v, first %s", ids, first)
	}
	a.say(t, ctx, "two")
	writeTree(t, h1.sessionDir(t, a), map[string]string{"w.txt": "v2"})
	second := waitAuto(firstAt)
	if second != first {
		t.Fatalf("the automatic snapshot was replaced by %s, not written over: %s", second, first)
	}

	list := listSnaps(t, ctx, a)
	if len(list) != 1 || list[0].SnapshotID != second || list[0].Kind == nil || *list[0].Kind != msg.SnapshotInfoKindAuto {
		t.Fatalf("list %+v", list)
	}
	if created := time.Unix(0, int64(list[0].Created*1e9)); created.Before(since.Add(-time.Second)) {
		t.Fatalf("created %v", created)
	}
	b := h2.connect(t, ctx)
	res, err := b.SessionRestore(ctx, &msg.SessionRestoreReq{FromSession: new(a.SessionID())})
	if err != nil || res.SnapshotID != second || res.Files.State != msg.SnapshotFilesStateRestored {
		t.Fatalf("from_session: %+v %v", res, err)
	}
	if got := b.notes(t, ctx); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("notes %v", got)
	}
	if got := readTree(t, h2.sessionDir(t, b)); !slices.Equal(got, []string{"w.txt=v2"}) {
		t.Fatalf("files %q", got)
	}
	// The session ends on a running host: its automatic snapshot goes.
	a.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(autos()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("automatic snapshots of an ended session: %v", autos())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Closed, the host takes no more.
	c := h1.connect(t, ctx)
	c.say(t, ctx, "three")
	waitAuto(time.Time{})
	h1.h.Close(ctx)
	n := len(autos())
	time.Sleep(2500 * time.Millisecond)
	if got := autos(); len(got) != n {
		t.Fatalf("automatic snapshots after close: %d, then %d", n, len(got))
	}
}

// autoWatch watches the automatic snapshots in a store that holds those
// of one session.
type autoWatch struct{ st *store.Store }

// autos lists the automatic snapshots of the session, from the store.
func (w autoWatch) autos(t *testing.T, ctx context.Context) []string {
	t.Helper()
	ids, err := w.st.Client.Snapshot.Query().Where(snapshot.Kind("auto")).IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// created is when the automatic snapshot id was last written.
func (w autoWatch) created(t *testing.T, ctx context.Context, id string) time.Time {
	t.Helper()
	row, err := w.st.Client.Snapshot.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return row.CreatedAt
}

// wait waits for the one automatic snapshot of the session to be written
// after after, and returns its id.
func (w autoWatch) wait(t *testing.T, ctx context.Context, after time.Time) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if ids := w.autos(t, ctx); len(ids) == 1 && w.created(t, ctx, ids[0]).After(after) {
			return ids[0]
		} else if len(ids) > 1 {
			t.Fatalf("%d automatic snapshots of one session: %v", len(ids), ids)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic snapshot: %v", w.autos(t, ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rebind writes ? placeholders as the dialect wants them.
func rebind(dialect, q string) string {
	if dialect != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + string(rune('0'+n)))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// TestFileSnapshotRollsFilesBack: a snapshot of the default target (file)
// carries the session's files, so snapshot, edit, restore gives the
// pre-edit content back, removes what was added since, and says
// restored; a damaged archive refuses the restore and changes nothing;
// deleting the snapshot deletes its archive.
func TestFileSnapshotRollsFilesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"notes"}, "")
	a := r.connect(t, ctx)
	dir := r.sessionDir(t, a)
	writeTree(t, dir, map[string]string{"plan.md": "v1", "src/main.go": "package main"})
	snap, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{}) // the default target: file
	if err != nil {
		t.Fatal(err)
	}
	if snap.Target != "file" || snap.Files == nil || snap.Files.State != msg.SnapshotFilesStateStored || snap.Files.Entries < 3 {
		t.Fatalf("file snapshot: target %s, files %+v", snap.Target, snap.Files)
	}
	writeTree(t, dir, map[string]string{"plan.md": "v2, edited", "new.txt": "added later"})

	res, err := a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files == nil || res.Files.State != msg.SnapshotFilesStateRestored {
		t.Fatalf("restore files %+v, want restored", res.Files)
	}
	want := []string{"plan.md=v1", "src/main.go=package main"}
	if got := readTree(t, r.sessionDir(t, a)); !slices.Equal(got, want) {
		t.Fatalf("after the restore the directory holds %q, want the snapshot's %q", got, want)
	}

	// A damaged archive: refused, nothing changed.
	writeTree(t, r.sessionDir(t, a), map[string]string{"plan.md": "v3"})
	archive := filepath.Join(r.dir, "snapshots", snap.SnapshotID+".files")
	if err := os.WriteFile(archive, []byte("not the archive"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: &snap.SnapshotID})
	if wire.ReasonOf(wireDetail(err)) != "corrupt_snapshot" {
		t.Fatalf("restore with a damaged archive: %v, want corrupt_snapshot", err)
	}
	if got := readTree(t, r.sessionDir(t, a)); !slices.Equal(got, []string{"plan.md=v3", "src/main.go=package main"}) {
		t.Fatalf("a refused restore changed the files: %q", got)
	}

	if _, err := a.SessionSnapshotDelete(ctx, &msg.SessionSnapshotDeleteReq{SnapshotID: snap.SnapshotID}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(archive); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted snapshot's archive is still there: %v", err)
	}
}
