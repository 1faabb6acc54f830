package memory

import (
	"encoding/json"
	"strings"
	"unicode"
)

// terms splits text into lower-case words of letters and digits, the same
// way SQLite's unicode61 tokenizer does for the scripts it folds, so the
// working tier and the database agree on what a word is.
func terms(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// queryTerms returns the distinct words of a recall query.
func queryTerms(q string) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range terms(q) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// ftsQuery turns query words into an FTS5 expression: each word quoted (so
// no word is read as FTS5 syntax — AND, NEAR, column filters, `*`) and joined
// with OR, so an entry matching any word is a candidate and bm25 ranks those
// matching more and rarer words higher.
func ftsQuery(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteByte('"')
		b.WriteString(strings.ReplaceAll(w, `"`, `""`))
		b.WriteByte('"')
	}
	return b.String()
}

// bodyText is the searchable text of a content value: a JSON string's text,
// or the JSON itself (whose punctuation the tokenizer drops).
func bodyText(content json.RawMessage) string {
	if len(content) > 0 && content[0] == '"' {
		var s string
		if json.Unmarshal(content, &s) == nil {
			return s
		}
	}
	return string(content)
}

// tagSep separates tags in the tag_set column and in working-tier tag
// matching: a control character the tokenizer treats as a separator and
// that a tag filter can search for as a whole-tag boundary.
const tagSep = "\x1f"

// tagSet encodes tags as "\x1fa\x1fb\x1f" ("" for none).
func tagSet(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	return tagSep + strings.Join(tags, tagSep) + tagSep
}

// hasAllTags reports whether the tag list has every wanted tag.
func hasAllTags(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// normalise maps a raw relevance r > 0 (minus bm25 on SQLite, n × ts_rank
// on PostgreSQL, or the working tier's term-frequency sum) to (0, 1) with
// r/(1+r): monotone, so ranks are kept, and absolute — a hit's score
// depends on it and the query only, not on the other hits — so min_score
// means the same in every recall. See docs/DECISIONS.md "Memory".
func normalise(r float64) float64 {
	if r <= 0 {
		// FTS5 clamps IDF to a tiny positive value, so a match always has
		// r > 0; keep the score inside (0, 1] even if it did not.
		return 1e-9
	}
	return r / (1 + r)
}

// rawFor is the inverse of normalise: the raw relevance a min_score needs.
func rawFor(minScore float64) float64 {
	if minScore >= 1 {
		return 1e308
	}
	return minScore / (1 - minScore)
}

// workingRelevance scores a working entry against query words with a
// saturating term frequency, tf/(tf+1.2) summed over matched words (the tf
// part of BM25 with k1 = 1.2; the working tier has no corpus statistics
// worth an IDF). Zero means no word matched.
func workingRelevance(words []string, key, body string, tags []string) float64 {
	if len(words) == 0 {
		return 0
	}
	counts := map[string]int{}
	for _, t := range terms(key) {
		counts[t]++
	}
	for _, t := range terms(body) {
		counts[t]++
	}
	for _, tag := range tags {
		for _, t := range terms(tag) {
			counts[t]++
		}
	}
	var r float64
	for _, w := range words {
		if tf := float64(counts[w]); tf > 0 {
			r += tf / (tf + 1.2)
		}
	}
	return r
}
