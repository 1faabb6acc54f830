package server

// Session snapshots (spec §1.6, spec §3 Session live → snapshot → live,
// docs/DECISIONS.md, State). A snapshot is one JSON document, the same for both targets:
//
//	{"format":"aep.snapshot","version":1,"sha256":"<hex of payload>","payload":{…}}
//
// The payload holds the snapshot's own id, the source session's agent id and
// accepted capabilities, the creation time, and per plugin implementing
// [Snapshotter] the bytes its Snapshot returned. Target "file" writes it to
// <data-dir>/snapshots/<id>.json atomically; target "sql" stores it in the
// ent Snapshot entity of the host's store. Restore decodes and verifies the
// whole document before any plugin is touched, so an unknown or corrupt
// snapshot changes nothing.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// SecretHolder is implemented by plugins that hold secrets (API keys,
// passwords from their config). Before a snapshot is written the kernel
// checks that none of them appears in it, as a defence behind each plugin's
// own duty to leave secrets out (docs/DECISIONS.md, State).
type SecretHolder interface {
	Secrets() []string
}

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
	// a restore keeps the handle of the session restored into (handle.go).
	SessionHandle string `json:"session_handle,omitempty"`
	// LegacySessionID is read from snapshots written before handles, which
	// recorded the transport id; it is never written again.
	LegacySessionID string `json:"session_id,omitempty"`
	// Owner is the saved session's owner key (snapshotlist.go): a one-way
	// digest of its transport id, so a session that presents that id is
	// its owner and the snapshot holds no bearer secret.
	Owner        string                `json:"owner,omitempty"`
	AgentID      string                `json:"agent_id"`
	AcceptedCaps []msg.CapabilityEntry `json:"accepted_caps"`
	Created      time.Time             `json:"created"`
	Plugins      []pluginSnapshot      `json:"plugins"`
	// Owned lists the owner keys of the earlier sessions the source
	// session owned through restores; restoring this snapshot passes them
	// on (snapshotlist.go).
	Owned []string `json:"owned,omitempty"`
	// Kind is why it was taken when not at a session's request: "drain"
	// or "auto" (the store row's kind says the same).
	Kind string `json:"kind,omitempty"`
	// Files says what the snapshot holds of the session directory
	// (snapfiles.go); a sql snapshot has it, a file snapshot does not: its
	// files stay on the host's disk.
	Files *filesInfo `json:"files,omitempty"`
}

// Why a snapshot was taken (the store row's kind).
const (
	kindRequest = "request"
	kindDrain   = "drain"
	kindAuto    = "auto"
)

// snapshotTaken is what taking a snapshot did.
type snapshotTaken struct {
	id    string
	bytes int
	owner string
	files *msg.SnapshotFiles
}

type pluginSnapshot struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Key is the plugin's instance key, what restore matches (snapshotlist.go).
	Key   string `json:"key,omitempty"`
	State []byte `json:"state"` // base64 in JSON: plugins may save any bytes
}

func newSnapshotID(target string) string { return target + "-" + wire.RandomHex(16) }

// snapshotSession saves the state of session s to target ("file" or "sql")
// at the session's request and returns the snapshot id and the stored size.
func (h *Host) snapshotSession(ctx context.Context, s *Session, target string) (string, int, error) {
	t, err := h.takeSnapshot(ctx, s, target, kindRequest)
	return t.id, t.bytes, err
}

// takeSnapshot saves the state of session s to target, for the reason
// kind. A sql snapshot carries a copy of the session directory within
// server.snapshots.files_max_bytes (snapfiles.go); a file snapshot keeps
// referring to the directory on this host's disk, which stays (pinned)
// after the session ends.
func (h *Host) takeSnapshot(ctx context.Context, s *Session, target, kind string) (t snapshotTaken, err error) {
	t0 := time.Now()
	defer func() { h.met.snapshotDone(s, kind, t0, t.bytes, err) }()
	return h.writeSnapshot(ctx, s, target, kind)
}

// writeSnapshot is takeSnapshot without its metrics.
func (h *Host) writeSnapshot(ctx context.Context, s *Session, target, kind string) (snapshotTaken, error) {
	switch target {
	case "file":
		if h.dataDir == "" {
			return snapshotTaken{}, wire.Reason("snapshot_target_unavailable", errors.New("file snapshots need a data directory; this host has none"))
		}
	case "sql":
		if h.store == nil {
			return snapshotTaken{}, wire.Reason("snapshot_target_unavailable", errors.New("sql snapshots need a store; this host has none"))
		}
	default:
		return snapshotTaken{}, fmt.Errorf("target %q: %w: want file or sql", target, wire.ErrInvalid)
	}
	p, secrets, err := h.sessionState(ctx, s)
	if err != nil {
		return snapshotTaken{}, err
	}
	p.SnapshotID = newSnapshotID(target)
	if kind != kindRequest {
		p.Kind = kind
	}
	var archive []byte
	if target == "sql" {
		lim := h.filesLimits(h.cfg.Server.Snapshots.filesMaxBytes())
		var fi filesInfo
		dir := h.sessionDirOf(s).Path
		release, err := h.holdFiles(ctx, dir)
		if err != nil {
			return snapshotTaken{}, err
		}
		archive, fi = archiveDir(dir, lim, secrets)
		release()
		p.Files = &fi
		if fi.State == filesOmitted {
			h.log.Warn("snapshot taken without the session's files", "session", s.handle, "snapshot_id", p.SnapshotID,
				"reason", fi.Reason, "limit", fi.Limit, "bytes_found", fi.Bytes, "entries_found", fi.Entries)
		}
	}
	doc, err := encodeSnapshot(p)
	if err != nil {
		return snapshotTaken{}, err
	}
	if what := findSecret(doc, secrets); what != "" {
		h.log.Warn("snapshot refused: it holds a secret", "session", s.handle, "found", what)
		return snapshotTaken{}, fmt.Errorf("%w (%s); nothing was written", ErrSnapshotSecret, what)
	}
	switch target {
	case "file":
		err = writeFileAtomic(filepath.Join(h.dataDir, snapshotDir), p.SnapshotID+".json", doc)
	case "sql":
		c := h.store.Client.Snapshot.Create().SetID(p.SnapshotID).SetSessionID(p.Owner).
			SetAgentID(p.AgentID).SetData(doc).SetCreatedAt(p.Created).SetKind(kind).SetFilesBytes(int64(len(archive)))
		if archive != nil {
			c.SetFiles(archive)
		}
		err = c.Exec(ctx)
	}
	if err != nil {
		return snapshotTaken{}, fmt.Errorf("write snapshot: %w", err)
	}
	t := snapshotTaken{id: p.SnapshotID, bytes: len(doc) + len(archive), owner: p.Owner}
	if p.Files != nil {
		t.files = p.Files.wire(msg.SnapshotFilesState(p.Files.State))
	} else {
		t.files = &msg.SnapshotFiles{State: msg.SnapshotFilesStateLocal}
	}
	h.log.Info("snapshot written", "session", s.handle, "snapshot_id", p.SnapshotID, "target", target, "kind", kind,
		"bytes", t.bytes, "plugins", len(p.Plugins), "files", t.files.State, "files_bytes", t.files.Bytes, "files_skipped", p.Files != nil && p.Files.SkippedCount > 0)
	// A snapshot without its files refers to the session's directory,
	// which then outlives the session on this host; an automatic one never
	// keeps a directory, or every session's would stay.
	if (p.Files == nil || p.Files.State != filesStored) && kind != kindAuto {
		h.pinSessionDir(s.handle)
	}
	h.applyRetention(ctx, p.Owner, target, p.SnapshotID, kind != kindAuto)
	return t, nil
}

// filesLimits are the bounds of a files archive on this host: maxBytes of
// regular files and server.snapshots.files_max_entries.
func (h *Host) filesLimits(maxBytes int64) filesLimits {
	return filesLimits{maxBytes: maxBytes, maxEntries: h.cfg.Server.Snapshots.filesMaxEntries()}
}

// sessionState collects the state of session s from every [Snapshotter],
// refusing state that holds a secret the kernel knows; it returns the
// payload without a snapshot id, and the secrets it checked. Snapshots
// store it; forks (fork.go) restore it into new sessions without storing it.
func (h *Host) sessionState(ctx context.Context, s *Session) (*snapshotPayload, []namedSecret, error) {
	s.mu.Lock()
	p := &snapshotPayload{SessionHandle: s.handle, AgentID: s.agentID, AcceptedCaps: append([]msg.CapabilityEntry{}, s.accepted...)}
	s.mu.Unlock()
	p.Created = time.Now().UTC()
	p.Plugins = []pluginSnapshot{}
	p.Owner = ownerKey(s.id)
	p.Owned = h.lineageOf(s.id)
	secrets := h.secrets(s)
	for _, snp := range h.snapshotters {
		pl, sn := snp.p, snp.v
		state, err := sn.Snapshot(ctx, s.handle)
		if err != nil {
			return nil, nil, wire.Public(fmt.Errorf("plugin %q: snapshot: %w", pl.Name, err))
		}
		// Plugin state is base64 in the document, so it is checked raw.
		if what := findSecret(state, secrets); what != "" {
			h.log.Warn("snapshot refused: plugin state holds a secret", "session", s.handle, "plugin", pl.Name, "found", what)
			return nil, nil, fmt.Errorf("%w (%s) in the state of plugin %q; nothing was written", ErrSnapshotSecret, what, pl.Name)
		}
		p.Plugins = append(p.Plugins, pluginSnapshot{Name: pl.Name, Type: pl.Type, Key: h.keys[pl.Name], State: state})
	}
	return p, secrets, nil
}

// restoreSession restores snapshot id into session s and returns the names
// of the plugins whose state it restored and what became of the session's
// files. On any error nothing has changed: the snapshot is verified first,
// its files (if it carries them) are extracted beside the session
// directory before any plugin is touched, a plugin that fails midway has
// the plugins restored before it rolled back to their pre-restore state,
// and the extracted files replace the directory only once every plugin
// restored.
func (h *Host) restoreSession(ctx context.Context, s *Session, id string) ([]string, *msg.SnapshotFiles, error) {
	p, err := h.openSnapshot(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	// Match every saved state to a loaded snapshotter before touching any.
	type step struct {
		name  string
		sn    Snapshotter
		state []byte
		prev  []byte
	}
	steps := make([]step, 0, len(p.Plugins))
	seen := map[string]bool{}
	for _, ps := range p.Plugins {
		pl, sn, ok := h.snapshotPlugin(ps)
		if !ok {
			return nil, nil, wire.Reason("snapshot_plugin_missing", fmt.Errorf("snapshot %s holds the state of plugin %q (%s), which this host does not load as a snapshotter; nothing was restored", id, ps.Name, ps.Key))
		}
		if seen[pl.Name] {
			return nil, nil, fmt.Errorf("snapshot %s: %w: plugin %q appears twice", id, ErrSnapshotCorrupt, ps.Name)
		}
		seen[pl.Name] = true
		steps = append(steps, step{name: pl.Name, sn: sn, state: ps.State})
	}
	staged, files, err := h.stageSnapshotFiles(ctx, s, id, p)
	if err != nil {
		return nil, nil, err
	}
	if staged != nil {
		defer staged.discard() // a no-op once committed
	}
	// The pre-restore state is taken in memory only, for the rollback.
	for i := range steps {
		prev, err := steps[i].sn.Snapshot(ctx, s.handle)
		if err != nil {
			return nil, nil, wire.Public(fmt.Errorf("plugin %q: saving the current state before restore: %w; nothing was restored", steps[i].name, err))
		}
		steps[i].prev = prev
	}
	// rollback restores the plugins up to and including index last to
	// their pre-restore state.
	rollback := func(last int) error {
		var rbErrs []error
		for j := last; j >= 0; j-- {
			h.dropState(steps[j].name, s.handle)
			if rerr := steps[j].sn.Restore(ctx, s.handle, steps[j].prev); rerr != nil {
				rbErrs = append(rbErrs, fmt.Errorf("plugin %q: %w", steps[j].name, rerr))
			}
		}
		rb := errors.Join(rbErrs...)
		if rb != nil {
			h.log.Error("restore rollback failed", "session", s.handle, "snapshot_id", id, "err", rb)
		}
		return rb
	}
	restored := make([]string, 0, len(steps))
	for i, st := range steps {
		// A restore replaces the plugin's state of the session: the
		// kernel drops what its SessionState containers hold first.
		h.dropState(st.name, s.handle)
		if err := st.sn.Restore(ctx, s.handle, st.state); err != nil {
			// The failing plugin may have changed part of its state, so it is rolled back too.
			if rb := rollback(i); rb != nil {
				return nil, nil, wire.Public(fmt.Errorf("plugin %q: restore: %w; rolling back also failed: %v", st.name, err, rb))
			}
			return nil, nil, wire.Public(fmt.Errorf("plugin %q: restore: %w; the session's state was rolled back", st.name, err))
		}
		restored = append(restored, st.name)
	}
	if staged != nil {
		if err := staged.commit(); err != nil {
			if rb := rollback(len(steps) - 1); rb != nil {
				return nil, nil, fmt.Errorf("putting the snapshot's files in place: %w; rolling the plugins back also failed: %v", err, rb)
			}
			return nil, nil, fmt.Errorf("putting the snapshot's files in place: %w; the session's state was rolled back", err)
		}
		if staged.leftover != nil {
			h.log.Warn("restore: the replaced files were not all removed", "session", s.handle, "err", staged.leftover)
		}
	}
	h.inherit(s.id, p.owner(), p.Owned)
	h.log.Info("snapshot restored", "session", s.handle, "snapshot_id", id, "from_session", p.SessionHandle, "plugins", len(restored),
		"files", files.State, "files_bytes", files.Bytes, "files_entries", files.Entries)
	if files.State == msg.SnapshotFilesStateOmitted {
		h.log.Warn("restored a snapshot taken without its files; the session's directory was left as it was", "session", s.handle, "snapshot_id", id, "reason", deref(files.Reason))
	}
	return restored, files, nil
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// stageSnapshotFiles extracts the files snapshot id (payload p) carries
// beside the directory of session s, for restoreSession to put in place,
// and says what the restore does with the files: nil and "kept" or
// "omitted" when the snapshot carries none.
func (h *Host) stageSnapshotFiles(ctx context.Context, s *Session, id string, p *snapshotPayload) (*stagedFiles, *msg.SnapshotFiles, error) {
	switch {
	case p.Files == nil:
		return nil, &msg.SnapshotFiles{State: msg.SnapshotFilesStateKept}, nil
	case p.Files.State != filesStored:
		return nil, p.Files.wire(msg.SnapshotFilesStateOmitted), nil
	}
	archive, err := h.snapshotArchive(ctx, id, p.Files)
	if err != nil {
		return nil, nil, err
	}
	d := h.sessionDirOf(s)
	if d.Owner != s.handle {
		return nil, nil, fmt.Errorf("snapshot %s carries files, and this subagent's session directory is its parent's: restore it into a top-level session; nothing was restored: %w", id, wire.ErrDenied)
	}
	staged, err := stageFiles(archive, d.Path, h.filesLimits(h.SessionQuota()))
	if err != nil {
		h.log.Warn("restore refused: the snapshot's files cannot be extracted", "session", s.handle, "snapshot_id", id, "err", err)
		return nil, nil, wire.Public(fmt.Errorf("snapshot %s: %w; nothing was restored", id, err))
	}
	f := p.Files.wire(msg.SnapshotFilesStateRestored)
	f.Bytes, f.Entries = int(staged.bytes), staged.entries
	return staged, f, nil
}

// snapshotArchive reads the files archive of sql snapshot id and checks
// it against what the snapshot's payload recorded.
func (h *Host) snapshotArchive(ctx context.Context, id string, fi *filesInfo) ([]byte, error) {
	if h.store == nil || !strings.HasPrefix(id, "sql-") {
		return nil, fmt.Errorf("snapshot %s: %w: it says it carries files, which only sql snapshots do; nothing was restored", id, ErrSnapshotCorrupt)
	}
	row, err := h.store.Client.Snapshot.Query().Where(snapshot.ID(id)).Select(snapshot.FieldID, snapshot.FieldFiles).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: files: %w", id, err)
	}
	archive := row.Files
	sum := sha256.Sum256(archive)
	if int64(len(archive)) != fi.ArchiveBytes || hex.EncodeToString(sum[:]) != fi.SHA256 {
		return nil, fmt.Errorf("snapshot %s: %w: its files archive does not match its checksum; nothing was restored", id, ErrSnapshotCorrupt)
	}
	return archive, nil
}

// openSnapshot reads and verifies the snapshot id names.
func (h *Host) openSnapshot(ctx context.Context, id string) (*snapshotPayload, error) {
	m := snapshotIDPattern.FindStringSubmatch(id)
	if m == nil {
		if len(id) > 80 {
			id = id[:80] + "…"
		}
		// An id the host could never have issued names nothing: not_found,
		// as any unknown id (docs/DECISIONS.md, Errors of state).
		return nil, fmt.Errorf("%w %q: a snapshot id is \"file-\" or \"sql-\" and 32 lower-case hex digits", ErrSnapshotNotFound, id)
	}
	doc, err := h.loadSnapshot(ctx, m[1], id)
	if err != nil {
		return nil, err
	}
	return decodeSnapshot(doc, id)
}

// loadSnapshot reads the stored document of a validated id.
func (h *Host) loadSnapshot(ctx context.Context, target, id string) ([]byte, error) {
	switch target {
	case "file":
		if h.dataDir == "" {
			return nil, wire.Reason("snapshot_target_unavailable", errors.New("file snapshots need a data directory; this host has none"))
		}
		path := filepath.Join(h.dataDir, snapshotDir, id+".json")
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
	default: // "sql"
		if h.store == nil {
			return nil, wire.Reason("snapshot_target_unavailable", errors.New("sql snapshots need a store; this host has none"))
		}
		// The document only: the files archive is read by a restore that needs it.
		row, err := h.store.Client.Snapshot.Query().Where(snapshot.ID(id)).Select(snapshot.FieldID, snapshot.FieldData).Only(ctx)
		if ent.IsNotFound(err) {
			return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, id)
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", id, err)
		}
		return row.Data, nil
	}
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

// secrets returns the secrets the kernel knows for session s: the host's
// auth token, the token s handshook with when it is not the host's (a child
// session's own, a tenant's secret), those plugins declared for the host
// and for s's tree (secrets.go), and those of [SecretHolder]s.
func (h *Host) secrets(s *Session) []namedSecret {
	out := []namedSecret{{"the host auth token", h.cfg.Server.AuthToken}}
	if t, ok := h.sessionTokens.Load(s.id); ok {
		out = append(out, namedSecret{"the session's auth token", t.(string)})
	}
	out = append(out, h.declaredSecrets(s)...)
	for _, sh := range h.secretHolders {
		for _, v := range sh.v.Secrets() {
			out = append(out, namedSecret{"a secret of plugin " + `"` + sh.p.Name + `"`, v})
		}
	}
	return out
}

// findSecret reports which secret appears in b, raw or JSON-escaped, as a
// description that does not reveal it ("" when none does).
func findSecret(b []byte, secrets []namedSecret) string {
	for _, sec := range secrets {
		if sec.value == "" {
			continue
		}
		esc, _ := json.Marshal(sec.value)
		esc = esc[1 : len(esc)-1]
		if bytes.Contains(b, []byte(sec.value)) || bytes.Contains(b, esc) {
			return sec.what
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
