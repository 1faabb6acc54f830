package memory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Backend keeps the persistent tiers (episodic and semantic): sqliteBackend
// (FTS5) on a SQLite store, postgresBackend (tsvector with a GIN index) on a
// PostgreSQL one. Every read takes `now` and hides
// entries that expired by then, so expiry is immediate whatever the
// collector's schedule (TTL).
type Backend interface {
	// Put writes a batch in one transaction: semantic records upserted by
	// key, episodic records appended.
	Put(ctx context.Context, sc scopeKey, recs []record) error
	// Get returns the live records of keys in one tier; episodic events in
	// append order.
	Get(ctx context.Context, tier string, sc scopeKey, keys []string, now int64) ([]record, error)
	// Search returns up to limit live records of a tier passing f, in
	// reply order. With q, those the engine matches by one of q's words
	// (stemmed), scored by q and ranked over every match ([rankText]);
	// without, all of them by time, newest or oldest first.
	Search(ctx context.Context, tier string, sc scopeKey, q *query, f filter, newest bool, limit int, now int64) ([]scored, error)
	// Forget deletes a tier's records matching sel and returns how many.
	Forget(ctx context.Context, tier string, sc scopeKey, sel selector) (int, error)
	// Stats counts a tier's live records and their bytes.
	Stats(ctx context.Context, tier string, sc scopeKey, now int64) (entries, bytes int, err error)
	// Collect deletes every expired record of every scope.
	Collect(ctx context.Context, now int64) (int, error)
}

// scopeKey is what the persistent tiers are scoped by (isolation).
type scopeKey struct{ ns, agent string }

// unsupported is the Backend of a host without a store.
type unsupported struct{ err error }

func (u unsupported) Put(context.Context, scopeKey, []record) error { return u.err }
func (u unsupported) Get(context.Context, string, scopeKey, []string, int64) ([]record, error) {
	return nil, u.err
}
func (u unsupported) Search(context.Context, string, scopeKey, *query, filter, bool, int, int64) ([]scored, error) {
	return nil, u.err
}
func (u unsupported) Forget(context.Context, string, scopeKey, selector) (int, error) {
	return 0, u.err
}
func (u unsupported) Stats(context.Context, string, scopeKey, int64) (int, int, error) {
	return 0, 0, u.err
}
func (u unsupported) Collect(context.Context, int64) (int, error) { return 0, nil }

// sqliteBackend keeps the tiers in the ent tables memory_semantic and
// memory_episodic (ent/schema/memory.go), each with an external-content
// FTS5 table kept in step by triggers. Statements are raw SQL on the store's
// *sql.DB: ent cannot express FTS5 MATCH, and the batched upsert is the hot
// path.
type sqliteBackend struct {
	db *sql.DB

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // recall's statements, prepared once (query)
}

// maxStmts bounds the statements a sqliteBackend keeps prepared: the shapes
// recall's statements take (tier, tag count, time filters, order) are few
// in use, but a tag count is the client's to choose.
const maxStmts = 32

// query runs q in tx through a statement prepared once per connection:
// parsing it anew each time was a tenth of a recall's own work.
func (b *sqliteBackend) query(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	st, err := b.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return tx.QueryContext(ctx, q, args...)
	}
	return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
}

// prepared returns q prepared, or nil once maxStmts statements are.
func (b *sqliteBackend) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := b.stmts[q]; st != nil || len(b.stmts) >= maxStmts {
		return st, nil
	}
	st, err := b.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	b.stmts[q] = st
	return st, nil
}

func tableOf(tier string) string {
	if tier == TierSemantic {
		return "memory_semantic"
	}
	return "memory_episodic"
}

// ftsDDL creates the FTS5 index of one table and the triggers that keep it
// in step; run after ent's migration, idempotent.
func ftsDDL(t string) []string {
	cols := `"key", body, tag_set`
	ins := fmt.Sprintf(`INSERT INTO %[1]s_fts(rowid, %[2]s) VALUES (new.id, new."key", new.body, new.tag_set);`, t, cols)
	del := fmt.Sprintf(`INSERT INTO %[1]s_fts(%[1]s_fts, rowid, %[2]s) VALUES ('delete', old.id, old."key", old.body, old.tag_set);`, t, cols)
	return []string{
		fmt.Sprintf(`CREATE VIRTUAL TABLE IF NOT EXISTS %[1]s_fts USING fts5(%[2]s, content='%[1]s', content_rowid='id', tokenize='porter unicode61')`, t, cols),
		// Merge segments in larger steps: at the default (4) a batched store
		// spends a third of its time merging the segment each commit adds.
		fmt.Sprintf(`INSERT INTO %[1]s_fts(%[1]s_fts, rank) VALUES('automerge', 16)`, t),
		fmt.Sprintf(`CREATE TRIGGER IF NOT EXISTS %[1]s_fts_ai AFTER INSERT ON %[1]s BEGIN %[2]s END`, t, ins),
		fmt.Sprintf(`CREATE TRIGGER IF NOT EXISTS %[1]s_fts_ad AFTER DELETE ON %[1]s BEGIN %[2]s END`, t, del),
		fmt.Sprintf(`CREATE TRIGGER IF NOT EXISTS %[1]s_fts_au AFTER UPDATE ON %[1]s BEGIN %[2]s %[3]s END`, t, del, ins),
	}
}

func newSQLiteBackend(ctx context.Context, db *sql.DB) (*sqliteBackend, error) {
	for _, t := range []string{"memory_semantic", "memory_episodic"} {
		// An index made before stemming (tokenize='unicode61') is made
		// again with the porter tokenizer and rebuilt from the table.
		var ddl string
		rebuild := false
		switch err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, t+"_fts").Scan(&ddl); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("memory: looking for the full-text index of %s: %w", t, err)
		case !strings.Contains(ddl, "porter"):
			if _, err := db.ExecContext(ctx, `DROP TABLE `+t+`_fts`); err != nil {
				return nil, fmt.Errorf("memory: dropping the unstemmed full-text index of %s: %w", t, err)
			}
			rebuild = true
		}
		stmts := ftsDDL(t)
		if rebuild {
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO %[1]s_fts(%[1]s_fts) VALUES('rebuild')`, t))
		}
		for _, stmt := range stmts {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return nil, fmt.Errorf("memory: creating the full-text index of %s: %w", t, err)
			}
		}
	}
	return &sqliteBackend{db: db, stmts: map[string]*sql.Stmt{}}, nil
}

const insertCols = `namespace, agent, "key", content, body, tags, tag_set, source, metadata, created_at, updated_at, expires_at, size`

// upsertTail makes a semantic insert an upsert by key. A replaced entry
// that had expired is a new entry, so it gets a new created_at.
const upsertTail = ` ON CONFLICT(namespace, agent, "key") DO UPDATE SET content = excluded.content, body = excluded.body, tags = excluded.tags,
tag_set = excluded.tag_set, source = excluded.source, metadata = excluded.metadata, updated_at = excluded.updated_at,
expires_at = excluded.expires_at, size = excluded.size,
created_at = CASE WHEN memory_semantic.expires_at != 0 AND memory_semantic.expires_at <= excluded.updated_at THEN excluded.created_at ELSE memory_semantic.created_at END`

// putChunk is how many rows one INSERT carries: multi-row statements
// cut the per-statement cost of the driver, which dominated batched stores
// (13 parameters a row stays far below SQLite's 32,766-parameter limit).
const putChunk = 64

func (b *sqliteBackend) Put(ctx context.Context, sc scopeKey, recs []record) error {
	// Semantic rows first, then episodic, each in request order; a key
	// stored twice in one batch ends with its last value.
	return putByTier(ctx, b.db, recs, func(tx *sql.Tx, tier string, rows []*record) error {
		for len(rows) > 0 {
			n := min(len(rows), putChunk)
			if err := b.putRows(ctx, tx, tier, sc, rows[:n]); err != nil {
				return err
			}
			rows = rows[n:]
		}
		return nil
	})
}

// putByTier runs put, in one transaction, for the semantic and then the
// episodic records of recs (in request order), and commits if all succeed.
func putByTier(ctx context.Context, db *sql.DB, recs []record, put func(tx *sql.Tx, tier string, rows []*record) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, tier := range []string{TierSemantic, TierEpisodic} {
		var rows []*record
		for i := range recs {
			if recs[i].Tier == tier {
				rows = append(rows, &recs[i])
			}
		}
		if len(rows) == 0 {
			continue
		}
		if err = put(tx, tier, rows); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (b *sqliteBackend) putRows(ctx context.Context, tx *sql.Tx, tier string, sc scopeKey, rows []*record) error {
	var q strings.Builder
	q.WriteString(`INSERT INTO ` + tableOf(tier) + ` (` + insertCols + `) VALUES `)
	args := make([]any, 0, 13*len(rows))
	for i, r := range rows {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString(`(?,?,?,?,?,?,?,?,?,?,?,?,?)`)
		tags, _ := json.Marshal(nonNil(r.Tags))
		var meta any
		if len(r.Metadata) > 0 {
			meta = []byte(r.Metadata)
		}
		args = append(args, sc.ns, sc.agent, r.Key, []byte(r.Content), bodyText(r.Content), string(tags),
			tagSet(r.Tags), r.Source, meta, r.Created, r.Updated, r.Expires, r.size())
	}
	if tier == TierSemantic {
		q.WriteString(upsertTail)
	}
	if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("memory: storing %d %s entries from %q: %w", len(rows), tier, rows[0].Key, err)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

const selectCols = `t.id, t."key", t.content, t.tags, t.source, t.metadata, t.created_at, t.updated_at, t.expires_at`

func scanRecords(rows *sql.Rows, tier string) ([]scored, error) {
	defer rows.Close()
	var out []scored
	for rows.Next() {
		var s scored
		var tags string
		var meta []byte
		if err := rows.Scan(&s.rec.Seq, &s.rec.Key, &s.rec.Content, &tags, &s.rec.Source, &meta, &s.rec.Created, &s.rec.Updated, &s.rec.Expires); err != nil {
			return nil, err
		}
		s.rec.Tier = tier
		if len(meta) > 0 {
			s.rec.Metadata = meta
		}
		if tags != "" && tags != "[]" {
			_ = json.Unmarshal([]byte(tags), &s.rec.Tags)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// scopeWhere is the WHERE part shared by reads: the scope, and liveness at now.
const scopeWhere = `t.namespace = ? AND t.agent = ? AND (t.expires_at = 0 OR t.expires_at > ?)`

func (b *sqliteBackend) Get(ctx context.Context, tier string, sc scopeKey, keys []string, now int64) ([]record, error) {
	q := `SELECT ` + selectCols + ` FROM ` + tableOf(tier) + ` t WHERE ` + scopeWhere + ` AND t."key" IN (` + placeholders(len(keys)) + `) ORDER BY t.id`
	args := []any{sc.ns, sc.agent, now}
	for _, k := range keys {
		args = append(args, k)
	}
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	s, err := scanRecords(rows, tier)
	if err != nil {
		return nil, err
	}
	return recordsOf(s), nil
}

// recordsOf drops the scores of s.
func recordsOf(s []scored) []record {
	out := make([]record, len(s))
	for i := range s {
		out[i] = s[i].rec
	}
	return out
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// filterSQL adds the tag and time filters.
func filterSQL(f filter, where *strings.Builder, args *[]any) {
	for _, tag := range f.tags {
		where.WriteString(` AND instr(t.tag_set, ?) > 0`)
		*args = append(*args, tagSep+tag+tagSep)
	}
	if f.since != 0 {
		where.WriteString(` AND t.created_at >= ?`)
		*args = append(*args, f.since)
	}
	if f.until != 0 {
		where.WriteString(` AND t.created_at <= ?`)
		*args = append(*args, f.until)
	}
}

func (b *sqliteBackend) Search(ctx context.Context, tier string, sc scopeKey, q *query, f filter, newest bool, limit int, now int64) ([]scored, error) {
	t := tableOf(tier)
	var where strings.Builder
	if q != nil {
		return b.searchText(ctx, tier, sc, q, f, newest, limit, now)
	}
	args := []any{sc.ns, sc.agent, now}
	where.WriteString(scopeWhere)
	filterSQL(f, &where, &args)
	order := `t.created_at, t.id`
	if newest {
		order = `t.created_at DESC, t.id DESC`
	}
	args = append(args, limit)
	rows, err := b.db.QueryContext(ctx, `SELECT `+selectCols+` FROM `+t+` t WHERE `+where.String()+` ORDER BY `+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	return scanRecords(rows, tier)
}

// searchText lists every match of FTS5 in the scope and filters, checked on
// the joined row, for rankText to score. FTS5's bm25 is not asked for: it
// cost more than reading and scoring the matches' text (docs/PERFORMANCE.md,
// memory).
func (b *sqliteBackend) searchText(ctx context.Context, tier string, sc scopeKey, q *query, f filter, newest bool, limit int, now int64) ([]scored, error) {
	t := tableOf(tier)
	var where strings.Builder
	args := []any{ftsQuery(q.words), sc.ns, sc.agent, now}
	where.WriteString(t + `_fts MATCH ? AND ` + scopeWhere)
	filterSQL(f, &where, &args)
	cands := `SELECT ` + candidateCols(q) + ` FROM ` + t + `_fts JOIN ` + t + ` t ON t.id = ` + t + `_fts.rowid WHERE ` + where.String()
	// FTS5 walks its matches newest first by itself (no sort), so a
	// candidate that only ties those kept is refused at once.
	cands += ` ORDER BY ` + t + `_fts.rowid DESC`
	return rankText(ctx, b.db, &sql.TxOptions{ReadOnly: true}, tier, q, newest, limit,
		func(tx *sql.Tx) (*sql.Rows, error) { return b.query(ctx, tx, cands, args...) },
		func(tx *sql.Tx, ids []int64) (*sql.Rows, error) {
			// One statement for any number of ids: a JSON array of them.
			list, _ := json.Marshal(ids)
			return b.query(ctx, tx, `SELECT `+selectCols+` FROM `+t+` t WHERE t.id IN (SELECT value FROM json_each(?))`, string(list))
		})
}

func (b *sqliteBackend) Forget(ctx context.Context, tier string, sc scopeKey, sel selector) (int, error) {
	var where strings.Builder
	args := []any{sc.ns, sc.agent}
	where.WriteString(`t.namespace = ? AND t.agent = ?`)
	if len(sel.keys) > 0 {
		where.WriteString(` AND t."key" IN (` + placeholders(len(sel.keys)) + `)`)
		for _, k := range sel.keys {
			args = append(args, k)
		}
	}
	filterSQL(filter{tags: sel.tags}, &where, &args)
	if sel.updatedBefore != 0 {
		where.WriteString(` AND t.updated_at <= ?`)
		args = append(args, sel.updatedBefore)
	}
	res, err := b.db.ExecContext(ctx, `DELETE FROM `+tableOf(tier)+` AS t WHERE `+where.String(), args...)
	if err != nil {
		return 0, fmt.Errorf("memory: forget in %s: %w", tier, err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func (b *sqliteBackend) Stats(ctx context.Context, tier string, sc scopeKey, now int64) (int, int, error) {
	var n, bytes int
	err := b.db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(t.size), 0) FROM `+tableOf(tier)+` t WHERE `+scopeWhere, sc.ns, sc.agent, now).Scan(&n, &bytes)
	return n, bytes, err
}

func (b *sqliteBackend) Collect(ctx context.Context, now int64) (int, error) {
	total := 0
	for _, t := range []string{"memory_semantic", "memory_episodic"} {
		res, err := b.db.ExecContext(ctx, `DELETE FROM `+t+` WHERE expires_at != 0 AND expires_at <= ?`, now)
		if err != nil {
			return total, fmt.Errorf("memory: collecting expired entries of %s: %w", t, err)
		}
		n, _ := res.RowsAffected()
		total += int(n)
	}
	return total, nil
}
