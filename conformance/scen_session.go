package conformance

import (
	"context"
	"encoding/json"
)

// sessionNS: the always-on session namespace (schemas/session.json):
// info, snapshots that restore what they saved, forks, trajectories.
func (k *kit) sessionNS(ctx context.Context) error {
	s := k.sessionFor(ctx, CheckSessionInfo, "session", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	c := CheckSessionInfo
	handle := ""
	m := s.call(ctx, "session/info/req", nil)
	if k.want(c, m, "session/info/resp", "session/info") {
		handle = str(m.body, "handle")
		k.expect(c, str(m.body, "session_id") == s.id, "session/info names the session_id %q, the handshake %q", str(m.body, "session_id"), s.id)
		k.expect(c, str(m.body, "agent_id") == k.opts.AgentID, "session/info names the agent_id %q, the handshake %q", str(m.body, "agent_id"), k.opts.AgentID)
		k.expect(c, handle != "", "session/info has no handle")
		caps := make([]any, len(s.caps))
		for i, e := range s.caps {
			caps[i] = map[string]any{"name": e.Name, "enabled": e.Enabled}
		}
		k.expect(c, equal(m.body["accepted_caps"], caps), "session/info's accepted_caps %s are not the handshake's %s", show(m.body["accepted_caps"]), show(caps))
		k.expect(c, equal(m.body["max_parallel"], float64(s.maxParallel)), "session/info's max_parallel %v is not the handshake's %d", m.body["max_parallel"], s.maxParallel)
		n, _ := num(m.body, "in_flight")
		k.expect(c, n >= 1, "session/info counts %v requests in flight, itself among them", n)
	}

	// Working memory is the state a snapshot is judged by, when offered.
	sn := CheckSessionSnapshot
	mid, key := "", k.name("snapshot")
	setWorking := func(v string) bool {
		if mid == "" {
			return false
		}
		m := s.call(ctx, "memory/store/req", map[string]any{"memory_id": mid, "entries": []any{map[string]any{"key": key, "content": v, "tier": "working"}}})
		return k.want(sn, m, "memory/store/resp", "storing the working entry")
	}
	working := func(what string) string {
		m := s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{key}, "tier": "working"})
		if !k.want(sn, m, "memory/retrieve/resp", what) {
			return ""
		}
		return str(m.body, "entries.0.content")
	}
	if k.offered["memory"] {
		if m := s.call(ctx, "memory/init/req", map[string]any{"namespace": k.name("snapshot")}); k.want(sn, m, "memory/init/resp", "memory/init") {
			mid = str(m.body, "memory_id")
		}
	} else {
		k.skip("the host does not offer memory: the state a snapshot restores is not judged", sn)
	}
	setWorking("before")
	m = s.call(ctx, "session/snapshot/req", nil)
	if !k.want(sn, m, "session/snapshot/resp", "session/snapshot") {
		return nil
	}
	snap := str(m.body, "snapshot_id")
	k.expect(sn, snap != "" && str(m.body, "target") == "file", "session/snapshot without a target: %s, want a snapshot_id and target file (the default)", m)
	setWorking("after")
	m = s.call(ctx, "session/snapshot/list/req", nil)
	if k.want(sn, m, "session/snapshot/list/resp", "session/snapshot/list") {
		found := false
		for _, x := range arr(m.body, "snapshots") {
			if str(x, "snapshot_id") == snap {
				found = true
				own, _ := boolean(x, "own")
				k.expect(sn, own, "the session's own snapshot is listed with own false")
			}
		}
		k.expect(sn, found, "session/snapshot/list lacks the snapshot just taken")
	}
	m = s.call(ctx, "session/restore/req", map[string]any{"snapshot_id": snap})
	if k.want(sn, m, "session/restore/resp", "session/restore") {
		k.expect(sn, str(m.body, "snapshot_id") == snap, "session/restore names %q, restored %q", str(m.body, "snapshot_id"), snap)
		if mid != "" {
			got := working("the working entry after the restore")
			k.expect(sn, got == "before", "after restoring the snapshot the working entry is %q, saved \"before\" (then stored \"after\")", got)
		}
	}
	sql := s.call(ctx, "session/snapshot/req", map[string]any{"target": "sql"})
	if k.want(sn, sql, "session/snapshot/resp", "session/snapshot to sql") {
		k.expect(sn, str(sql.body, "target") == "sql", "session/snapshot with target sql: target %q", str(sql.body, "target"))
		s.call(ctx, "session/snapshot/delete/req", map[string]any{"snapshot_id": str(sql.body, "snapshot_id")})
	}
	m = s.call(ctx, "session/snapshot/delete/req", map[string]any{"snapshot_id": snap})
	if k.want(sn, m, "session/snapshot/delete/resp", "session/snapshot/delete") {
		deleted, _ := boolean(m.body, "deleted")
		k.expect(sn, deleted && str(m.body, "snapshot_id") == snap, "session/snapshot/delete: %s, want deleted true", m)
	}
	if m = s.call(ctx, "session/snapshot/list/req", nil); k.want(sn, m, "session/snapshot/list/resp", "session/snapshot/list after delete") {
		for _, x := range arr(m.body, "snapshots") {
			k.expect(sn, str(x, "snapshot_id") != snap, "a deleted snapshot is still listed")
		}
	}
	setWorking("changed")
	k.wantError(sn, s.call(ctx, "session/restore/req", map[string]any{"snapshot_id": snap}), "restoring a deleted snapshot")
	if mid != "" {
		got := working("the working entry after a refused restore")
		k.expect(sn, got == "changed", "a refused restore changed the working entry to %q", got)
	}

	k.fork(ctx, s, handle, mid, key)

	t := CheckSessionTrajectory
	m = s.call(ctx, "session/trajectory/export/req", nil)
	if k.want(t, m, "session/trajectory/export/resp", "session/trajectory/export") {
		n, _ := num(m.body, "records")
		k.expect(t, str(m.body, "format") == "jsonl" && int(n) == len(arr(m.body, "lines")), "session/trajectory/export: format %q, records %v, %d lines", str(m.body, "format"), n, len(arr(m.body, "lines")))
	}
	return nil
}

// fork: one fork of s, reached by its id where the transport can, holds
// a copy of s's working memory.
func (k *kit) fork(ctx context.Context, s *session, handle, mid, key string) {
	f := CheckSessionFork
	m := s.call(ctx, "session/fork/req", map[string]any{"count": 1})
	if !k.want(f, m, "session/fork/resp", "session/fork") {
		return
	}
	forks := arr(m.body, "forks")
	if !k.expect(f, len(forks) == 1, "session/fork of count 1 made %d forks", len(forks)) {
		return
	}
	id, h := str(forks[0], "session_id"), str(forks[0], "handle")
	k.expect(f, id != "" && id != s.id, "the fork's session_id %q is empty or the sender's", id)
	k.expect(f, h != "" && h != handle, "the fork's handle %q is empty or the sender's", h)
	if k.target.Attach == nil {
		k.skip("needs "+needAttach, f) // only when nothing else counted
		k.transportBranch("no attach")
		return
	}
	conn, err := k.target.Attach(ctx, id)
	if err != nil {
		k.fail(f, "reaching the fork by its id: %v", err)
		return
	}
	fs := k.newSession(conn, "fork")
	defer fs.close(ctx)
	hs, err := fs.handshake(ctx, k.opts.Caps, k.opts.Token)
	if err != nil || hs.OK == nil || !*hs.OK {
		k.fail(f, "the fork's handshake with the host's token: %v %s", err, hs)
		return
	}
	if info := fs.call(ctx, "session/info/req", nil); k.want(f, info, "session/info/resp", "the fork's session/info") {
		k.expect(f, str(info.body, "session_id") == id, "the fork's session/info names %q, the fork is %q", str(info.body, "session_id"), id)
	}
	if mid == "" {
		return
	}
	r := fs.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{key}, "tier": "working"})
	if k.want(f, r, "memory/retrieve/resp", "the fork's working memory") {
		got := str(r.body, "entries.0.content")
		k.expect(f, got == "changed", "the fork's working entry is %q, the sender's was \"changed\" when it forked", got)
	}
}

// points: the envelope's point on replies (docs/DECISIONS.md, Points),
// judged by working memory: writes move it, reads do not, a snapshot
// covers it, and a restore never resumes from an earlier point than the
// caller saw without saying so.
func (k *kit) points(ctx context.Context) error {
	c := CheckSessionPoints
	if !k.offered["memory"] {
		k.skip("the host does not offer memory: no state-changing request to count", c)
		return nil
	}
	s := k.sessionFor(ctx, c, "points", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	at := func(m *msg) float64 {
		p, _ := num(m.body, "point")
		return p
	}
	m := s.call(ctx, "session/info/req", nil)
	if !k.want(c, m, "session/info/resp", "session/info") {
		return nil
	}
	p0, ok := num(m.body, "point")
	if !ok {
		k.skip("the host keeps no points (its replies carry none)", c)
		return nil
	}
	m = s.call(ctx, "memory/init/req", map[string]any{"namespace": k.name("points")})
	if !k.want(c, m, "memory/init/resp", "memory/init") {
		return nil
	}
	k.expect(c, at(m) == p0+1, "memory/init (state-changing) answered at point %v, after %v", at(m), p0)
	mid, key := str(m.body, "memory_id"), k.name("point")
	store := func(v string) *msg {
		return s.call(ctx, "memory/store/req", map[string]any{"memory_id": mid, "entries": []any{map[string]any{"key": key, "content": v, "tier": "working"}}})
	}
	working := func() string {
		m := s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{key}, "tier": "working"})
		return str(m.body, "entries.0.content")
	}
	if m = store("saved"); !k.want(c, m, "memory/store/resp", "memory/store") {
		return nil
	}
	k.expect(c, at(m) == p0+2, "memory/store answered at point %v, want %v", at(m), p0+2)
	m = s.call(ctx, "memory/retrieve/req", map[string]any{"memory_id": mid, "keys": []any{key}, "tier": "working"})
	k.expect(c, at(m) == p0+2, "memory/retrieve (a read) moved the point to %v", at(m))
	m = s.call(ctx, "session/snapshot/req", nil)
	if !k.want(c, m, "session/snapshot/resp", "session/snapshot") {
		return nil
	}
	snap := str(m.body, "snapshot_id")
	defer s.call(ctx, "session/snapshot/delete/req", map[string]any{"snapshot_id": snap})
	cov, ok := num(m.body, "covers_point")
	k.expect(c, ok && cov == p0+2, "session/snapshot covers_point %v, want %v", m.body["covers_point"], p0+2)
	if m = store("after"); !k.want(c, m, "memory/store/resp", "memory/store after the snapshot") {
		return nil
	}
	last := at(m)

	m = s.call(ctx, "session/restore/req", map[string]any{"snapshot_id": snap, "last_point": last})
	if k.wantError(c, m, "a restore below last_point", "runtime_error") {
		var d map[string]any
		_ = json.Unmarshal(m.Detail, &d)
		lost, _ := num(d, "lost")
		k.expect(c, str(d, "reason") == "point_gap" && lost == 1, "a restore below last_point: detail %s, want reason point_gap and lost 1", m.Detail)
	}
	k.expect(c, working() == "after", "a refused restore changed the working entry")
	m = s.call(ctx, "session/restore/req", map[string]any{"snapshot_id": snap, "last_point": last, "accept_gap": true})
	if k.want(c, m, "session/restore/resp", "a restore with accept_gap") {
		lost, _ := num(m.body, "gap.lost")
		from, _ := num(m.body, "from_point")
		k.expect(c, lost == 1 && from == p0+2 && at(m) == p0+2, "a restore with accept_gap: gap %s, from_point %v, point %v; want lost 1, resumed at %v", show(m.body["gap"]), m.body["from_point"], at(m), p0+2)
		k.expect(c, working() == "saved", "after the accepted restore the working entry is %q, want the snapshot's", working())
	}
	m = s.call(ctx, "session/restore/req", map[string]any{"snapshot_id": snap, "last_point": p0 + 2})
	k.want(c, m, "session/restore/resp", "a restore that covers last_point")
	return nil
}
