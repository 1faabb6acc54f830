package inspector

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	"github.com/aephost/aep/server/inspect"
)

// redacted replaces what a page must never be shown.
const redacted = "[redacted]"

// bearerFields are the fields whose values are always replaced, whatever
// they hold: they carry tokens and transport ids by definition, as in a
// trajectory record (schemas/records/trajectory.json).
var bearerFields = map[string]bool{"auth_token": true, "session_id": true, "session_ids": true, "token": true}

// minSecret is the shortest value treated as a secret, as the kernel's
// server.MinSecretBytes: a shorter one would match ordinary words.
const minSecret = 8

// redactor cuts secrets out of messages. It holds the host's secrets at
// one generation and the extra values a message carries (inspect.Message
// Known); it is used by one goroutine.
type redactor struct {
	host   inspect.Host
	gen    uint64
	have   bool
	values []string
	seen   map[string]bool
	hashes map[[32]byte]bool
	// rep replaces values plus the extra values of the last message;
	// repKnown is that list.
	rep      *strings.Replacer
	repKnown []string
}

func newRedactor(h inspect.Host) *redactor { return &redactor{host: h} }

// refresh reads the host's secrets again; called once per batch of
// messages, so a secret declared since is cut from the next batch.
func (r *redactor) refresh() {
	s := r.host.Secrets()
	if r.have && s.Gen == r.gen {
		return
	}
	r.have, r.gen = true, s.Gen
	// A secret the host forgot (a session that ended, its declared
	// secrets gone) stays cut for the page's life: the messages queued
	// for it may still hold it.
	if r.seen == nil {
		r.seen = map[string]bool{}
		r.hashes = map[[32]byte]bool{}
	}
	if len(r.seen)+len(s.Values) > maxRemembered {
		r.seen, r.values = map[string]bool{}, nil
	}
	for _, v := range s.Values {
		if !r.seen[v] {
			r.seen[v] = true
			r.values = append(r.values, v)
		}
	}
	for _, h := range s.TenantHashes {
		r.hashes[h] = true
	}
	r.rep, r.repKnown = nil, nil
}

// maxRemembered bounds the secrets one page's redactor remembers beyond
// the host's current ones.
const maxRemembered = 1 << 20

// replacer returns the replacer of the host's secrets and known.
func (r *redactor) replacer(known []string) *strings.Replacer {
	if r.rep != nil && sameList(r.repKnown, known) {
		return r.rep
	}
	var pairs []string
	seen := map[string]bool{}
	// Longest first: a secret that contains another is cut whole.
	all := append(append([]string(nil), r.values...), known...)
	sortByLenDesc(all)
	for _, v := range all {
		if len(v) < minSecret || seen[v] {
			continue
		}
		seen[v] = true
		pairs = append(pairs, v, redacted)
	}
	r.rep, r.repKnown = strings.NewReplacer(pairs...), known
	return r.rep
}

func sameList(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return &a[0] == &b[0]
}

func sortByLenDesc(s []string) {
	slices.SortFunc(s, func(a, b string) int { return len(b) - len(a) })
}

// line returns a JSON message with every secret cut out: the bearer
// fields at any depth, every known value wherever it occurs in a key or a
// string, every word that is a tenant's secret by its hash, and any
// base64 string whose bytes hold one of those. A line that is not JSON
// comes back as a JSON string, redacted the same way.
func (r *redactor) line(line []byte, known []string) json.RawMessage {
	rep := r.replacer(known)
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		out, _ := json.Marshal(r.str(string(line), rep))
		return out
	}
	out, err := json.Marshal(r.walk(v, rep))
	if err != nil {
		out, _ = json.Marshal(redacted)
	}
	return out
}

func (r *redactor) walk(v any, rep *strings.Replacer) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if bearerFields[k] {
				out[k] = redacted
				continue
			}
			out[r.str(k, rep)] = r.walk(e, rep)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = r.walk(e, rep)
		}
		return x
	case string:
		return r.str(x, rep)
	}
	return v
}

// str redacts one string.
func (r *redactor) str(s string, rep *strings.Replacer) string {
	if len(s) < minSecret {
		return s
	}
	s = rep.Replace(s)
	s = r.tenantWords(s)
	if len(s) >= 12 && !strings.Contains(s, redacted) {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) >= minSecret {
			d := string(b)
			if rep.Replace(d) != d || r.tenantWords(d) != d {
				return redacted
			}
		}
	}
	return s
}

// tenantWords replaces each tenant's secret in s that stands as a word,
// or as a run of a word's parts: the host holds only the secrets' hashes,
// so each candidate is hashed. A word is a run of the characters a token
// is made of; its parts are split at - _ . / : + = ~, so "id-<secret>",
// "<secret>.txt" and "/etc/<secret>" are found. A secret glued to other
// letters is not (docs/inspector.md, What the page never shows).
func (r *redactor) tenantWords(s string) string {
	if len(r.hashes) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !wordByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && wordByte(s[j]) {
			j++
		}
		if j-i >= minSecret {
			for _, m := range r.secretRuns(s[i:j]) {
				b.WriteString(s[last : i+m[0]])
				b.WriteString(redacted)
				last = i + m[1]
			}
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// maxParts bounds the parts of one word that are tried (their runs are
// hashed: parts² / 2 hashes).
const maxParts = 24

// secretRuns returns the [start, end) ranges of w that are tenants'
// secrets, in order and apart, the longest first where they overlap.
func (r *redactor) secretRuns(w string) [][2]int {
	starts, ends := []int{0}, []int{}
	for k := 0; k < len(w) && len(starts) < maxParts; k++ {
		if partSep(w[k]) {
			ends = append(ends, k)
			starts = append(starts, k+1)
		}
	}
	ends = append(ends, len(w))
	var out [][2]int
	from := 0
	for _, a := range starts {
		if a < from {
			continue
		}
		for k := len(ends) - 1; k >= 0; k-- {
			z := ends[k]
			if z-a < minSecret {
				break
			}
			if r.hashes[sha256.Sum256([]byte(w[a:z]))] {
				out = append(out, [2]int{a, z})
				from = z
				break
			}
		}
	}
	return out
}

func partSep(c byte) bool {
	return c == '-' || c == '_' || c == '.' || c == '/' || c == ':' || c == '+' || c == '=' || c == '~'
}

// wordByte says whether c may be part of a token: letters, digits and
// the punctuation of base64, base32, hex and URL-safe tokens.
func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '~' || c == '+' || c == '/' || c == '=' || c == ':' || c >= 0x80
}
