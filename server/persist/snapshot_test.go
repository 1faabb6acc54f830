package persist_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/internal/pgtest"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// Canaries: the host token and a plugin's configured secret. Neither may
// appear in any snapshot file, SQL row, audit line or log line.
const (
	hostCanary   = "CANARY-host-token-7f3a9c21"
	pluginCanary = "CANARY-plugin-key-b8e4d015"
)

// notesPlugin keeps per-session notes: echo/say appends a note and answers
// all notes so far, echo/list lists them. Each session also holds a copy of
// the configured API key, which Snapshot deliberately leaves out.
type notesPlugin struct {
	// Secret is a configured credential (a toolkit's API key, say).
	Secret string `yaml:"secret"`
	// Leak makes Snapshot include the secret, to prove the kernel's defence.
	Leak bool `yaml:"leak"`
	// FailRestore makes the next Restore fail after changing the state, to
	// prove the rollback.
	FailRestore atomic.Bool `yaml:"-"`
	// gate, when set, holds every Snapshot until it is closed, telling
	// entered first: a snapshot that takes its time.
	gate, entered chan struct{}
	// slow makes every Snapshot take that long.
	slow time.Duration

	// hold, when set, makes Snapshot wait for it to be closed before it
	// takes the plugin's lock: a save the store is slow to finish.
	hold atomic.Pointer[chan struct{}]
	// poison, when set, makes Snapshot fail for a session whose notes
	// hold "poison": a state that cannot be saved.
	poison atomic.Bool

	mu       sync.Mutex
	sessions map[string]*notesState
	restores atomic.Int32
}

type notesState struct {
	Notes  []string `json:"notes"`
	APIKey string   `json:"-"` // a secret: never saved
}

type leakyState struct {
	Notes  []string `json:"notes"`
	APIKey string   `json:"api_key"`
}

func init() {
	server.RegisterModule(new(notesPlugin))
}

var (
	_ testproto.EchoHandler = (*notesPlugin)(nil)
	_ persist.Snapshotter   = (*notesPlugin)(nil)
	_ persist.SecretHolder  = (*notesPlugin)(nil)
)

func (p *notesPlugin) state(sid string) *notesState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions == nil {
		p.sessions = map[string]*notesState{}
	}
	st, ok := p.sessions[sid]
	if !ok {
		st = &notesState{APIKey: p.Secret}
		p.sessions[sid] = st
	}
	return st
}

func (p *notesPlugin) EchoSay(ctx context.Context, s wire.Scope, req *testproto.EchoSayReq) (*testproto.EchoSayResp, error) {
	st := p.state(s.SessionID())
	p.mu.Lock()
	defer p.mu.Unlock()
	st.Notes = append(st.Notes, req.Text)
	return &testproto.EchoSayResp{Text: strings.Join(st.Notes, ","), By: "notes"}, nil
}

func (p *notesPlugin) EchoList(ctx context.Context, s wire.Scope, req *testproto.EchoListReq) (*testproto.EchoListResp, error) {
	st := p.state(s.SessionID())
	p.mu.Lock()
	defer p.mu.Unlock()
	return &testproto.EchoListResp{Items: append([]string{}, st.Notes...)}, nil
}

func (p *notesPlugin) EchoFind(ctx context.Context, s wire.Scope, req *testproto.EchoFindReq) (*testproto.EchoFindResp, error) {
	return nil, wire.ErrDecline
}

func (p *notesPlugin) EchoWait(ctx context.Context, s wire.Scope, req *testproto.EchoWaitReq) (*testproto.EchoWaitResp, error) {
	return nil, wire.ErrDecline
}

func (p *notesPlugin) Snapshot(ctx context.Context, sid string) ([]byte, error) {
	if h := p.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.mu.Lock()
	gate, entered, slow := p.gate, p.entered, p.slow
	p.mu.Unlock()
	time.Sleep(slow)
	if gate != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	}
	st := p.state(sid)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.poison.Load() && slices.Contains(st.Notes, "poison") {
		return nil, errors.New("this state cannot be saved")
	}
	if p.Leak {
		return json.Marshal(leakyState{Notes: st.Notes, APIKey: st.APIKey})
	}
	return json.Marshal(st)
}

func (p *notesPlugin) Restore(ctx context.Context, sid string, state []byte) error {
	p.restores.Add(1)
	var st notesState
	if err := json.Unmarshal(state, &st); err != nil {
		return err
	}
	cur := p.state(sid)
	p.mu.Lock()
	defer p.mu.Unlock()
	cur.Notes = st.Notes                           // the API key stays the configured one
	if p.FailRestore.CompareAndSwap(true, false) { // once: the rollback succeeds
		cur.Notes = append(cur.Notes, "half-restored")
		return errors.New("injected restore failure")
	}
	return nil
}

func (p *notesPlugin) Secrets() []string { return []string{p.Secret} }

// rig is one host on a data directory, with its store, audit file and log.
type rig struct {
	dir string
	st  *store.Store
	h   *server.Host
	log *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startRig starts a host on dir whose plugins are configured by YAML, as
// the CLI would; extra YAML goes into every notes plugin's config.
func startRig(t *testing.T, ctx context.Context, dir string, log *lockedBuffer, names []string, extra string) *rig {
	return startRigDSN(t, ctx, "", dir, log, names, extra)
}

// startRigDSN is startRig with the store at dsn ("" for SQLite under dir).
func startRigDSN(t *testing.T, ctx context.Context, dsn, dir string, log *lockedBuffer, names []string, extra string) *rig {
	t.Helper()
	return startRigConf(t, ctx, dsn, dir, log, names, extra, "")
}

// startRigWith starts a host with one notes plugin and serverYAML (keys
// under server:, indented two spaces) in its config.
func startRigWith(t *testing.T, ctx context.Context, dir string, log *lockedBuffer, serverYAML string) *rig {
	t.Helper()
	return startRigConf(t, ctx, "", dir, log, []string{"notes"}, "", serverYAML)
}

// startRigConf is startRigDSN with serverYAML added under server:.
func startRigConf(t testing.TB, ctx context.Context, dsn, dir string, log *lockedBuffer, names []string, extra, serverYAML string) *rig {
	t.Helper()
	var y strings.Builder
	fmt.Fprintf(&y, "server:\n  auth_token: %s\n%splugins:\n", hostCanary, serverYAML)
	for _, n := range names {
		fmt.Fprintf(&y, "  - name: %s\n    type: echo\n    cls: aep.test.snapnotes\n    config:\n      secret: %s\n%s", n, pluginCanary, extra)
	}
	cfg, err := server.ParseConfig([]byte(y.String()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := server.New(ctx, cfg,
		server.WithRegistry(msg.Registry().Union(testproto.Registry())),
		server.WithDataDir(dir), server.WithStore(st), server.WithLogger(logger),
		server.WithAuditor(server.NewFileAuditor(filepath.Join(dir, "audit.jsonl"), 10, 5, logger)))
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	r := &rig{dir: dir, st: st, h: h, log: log}
	t.Cleanup(func() { r.close(context.Background()) })
	return r
}

func (r *rig) close(ctx context.Context) {
	if r.h != nil {
		r.h.Close(ctx)
		r.st.Close()
		r.h = nil
	}
}

func (r *rig) plugin(t *testing.T, name string) *notesPlugin {
	t.Helper()
	impl, ok := r.h.PluginImpl(name)
	if !ok {
		t.Fatalf("plugin %q not loaded", name)
	}
	return impl.(*notesPlugin)
}

type agent struct {
	*client.Client
	echo testproto.Client
}

func (r *rig) connect(t testing.TB, ctx context.Context) *agent {
	t.Helper()
	c, err := client.InProcess(r.h, client.JSON, msg.Registry().Union(testproto.Registry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Handshake(ctx, "agent-1", hostCanary, "echo"); err != nil {
		t.Fatal(err)
	}
	return &agent{Client: c, echo: testproto.Client{Requester: c}}
}

func (a *agent) say(t *testing.T, ctx context.Context, text string) string {
	t.Helper()
	r, err := a.echo.EchoSay(ctx, &testproto.EchoSayReq{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return r.Text
}

func (a *agent) notes(t *testing.T, ctx context.Context) []string {
	t.Helper()
	r, err := a.echo.EchoList(ctx, &testproto.EchoListReq{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Items
}

// assertNoCanary fails if a canary is in any file under dir (snapshots,
// audit lines, the SQLite database and its WAL) or in the log.
func assertNoCanary(t *testing.T, dir, log string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, c := range []string{hostCanary, pluginCanary} {
			if bytes.Contains(b, []byte(c)) {
				t.Errorf("canary %q found in %s", c, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no files to check")
	}
	for _, c := range []string{hostCanary, pluginCanary} {
		if strings.Contains(log, c) {
			t.Errorf("canary %q found in the log", c)
		}
	}
}

// assertNoCanaryInRows fails if a canary is in any stored SQL snapshot.
func assertNoCanaryInRows(t *testing.T, ctx context.Context, st *store.Store) {
	t.Helper()
	rows, err := st.DB().QueryContext(ctx, "SELECT id, session_id, agent_id, data FROM snapshots")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, sid, agent string
		var data []byte
		if err := rows.Scan(&id, &sid, &agent, &data); err != nil {
			t.Fatal(err)
		}
		n++
		row := id + sid + agent + string(data)
		for _, c := range []string{hostCanary, pluginCanary} {
			if strings.Contains(row, c) {
				t.Errorf("canary %q in snapshot row %s", c, id)
			}
		}
	}
	if err := rows.Err(); err != nil || n == 0 {
		t.Fatalf("%d rows, %v", n, err)
	}
}

func TestSnapshotRestoreAcrossRestart(t *testing.T) {
	for _, tc := range []struct{ name, target string }{{"file", "file"}, {"sql", "sql"}, {"sql-postgres", "sql"}} {
		target := tc.target
		t.Run(tc.name, func(t *testing.T) {
			dsn := ""
			if tc.name == "sql-postgres" {
				dsn = pgtest.DSN(t, "aep_server_test")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			dir := t.TempDir()
			log := &lockedBuffer{}
			r1 := startRigDSN(t, ctx, dsn, dir, log, []string{"notes"}, "")
			a1 := r1.connect(t, ctx)
			a1.say(t, ctx, "one")
			a1.say(t, ctx, "two")
			snap, err := a1.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
			if err != nil {
				t.Fatal(err)
			}
			if string(snap.Target) != target || snap.Bytes <= 0 || !strings.HasPrefix(snap.SnapshotID, target+"-") {
				t.Fatalf("snapshot resp %+v", snap)
			}
			// The stored size is what the response reports.
			checkStoredSize(t, ctx, r1, target, snap)
			a1.say(t, ctx, "after-snapshot") // lost by the restore below
			r1.close(ctx)

			// A new host on the same data directory and store.
			r2 := startRigDSN(t, ctx, dsn, dir, log, []string{"notes"}, "")
			a2 := r2.connect(t, ctx)
			if got := a2.notes(t, ctx); len(got) != 0 {
				t.Fatalf("fresh session has notes %v", got)
			}
			res, err := a2.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)})
			if err != nil {
				t.Fatal(err)
			}
			if res.SnapshotID != snap.SnapshotID || !slices.Equal(res.Restored, []string{"notes"}) {
				t.Fatalf("restore resp %+v", res)
			}
			if got := a2.notes(t, ctx); !slices.Equal(got, []string{"one", "two"}) {
				t.Fatalf("restored notes %v, want [one two]", got)
			}
			// The session resumes where it was.
			if got := a2.say(t, ctx, "three"); got != "one,two,three" {
				t.Fatalf("resumed session says %q", got)
			}
			// The secret left out of the snapshot is still the configured one.
			if got := r2.plugin(t, "notes").state(aeptest.Handle(t, a2.Client)).APIKey; got != pluginCanary {
				t.Fatalf("api key after restore %q", got)
			}
			if target == "sql" {
				assertNoCanaryInRows(t, ctx, r2.st)
			}
			r2.close(ctx)
			assertNoCanary(t, dir, log.String())
			if !strings.Contains(log.String(), "snapshot restored") {
				t.Fatal("the log captured nothing: the canary check would be empty")
			}
			audit, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
			if err != nil || !bytes.Contains(audit, []byte("session/restore/req")) {
				t.Fatalf("audit has no restore line (%v): %s", err, audit)
			}
		})
	}
}

// checkStoredSize checks that snapshot snap of rig r takes the bytes its
// reply says where target keeps it.
func checkStoredSize(t *testing.T, ctx context.Context, r *rig, target string, snap *msg.SessionSnapshotResp) {
	t.Helper()
	switch target {
	case "file":
		// The document and the files archive beside it.
		size := int64(0)
		for _, ext := range []string{".json", ".files"} {
			fi, err := os.Stat(filepath.Join(r.dir, "snapshots", snap.SnapshotID+ext))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Fatalf("snapshot file %s mode %v, want 0600", ext, fi.Mode().Perm())
			}
			size += fi.Size()
		}
		if int(size) != snap.Bytes {
			t.Fatalf("snapshot files hold %d bytes, response says %d", size, snap.Bytes)
		}
	case "sql":
		var n int
		// The document and the files archive stored beside it.
		q := "SELECT length(data) + coalesce(length(files), 0) FROM snapshots WHERE id = ?"
		if r.st.Dialect() == "postgres" {
			q = strings.Replace(q, "?", "$1", 1)
		}
		if err := r.st.DB().QueryRowContext(ctx, q, snap.SnapshotID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != snap.Bytes {
			t.Fatalf("sql row holds %d bytes, response says %d", n, snap.Bytes)
		}
	}
}

// TestRestoreBadSnapshotChangesNothing: an unknown, malformed or corrupt
// snapshot is answered with a clear error, and no plugin's Restore runs.
func TestRestoreBadSnapshotChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	r := startRig(t, ctx, dir, &lockedBuffer{}, []string{"notes"}, "")
	a := r.connect(t, ctx)
	a.say(t, ctx, "saved")
	good, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
	if err != nil {
		t.Fatal(err)
	}
	goodSQL, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	a.say(t, ctx, "current")
	snapDir := filepath.Join(dir, "snapshots")
	goodDoc, err := os.ReadFile(filepath.Join(snapDir, good.SnapshotID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	// plant writes a file snapshot under a fresh id and returns the id.
	n := 0
	plant := func(doc []byte) string {
		n++
		id := fmt.Sprintf("file-%032x", n)
		if err := os.WriteFile(filepath.Join(snapDir, id+".json"), doc, 0o600); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// withID rewrites the payload's own id so only the named defect remains.
	var d struct {
		Format  string          `json:"format"`
		Version int             `json:"version"`
		SHA256  string          `json:"sha256"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(goodDoc, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Payload), `"agent-1"`) {
		t.Fatalf("payload lacks the state: %s", d.Payload)
	}
	tamperedPayload := bytes.Replace(d.Payload, []byte(`"agent-1"`), []byte(`"agent-2"`), 1)
	tampered, _ := json.Marshal(map[string]any{"format": d.Format, "version": d.Version, "sha256": d.SHA256, "payload": json.RawMessage(tamperedPayload)})
	v2, _ := json.Marshal(map[string]any{"format": d.Format, "version": 2, "sha256": d.SHA256, "payload": d.Payload})

	// A corrupt SQL row: same id pattern, bad data.
	badSQL := "sql-0123456789abcdef0123456789abcdef"
	if _, err := r.st.Client.Snapshot.Create().SetID(badSQL).SetSessionID("s-x").SetAgentID("x").SetData([]byte(`{"format":"aep.snapshot"`)).Save(ctx); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "outside.json")
	if err := os.WriteFile(outside, goodDoc, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		id   string
		code wire.Code
		want string
	}{
		{"unknown file id", "file-ffffffffffffffffffffffffffffffff", wire.CodeRuntimeError, "unknown snapshot"},
		{"unknown sql id", "sql-ffffffffffffffffffffffffffffffff", wire.CodeRuntimeError, "unknown snapshot"},
		{"path traversal", "../outside", wire.CodeRuntimeError, "a snapshot id is"},
		{"traversal with prefix", "file-../../outside", wire.CodeRuntimeError, "a snapshot id is"},
		{"absolute path", outside, wire.CodeRuntimeError, "a snapshot id is"},
		{"upper-case hex", strings.ToUpper(good.SnapshotID), wire.CodeRuntimeError, "a snapshot id is"},
		{"not json", plant([]byte("this is not json")), wire.CodeRuntimeError, "corrupt snapshot"},
		{"truncated", plant(goodDoc[:len(goodDoc)/2]), wire.CodeRuntimeError, "corrupt snapshot"},
		{"empty", plant(nil), wire.CodeRuntimeError, "corrupt snapshot"},
		{"checksum mismatch", plant(tampered), wire.CodeRuntimeError, "checksum mismatch"},
		{"wrong version", plant(v2), wire.CodeRuntimeError, "format version 2"},
		{"trailing data", plant(append(append([]byte{}, goodDoc...), "{}"...)), wire.CodeRuntimeError, "trailing data"},
		{"stored under another id", plant(goodDoc), wire.CodeRuntimeError, "stored under another id"},
		{"corrupt sql row", badSQL, wire.CodeRuntimeError, "corrupt snapshot"},
	}
	p := r.plugin(t, "notes")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(tc.id)})
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("want a wire error, got %v", err)
			}
			if we.Code != tc.code || !strings.Contains(we.Message, tc.want) {
				t.Fatalf("got %s %q, want %s containing %q", we.Code, we.Message, tc.code, tc.want)
			}
			if got := a.notes(t, ctx); !slices.Equal(got, []string{"saved", "current"}) {
				t.Fatalf("state changed to %v", got)
			}
			if n := p.restores.Load(); n != 0 {
				t.Fatalf("Restore ran %d times", n)
			}
		})
	}
	// The good snapshots still restore: the errors above were about the input.
	for _, id := range []string{good.SnapshotID, goodSQL.SnapshotID} {
		a.say(t, ctx, "more")
		if _, err := a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(id)}); err != nil {
			t.Fatal(err)
		}
		if got := a.notes(t, ctx); !slices.Equal(got, []string{"saved"}) {
			t.Fatalf("after restoring %s: %v", id, got)
		}
	}
}

// TestRestoreRollsBackOnPluginFailure: when the second plugin's Restore
// fails, the first plugin gets its pre-restore state back.
func TestRestoreRollsBackOnPluginFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := startRig(t, ctx, t.TempDir(), &lockedBuffer{}, []string{"first", "second"}, "")
	a := r.connect(t, ctx)
	a.say(t, ctx, "old") // broadcast: both plugins note it
	snap, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Target != "file" {
		t.Fatalf("default target %q", snap.Target)
	}
	a.say(t, ctx, "new")
	first, second := r.plugin(t, "first"), r.plugin(t, "second")
	second.FailRestore.Store(true)
	_, err = a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)})
	if err == nil || !strings.Contains(err.Error(), "rolled back") || !strings.Contains(err.Error(), `plugin "second"`) {
		t.Fatalf("got %v", err)
	}
	for _, p := range []*notesPlugin{first, second} {
		if got := p.state(aeptest.Handle(t, a.Client)).Notes; !slices.Equal(got, []string{"old", "new"}) {
			t.Fatalf("state after failed restore %v, want [old new]", got)
		}
	}
	for _, p := range []*notesPlugin{first, second} {
		if p.restores.Load() != 2 { // the restore and the rollback
			t.Fatalf("a plugin restored %d times, want 2", p.restores.Load())
		}
	}
	res, err := a.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)})
	if err != nil || !slices.Equal(res.Restored, []string{"first", "second"}) {
		t.Fatalf("restore %+v, %v", res, err)
	}
}

// TestSnapshotRefusesSecrets: the kernel never writes a snapshot holding
// the host token or a secret a plugin declares, on either target.
func TestSnapshotRefusesSecrets(t *testing.T) {
	tests := []struct {
		name  string
		extra string // plugin config
		say   string
		want  string
	}{
		{"host token in plugin state", "", hostCanary, "the host auth token"},
		{"plugin secret in plugin state", "      leak: true\n", "hello", `a secret of plugin "notes"`},
		{"plugin secret said by the agent", "", "key=" + pluginCanary, `a secret of plugin "notes"`},
	}
	for _, tc := range tests {
		for _, target := range []string{"file", "sql"} {
			t.Run(tc.name+"/"+target, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				dir := t.TempDir()
				log := &lockedBuffer{}
				r := startRig(t, ctx, dir, log, []string{"notes"}, tc.extra)
				a := r.connect(t, ctx)
				a.say(t, ctx, tc.say)
				_, err := a.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
				if err == nil || !strings.Contains(err.Error(), "contains a secret") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v", err)
				}
				if strings.Contains(err.Error(), hostCanary) || strings.Contains(err.Error(), pluginCanary) {
					t.Fatalf("the error reveals the secret: %v", err)
				}
				entries, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
				if len(entries) != 0 {
					t.Fatalf("snapshot directory holds %d entries", len(entries))
				}
				if n, err := r.st.Client.Snapshot.Query().Count(ctx); err != nil || n != 0 {
					t.Fatalf("sql snapshots: %d, %v", n, err)
				}
				if !strings.Contains(log.String(), "snapshot refused") {
					t.Fatal("refusal not logged")
				}
			})
		}
	}
}

// TestSnapshotNeedsItsTarget: a host without data directory or store says so.
func TestSnapshotNeedsItsTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := server.Defaults()
	cfg.Server.AuthToken = hostCanary
	h, err := server.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Handshake(ctx, "a", hostCanary); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]string{"file": "need a data directory", "sql": "need a store"} {
		_, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: msg.SessionSnapshotReqTarget(target)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: got %v", target, err)
		}
		_, err = c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(target + "-0123456789abcdef0123456789abcdef")})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("restore %s: got %v", target, err)
		}
	}
}

func (*notesPlugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "aep.test.snapnotes", Capability: "echo", New: func() server.Plugin { return new(notesPlugin) }}
}
