package server

// Portable snapshots: what survives a rename, and the snapshots a session
// may list and delete (docs/DECISIONS.md, Capability gaps users hit).
//
// A plugin's state in a snapshot and its data directory are keyed by its
// instance key — its module ID, with "#2", "#3"… for further instances of
// the same module in config order — not by its configured name, so renaming
// a plugin in the config keeps both.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/snapshot"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/wire"
)

const (
	// DefaultFilesMaxBytes is server.snapshots.files_max_bytes when unset.
	DefaultFilesMaxBytes int64 = 64 << 20
	// DefaultFilesMaxEntries is server.snapshots.files_max_entries when unset.
	DefaultFilesMaxEntries = 100_000
	// maxFilesMaxBytes caps files_max_bytes: the archive is held in memory
	// while it is written to or read from the store.
	maxFilesMaxBytes int64 = 1 << 30
	// minAutoInterval is the shortest auto_interval accepted.
	minAutoInterval = time.Second
)

// filesMaxBytes is the effective files_max_bytes (0: files off).
func (c SnapshotConfig) filesMaxBytes() int64 {
	if c.FilesMaxBytes == nil {
		return DefaultFilesMaxBytes
	}
	return *c.FilesMaxBytes
}

// filesMaxEntries is the effective files_max_entries.
func (c SnapshotConfig) filesMaxEntries() int {
	if c.FilesMaxEntries > 0 {
		return c.FilesMaxEntries
	}
	return DefaultFilesMaxEntries
}

// check rejects settings that make no sense.
func (c SnapshotConfig) check() []error {
	var probs []error
	add := func(key, format string, args ...any) {
		probs = append(probs, configcheck.At("server.snapshots."+key, format, args...))
	}
	if c.KeepPerSession < 0 {
		add("keep_per_session", "must not be negative")
	}
	if c.MaxAge < 0 {
		add("max_age", "must not be negative")
	}
	if c.FilesMaxBytes != nil && (*c.FilesMaxBytes < 0 || *c.FilesMaxBytes > maxFilesMaxBytes) {
		add("files_max_bytes", "%d: want 0 (no files) to %d (1 GiB): the archive is held in memory", *c.FilesMaxBytes, maxFilesMaxBytes)
	}
	if c.FilesMaxEntries < 0 {
		add("files_max_entries", "must not be negative")
	}
	if c.AutoInterval < 0 || (c.AutoInterval > 0 && time.Duration(c.AutoInterval) < minAutoInterval) {
		add("auto_interval", "%s: want 0s (off) or at least %s", time.Duration(c.AutoInterval), minAutoInterval)
	}
	return probs
}

// instanceKeys gives each plugin its instance key (see the file comment).
func instanceKeys(specs []PluginSpec) map[string]string {
	keys := make(map[string]string, len(specs))
	seen := map[string]int{}
	for _, sp := range specs {
		id := sp.Impl.Module().ID
		if id == "" {
			id = "plugin." + sp.Name // a module without an ID has only its name
		}
		seen[id]++
		if n := seen[id]; n > 1 {
			id = fmt.Sprintf("%s#%d", id, n)
		}
		keys[sp.Name] = id
	}
	return keys
}

// reservedDataNames are what the kernel keeps in the data directory; a
// plugin directory named like one is never moved.
var reservedDataNames = []string{snapshotDir, "sessions", "aep.db", "audit.jsonl"}

// movePluginDirs moves each plugin's data directory of an earlier release,
// named after the plugin, to the one named by its instance key.
func (h *Host) movePluginDirs(specs []PluginSpec) {
	if h.dataDir == "" {
		return
	}
	for _, sp := range specs {
		h.movePluginDir(sp.Name, h.keys[sp.Name])
	}
}

func (h *Host) movePluginDir(name, key string) {
	dir := filepath.Join(h.dataDir, key)
	old := filepath.Join(h.dataDir, name)
	if old == dir || slices.Contains(reservedDataNames, name) || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return
	}
	if fi, err := os.Lstat(old); err == nil && fi.IsDir() {
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			if err := os.Rename(old, dir); err != nil {
				h.log.Warn("plugin data directory not moved to its instance key", "plugin", name, "from", old, "to", dir, "err", err)
			} else {
				h.log.Info("plugin data directory moved to its instance key", "plugin", name, "to", dir)
			}
		}
	}
}

// snapshotPlugin finds the loaded snapshotter a saved state belongs to: by
// instance key, or by name for a snapshot that has none.
func (h *Host) snapshotPlugin(ps pluginSnapshot) (*plugin, Snapshotter, bool) {
	for _, snp := range h.snapshotters {
		if (ps.Key != "" && h.keys[snp.p.Name] == ps.Key) || (ps.Key == "" && snp.p.Name == ps.Name) {
			return snp.p, snp.v, true
		}
	}
	return nil, nil, false
}

// ownerKey names the owner of a session's snapshots: a one-way digest of
// its transport id. Snapshots and the store hold it, never the id (a
// bearer secret, handle.go); a session that presents the id proves it is
// the owner, and the key tells nothing about the id.
func ownerKey(sessionID string) string {
	sum := sha256.Sum256([]byte("aep-snapshot-owner:" + sessionID))
	return "o-" + hex.EncodeToString(sum[:16])
}

// owner is the payload's owner key; snapshots written before owner keys
// recorded the transport id itself.
func (p *snapshotPayload) owner() string {
	if p.Owner == "" && p.LegacySessionID != "" {
		return ownerKey(p.LegacySessionID)
	}
	return p.Owner
}

// ownedBy returns the owner keys of the sessions whose snapshots session
// sid may list and delete: itself, those whose ids it presents, and those
// it owns through restores.
func (h *Host) ownedBy(sid string, presented []string) []string {
	out := []string{ownerKey(sid)}
	if v, ok := h.lineage.Load(sid); ok {
		out = append(out, v.([]string)...)
	}
	for _, p := range presented {
		if k := ownerKey(p); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// inherit records that session sid restored a snapshot of the session
// with owner key from, which owned the sessions in owned: all of them are
// sid's now (owner keys, as in ownedBy).
func (h *Host) inherit(sid, from string, owned []string) {
	var cur []string
	if v, ok := h.lineage.Load(sid); ok {
		cur = slices.Clone(v.([]string))
	}
	self := ownerKey(sid)
	for _, o := range append([]string{from}, owned...) {
		if o != "" && o != self && !slices.Contains(cur, o) {
			cur = append(cur, o)
		}
	}
	// The lineage is bounded: a snapshot carries it, and restores chain.
	if len(cur) > 256 {
		cur = cur[len(cur)-256:]
	}
	h.lineage.Store(sid, cur)
}

// lineageOf is what a snapshot of sid records as owned besides sid (owner
// keys).
func (h *Host) lineageOf(sid string) []string {
	if v, ok := h.lineage.Load(sid); ok {
		return slices.Clone(v.([]string))
	}
	return nil
}

// storedSnapshot is one snapshot as list, delete and retention see it;
// session is the owner key of the session that took it.
type storedSnapshot struct {
	id, target, session, agent string
	kind                       string // request, drain or auto
	bytes                      int    // the document and the files archive
	created                    time.Time
}

// storedSnapshots returns the snapshots of target ("" both) taken by one of
// the sessions with owner keys sessions (nil: any session). A SQL row's
// session_id is the owner key.
func (h *Host) storedSnapshots(ctx context.Context, target string, sessions []string) ([]storedSnapshot, error) {
	var out []storedSnapshot
	if (target == "" || target == "file") && h.dataDir != "" {
		dir := filepath.Join(h.dataDir, snapshotDir)
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok || !snapshotIDPattern.MatchString(id) {
				continue
			}
			doc, err := h.loadSnapshot(ctx, "file", id)
			if err != nil {
				continue // removed meanwhile
			}
			p, err := decodeSnapshot(doc, id)
			if err != nil {
				h.log.Warn("corrupt snapshot file skipped", "snapshot_id", id, "err", err)
				continue
			}
			if owner := p.owner(); sessions == nil || slices.Contains(sessions, owner) {
				kind := p.Kind
				if kind == "" {
					kind = kindRequest
				}
				out = append(out, storedSnapshot{id: id, target: "file", session: owner, agent: p.AgentID, kind: kind, bytes: len(doc), created: p.Created})
			}
		}
	}
	if (target == "" || target == "sql") && h.store != nil {
		q := h.store.Client.Snapshot.Query()
		if sessions != nil {
			q = q.Where(snapshot.SessionIDIn(sessions...))
		}
		// Every column but the files archive, which a listing never needs.
		rows, err := q.Select(snapshot.FieldID, snapshot.FieldSessionID, snapshot.FieldAgentID, snapshot.FieldData,
			snapshot.FieldCreatedAt, snapshot.FieldKind, snapshot.FieldFilesBytes).All(ctx)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		for _, r := range rows {
			out = append(out, storedSnapshot{id: r.ID, target: "sql", session: r.SessionID, agent: r.AgentID, kind: r.Kind,
				bytes: len(r.Data) + int(r.FilesBytes), created: r.CreatedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.After(out[j].created)
		}
		return out[i].id > out[j].id
	})
	return out, nil
}

// ErrNoSnapshotOf answers a restore from a session that left no snapshot
// (or an id that was never a session's: the two look alike on purpose).
var ErrNoSnapshotOf = fmt.Errorf("%w of that session: it was never snapshotted, or its snapshots were deleted", ErrSnapshotNotFound)

// newestSnapshotOf names the newest stored snapshot of the session whose
// transport id is sid, of either target and any kind (at its request, a
// drain's, an automatic one): what a session that moved (docs/deploy.md)
// restores with from_session.
func (h *Host) newestSnapshotOf(ctx context.Context, sid string) (string, error) {
	all, err := h.storedSnapshots(ctx, "", []string{ownerKey(sid)})
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "", ErrNoSnapshotOf
	}
	return all[0].id, nil
}

// deleteSnapshot removes one stored snapshot.
func (h *Host) deleteSnapshot(ctx context.Context, st storedSnapshot) error {
	switch st.target {
	case "file":
		err := os.Remove(filepath.Join(h.dataDir, snapshotDir, st.id+".json"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delete snapshot %s: %w", st.id, err)
		}
	default:
		if err := h.store.Client.Snapshot.DeleteOneID(st.id).Exec(ctx); err != nil && !ent.IsNotFound(err) {
			return fmt.Errorf("delete snapshot %s: %w", st.id, err)
		}
	}
	h.log.Info("snapshot deleted", "snapshot_id", st.id, "target", st.target)
	return nil
}

// applyRetention deletes what server.snapshots no longer keeps, after the
// session with owner key sid took snapshot taken to target: its own
// beyond keep_per_session, and with ages set every snapshot past max_age
// (a listing of the whole store, which an automatic round does once,
// autosnap.go, not once per session). Failures are logged: the snapshot
// just taken stands, whatever the settings.
func (h *Host) applyRetention(ctx context.Context, sid, target, taken string, ages bool) {
	rc := h.cfg.Server.Snapshots
	var drop []storedSnapshot
	if rc.KeepPerSession > 0 && sid != "" {
		mine, err := h.storedSnapshots(ctx, target, []string{sid})
		if err != nil {
			h.log.Warn("snapshot retention", "err", err)
			return
		}
		if len(mine) > rc.KeepPerSession {
			drop = append(drop, mine[rc.KeepPerSession:]...)
		}
	}
	if rc.MaxAge > 0 && ages {
		all, err := h.storedSnapshots(ctx, "", nil)
		if err != nil {
			h.log.Warn("snapshot retention", "err", err)
			return
		}
		cut := time.Now().Add(-time.Duration(rc.MaxAge))
		for _, st := range all {
			if st.created.Before(cut) && st.id != taken {
				drop = append(drop, st)
			}
		}
	}
	for _, st := range drop {
		if err := h.deleteSnapshot(ctx, st); err != nil {
			h.log.Warn("snapshot retention", "err", err)
		}
	}
}

// SessionSnapshotList answers session/snapshot/list (see ownedBy).
func (p *sessionPlugin) SessionSnapshotList(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotListReq) (*msg.SessionSnapshotListResp, error) {
	target := ""
	if req.Target != nil {
		target = string(*req.Target)
	}
	sid, err := p.h.transportID(sc)
	if err != nil {
		return nil, err
	}
	list, err := p.h.storedSnapshots(ctx, target, p.h.ownedBy(sid, req.SessionIds))
	if err != nil {
		return nil, err
	}
	own := ownerKey(sid)
	resp := &msg.SessionSnapshotListResp{Snapshots: make([]msg.SnapshotInfo, len(list))}
	for i, st := range list {
		kind := msg.SnapshotInfoKind(st.kind)
		in := msg.SnapshotInfo{SnapshotID: st.id, Target: msg.SnapshotInfoTarget(st.target), Bytes: st.bytes,
			Created: wire.Epoch(st.created), Own: st.session == own, Kind: &kind}
		if st.agent != "" {
			a := st.agent
			in.AgentID = &a
		}
		resp.Snapshots[i] = in
	}
	return resp, nil
}

// SessionSnapshotDelete answers session/snapshot/delete: only a snapshot
// the session may list; any other id is an unknown snapshot.
func (p *sessionPlugin) SessionSnapshotDelete(ctx context.Context, sc wire.Scope, req *msg.SessionSnapshotDeleteReq) (*msg.SessionSnapshotDeleteResp, error) {
	m := snapshotIDPattern.FindStringSubmatch(req.SnapshotID)
	if m == nil {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, req.SnapshotID)
	}
	sid, err := p.h.transportID(sc)
	if err != nil {
		return nil, err
	}
	list, err := p.h.storedSnapshots(ctx, m[1], p.h.ownedBy(sid, req.SessionIds))
	if err != nil {
		return nil, err
	}
	for _, st := range list {
		if st.id == req.SnapshotID {
			if err := p.h.deleteSnapshot(ctx, st); err != nil {
				return nil, err
			}
			return &msg.SessionSnapshotDeleteResp{SnapshotID: st.id, Deleted: true}, nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, req.SnapshotID)
}

// transportID is the transport id of the session a request came from:
// plugins know sessions by handle, but ownership is proven by ids.
func (h *Host) transportID(sc wire.Scope) (string, error) {
	s, ok := h.SessionByHandle(sc.SessionID())
	if !ok {
		return "", fmt.Errorf("%w: the session ended", ErrSessionEnded)
	}
	return s.id, nil
}
