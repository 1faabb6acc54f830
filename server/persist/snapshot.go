package persist

// Session snapshots (spec §1.6, spec §3 Session live → snapshot → live,
// docs/DECISIONS.md, State). A snapshot is one JSON document, the same for both targets:
//
//	{"format":"aep.snapshot","version":1,"sha256":"<hex of payload>","payload":{…}}
//
// The payload holds the snapshot's own id, the source session's agent id and
// accepted capabilities, the creation time, and per plugin implementing
// [Snapshotter] the bytes its Snapshot returned. Target "file" writes it to
// <data-dir>/snapshots/<id>.json atomically, and the archive of the
// session's directory (archive.go) beside it, <id>.files, first; target
// "sql" stores both in the ent Snapshot entity of the host's store. Both
// carry the files, so a restore rolls the directory back with the rest
// (docs/DECISIONS.md, File snapshots roll files back). Restore (restore.go) decodes and
// verifies the whole document before any plugin is touched, so an unknown
// or corrupt snapshot changes nothing.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

const (
	snapshotFormat  = "aep.snapshot"
	snapshotVersion = 1
	// snapshotDir is the directory of file snapshots under the data directory.
	snapshotDir = "snapshots"
	// filesSuffix names a file snapshot's files archive beside its
	// document: <id>.files.
	filesSuffix = ".files"
	// maxSnapshotBytes bounds what restore reads, so a huge or endless file
	// cannot exhaust memory.
	maxSnapshotBytes = 256 << 20
)

// snapshotIDPattern is the only shape of snapshot id the host generates and
// accepts. It names the target and cannot name a path outside the snapshot
// directory (no separators, no dots).
var snapshotIDPattern = regexp.MustCompile(`^(file|sql)-[0-9a-f]{32}$`)

var (
	// ErrSnapshotNotFound is the cause when no snapshot has the requested id.
	ErrSnapshotNotFound = fmt.Errorf("%w: unknown snapshot", wire.ErrNotFound)
	// ErrSnapshotCorrupt is the cause when a stored snapshot fails to decode or verify.
	ErrSnapshotCorrupt = wire.Reason("corrupt_snapshot", errors.New("corrupt snapshot"))
	// ErrSnapshotSecret is the cause when a snapshot would contain a secret
	// the kernel knows; nothing is written.
	ErrSnapshotSecret = wire.Reason("secret_in_snapshot", errors.New("snapshot refused: it contains a secret"))
)

// snapshotDoc is the stored form; SHA256 covers the exact bytes of Payload.
type snapshotDoc struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	Payload json.RawMessage `json:"payload"`
}

type snapshotPayload struct {
	SnapshotID string `json:"snapshot_id"`
	// SessionHandle is the saved session's public handle, for information:
	// a restore keeps the handle of the session restored into.
	SessionHandle string `json:"session_handle,omitempty"`
	// LegacySessionID is read from snapshots written before handles, which
	// recorded the transport id; it is never written again.
	LegacySessionID string `json:"session_id,omitempty"`
	// Owner is the saved session's owner key (stored.go): a one-way
	// digest of its transport id, so a session that presents that id is
	// its owner and the snapshot holds no bearer secret.
	Owner        string                `json:"owner,omitempty"`
	AgentID      string                `json:"agent_id"`
	AcceptedCaps []msg.CapabilityEntry `json:"accepted_caps"`
	Created      time.Time             `json:"created"`
	Plugins      []pluginSnapshot      `json:"plugins"`
	// Owned lists the owner keys of the earlier sessions the source
	// session owned through restores; restoring this snapshot passes them
	// on (stored.go).
	Owned []string `json:"owned,omitempty"`
	// Kind is why it was taken when not at a session's request: "drain"
	// or "auto" (the store row's kind says the same).
	Kind string `json:"kind,omitempty"`
	// Files says what the snapshot holds of the session directory
	// (archive.go). Every snapshot has it now; file snapshots written
	// before they carried files have none (their files stayed on the
	// host's disk).
	Files *filesInfo `json:"files,omitempty"`
	// Tenant is the saved session's tenant ("" for the default one):
	// only a session of that tenant finds the snapshot (openSnapshot).
	Tenant string `json:"tenant,omitempty"`
	// Point is the session's point the snapshot covers (docs/DECISIONS.md,
	// Points); nil in snapshots written before points were kept, which
	// count as point 0.
	Point *uint64 `json:"point,omitempty"`
}

// point is the point the snapshot covers: 0 when it recorded none.
func (p *snapshotPayload) point() uint64 {
	if p.Point == nil {
		return 0
	}
	return *p.Point
}

// Why a snapshot was taken: the store row's kind, and what the kernel's
// metrics count snapshots by ([Kernel.SnapshotDone]).
const (
	KindRequest = "request" // an agent's session/snapshot
	KindDrain   = "drain"   // a drain's (drain.go)
	KindAuto    = "auto"    // an automatic one (autosnap.go)
)

// snapshotTaken is what taking a snapshot did.
type snapshotTaken struct {
	id    string
	bytes int
	owner string
	files *msg.SnapshotFiles
	point uint64
}

type pluginSnapshot struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Key is the plugin's instance key, what restore matches (stored.go).
	Key   string `json:"key,omitempty"`
	State []byte `json:"state"` // base64 in JSON: plugins may save any bytes
}

func newSnapshotID(target string) string { return target + "-" + wire.RandomHex(16) }

// takeSnapshot saves the state of session s to target, for the reason
// kind, with a copy of the session directory within
// server.snapshots.files_max_bytes (archive.go): in the store row for a
// sql snapshot, in a file beside the document for a file snapshot. The
// kernel is told how it went, for its metrics.
func (p *Keeper) takeSnapshot(ctx context.Context, s Session, target, kind string) (t snapshotTaken, err error) {
	return p.takeSnapshotInto(ctx, s, target, kind, nil)
}

// takeSnapshotInto is takeSnapshot that, with row, writes over the
// session's automatic snapshot (autosnap.go) instead of adding one.
func (p *Keeper) takeSnapshotInto(ctx context.Context, s Session, target, kind string, row *autoRow) (t snapshotTaken, err error) {
	t0 := time.Now()
	defer func() {
		p.k.SnapshotDone(s, SnapshotReport{Kind: kind, Target: target, Began: t0, ID: t.id, Bytes: t.bytes, Err: err})
	}()
	return p.writeSnapshot(ctx, s, target, kind, row)
}

// writeSnapshot is takeSnapshotInto without the kernel's metrics.
func (p *Keeper) writeSnapshot(ctx context.Context, s Session, target, kind string, row *autoRow) (snapshotTaken, error) {
	if err := p.targetAvailable(target); err != nil {
		return snapshotTaken{}, err
	}
	// Read before the state and files are: a change meanwhile shows as a
	// different fingerprint at the next save.
	var fp uint64
	if row != nil {
		fp = dirFingerprint(p.DirOf(s).Path, p.set.Snapshots.filesMaxEntries())
	}
	pl, secrets, err := p.sessionState(ctx, s)
	if err != nil {
		return snapshotTaken{}, err
	}
	pl.SnapshotID = newSnapshotID(target)
	if row != nil && row.id != "" {
		pl.SnapshotID = row.id
	}
	if kind != KindRequest {
		pl.Kind = kind
	}
	var archive []byte
	reused := row != nil && row.id != "" && row.files != nil && row.filesMark == fp
	switch {
	case reused:
		// Incremental: the directory is as it was when the row's archive
		// was made; the row keeps it and the document repeats its
		// description.
		fi := *row.files
		pl.Files = &fi
	// A file snapshot of a subagent that works in its parent's directory
	// carries no files, as before file snapshots carried any: restoring
	// them would replace the parent's directory, which restore refuses.
	case target == "sql" || p.DirOf(s).Owner == s.Handle():
		if archive, err = p.archiveSessionFiles(ctx, s, pl, secrets); err != nil {
			return snapshotTaken{}, err
		}
	}
	doc, err := encodeSnapshot(pl)
	if err != nil {
		return snapshotTaken{}, err
	}
	if what := findSecret(doc, secrets); what != "" {
		p.log.Warn("snapshot refused: it holds a secret", "session", s.Handle(), "found", what)
		return snapshotTaken{}, fmt.Errorf("%w (%s); nothing was written", ErrSnapshotSecret, what)
	}
	if row != nil && row.id != "" {
		found, err := p.updateAutoRow(ctx, pl, doc, archive, reused)
		if err != nil {
			return snapshotTaken{}, fmt.Errorf("write snapshot: %w", err)
		}
		if !found {
			// Deleted under it (max_age, keep_per_session, the client's
			// session/snapshot/delete, a drain): a new row, files and all.
			row.id, row.files = "", nil
			return p.writeSnapshot(ctx, s, target, kind, row)
		}
	} else if err := p.storeSnapshot(ctx, target, kind, pl, doc, archive); err != nil {
		return snapshotTaken{}, fmt.Errorf("write snapshot: %w", err)
	}
	if row != nil {
		row.id = pl.SnapshotID
		if !reused {
			row.files, row.filesMark = pl.Files, fp
		}
	}
	t := snapshotTaken{id: pl.SnapshotID, bytes: len(doc) + len(archive), owner: pl.Owner, files: pl.Files.taken(), point: pl.point()}
	level := slog.LevelInfo
	if kind == KindAuto {
		level = slog.LevelDebug // twice a crash window per busy session
	}
	p.log.Log(ctx, level, "snapshot written", "session", s.Handle(), "snapshot_id", pl.SnapshotID, "target", target, "kind", kind, "point", t.point,
		"bytes", t.bytes, "plugins", len(pl.Plugins), "files", t.files.State, "files_bytes", t.files.Bytes, "files_reused", reused,
		"files_skipped", pl.Files != nil && pl.Files.SkippedCount > 0)
	// A snapshot without its files refers to the session's directory,
	// which then outlives the session on this host; an automatic one never
	// keeps a directory, or every session's would stay.
	if (pl.Files == nil || pl.Files.State != filesStored) && kind != KindAuto {
		p.pinDir(s.Handle())
	}
	p.applyRetention(ctx, pl.Owner, target, pl.SnapshotID, kind != KindAuto)
	return t, nil
}

// targetAvailable refuses a target this host cannot write.
func (p *Keeper) targetAvailable(target string) error {
	switch target {
	case "file":
		if p.dataDir == "" {
			return wire.Reason("snapshot_target_unavailable", errors.New("file snapshots need a data directory; this host has none"))
		}
	case "sql":
		if p.store == nil {
			return wire.Reason("snapshot_target_unavailable", errors.New("sql snapshots need a store; this host has none"))
		}
	default:
		return fmt.Errorf("target %q: %w: want file or sql", target, wire.ErrInvalid)
	}
	return nil
}

// archiveSessionFiles archives the directory of session s for a sql
// snapshot, held still by the plugins that write it (FileHolder), and
// records in pl what it holds; a directory it cannot carry is recorded as
// omitted with the reason, and logged.
func (p *Keeper) archiveSessionFiles(ctx context.Context, s Session, pl *snapshotPayload, secrets []Secret) ([]byte, error) {
	lim := p.filesLimits(p.set.Snapshots.filesMaxBytes())
	dir := p.DirOf(s).Path
	release, err := p.holdFiles(ctx, dir)
	if err != nil {
		return nil, err
	}
	archive, fi := archiveDir(dir, lim, secrets)
	release()
	pl.Files = &fi
	if fi.State == filesOmitted {
		p.log.Warn("snapshot taken without the session's files", "session", s.Handle(), "snapshot_id", pl.SnapshotID,
			"reason", fi.Reason, "limit", fi.Limit, "bytes_found", fi.Bytes, "entries_found", fi.Entries)
	}
	return archive, nil
}

// storeSnapshot writes the document (and a sql snapshot's files archive)
// to target.
func (p *Keeper) storeSnapshot(ctx context.Context, target, kind string, pl *snapshotPayload, doc, archive []byte) error {
	if target == "file" {
		dir := filepath.Join(p.dataDir, snapshotDir)
		if archive != nil {
			// The archive first: a document names only files that exist.
			if err := writeFileAtomic(dir, pl.SnapshotID+filesSuffix, archive); err != nil {
				return err
			}
		}
		if err := writeFileAtomic(dir, pl.SnapshotID+".json", doc); err != nil {
			os.Remove(filepath.Join(dir, pl.SnapshotID+filesSuffix))
			return err
		}
		return nil
	}
	wait := p.storeWait()
	if kind == KindAuto {
		wait = 0 // a round goes on to the next session; this one is tried next round
	}
	tried := false
	return p.storeCall(ctx, "snapshot", wait, func(ctx context.Context) error {
		c := p.store.Client.Snapshot.Create().SetID(pl.SnapshotID).SetSessionID(pl.Owner).
			SetAgentID(pl.AgentID).SetData(doc).SetCreatedAt(pl.Created).SetKind(kind).SetFilesBytes(int64(len(archive))).
			SetTenant(pl.Tenant).SetPoint(int64(pl.point()))
		if archive != nil {
			c.SetFiles(archive)
		}
		err := c.Exec(ctx)
		if err != nil && tried && ent.IsConstraintError(err) {
			// The attempt before may have committed as the connection
			// dropped: the row is there, and the snapshot is taken.
			if ok, xerr := p.store.Client.Snapshot.Query().Where(snapshot.ID(pl.SnapshotID)).Exist(ctx); xerr == nil && ok {
				return nil
			}
		}
		tried = true
		return err
	})
}

// updateAutoRow writes a new document over the session's automatic
// snapshot row, with the files archive unless reused, in one statement;
// found is false when the row is gone. Like storeSnapshot's automatic
// writes it does not wait for a store that does not answer: the saver
// tries again.
func (p *Keeper) updateAutoRow(ctx context.Context, pl *snapshotPayload, doc, archive []byte, reused bool) (found bool, err error) {
	err = p.storeCall(ctx, "snapshot", 0, func(ctx context.Context) error {
		u := p.store.Client.Snapshot.Update().Where(snapshot.ID(pl.SnapshotID), snapshot.Kind(KindAuto)).
			SetData(doc).SetCreatedAt(pl.Created).SetPoint(int64(pl.point()))
		if !reused {
			u.SetFilesBytes(int64(len(archive)))
			if archive != nil {
				u.SetFiles(archive)
			} else {
				u.ClearFiles()
			}
		}
		n, err := u.Save(ctx)
		found = n == 1
		return err
	})
	return found, err
}

// filesLimits are the bounds of a files archive on this host: maxBytes of
// regular files and server.snapshots.files_max_entries.
func (p *Keeper) filesLimits(maxBytes int64) filesLimits {
	return filesLimits{maxBytes: maxBytes, maxEntries: p.set.Snapshots.filesMaxEntries()}
}

// sessionState collects the state of session s from every [Snapshotter],
// refusing state that holds a secret the kernel knows; it returns the
// payload without a snapshot id, and the secrets it checked. Snapshots
// store it; forks (fork.go) restore it into new sessions without storing it.
func (p *Keeper) sessionState(ctx context.Context, s Session) (*snapshotPayload, []Secret, error) {
	// The point first: a request answered after this may be in part in
	// the state taken below, one answered before is in it whole.
	point := s.Point()
	agent, accepted := s.Identity()
	pl := &snapshotPayload{SessionHandle: s.Handle(), AgentID: agent, AcceptedCaps: accepted, Point: &point}
	pl.Created = time.Now().UTC()
	pl.Plugins = []pluginSnapshot{}
	pl.Owner = ownerKey(s.ID())
	pl.Owned = p.lineageOf(s.ID())
	pl.Tenant = s.Tenant()
	secrets := p.secrets(s)
	for _, snp := range p.snapshotters {
		state, err := snp.v.Snapshot(ctx, s.Handle())
		if err != nil {
			return nil, nil, wire.Public(fmt.Errorf("plugin %q: snapshot: %w", snp.Name, err))
		}
		// Plugin state is base64 in the document, so it is checked raw.
		if what := findSecret(state, secrets); what != "" {
			p.log.Warn("snapshot refused: plugin state holds a secret", "session", s.Handle(), "plugin", snp.Name, "found", what)
			return nil, nil, fmt.Errorf("%w (%s) in the state of plugin %q; nothing was written", ErrSnapshotSecret, what, snp.Name)
		}
		pl.Plugins = append(pl.Plugins, pluginSnapshot{Name: snp.Name, Type: snp.Type, Key: snp.Key, State: state})
	}
	return pl, secrets, nil
}

// openSnapshot reads and verifies the snapshot id names, for a session of
// tenant: another tenant's snapshot is answered as one that does not
// exist, word for word (no existence oracle).
func (p *Keeper) openSnapshot(ctx context.Context, tenant, id string) (*snapshotPayload, error) {
	m := snapshotIDPattern.FindStringSubmatch(id)
	if m == nil {
		if len(id) > 80 {
			id = id[:80] + "…"
		}
		// An id the host could never have issued names nothing: not_found,
		// as any unknown id (docs/DECISIONS.md, Errors of state).
		return nil, fmt.Errorf("%w %q: a snapshot id is \"file-\" or \"sql-\" and 32 lower-case hex digits", ErrSnapshotNotFound, id)
	}
	doc, err := p.loadSnapshot(ctx, m[1], id)
	if err != nil {
		return nil, err
	}
	pl, err := decodeSnapshot(doc, id)
	if err != nil {
		return nil, err
	}
	if pl.Tenant != tenant {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, id)
	}
	return pl, nil
}

// loadSnapshot reads the stored document of a validated id.
func (p *Keeper) loadSnapshot(ctx context.Context, target, id string) ([]byte, error) {
	if target == "file" {
		return p.loadFileSnapshot(id)
	}
	if p.store == nil {
		return nil, wire.Reason("snapshot_target_unavailable", errors.New("sql snapshots need a store; this host has none"))
	}
	// The document only: the files archive is read by a restore that needs it.
	var row *ent.Snapshot
	err := p.storeCall(ctx, "read snapshot", p.storeWait(), func(ctx context.Context) (err error) {
		row, err = p.store.Client.Snapshot.Query().Where(snapshot.ID(id)).Select(snapshot.FieldID, snapshot.FieldData).Only(ctx)
		return err
	})
	if ent.IsNotFound(err) {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, id)
	}
	if errors.Is(err, ErrStoreUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return row.Data, nil
}

// loadFileSnapshot reads the document of file snapshot id, a regular
// file of at most maxSnapshotBytes.
func (p *Keeper) loadFileSnapshot(id string) ([]byte, error) {
	if p.dataDir == "" {
		return nil, wire.Reason("snapshot_target_unavailable", errors.New("file snapshots need a data directory; this host has none"))
	}
	path := filepath.Join(p.dataDir, snapshotDir, id+".json")
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("snapshot %s: %w: not a regular file", id, ErrSnapshotCorrupt)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	defer f.Close()
	doc, err := io.ReadAll(io.LimitReader(f, maxSnapshotBytes+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if len(doc) > maxSnapshotBytes {
		return nil, fmt.Errorf("snapshot %s: %w: larger than %d bytes", id, ErrSnapshotCorrupt, maxSnapshotBytes)
	}
	return doc, nil
}

// encodeSnapshot builds the stored document of p.
func encodeSnapshot(p *snapshotPayload) ([]byte, error) {
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	sum := sha256.Sum256(payload)
	doc, err := json.Marshal(snapshotDoc{Format: snapshotFormat, Version: snapshotVersion, SHA256: hex.EncodeToString(sum[:]), Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	return append(doc, '\n'), nil
}

// decodeSnapshot verifies doc completely: format, version, checksum, payload
// and that it is the snapshot id names.
func decodeSnapshot(doc []byte, id string) (*snapshotPayload, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("snapshot %s: %w: %s; nothing was restored", id, ErrSnapshotCorrupt, fmt.Sprintf(format, args...))
	}
	var d snapshotDoc
	// The envelope is read leniently so a later format version is reported
	// as such, not as an unknown field; the payload is read strictly.
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&d); err != nil {
		return nil, corrupt("not a snapshot document: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, corrupt("trailing data after the document")
	}
	if d.Format != snapshotFormat {
		return nil, corrupt("format %q, want %q", d.Format, snapshotFormat)
	}
	if d.Version != snapshotVersion {
		return nil, corrupt("format version %d; this host reads version %d", d.Version, snapshotVersion)
	}
	sum := sha256.Sum256(d.Payload)
	if want, err := hex.DecodeString(d.SHA256); err != nil || !bytes.Equal(want, sum[:]) {
		return nil, corrupt("checksum mismatch")
	}
	var p snapshotPayload
	pdec := json.NewDecoder(bytes.NewReader(d.Payload))
	pdec.DisallowUnknownFields()
	if err := pdec.Decode(&p); err != nil {
		return nil, corrupt("payload: %v", err)
	}
	if p.SnapshotID != id {
		return nil, corrupt("it is snapshot %q, stored under another id", p.SnapshotID)
	}
	return &p, nil
}

// findSecret reports which secret appears in b, raw or JSON-escaped, as a
// description that does not reveal it ("" when none does).
func findSecret(b []byte, secrets []Secret) string {
	for _, sec := range secrets {
		if sec.Value == "" {
			continue
		}
		esc, _ := json.Marshal(sec.Value)
		esc = esc[1 : len(esc)-1]
		if bytes.Contains(b, []byte(sec.Value)) || bytes.Contains(b, esc) {
			return sec.What
		}
	}
	return ""
}

// writeFileAtomic writes dir/name so that a reader sees either nothing or
// the whole file, even after a crash: a temp file in the same directory is
// written and synced, renamed over the name, and the directory is synced so
// the rename is durable. The file's mode is 0600.
func writeFileAtomic(dir, name string, data []byte) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
