package memory

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

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
// with OR, so an entry matching any word is a candidate for the score to
// rank.
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

// satK is the saturation constant of the score: one occurrence of a query
// word counts 1/(1+satK) = 2/3 of that word's share, two 0.8, three 6/7.
const satK = 0.5

// A matcher scores entries against one recall query (docs/DECISIONS.md,
// Capability gaps users hit): the score is the mean over the query's
// distinct word stems of tf/(tf+satK), tf being how often the stem occurs in
// the entry's key, text and tags. It depends only on the entry and the
// query — not on the other entries, the tier or the store — so a min_score
// keeps the same entries in every recall and on every backend. An entry with
// every query word once scores 2/3, one with half of them once 1/3.
//
// Recall scores every match, so counting is the hot path: the text is read
// once into words as [terms] splits them, a word that cannot start with a
// query stem's first letter is skipped uncopied, and only a word that
// begins with a stem's head ([stemHead]) is stemmed, once per recall. A
// matcher is used by one goroutine.
type matcher struct {
	stems []string       // distinct stems of the query's words, in query order
	index map[string]int // the position of each stem in stems
	// heads holds stemHead of every stem, headLens their lengths: a word
	// is stemmed only if one of its prefixes of those lengths is a head, a
	// few lookups whatever the number of stems (a query may have hundreds).
	heads    map[string]bool
	headLens []int
	// firstASCII and firstOther hold the first rune of every head; starts
	// the ASCII ones in both cases (countASCII).
	firstASCII [utf8.RuneSelf]bool
	firstOther map[rune]bool
	starts     []byte
	tf         []int  // occurrences of each stem in the entry being scored
	word       []byte // the word being read, lower-cased
	// seen maps the words looked up so far (those starting with a head's
	// first rune) to the index of their stem in stems, or -1: they are
	// mostly the query's own, met again in every candidate. At most
	// maxSeen are kept.
	seen map[string]int
}

// maxSeen bounds a matcher's memory of stemmed words.
const maxSeen = 1024

func newMatcher(words []string) *matcher {
	m := &matcher{index: map[string]int{}, heads: map[string]bool{}, firstOther: map[rune]bool{}, seen: map[string]int{}}
	for _, w := range words {
		st := stem(w)
		if _, dup := m.index[st]; dup {
			continue
		}
		m.index[st] = len(m.stems)
		m.stems = append(m.stems, st)
		h := stemHead(st)
		if !m.heads[h] {
			m.heads[h] = true
			if !slices.Contains(m.headLens, len(h)) {
				m.headLens = append(m.headLens, len(h))
			}
		}
		switch first, _ := utf8.DecodeRuneInString(h); {
		case first >= utf8.RuneSelf:
			m.firstOther[first] = true
		case !m.firstASCII[first]:
			m.firstASCII[first] = true
			m.starts = append(m.starts, byte(first))
			if up := unicode.ToUpper(first); up != first {
				m.starts = append(m.starts, byte(up))
			}
		}
	}
	m.tf = make([]int, len(m.stems))
	return m
}

// isFirst reports whether a head begins with r.
func (m *matcher) isFirst(r rune) bool {
	if r < utf8.RuneSelf {
		return m.firstASCII[r]
	}
	return m.firstOther[r]
}

// stemHead is what every word with the stem st begins with: st without its
// last two runes, and never less than its first rune. The English stemmer
// keeps a word's first letter, and the stem it returns is a prefix of the
// word followed by at most two runes the word does not have there (y
// turned to i, an e put back, a suffix replaced: "crying" → "cri",
// "hoping" → "hope", "dying" → "die"); TestStemHead holds it to that.
func stemHead(st string) string {
	end := len(st)
	for range 2 {
		_, n := utf8.DecodeLastRuneInString(st[:end])
		end -= n
	}
	if _, first := utf8.DecodeRuneInString(st); end < first {
		end = first
	}
	return st[:end]
}

// scoreEntry is the score of an entry with this key, text and tags.
func (m *matcher) scoreEntry(key, body string, tags []string) float64 {
	clear(m.tf)
	m.count(key)
	m.count(body)
	for _, t := range tags {
		m.count(t)
	}
	return m.result()
}

// scoreText is the score of an entry whose key, text and tags are joined
// in s by separators (a space, or tagSet's), as the stores read them.
func (m *matcher) scoreText(s string) float64 {
	clear(m.tf)
	m.count(s)
	return m.result()
}

func (m *matcher) result() float64 {
	if len(m.tf) == 0 {
		return 0
	}
	var sum float64
	for _, tf := range m.tf {
		if tf > 0 {
			sum += float64(tf) / (float64(tf) + satK)
		}
	}
	return sum / float64(len(m.tf))
}

// count adds the occurrences of the query's stems in s, splitting and
// lower-casing it exactly as terms does (strings.ToLower, then runs of
// letters and digits; invalid UTF-8 is a separator). A word whose first
// letter starts no head is skipped without being copied.
func (m *matcher) count(s string) {
	if isASCII(s) {
		m.countASCII(s)
		return
	}
	for i := 0; i < len(s); {
		r, n := rune(s[i]), 1
		if r < utf8.RuneSelf {
			if r = rune(asciiWord[r]); r == 0 {
				i++
				continue
			}
		} else if r, n = wordRune(s[i:]); r < 0 {
			i += n
			continue
		}
		if !m.isFirst(r) {
			i = skipWord(s, i+n)
			continue
		}
		m.word = utf8.AppendRune(m.word[:0], r)
		for i += n; i < len(s); i += n {
			if r, n = rune(s[i]), 1; r < utf8.RuneSelf {
				r = rune(asciiWord[r])
			} else {
				r, n = wordRune(s[i:])
			}
			if r <= 0 {
				break
			}
			m.word = utf8.AppendRune(m.word, r)
		}
		m.endWord()
	}
}

// countASCII is count for a text of ASCII only, whose words start with
// one of the bytes m.starts lists (the first letter of each head, in both
// cases): those bytes are looked for (strings.IndexByte) instead of every
// byte being read.
func (m *matcher) countASCII(s string) {
	for _, b := range m.starts {
		for i := 0; i < len(s); {
			j := strings.IndexByte(s[i:], b)
			if j < 0 {
				break
			}
			if i += j; i > 0 && asciiWord[s[i-1]] != 0 {
				i++ // inside a word
				continue
			}
			m.word = m.word[:0]
			for ; i < len(s) && asciiWord[s[i]] != 0; i++ {
				m.word = append(m.word, asciiWord[s[i]])
			}
			m.endWord()
		}
	}
}

// isASCII reports whether s holds ASCII only.
func isASCII(s string) bool {
	for ; len(s) >= 8; s = s[8:] {
		if binary.LittleEndian.Uint64([]byte(s[:8]))&0x8080808080808080 != 0 {
			return false
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// wordRune decodes the first rune of s, which is not ASCII, and returns it
// lower-cased, or -1 if it is no letter or digit (as is invalid UTF-8), and
// its length.
func wordRune(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if r = unicode.ToLower(r); unicode.IsLetter(r) || unicode.IsDigit(r) {
		return r, n
	}
	return -1, n
}

// skipWord returns where the word that goes on at s[i:] ends.
func skipWord(s string, i int) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiWord[c] == 0 {
				return i
			}
			i++
			continue
		}
		r, n := wordRune(s[i:])
		if r < 0 {
			return i
		}
		i += n
	}
	return i
}

// asciiWord maps an ASCII byte to itself lower-cased if it is a letter or
// a digit, else to 0.
var asciiWord = func() (t [utf8.RuneSelf]byte) {
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c
	}
	for c := byte('a'); c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = c, c
	}
	return t
}()

// endWord counts the word read, if it has a query stem.
func (m *matcher) endWord() {
	w := m.word
	i, ok := m.seen[string(w)]
	if !ok {
		i = m.stemIndex(w)
		if len(m.seen) < maxSeen {
			m.seen[string(w)] = i
		}
	}
	if i >= 0 {
		m.tf[i]++
	}
}

// stemIndex is the position in stems of w's stem, or -1; w is stemmed only
// if it begins with a head.
func (m *matcher) stemIndex(w []byte) int {
	for _, n := range m.headLens {
		if n <= len(w) && m.heads[string(w[:n])] {
			if i, ok := m.index[stem(string(w))]; ok {
				return i
			}
			return -1
		}
	}
	return -1
}
