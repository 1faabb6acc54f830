package memory

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// stemSuffixes are the endings the English stemmer's steps remove or
// replace (Snowball English, steps 1a to 5), and inflections that make
// them.
var stemSuffixes = []string{"", "s", "es", "ies", "ied", "sses", "ss", "us", "ed", "edly", "eed", "eedly", "ing", "ingly",
	"y", "ly", "li", "ogi", "ogy", "bli", "bly", "bility", "biliti", "ational", "tional", "ation", "ator", "alism", "aliti",
	"ality", "alli", "ally", "fulness", "ousli", "ously", "ousness", "iveness", "iviti", "ivity", "entli", "ently", "enci",
	"ency", "anci", "ancy", "abli", "ably", "izer", "ization", "ize", "izing", "alize", "icate", "iciti", "icity", "ical",
	"ically", "ful", "fully", "ness", "ative", "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment",
	"ent", "ism", "ate", "ating", "iti", "ous", "ive", "ion", "sion", "tion", "e", "l", "ll", "'s"}

// stemRoots start the words of TestStemHead: short and long, with the
// prefixes the stemmer treats apart (gener, commun, arsen), vowels, y
// and letters outside ASCII.
var stemRoots = []string{"", "a", "b", "e", "y", "i", "ab", "be", "ey", "bab", "tap", "hop", "plan", "cry", "dy", "ly",
	"ty", "sk", "spec", "gener", "commun", "arsen", "possi", "sens", "happ", "nat", "relat", "condit", "valen", "hesit",
	"digit", "conform", "radic", "feud", "rational", "generat", "fals", "sensit", "dragon", "yell", "größ", "naïv", "café"}

// TestStemHead holds the stemmer to what matcher relies on to skip words:
// every word begins with stemHead of its stem (the stem keeps the word's
// first letter and adds at most two runes of its own at the end).
func TestStemHead(t *testing.T) {
	words := []string{"dying", "lying", "tying", "skies", "skis", "idly", "gently", "ugly", "early", "only", "singly",
		"news", "howe", "atlas", "cosmos", "bias", "andes", "innings", "outings", "cannings", "herrings", "earrings",
		"proceeded", "exceeding", "succeeds", "ies", "ied", "eed", "ing", "yyy", "ÿes"}
	for _, r := range stemRoots {
		for _, s1 := range stemSuffixes {
			words = append(words, r+s1)
			for _, s2 := range []string{"s", "ly", "ing", "ed", "ness", "ity", "ation", "al", "ize", "er", "y"} {
				words = append(words, r+s1+s2)
			}
		}
	}
	for _, w := range words {
		for _, word := range terms(w) {
			if st := stem(word); !strings.HasPrefix(word, stemHead(st)) {
				t.Errorf("%q stems to %q, whose head %q it does not begin with", word, st, stemHead(st))
			}
		}
	}
}

// TestStemHeadCuts: what stemHead keeps of a stem.
func TestStemHeadCuts(t *testing.T) {
	for _, tc := range []struct{ stem, head string }{
		{"dragon", "drag"}, {"abl", "a"}, {"die", "d"}, {"go", "g"}, {"a", "a"}, {"größ", "gr"}, {"ßa", "ß"}, {"éé", "é"},
	} {
		if got := stemHead(tc.stem); got != tc.head {
			t.Errorf("stemHead(%q) = %q, want %q", tc.stem, got, tc.head)
		}
	}
}

// refScore is the score as defined (docs/DECISIONS.md, Capability gaps
// users hit), computed the plain way: split with terms, stem every word.
func refScore(query string, texts ...string) float64 {
	var stems []string
	for _, w := range queryTerms(query) {
		if st := stem(w); !slices.Contains(stems, st) {
			stems = append(stems, st)
		}
	}
	if len(stems) == 0 {
		return 0
	}
	tf := make([]int, len(stems))
	for _, s := range texts {
		for _, w := range terms(s) {
			if i := slices.Index(stems, stem(w)); i >= 0 {
				tf[i]++
			}
		}
	}
	var sum float64
	for _, n := range tf {
		if n > 0 {
			sum += float64(n) / (float64(n) + satK)
		}
	}
	return sum / float64(len(stems))
}

// checkMatcher checks that a matcher scores an entry as refScore does,
// given its fields apart (the working tier) or joined as each store reads
// them (candidateCols): SQLite's body is bodyText, PostgreSQL's pgBody.
func checkMatcher(t *testing.T, query, key, body, tag string) {
	t.Helper()
	m := newMatcher(queryTerms(query))
	tags := []string{tag}
	want := refScore(query, key, body, tag)
	content, _ := json.Marshal(body)
	pgWant := refScore(query, key, bodyText(content), tag)
	for _, c := range []struct {
		how       string
		got, want float64
	}{
		{"apart", m.scoreEntry(key, body, tags), want},
		{"joined", m.scoreText(key + " " + body + " " + tagSet(tags)), want},
		{"again", m.scoreText(key + " " + body + " " + tagSet(tags)), want},
		{"joined, PostgreSQL body", m.scoreText(key + " " + pgBody(content) + " " + tagSet(tags)), pgWant},
	} {
		if c.got != c.want {
			t.Fatalf("%s: query %q, key %q, body %q, tag %q: score %v, want %v", c.how, query, key, body, tag, c.got, c.want)
		}
	}
	for _, w := range terms(key + " " + body + " " + tag + " " + query) {
		if st := stem(w); !strings.HasPrefix(w, stemHead(st)) {
			t.Fatalf("%q stems to %q, whose head %q it does not begin with", w, st, stemHead(st))
		}
	}
}

var matcherCases = []struct{ query, key, body, tag string }{
	{"dragon", "lair", "two dragons guard the lair", ""},
	{"red dragon fire", "strong", "the red dragon breathes fire", "fire"},
	{"Rust borrow-checker", "all3", "rust borrow checker rejects the borrow that the checker sees", "rust"},
	{"GRÖßE", "k", "see foo.bar.com/some_path v1.2.3 and 3.14 for Größe", "100%"},
	{"kelvin", "k", "\u212Aelvin KELVIN kelvins", ""},          // Kelvin sign lower-cases to ASCII k
	{"istanbul", "İstanbul", "İSTANBUL istanbul", "i̇stanbul"}, // dotted capital I
	{"after", "nul", "before\x00after", ""},
	{"bad", "x", "bad\xffbad\xc3", "\xff"},
	{"dying lying", "d", "the dying swan, lying still; died", "dies"},
	{"abilities", "a", "ability able abilities", ""},
	{"generously generous", "g", "Generously, the generous generation", "gen"},
	{"a i go", "short", "a I go went GO a", "i"},
	{"zephyr", "k12300", "alpha bravo zephyr note 12300 zephyrs ZEPHYR", "bench"},
	{"naïvely", "n", "naïve naïvely NAÏVELY", ""},
}

func TestMatcherScoresAsDefined(t *testing.T) {
	for _, tc := range matcherCases {
		checkMatcher(t, tc.query, tc.key, tc.body, tc.tag)
	}
	// A query of many words (the schema allows 4,096 characters): heads
	// sharing first letters and lengths.
	var q, body strings.Builder
	for i := range 800 {
		w := string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + "ing" + strings.Repeat("s", i%3)
		q.WriteString(w + " ")
		if i%7 == 0 {
			body.WriteString(strings.ToUpper(w) + "s, " + w + " ")
		}
	}
	checkMatcher(t, q.String(), "many", body.String(), "tag")
	checkMatcher(t, q.String(), "many", body.String()+" é", "tag") // not ASCII
	// Spot values: every query word once 2/3; one word of three once 2/9.
	m := newMatcher(queryTerms("red dragon fire"))
	if got := m.scoreText("the red dragon breathes fire"); got != 2.0/3 {
		t.Errorf("every word once: %v", got)
	}
	if got := m.scoreText("a dragon sleeps"); got != 2.0/9 {
		t.Errorf("one word of three: %v", got)
	}
}

// TestMatcherRemembersBounded: the stems a matcher remembers stay within
// maxSeen, and scores stay right past it.
func TestMatcherRemembersBounded(t *testing.T) {
	m := newMatcher(queryTerms("word"))
	var b strings.Builder
	for i := range 3 * maxSeen {
		b.WriteString("words" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + " ")
	}
	text := b.String() + " words worded word"
	if got, want := m.scoreText(text), refScore("word", text); got != want {
		t.Fatalf("score %v, want %v", got, want)
	}
	if len(m.seen) > maxSeen {
		t.Fatalf("%d words remembered, over %d", len(m.seen), maxSeen)
	}
}

func FuzzMatcher(f *testing.F) {
	for _, tc := range matcherCases {
		f.Add(tc.query, tc.key, tc.body, tc.tag)
	}
	f.Fuzz(func(t *testing.T, query, key, body, tag string) {
		checkMatcher(t, query, key, body, tag)
	})
}

// BenchmarkMatcherScoreText scores a 100,000-entry corpus line as
// BenchmarkRecall100k's candidates read it (key, text, tag set).
func BenchmarkMatcherScoreText(b *testing.B) {
	m := newMatcher(queryTerms("zephyr"))
	text := "k12300 hotel kilo november quebec tango charlie foxtrot india note 12300 zephyr " + tagSet([]string{"bench"})
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		m.scoreText(text)
	}
}
