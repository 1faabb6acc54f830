package persist

// The session namespace's persistence requests (schemas/session.json).
// The kernel's session plugin (server/sessionplugin.go) finds the live
// session a request came from and hands it here; each method answers as
// the generated msg.SessionHandler method of the same name does.

import (
	"context"
	"fmt"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// SessionSnapshot saves the state of session s (spec §1.6; snapshot.go).
func (p *Keeper) SessionSnapshot(ctx context.Context, s Session, req *msg.SessionSnapshotReq) (*msg.SessionSnapshotResp, error) {
	target := string(req.Target)
	if target == "" {
		target = string(msg.SessionSnapshotReqTargetFile) // the schema's default
	}
	t, err := p.takeSnapshot(ctx, s, target, KindRequest)
	if err != nil {
		return nil, err
	}
	point := int(t.point)
	return &msg.SessionSnapshotResp{SnapshotID: t.id, Bytes: t.bytes, Target: msg.SessionSnapshotRespTarget(target), Files: t.files, CoversPoint: &point}, nil
}

// SessionRestore restores a snapshot into session s (spec §3; restore.go):
// the one named, or the newest of the session whose transport id
// from_session presents (a session that moved).
func (p *Keeper) SessionRestore(ctx context.Context, s Session, req *msg.SessionRestoreReq) (*msg.SessionRestoreResp, error) {
	var id string
	switch {
	case req.SnapshotID != nil:
		id = *req.SnapshotID
	case req.FromSession != nil:
		var err error
		if id, err = p.newestSnapshotOf(ctx, s.Tenant(), *req.FromSession); err != nil {
			return nil, err
		}
	}
	var gate *pointGate
	if req.LastPoint != nil {
		gate = &pointGate{last: uint64(*req.LastPoint), accept: req.AcceptGap != nil && *req.AcceptGap}
	}
	r, err := p.restoreSession(ctx, s, id, gate)
	if err != nil {
		return nil, err
	}
	point := int(r.point)
	resp := &msg.SessionRestoreResp{SnapshotID: id, Restored: r.restored, Files: r.files, FromPoint: &point}
	if r.gap != nil {
		resp.Gap = &msg.PointGap{Point: int(r.gap.point), LastPoint: int(r.gap.last), Lost: int(r.gap.last - r.gap.point)}
	}
	return resp, nil
}

// SessionFork forks session s count ways (fork.go).
func (p *Keeper) SessionFork(ctx context.Context, s Session, req *msg.SessionForkReq) (*msg.SessionForkResp, error) {
	snap := ""
	if req.SnapshotID != nil {
		snap = *req.SnapshotID
	}
	return p.forkSession(ctx, s, req.Count, snap)
}

// SessionSnapshotList lists the snapshots session s may see: its own,
// those of the sessions it owns through restores, and those of the
// sessions whose transport ids it presents (stored.go, ownedBy).
func (p *Keeper) SessionSnapshotList(ctx context.Context, s Session, req *msg.SessionSnapshotListReq) (*msg.SessionSnapshotListResp, error) {
	target := ""
	if req.Target != nil {
		target = string(*req.Target)
	}
	sid := s.ID()
	list, err := p.storedSnapshots(ctx, target, s.Tenant(), p.ownedBy(sid, req.SessionIds))
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
		if st.point != nil {
			pt := int(*st.point)
			in.CoversPoint = &pt
		}
		resp.Snapshots[i] = in
	}
	return resp, nil
}

// SessionSnapshotDelete deletes a snapshot session s may list; any other
// id is an unknown snapshot.
func (p *Keeper) SessionSnapshotDelete(ctx context.Context, s Session, req *msg.SessionSnapshotDeleteReq) (*msg.SessionSnapshotDeleteResp, error) {
	m := snapshotIDPattern.FindStringSubmatch(req.SnapshotID)
	if m == nil {
		return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, req.SnapshotID)
	}
	list, err := p.storedSnapshots(ctx, m[1], s.Tenant(), p.ownedBy(s.ID(), req.SessionIds))
	if err != nil {
		return nil, err
	}
	for _, st := range list {
		if st.id == req.SnapshotID {
			if err := p.deleteSnapshot(ctx, st); err != nil {
				return nil, err
			}
			return &msg.SessionSnapshotDeleteResp{SnapshotID: st.id, Deleted: true}, nil
		}
	}
	return nil, fmt.Errorf("%w %q", ErrSnapshotNotFound, req.SnapshotID)
}

// SnapshotInfo is one stored snapshot as the host's operator sees it.
type SnapshotInfo struct {
	ID, Target, Kind string
	Created          time.Time
	// Bytes is what it stores: its document and its files archive.
	Bytes int
}

// SnapshotsOf lists the stored snapshots session s may list as its own
// (its own and those of the sessions it owns through restores), newest
// first, at most limit: what the operator's admin API shows of a session.
func (p *Keeper) SnapshotsOf(ctx context.Context, s Session, limit int) ([]SnapshotInfo, error) {
	stored, err := p.storedSnapshots(ctx, "", s.Tenant(), p.ownedBy(s.ID(), nil))
	if err != nil {
		return nil, err
	}
	out := make([]SnapshotInfo, 0, min(len(stored), limit))
	for _, st := range stored {
		if len(out) == limit {
			break
		}
		out = append(out, SnapshotInfo{ID: st.id, Target: st.target, Kind: st.kind, Created: st.created, Bytes: st.bytes})
	}
	return out, nil
}

// SessionTrajectoryExport exports recorded trajectory records (trajexport.go).
func (p *Keeper) SessionTrajectoryExport(ctx context.Context, s Session, req *msg.SessionTrajectoryExportReq) (*msg.SessionTrajectoryExportResp, error) {
	return p.exportTrajectory(ctx, s, req)
}
