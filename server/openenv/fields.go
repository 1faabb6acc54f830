package openenv

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// member is one key of a JSON object and its raw value.
type member struct {
	key string
	val json.RawMessage
}

// members splits a JSON object into its top-level members, in order; ok is
// false when b is not valid JSON (in UTF-8) or not an object. It checks b with
// json.Valid and then only tracks strings and nesting: on the step path a
// map decode of every frame and of its data cost a tenth of a round trip
// (docs/PERFORMANCE.md, The OpenEnv face). Values are slices of b.
func members(b []byte) ([]member, bool) {
	b = bytes.TrimSpace(b)
	// Invalid UTF-8 is not JSON text (Python's json, OpenEnv's, refuses it).
	if len(b) < 2 || b[0] != '{' || !utf8.Valid(b) || !json.Valid(b) {
		return nil, false
	}
	out := make([]member, 0, 4)
	i := skipSpace(b, 1)
	if b[i] == '}' {
		return out, true
	}
	for {
		end := stringEnd(b, i)
		key := b[i+1 : end]
		var k string
		if bytes.IndexByte(key, '\\') >= 0 {
			if json.Unmarshal(b[i:end+1], &k) != nil {
				return nil, false
			}
		} else {
			k = string(key)
		}
		i = skipSpace(b, end+1) + 1 // past ':'
		i = skipSpace(b, i)
		vend := valueEnd(b, i)
		out = append(out, member{key: k, val: b[i:vend]})
		i = skipSpace(b, vend)
		if b[i] == '}' {
			return out, true
		}
		i = skipSpace(b, i+1) // past ','
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index of the closing quote of the string at i.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return len(b) - 1
}

// valueEnd returns the index just past the (valid) JSON value at i.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i) + 1
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j)
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j
}

// get returns the last value of key (JSON objects' duplicate keys: the
// last wins, as in Python's json).
func get(ms []member, key string) (json.RawMessage, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return ms[i].val, true
		}
	}
	return nil, false
}
