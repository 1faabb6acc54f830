package memory

import (
	"encoding/json"
	"strings"
	"unicode"

	"github.com/kljensen/snowball/english"
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

// stem is the Snowball English stem of a lower-case word, the stemmer of
// PostgreSQL's english configuration; SQLite's porter tokenizer (the
// original Porter algorithm) agrees on regular forms (dragons → dragon).
func stem(w string) string {
	if len(w) < 3 {
		return w // the stemmer leaves short words alone; skip its set-up
	}
	return english.Stem(w, true)
}

// satK is the saturation constant of [score]: one occurrence of a query word
// counts 1/(1+satK) = 2/3 of that word's share, two 0.8, three 6/7.
const satK = 0.5

// score is the relevance of an entry to a query on the absolute 0–1 scale
// that min_score uses (docs/DECISIONS.md, Capability gaps users hit): the
// mean over the query's distinct word stems of tf/(tf+satK), tf being how
// often the stem occurs in the entry's key, text and tags. It depends only
// on the entry and the query — not on the other entries, the tier or the
// store — so a min_score keeps the same entries in every recall and on
// every backend. An entry with every query word once scores 2/3, one with
// half of them once 1/3.
func score(qstems []string, key, body string, tags []string) float64 {
	if len(qstems) == 0 {
		return 0
	}
	want := make(map[string]int, len(qstems))
	for _, q := range qstems {
		want[q] = 0
	}
	count := func(s string) {
		for _, t := range terms(s) {
			st := stem(t)
			if n, ok := want[st]; ok {
				want[st] = n + 1
			}
		}
	}
	count(key)
	count(body)
	for _, tag := range tags {
		count(tag)
	}
	var sum float64
	for _, tf := range want {
		if tf > 0 {
			sum += float64(tf) / (float64(tf) + satK)
		}
	}
	return sum / float64(len(want))
}

// queryStems returns the distinct stems of query words.
func queryStems(words []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range words {
		if st := stem(w); !seen[st] {
			seen[st] = true
			out = append(out, st)
		}
	}
	return out
}
