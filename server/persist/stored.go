package persist

// Portable snapshots: what survives a rename, and the snapshots a session
// may list and delete (docs/DECISIONS.md, Capability gaps users hit).
//
// A plugin's state in a snapshot is keyed by its instance key — its
// module ID, with "#2", "#3"… for further instances of the same module in
// config order ([Plugin].Key, given by the kernel) — not by its
// configured name, so renaming a plugin in the config keeps it.

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
)

// snapshotPlugin finds the loaded snapshotter a saved state belongs to: by
// instance key, or by name for a snapshot that has none.
func (p *Keeper) snapshotPlugin(ps pluginSnapshot) (pluginAs[Snapshotter], bool) {
	for _, snp := range p.snapshotters {
		if (ps.Key != "" && snp.Key == ps.Key) || (ps.Key == "" && snp.Name == ps.Name) {
			return snp, true
		}
	}
	return pluginAs[Snapshotter]{}, false
}

// ownerKey names the owner of a session's snapshots: a one-way digest of
// its transport id. Snapshots and the store hold it, never the id (a
// bearer secret, server/handle.go); a session that presents the id proves
// it is the owner, and the key tells nothing about the id.
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
func (p *Keeper) ownedBy(sid string, presented []string) []string {
	out := []string{ownerKey(sid)}
	if v, ok := p.lineage.Load(sid); ok {
		out = append(out, v.([]string)...)
	}
	for _, pr := range presented {
		if k := ownerKey(pr); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// inherit records that session sid restored a snapshot of the session
// with owner key from, which owned the sessions in owned: all of them are
// sid's now (owner keys, as in ownedBy).
func (p *Keeper) inherit(sid, from string, owned []string) {
	var cur []string
	if v, ok := p.lineage.Load(sid); ok {
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
	p.lineage.Store(sid, cur)
}

// lineageOf is what a snapshot of sid records as owned besides sid (owner
// keys).
func (p *Keeper) lineageOf(sid string) []string {
	if v, ok := p.lineage.Load(sid); ok {
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
	point                      *uint64 // nil: taken before points were kept
}

// anyTenant selects the snapshots of every tenant (the host's retention):
// no tenant is named so (server.tenants' names are lower-case words).
const anyTenant = "\x00"

// storedSnapshots returns the snapshots of target ("" both) of tenant
// (anyTenant: every tenant's) taken by one of the sessions with owner
// keys sessions (nil: any session), newest first.
func (p *Keeper) storedSnapshots(ctx context.Context, target, tenant string, sessions []string) ([]storedSnapshot, error) {
	var out []storedSnapshot
	if (target == "" || target == "file") && p.dataDir != "" {
		files, err := p.fileSnapshots(ctx, tenant, sessions)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	if (target == "" || target == "sql") && p.store != nil {
		rows, err := p.sqlSnapshots(ctx, tenant, sessions)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.After(out[j].created)
		}
		return out[i].id > out[j].id
	})
	return out, nil
}

// fileSnapshots lists the file snapshots of the sessions with owner keys
// sessions (nil: any), reading each document for its owner; a corrupt
// one is logged and left out.
func (p *Keeper) fileSnapshots(ctx context.Context, tenant string, sessions []string) ([]storedSnapshot, error) {
	dir := filepath.Join(p.dataDir, snapshotDir)
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []storedSnapshot
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !snapshotIDPattern.MatchString(id) {
			continue
		}
		doc, err := p.loadSnapshot(ctx, "file", id)
		if err != nil {
			continue // removed meanwhile
		}
		pl, err := decodeSnapshot(doc, id)
		if err != nil {
			p.log.Warn("corrupt snapshot file skipped", "snapshot_id", id, "err", err)
			continue
		}
		if tenant != anyTenant && pl.Tenant != tenant {
			continue
		}
		if owner := pl.owner(); sessions == nil || slices.Contains(sessions, owner) {
			kind := pl.Kind
			if kind == "" {
				kind = KindRequest
			}
			size := len(doc)
			if pl.Files != nil {
				size += int(pl.Files.ArchiveBytes)
			}
			out = append(out, storedSnapshot{id: id, target: "file", session: owner, agent: pl.AgentID, kind: kind, bytes: size, created: pl.Created, point: pl.Point})
		}
	}
	return out, nil
}

// sqlSnapshots lists the sql snapshots of the sessions with owner keys
// sessions (nil: any): a row's session_id is the owner key.
func (p *Keeper) sqlSnapshots(ctx context.Context, tenant string, sessions []string) ([]storedSnapshot, error) {
	q := p.store.Client.Snapshot.Query()
	if tenant != anyTenant {
		q = q.Where(snapshot.Tenant(tenant))
	}
	if sessions != nil {
		q = q.Where(snapshot.SessionIDIn(sessions...))
	}
	// Every column but the files archive, which a listing never needs.
	var rows []*ent.Snapshot
	err := p.storeCall(ctx, "list snapshots", p.storeWait(), func(ctx context.Context) (err error) {
		rows, err = q.Clone().Select(snapshot.FieldID, snapshot.FieldSessionID, snapshot.FieldAgentID, snapshot.FieldData,
			snapshot.FieldCreatedAt, snapshot.FieldKind, snapshot.FieldFilesBytes, snapshot.FieldPoint).All(ctx)
		return err
	})
	if errors.Is(err, ErrStoreUnavailable) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := make([]storedSnapshot, 0, len(rows))
	for _, r := range rows {
		st := storedSnapshot{id: r.ID, target: "sql", session: r.SessionID, agent: r.AgentID, kind: r.Kind,
			bytes: len(r.Data) + int(r.FilesBytes), created: r.CreatedAt}
		if r.Point != nil {
			pt := uint64(*r.Point)
			st.point = &pt
		}
		out = append(out, st)
	}
	return out, nil
}

// ErrNoSnapshotOf answers a restore from a session that left no snapshot
// (or an id that was never a session's: the two look alike on purpose).
var ErrNoSnapshotOf = fmt.Errorf("%w of that session: it was never snapshotted, or its snapshots were deleted", ErrSnapshotNotFound)

// newestSnapshotOf names the newest stored snapshot of tenant of the
// session whose transport id is sid, of either target and any kind (at
// its request, a drain's, an automatic one): what a session that moved
// (docs/deploy.md) restores with from_session. Another tenant's session
// has none, as a never-issued id has none.
func (p *Keeper) newestSnapshotOf(ctx context.Context, tenant, sid string) (string, error) {
	all, err := p.storedSnapshots(ctx, "", tenant, []string{ownerKey(sid)})
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "", ErrNoSnapshotOf
	}
	return all[0].id, nil
}

// deleteSnapshot removes one stored snapshot.
func (p *Keeper) deleteSnapshot(ctx context.Context, st storedSnapshot) error {
	switch st.target {
	case "file":
		err := os.Remove(filepath.Join(p.dataDir, snapshotDir, st.id+".json"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delete snapshot %s: %w", st.id, err)
		}
		// Its files archive, once the document that names it is gone.
		if err := os.Remove(filepath.Join(p.dataDir, snapshotDir, st.id+filesSuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("delete snapshot files", "snapshot_id", st.id, "err", err)
		}
	default:
		err := p.storeCall(ctx, "delete snapshot", p.storeWait(), func(ctx context.Context) error {
			err := p.store.Client.Snapshot.DeleteOneID(st.id).Exec(ctx)
			if ent.IsNotFound(err) {
				return nil
			}
			return err
		})
		if errors.Is(err, ErrStoreUnavailable) {
			return err
		}
		if err != nil {
			return fmt.Errorf("delete snapshot %s: %w", st.id, err)
		}
	}
	p.log.Info("snapshot deleted", "snapshot_id", st.id, "target", st.target)
	return nil
}

// applyRetention deletes what server.snapshots no longer keeps, after the
// session with owner key sid took snapshot taken to target: its own
// beyond keep_per_session, and with ages set every snapshot past max_age
// (a listing of the whole store, which an automatic round does once,
// autosnap.go, not once per session). Failures are logged: the snapshot
// just taken stands, whatever the settings.
func (p *Keeper) applyRetention(ctx context.Context, sid, target, taken string, ages bool) {
	rc := p.set.Snapshots
	var drop []storedSnapshot
	if rc.KeepPerSession > 0 && sid != "" {
		mine, err := p.storedSnapshots(ctx, target, anyTenant, []string{sid})
		if err != nil {
			p.log.Warn("snapshot retention", "err", err)
			return
		}
		if len(mine) > rc.KeepPerSession {
			drop = append(drop, mine[rc.KeepPerSession:]...)
		}
	}
	if rc.MaxAge > 0 && ages {
		all, err := p.storedSnapshots(ctx, "", anyTenant, nil)
		if err != nil {
			p.log.Warn("snapshot retention", "err", err)
			return
		}
		cut := time.Now().Add(-rc.MaxAge)
		for _, st := range all {
			if st.created.Before(cut) && st.id != taken {
				drop = append(drop, st)
			}
		}
	}
	for _, st := range drop {
		if err := p.deleteSnapshot(ctx, st); err != nil {
			p.log.Warn("snapshot retention", "err", err)
		}
	}
}
