package configcheck

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// durationHint is what every refused duration is told.
const durationHint = "a duration: a number with a unit (ns, us, ms, s, m, h), such as 30s, 5m or 1h30m"

// message words one failure for an operator: what was found, what is
// wanted, and for an unknown key the known key it is closest to. A
// secret's value (writeOnly) is never repeated.
func (s *schema) message(f failure, val *yaml.Node) string {
	sch := s.at(f.pointer)
	e := f.err
	switch e.Keyword {
	case "additionalProperties":
		name := unescape(f.pointer[strings.LastIndex(f.pointer, "/")+1:])
		msg := "unknown key " + strconv.Quote(name)
		parent := f.pointer[:strings.LastIndex(f.pointer, "/")]
		if near := closest(name, s.keys(parent)); near != "" {
			msg += "; did you mean " + near + "?"
		}
		return msg
	case "required":
		return "missing: this key is required"
	case "type":
		want, _ := e.Params["expected"].(string)
		if isDuration(sch) {
			return "want " + durationHint + ", got " + s.describe(f.pointer, val)
		}
		return "want " + typeWords(want) + ", got " + s.describe(f.pointer, val)
	case "enum":
		var allowed []string
		if sch != nil {
			for _, v := range sch.Enum {
				allowed = append(allowed, fmt.Sprint(v))
			}
		}
		return s.quoteAt(f.pointer, val) + " is not allowed; want one of: " + strings.Join(allowed, ", ")
	case "minimum":
		return fmt.Sprintf("want at least %v, got %s", e.Params["minimum"], s.quoteAt(f.pointer, val))
	case "maximum":
		return fmt.Sprintf("want at most %v, got %s", e.Params["maximum"], s.quoteAt(f.pointer, val))
	case "exclusiveMinimum":
		return fmt.Sprintf("want more than %v, got %s", e.Params["exclusive_minimum"], s.quoteAt(f.pointer, val))
	case "exclusiveMaximum":
		return fmt.Sprintf("want less than %v, got %s", e.Params["exclusive_maximum"], s.quoteAt(f.pointer, val))
	case "minLength":
		return "must not be empty"
	case "pattern":
		switch {
		case isDuration(sch):
			return s.quoteAt(f.pointer, val) + " is not " + durationHint
		case sch != nil && sch.PatternHint != "":
			return s.quoteAt(f.pointer, val) + ": want " + sch.PatternHint
		}
		return s.quoteAt(f.pointer, val) + " does not match the pattern " + fmt.Sprint(e.Params["pattern"])
	}
	return e.Error()
}

// typeWords names a JSON Schema type as a YAML writer knows it.
func typeWords(t string) string {
	switch t {
	case "object":
		return "a mapping (key: value lines)"
	case "array":
		return "a list"
	case "string":
		return "a string"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	case "boolean":
		return "true or false"
	}
	return t
}

// describe says what a YAML value is, with the value unless it is secret.
func (s *schema) describe(pointer string, n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	kind := "the string"
	switch n.ShortTag() {
	case "!!int", "!!float":
		kind = "the number"
	case "!!bool":
		kind = "the boolean"
	case "!!null":
		return "nothing"
	}
	if s.secret(pointer) {
		return strings.TrimPrefix(kind, "the ") + " (not shown: a secret)"
	}
	if kind == "the string" {
		return kind + " " + strconv.Quote(n.Value)
	}
	return kind + " " + n.Value
}

// quoteAt shows a value as written, or that it is a secret.
func (s *schema) quoteAt(pointer string, n *yaml.Node) string {
	if n == nil {
		return "the value"
	}
	if s.secret(pointer) {
		return "the value (not shown: a secret)"
	}
	if n.Kind != yaml.ScalarNode {
		return "the value"
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// Suggest returns the known name nearest to name when it is near enough
// to be a typo, else "": for "did you mean …?" in a message.
func Suggest(name string, known []string) string {
	return closest(name, append([]string(nil), known...))
}

// closest returns the known key nearest to name when it is near enough
// to be a typo (at most 2 edits, or a third of its letters), else "".
func closest(name string, known []string) string {
	sort.Strings(known)
	best, bestD := "", -1
	for _, k := range known {
		if d := distance(name, k); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD < 0 || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
