package memory

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aephost/aep/wire"
)

// postgresBackend keeps the tiers in the same ent tables as on SQLite
// (ent/schema/memory.go), on a PostgreSQL store. Each table gets one more
// column, `fts` (a tsvector), with a GIN index, both added after ent's
// migration by [pgDDL].
//
// What a word is comes from Go, not from PostgreSQL's parser: `fts` is
// to_tsvector('english', …) over [terms] of the key, body and tags joined by
// spaces, and a query is the same words OR-ed, stemmed by the same
// configuration. So an entry matches the same queries here as on SQLite
// (porter over unicode61) and in the working tier; the parser's own token
// types (host names, URLs, paths, version numbers, floats kept whole) would
// make "bar" miss "foo.bar.com". The english configuration stems (Snowball)
// and drops stop words, which SQLite's porter tokenizer keeps.
//
// The GIN index finds the matches; each is scored from its own text
// (text.go, matcher) and ranked by that score, as on SQLite (search.go,
// rankText). See docs/DECISIONS.md "Memory".
type postgresBackend struct{ db *sql.DB }

// pgDDL adds the full-text column and index of one table; idempotent.
// Nothing can have written rows before it: the persistent tiers refused
// PostgreSQL stores until this backend existed, so the column's empty default
// never stands for an unindexed row.
func pgDDL(t string) []string {
	return []string{
		pgConfigDDL,
		`ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS fts tsvector NOT NULL DEFAULT ''`,
		`CREATE INDEX IF NOT EXISTS ` + t + `_fts ON ` + t + ` USING gin (fts)`,
		// Rows indexed before stemming hold 'simple' lexemes (the words
		// themselves): stem them. Matching needs only the lexemes; the
		// score is computed from the row's text (text.go, matcher).
		`UPDATE ` + t + ` SET fts = to_tsvector('` + pgFTSConfig + `', array_to_string(tsvector_to_array(fts), ' ')) WHERE fts <> ''`,
		`COMMENT ON COLUMN ` + t + `.fts IS '` + pgFTSConfig + `'`,
	}
}

// pgFTSConfig is the text search configuration of fts, kept as the
// column's comment so a table indexed with another one is re-indexed. It is
// PostgreSQL's english configuration with a Snowball English stemmer that
// keeps stop words (english_stem drops them), so "or" and "some" are found
// here as on SQLite, whose porter tokenizer keeps every word.
const pgFTSConfig = "aep_english"

// pgConfigDDL creates pgFTSConfig in the current schema unless it exists.
const pgConfigDDL = `DO $$ BEGIN
IF to_regnamespace(current_schema()) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = 'aep_english' AND cfgnamespace = to_regnamespace(current_schema())) THEN
  CREATE TEXT SEARCH DICTIONARY aep_english_stem (TEMPLATE = snowball, Language = english);
  CREATE TEXT SEARCH CONFIGURATION aep_english (COPY = english);
  ALTER TEXT SEARCH CONFIGURATION aep_english ALTER MAPPING REPLACE english_stem WITH aep_english_stem;
END IF;
END $$`

// pgDDLLock serialises the DDL of hosts starting at once on one database
// (an advisory lock key: "aep.mem" in ASCII).
const pgDDLLock = 0x6165702e6d656d

func newPostgresBackend(ctx context.Context, db *sql.DB) (*postgresBackend, error) {
	for _, t := range []string{"memory_semantic", "memory_episodic"} {
		// ALTER TABLE locks the table exclusively even when the column
		// exists; look first, so a restart does not queue behind readers.
		var have bool
		err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'fts' AND NOT attisdropped
AND col_description(attrelid, attnum) = $3) AND to_regclass($2) IS NOT NULL`, t, t+"_fts", pgFTSConfig).Scan(&have)
		if err != nil {
			return nil, fmt.Errorf("memory: looking for the full-text index of %s: %w", t, err)
		}
		if have {
			continue
		}
		if err := pgExecTx(ctx, db, pgDDL(t)); err != nil {
			return nil, fmt.Errorf("memory: creating the full-text index of %s: %w", t, err)
		}
	}
	return &postgresBackend{db: db}, nil
}

func pgExecTx(ctx context.Context, db *sql.DB, stmts []string) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgDDLLock)); err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err = tx.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// pgArgs collects the values of a statement and names each one's $n.
type pgArgs []any

func (a *pgArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// pgText reports whether PostgreSQL's text can hold s: valid UTF-8 without
// NUL.
func pgText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// pgBody is the body column's text: bodyText with what text cannot hold
// replaced (the body is only read by search, and NULs are not words).
func pgBody(content json.RawMessage) string {
	return strings.ReplaceAll(strings.ToValidUTF8(bodyText(content), "\uFFFD"), "\x00", " ")
}

// checkPgText refuses a record whose key, tags or source PostgreSQL cannot
// store as given: it would have to change them, and they come back to the
// client (content and metadata are bytea and keep any bytes).
func checkPgText(r *record) error {
	bad := func(field, v string) error {
		return &wire.FieldError{Field: field, Reason: fmt.Sprintf("%q holds a NUL character or invalid UTF-8, which a PostgreSQL store cannot keep", v)}
	}
	if !pgText(r.Key) {
		return bad("key", r.Key)
	}
	if !pgText(r.Source) {
		return bad("source", r.Source)
	}
	for _, t := range r.Tags {
		if !pgText(t) {
			return bad("tags", t)
		}
	}
	return nil
}

// ftsText is the text `fts` indexes: the words of the key, body and tags,
// in that order, separated by spaces.
func ftsText(r *record, body string) string {
	var b strings.Builder
	add := func(s string) {
		for _, w := range terms(s) {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w)
		}
	}
	add(r.Key)
	add(body)
	for _, t := range r.Tags {
		add(t)
	}
	return b.String()
}

// pgUpsertTail makes a semantic insert an upsert by key, as on SQLite: a
// replaced entry that had expired is a new entry with a new created_at.
const pgUpsertTail = ` ON CONFLICT (namespace, agent, "key") DO UPDATE SET content = excluded.content, body = excluded.body, tags = excluded.tags,
tag_set = excluded.tag_set, source = excluded.source, metadata = excluded.metadata, updated_at = excluded.updated_at,
expires_at = excluded.expires_at, size = excluded.size, fts = excluded.fts,
created_at = CASE WHEN t.expires_at <> 0 AND t.expires_at <= excluded.updated_at THEN excluded.created_at ELSE t.created_at END`

// Put writes each tier's rows with one INSERT over unnest()ed arrays: one
// statement and 14 parameters whatever the batch size.
func (b *postgresBackend) Put(ctx context.Context, sc scopeKey, recs []record) error {
	for i := range recs {
		if err := checkPgText(&recs[i]); err != nil {
			return err
		}
	}
	return putByTier(ctx, b.db, recs, func(tx *sql.Tx, tier string, rows []*record) error {
		if tier == TierSemantic {
			rows = lastPerKey(rows)
		}
		return b.putRows(ctx, tx, tier, sc, rows)
	})
}

// lastPerKey keeps one row per key, at its first position with its last
// value: PostgreSQL refuses an upsert that touches a row twice, and SQLite,
// applying the rows in turn, ends the same way (a key stored twice in one
// batch ends with its last value).
func lastPerKey(rows []*record) []*record {
	at := make(map[string]int, len(rows))
	out := make([]*record, 0, len(rows))
	for _, r := range rows {
		if i, ok := at[r.Key]; ok {
			out[i] = r
			continue
		}
		at[r.Key] = len(out)
		out = append(out, r)
	}
	return out
}

func (b *postgresBackend) putRows(ctx context.Context, tx *sql.Tx, tier string, sc scopeKey, rows []*record) error {
	n := len(rows)
	var (
		keys, bodies, tags, sets, srcs, fts = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		contents, metas                     = make([][]byte, n), make([][]byte, n)
		created, updated, expires, sizes    = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	)
	for i, r := range rows {
		tj, _ := json.Marshal(nonNil(r.Tags))
		keys[i], contents[i], tags[i], sets[i], srcs[i] = r.Key, r.Content, string(tj), tagSet(r.Tags), r.Source
		bodies[i] = pgBody(r.Content)
		fts[i] = ftsText(r, bodies[i])
		if len(r.Metadata) > 0 {
			metas[i] = r.Metadata
		}
		created[i], updated[i], expires[i], sizes[i] = r.Created, r.Updated, r.Expires, int64(r.size())
	}
	var a pgArgs
	// WITH ORDINALITY … ORDER BY keeps request order, so episodic ids (the
	// append order) follow it.
	q := `INSERT INTO ` + tableOf(tier) + ` AS t (` + insertCols + `, fts) SELECT ` + a.add(sc.ns) + `, ` + a.add(sc.agent) +
		`, u.k, u.c, u.b, u.tg, u.ts, u.src, u.m, u.ca, u.ua, u.ea, u.sz, to_tsvector('` + pgFTSConfig + `', u.ft) FROM unnest(` +
		a.add(keys) + `::text[], ` + a.add(contents) + `::bytea[], ` + a.add(bodies) + `::text[], ` + a.add(tags) + `::text[], ` +
		a.add(sets) + `::text[], ` + a.add(srcs) + `::text[], ` + a.add(metas) + `::bytea[], ` + a.add(created) + `::int8[], ` +
		a.add(updated) + `::int8[], ` + a.add(expires) + `::int8[], ` + a.add(sizes) + `::int8[], ` + a.add(fts) + `::text[])` +
		` WITH ORDINALITY AS u(k, c, b, tg, ts, src, m, ca, ua, ea, sz, ft, ord) ORDER BY u.ord`
	if tier == TierSemantic {
		q += pgUpsertTail
	}
	if _, err := tx.ExecContext(ctx, q, a...); err != nil {
		return fmt.Errorf("memory: storing %d %s entries from %q: %w", n, tier, rows[0].Key, err)
	}
	return nil
}

// pgScope is the WHERE part shared by reads: the scope, and liveness at now.
func pgScope(a *pgArgs, sc scopeKey, now int64) string {
	return `t.namespace = ` + a.add(sc.ns) + ` AND t.agent = ` + a.add(sc.agent) +
		` AND (t.expires_at = 0 OR t.expires_at > ` + a.add(now) + `)`
}

// pgKeys drops keys PostgreSQL cannot hold: no entry has them.
func pgKeys(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if pgText(k) {
			out = append(out, k)
		}
	}
	return out
}

func (b *postgresBackend) Get(ctx context.Context, tier string, sc scopeKey, keys []string, now int64) ([]record, error) {
	keys = pgKeys(keys)
	if len(keys) == 0 {
		return nil, nil
	}
	var a pgArgs
	q := `SELECT ` + selectCols + ` FROM ` + tableOf(tier) + ` t WHERE ` + pgScope(&a, sc, now) + ` AND t."key" = ANY(` + a.add(keys) + `::text[]) ORDER BY t.id`
	rows, err := b.db.QueryContext(ctx, q, a...)
	if err != nil {
		return nil, fmt.Errorf("memory: retrieve in %s: %w", tier, err)
	}
	s, err := scanRecords(rows, tier)
	if err != nil {
		return nil, err
	}
	return recordsOf(s), nil
}

// pgFilter adds the tag and time filters; false when a tag cannot exist
// (so nothing matches).
func pgFilter(f filter, where *strings.Builder, a *pgArgs) bool {
	for _, tag := range f.tags {
		if !pgText(tag) {
			return false
		}
		where.WriteString(` AND strpos(t.tag_set, ` + a.add(tagSep+tag+tagSep) + `) > 0`)
	}
	if f.since != 0 {
		where.WriteString(` AND t.created_at >= ` + a.add(f.since))
	}
	if f.until != 0 {
		where.WriteString(` AND t.created_at <= ` + a.add(f.until))
	}
	return true
}

// tsQuote escapes a word inside a quoted tsquery operand.
var tsQuote = strings.NewReplacer(`'`, `''`, `\`, `\\`)

// pgQuery is the tsquery text of query words: each quoted (so nothing in
// a word is read as an operator; [terms] leaves only letters and digits
// anyway) and OR-ed, like [ftsQuery] for FTS5.
func pgQuery(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteByte('\'')
		b.WriteString(tsQuote.Replace(w))
		b.WriteByte('\'')
	}
	return b.String()
}

func (b *postgresBackend) Search(ctx context.Context, tier string, sc scopeKey, q *query, f filter, newest bool, limit int, now int64) ([]scored, error) {
	var a pgArgs
	var where strings.Builder
	t := tableOf(tier)
	if q != nil {
		where.WriteString(`t.fts @@ to_tsquery('` + pgFTSConfig + `', ` + a.add(pgQuery(q.words)) + `) AND ` + pgScope(&a, sc, now))
		if !pgFilter(f, &where, &a) {
			return nil, nil
		}
		cands := `SELECT ` + candidateCols(q) + ` FROM ` + t + ` t WHERE ` + where.String()
		return rankText(ctx, b.db, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, tier, q, newest, limit,
			func(tx *sql.Tx) (*sql.Rows, error) { return tx.QueryContext(ctx, cands, a...) },
			func(tx *sql.Tx, ids []int64) (*sql.Rows, error) {
				return tx.QueryContext(ctx, `SELECT `+selectCols+` FROM `+t+` t WHERE t.id = ANY($1::int8[])`, ids)
			})
	}
	where.WriteString(pgScope(&a, sc, now))
	if !pgFilter(f, &where, &a) {
		return nil, nil
	}
	order := `t.created_at, t.id`
	if newest {
		order = `t.created_at DESC, t.id DESC`
	}
	rows, err := b.db.QueryContext(ctx, `SELECT `+selectCols+` FROM `+t+` t WHERE `+where.String()+` ORDER BY `+order+` LIMIT `+a.add(limit), a...)
	if err != nil {
		return nil, fmt.Errorf("memory: recall in %s: %w", tier, err)
	}
	return scanRecords(rows, tier)
}

func (b *postgresBackend) Forget(ctx context.Context, tier string, sc scopeKey, sel selector) (int, error) {
	var a pgArgs
	var where strings.Builder
	where.WriteString(`t.namespace = ` + a.add(sc.ns) + ` AND t.agent = ` + a.add(sc.agent))
	if len(sel.keys) > 0 {
		keys := pgKeys(sel.keys)
		if len(keys) == 0 {
			return 0, nil
		}
		where.WriteString(` AND t."key" = ANY(` + a.add(keys) + `::text[])`)
	}
	if !pgFilter(filter{tags: sel.tags}, &where, &a) {
		return 0, nil
	}
	if sel.updatedBefore != 0 {
		where.WriteString(` AND t.updated_at <= ` + a.add(sel.updatedBefore))
	}
	res, err := b.db.ExecContext(ctx, `DELETE FROM `+tableOf(tier)+` AS t WHERE `+where.String(), a...)
	if err != nil {
		return 0, fmt.Errorf("memory: forget in %s: %w", tier, err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func (b *postgresBackend) Stats(ctx context.Context, tier string, sc scopeKey, now int64) (int, int, error) {
	var a pgArgs
	var n, bytes int
	// sum(bigint) is numeric in PostgreSQL; the cast keeps it an integer.
	err := b.db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(t.size), 0)::int8 FROM `+tableOf(tier)+` t WHERE `+pgScope(&a, sc, now), a...).Scan(&n, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("memory: stats of %s: %w", tier, err)
	}
	return n, bytes, nil
}

func (b *postgresBackend) Collect(ctx context.Context, now int64) (int, error) {
	total := 0
	for _, t := range []string{"memory_semantic", "memory_episodic"} {
		res, err := b.db.ExecContext(ctx, `DELETE FROM `+t+` WHERE expires_at <> 0 AND expires_at <= $1`, now)
		if err != nil {
			return total, fmt.Errorf("memory: collecting expired entries of %s: %w", t, err)
		}
		n, _ := res.RowsAffected()
		total += int(n)
	}
	return total, nil
}
