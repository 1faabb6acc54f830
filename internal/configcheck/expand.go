package configcheck

import (
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// expand replaces ${NAME} and ${NAME:-default} in every scalar value of d
// with the environment's values, in place, and returns a problem for
// each ${NAME} whose variable is unset or empty: a configuration that
// silently lost a value (a store DSN, a token) would start as something
// else. ${NAME:-default} gives default when NAME is unset or empty
// (${NAME:-} gives the empty string); $${ writes a literal ${. A bare $
// is left alone, so values such as passwords may hold it.
//
// Only values are expanded, after the YAML is parsed: a variable's value
// stays within its key, whatever it holds (no newline or ": " in it can
// add keys), keys and comments are never expanded, and lines stay those
// of the file. An expanded unquoted value is typed anew, so
// `max_parallel: ${N:-4}` is a number; a quoted one stays a string.
func expand(d *Document) Problems {
	if d.Root == nil {
		return nil
	}
	var probs Problems
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node, key string)
	walk = func(n *yaml.Node, key string) {
		if n == nil || seen[n] {
			return // an alias's target is expanded once, where it is defined
		}
		seen[n] = true
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], join(key, n.Content[i].Value))
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, key+"["+strconv.Itoa(i)+"]")
			}
		case yaml.ScalarNode:
			if !strings.Contains(n.Value, "${") {
				return
			}
			v, missing := expandString(n.Value)
			for _, name := range missing {
				probs = append(probs, Problem{File: d.File, Line: n.Line, Key: key,
					Message: "${" + name + "} is not set (or is empty); set it, or write ${" + name + ":-value} to give a default"})
			}
			n.Value = v
			if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 && n.Style&yaml.TaggedStyle == 0 {
				n.Tag = "" // typed anew from the expanded text
			}
		}
	}
	walk(d.Root, "")
	return probs
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// expandString expands one value and names the variables it needed and
// found unset or empty.
func expandString(s string) (string, []string) {
	var b strings.Builder
	var missing []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), missing
		}
		if i > 0 && s[i-1] == '$' {
			// $${ is a literal ${.
			b.WriteString(s[:i-1] + "${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		name, def, hasDef := "", "", false
		if end > 0 {
			name, def, hasDef = strings.Cut(s[i+2:i+end], ":-")
		}
		if end < 0 || !validName(name) {
			// Not a reference (no closing brace, or not a name): kept as written.
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		switch v := os.Getenv(name); {
		case v != "":
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			missing = append(missing, name)
		}
		s = s[i+end+1:]
	}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
