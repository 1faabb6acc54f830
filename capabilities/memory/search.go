package memory

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
)

// query is a recall's full-text query, as the tiers search for it.
type query struct {
	words    []string // distinct words, for the engine's full-text match
	m        *matcher // scores each candidate from its own text
	minScore float64  // hits scoring below it are left out
	byTime   bool     // rank the hits by time (order newest or oldest), not by score
}

// candidate is a row that matched a query, ranked before its record is read.
type candidate struct {
	id, created int64
	score       float64
}

// best keeps the best limit candidates offered to it, as a heap whose root
// is the worst kept, so a recall holds limit candidates however many match.
// Relevance ranks by score, ties newest (highest id) first; time ranks by
// creation, then id, in the order asked for.
type best struct {
	byTime, newest bool
	limit          int
	h              []candidate
}

// before reports whether a ranks before b in the reply.
func (t *best) before(a, b candidate) bool {
	if t.byTime {
		if a.created != b.created {
			return (a.created > b.created) == t.newest
		}
		return (a.id > b.id) == t.newest
	}
	if a.score != b.score {
		return a.score > b.score
	}
	return a.id > b.id
}

// offer keeps c if it is among the best limit offered so far.
func (t *best) offer(c candidate) {
	if len(t.h) < t.limit {
		// Sift the new leaf up while it ranks below its parent.
		t.h = append(t.h, c)
		for i := len(t.h) - 1; i > 0; {
			p := (i - 1) / 2
			if !t.before(t.h[p], t.h[i]) {
				break
			}
			t.h[p], t.h[i] = t.h[i], t.h[p]
			i = p
		}
		return
	}
	if !t.before(c, t.h[0]) {
		return
	}
	// Replace the worst kept and sift it down below the children that rank
	// below it.
	t.h[0] = c
	for i := 0; ; {
		w, l, r := i, 2*i+1, 2*i+2
		if l < len(t.h) && t.before(t.h[w], t.h[l]) {
			w = l
		}
		if r < len(t.h) && t.before(t.h[w], t.h[r]) {
			w = r
		}
		if w == i {
			return
		}
		t.h[i], t.h[w] = t.h[w], t.h[i]
		i = w
	}
}

// ranked returns the candidates kept, best first.
func (t *best) ranked() []candidate {
	sort.Slice(t.h, func(i, j int) bool { return t.before(t.h[i], t.h[j]) })
	return t.h
}

// candidateCols are the columns rankText reads of each candidate, from a
// memory table aliased t: the id, created_at when ranking by time, and the
// text the score reads — key, body and tag set, joined by a space (tag_set
// separates and brackets its tags with tagSep, which is no letter either).
func candidateCols(q *query) string {
	cols := `t.id, `
	if q.byTime {
		cols += `t.created_at, `
	}
	return cols + `t."key" || ' ' || t.body || ' ' || t.tag_set`
}

// rankText is a tier's full-text recall on either store, in two passes in
// one read-only transaction (so both see the same rows): candidates streams
// the candidateCols of every row the engine matched; each is scored from that
// text and the best limit kept; fetch then reads the records of those ids
// only. Scoring every match exactly costs less than the engine's own rank
// (bm25 read each match's document sizes as well as its row) and ranks
// every match, not just the engine's best few (docs/PERFORMANCE.md, memory).
func rankText(ctx context.Context, db *sql.DB, opts *sql.TxOptions, tier string, q *query, newest bool, limit int,
	candidates func(tx *sql.Tx) (*sql.Rows, error), fetch func(tx *sql.Tx, ids []int64) (*sql.Rows, error)) ([]scored, error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	defer tx.Rollback()
	rows, err := candidates(tx)
	if err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	top := best{byTime: q.byTime, newest: newest, limit: limit}
	var c candidate
	var text string
	dest := []any{&c.id, &text}
	if q.byTime {
		dest = []any{&c.id, &c.created, &text}
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
		}
		if c.score = q.m.scoreText(text); c.score > 0 && c.score >= q.minScore {
			top.offer(c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	hits := top.ranked()
	if len(hits) == 0 {
		return nil, tx.Commit()
	}
	ids := make([]int64, len(hits))
	for i, c := range hits {
		ids[i] = c.id
	}
	rows, err = fetch(tx, ids)
	if err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	recs, err := scanRecords(rows, tier)
	if err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	byID := make(map[int64]*record, len(recs))
	for i := range recs {
		byID[recs[i].rec.Seq] = &recs[i].rec
	}
	out := make([]scored, 0, len(hits))
	for _, c := range hits {
		if r, ok := byID[c.id]; ok {
			out = append(out, scored{rec: *r, raw: c.score})
		}
	}
	return out, tx.Commit()
}
