package persist

// Whole-lineage exports (docs/DECISIONS.md, Trajectories): a fork's
// recorded trajectory starts at its own handshake, so its episode is its
// ancestors' records before each fork point (the prefix), root first,
// then its own. An export of a fork, of a sibling group or of a session
// with its descendants yields one episode per session, the prefix
// repeated in each (the default), once over the whole export, or left
// out. Lineage is the authorization: a reader gets the episodes of
// sessions it is, or is an ancestor of, in its own tenant only.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/ent/predicate"
	"github.com/aephost/aep/ent/trajectoryrecord"
)

// Values of session/trajectory/export `prefix`.
const (
	PrefixRepeat = "repeat"
	PrefixOnce   = "once"
	PrefixNone   = "none"
)

// trajSource reads recorded trajectories of one tenant, or of every
// tenant for the operator.
type trajSource struct {
	client *ent.Client
	tenant string
	all    bool
}

func (q trajSource) where(ps ...predicate.TrajectoryRecord) []predicate.TrajectoryRecord {
	if !q.all {
		ps = append(ps, trajectoryrecord.Tenant(q.tenant))
	}
	return ps
}

// head reads the first kept record of the session with handle h, which
// names its lineage; nil when nothing of it is kept.
func (q trajSource) head(ctx context.Context, h string) (*TrajectoryRecord, error) {
	row, err := q.client.TrajectoryRecord.Query().Where(q.where(trajectoryrecord.Handle(h))...).
		Order(ent.Asc(trajectoryrecord.FieldSeq), ent.Asc(trajectoryrecord.FieldID)).First(ctx)
	if ent.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeRecord(row)
}

// handles returns the handles of the sessions with records matching ps,
// in the order of their first record.
func (q trajSource) handles(ctx context.Context, ps ...predicate.TrajectoryRecord) ([]string, error) {
	var rows []struct {
		Handle string `json:"handle"`
		First  int    `json:"min"`
	}
	err := q.client.TrajectoryRecord.Query().Where(q.where(ps...)...).
		GroupBy(trajectoryrecord.FieldHandle).Aggregate(ent.Min(trajectoryrecord.FieldID)).Scan(ctx, &rows)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rows, func(a, b struct {
		Handle string `json:"handle"`
		First  int    `json:"min"`
	}) int {
		return a.First - b.First
	})
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Handle
	}
	return out, nil
}

// records reads the kept records of session h, in order.
func (q trajSource) records(ctx context.Context, h string) ([]TrajectoryRecord, error) {
	rows, err := q.client.TrajectoryRecord.Query().Where(q.where(trajectoryrecord.Handle(h))...).
		Order(ent.Asc(trajectoryrecord.FieldSeq), ent.Asc(trajectoryrecord.FieldID)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TrajectoryRecord, 0, len(rows))
	for _, row := range rows {
		rec, err := decodeRecord(row)
		if err != nil {
			return nil, err
		}
		out = append(out, *rec)
	}
	return out, nil
}

func decodeRecord(row *ent.TrajectoryRecord) (*TrajectoryRecord, error) {
	var rec TrajectoryRecord
	if err := json.Unmarshal(row.Data, &rec); err != nil {
		return nil, fmt.Errorf("trajectory record %d: %w", row.ID, err)
	}
	return &rec, nil
}

// selection is what an export asks for.
type selection struct {
	// handles are the sessions exported (with their descendants when
	// descendants is set); group, when set, replaces them.
	handles     []string
	group       string
	descendants bool
	// readers are the handles lineage authorizes from (the reader and
	// the sessions whose ids it presented), with roots their lineages'
	// roots; nil readers: the operator, who reads any.
	readers []string
	roots   []string
	prefix  string
}

// episode is one session's whole trajectory: segments of its ancestors'
// records (root first), then its own.
type episode struct {
	handle  string
	head    *TrajectoryRecord
	segs    []segment
	missing bool
}

// segment is the records of session handle with seq below below.
type segment struct {
	handle string
	below  int64
}

// planner resolves selections into episodes, reading each session's
// head once.
type planner struct {
	q     trajSource
	heads map[string]*TrajectoryRecord
}

func (pl *planner) head(ctx context.Context, h string) (*TrajectoryRecord, error) {
	if r, ok := pl.heads[h]; ok {
		return r, nil
	}
	r, err := pl.q.head(ctx, h)
	if err != nil {
		return nil, err
	}
	pl.heads[h] = r
	return r, nil
}

// episodes returns the episodes sel selects that its readers may read,
// in the order of their sessions' first records (a parent before its
// forks).
func (pl *planner) episodes(ctx context.Context, sel selection) ([]episode, error) {
	var targets []string
	switch {
	case sel.group != "":
		hs, err := pl.q.handles(ctx, trajectoryrecord.ForkGroup(sel.group))
		if err != nil {
			return nil, err
		}
		targets = hs
	case sel.descendants:
		var roots []string
		for _, h := range sel.handles {
			hd, err := pl.head(ctx, h)
			if err != nil {
				return nil, err
			}
			if hd != nil && hd.Root != "" && !slices.Contains(roots, hd.Root) {
				roots = append(roots, hd.Root)
			}
		}
		for _, r := range sel.roots {
			if !slices.Contains(roots, r) {
				roots = append(roots, r)
			}
		}
		if len(roots) > 0 {
			hs, err := pl.q.handles(ctx, trajectoryrecord.RootIn(roots...))
			if err != nil {
				return nil, err
			}
			// A descendant of an exported session, or one of them.
			for _, h := range hs {
				up, err := pl.ancestry(ctx, h)
				if err != nil {
					return nil, err
				}
				if slices.ContainsFunc(up, func(a string) bool { return slices.Contains(sel.handles, a) }) {
					targets = append(targets, h)
				}
			}
		}
	default:
		for _, h := range sel.handles {
			if hd, err := pl.head(ctx, h); err != nil {
				return nil, err
			} else if hd != nil {
				targets = append(targets, h)
			}
		}
	}
	var out []episode
	for _, h := range targets {
		if slices.ContainsFunc(out, func(e episode) bool { return e.handle == h }) {
			continue
		}
		if sel.readers != nil {
			up, err := pl.ancestry(ctx, h)
			if err != nil {
				return nil, err
			}
			if !slices.ContainsFunc(up, func(a string) bool { return slices.Contains(sel.readers, a) }) {
				continue // not the reader's lineage: as if it did not exist
			}
		}
		ep, err := pl.episode(ctx, h, sel.prefix)
		if err != nil {
			return nil, err
		}
		if ep.head != nil {
			out = append(out, ep)
		}
	}
	return out, nil
}

// ancestry returns h and the handles of its ancestors as its records
// name them: parents up to the first that recorded nothing, and the root.
func (pl *planner) ancestry(ctx context.Context, h string) ([]string, error) {
	out := []string{h}
	cur, err := pl.head(ctx, h)
	if err != nil || cur == nil {
		return out, err
	}
	if cur.Root != "" && cur.Root != h {
		out = append(out, cur.Root)
	}
	for cur.Parent != "" && len(out) < maxLineageDepth {
		if !slices.Contains(out, cur.Parent) {
			out = append(out, cur.Parent)
		}
		if cur, err = pl.head(ctx, cur.Parent); err != nil || cur == nil {
			return out, err
		}
	}
	return out, nil
}

// maxLineageDepth bounds a walk up a lineage: forks of forks, each a
// session its tenant's budgets counted.
const maxLineageDepth = 1024

// episode plans session h's episode: its prefix segments, root first,
// and whether any of the prefix is not recorded.
func (pl *planner) episode(ctx context.Context, h, prefix string) (episode, error) {
	hd, err := pl.head(ctx, h)
	if err != nil || hd == nil {
		return episode{handle: h}, err
	}
	ep := episode{handle: h, head: hd}
	if prefix == PrefixNone {
		return ep, nil
	}
	for cur := hd; cur.Parent != "" && len(ep.segs) < maxLineageDepth; {
		if cur.ForkPoint == nil {
			ep.missing = true // the parent did not record, or a fork from a snapshot
			break
		}
		ep.segs = append([]segment{{handle: cur.Parent, below: *cur.ForkPoint}}, ep.segs...)
		up, err := pl.head(ctx, cur.Parent)
		if err != nil {
			return ep, err
		}
		if up == nil {
			ep.missing = *cur.ForkPoint > 0
			break
		}
		cur = up
	}
	return ep, nil
}

// exportPage is one page of an episode export.
type exportPage struct {
	lines   []map[string]any
	records int
	next    int // episodes done; 0 when none are left
	missing []string
}

// renderEpisodes renders eps[after:] in format until a page holds more
// than limit records (at least one episode each page; limit 0: all).
func renderEpisodes(ctx context.Context, q trajSource, eps []episode, after, limit int, format, prefix string) (exportPage, error) {
	var pg exportPage
	cache := map[string][]TrajectoryRecord{}
	recsOf := func(h string) ([]TrajectoryRecord, error) {
		if r, ok := cache[h]; ok {
			return r, nil
		}
		r, err := q.records(ctx, h)
		cache[h] = r
		return r, err
	}
	// What earlier pages gave, by session: records with seq below.
	emitted := map[string]int64{}
	mark := func(h string, below int64) {
		if below > emitted[h] {
			emitted[h] = below
		}
	}
	for _, ep := range eps[:min(after, len(eps))] {
		for _, sg := range ep.segs {
			mark(sg.handle, sg.below)
		}
		mark(ep.handle, math.MaxInt64)
	}
	for i := after; i < len(eps); i++ {
		if limit > 0 && pg.records >= limit && i > after {
			pg.next = i
			break
		}
		ep := eps[i]
		var prefixRecs []TrajectoryRecord
		for _, sg := range ep.segs {
			all, err := recsOf(sg.handle)
			if err != nil {
				return pg, err
			}
			var n int64
			for _, r := range all {
				if r.Seq < sg.below {
					n++
					if prefix == PrefixRepeat || r.Seq >= emitted[sg.handle] {
						prefixRecs = append(prefixRecs, r)
					}
				}
			}
			if n < sg.below {
				ep.missing = true // dropped by retention or max_records_per_session
			}
			if prefix == PrefixOnce {
				mark(sg.handle, sg.below)
			}
		}
		own, err := recsOf(ep.handle)
		if err != nil {
			return pg, err
		}
		if prefix == PrefixOnce {
			own = slices.DeleteFunc(slices.Clone(own), func(r TrajectoryRecord) bool { return r.Seq < emitted[ep.handle] })
			mark(ep.handle, math.MaxInt64)
		}
		if ep.missing {
			pg.missing = append(pg.missing, ep.handle)
		}
		pg.records += len(prefixRecs) + len(own)
		switch {
		case format == "chat" && prefix == PrefixOnce:
			if len(prefixRecs) > 0 {
				for _, s := range ChatSamples(prefixRecs) {
					s["part"] = "prefix"
					pg.lines = append(pg.lines, s)
				}
			}
			pg.lines = append(pg.lines, episodeSample(ep, own, 0))
		case format == "chat":
			pg.lines = append(pg.lines, episodeSample(ep, append(prefixRecs, own...), len(prefixRecs)))
		default:
			for _, set := range [][]TrajectoryRecord{prefixRecs, own} {
				for _, r := range set {
					if prefix == PrefixRepeat {
						r.Episode = ep.handle
					}
					if ep.missing {
						r.Prefix = "missing"
					}
					line, err := recordLine(r)
					if err != nil {
						return pg, err
					}
					pg.lines = append(pg.lines, line)
				}
			}
		}
	}
	return pg, nil
}

// episodeSample is the chat sample of episode ep, whose records are recs,
// the first prefixRecs of them its prefix.
func episodeSample(ep episode, recs []TrajectoryRecord, prefixRecs int) map[string]any {
	s := chatSample(recs, prefixRecs)
	setLineage(s, ep.head)
	if ep.missing {
		s["prefix"] = "missing"
	}
	return s
}

// setLineage names in a chat sample the session of head and its lineage.
func setLineage(s map[string]any, head *TrajectoryRecord) {
	s["session"] = head.Session
	if head.Root != "" {
		s["root"] = head.Root
	}
	if head.Parent != "" {
		s["parent"] = head.Parent
		s["group"] = head.Group
		if head.ForkPoint != nil {
			s["fork_point"] = *head.ForkPoint
		}
	}
}

// recordLine is record r as a line of a jsonl export.
func recordLine(r TrajectoryRecord) (map[string]any, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}
