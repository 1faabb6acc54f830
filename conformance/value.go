package conformance

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Helpers that read decoded JSON (map[string]any, []any, float64, string,
// bool, nil) by a dotted path, and compare values.

// get returns the value at a dotted path ("result.events.0.kind"): object
// keys and array indexes.
func get(v any, path string) (any, bool) {
	if path == "" {
		return v, true
	}
	for _, p := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func str(v any, path string) string {
	x, _ := get(v, path)
	s, _ := x.(string)
	return s
}

func num(v any, path string) (float64, bool) {
	x, _ := get(v, path)
	f, ok := x.(float64)
	return f, ok
}

func boolean(v any, path string) (value, ok bool) {
	x, _ := get(v, path)
	b, ok := x.(bool)
	return b, ok
}

func arr(v any, path string) []any {
	x, _ := get(v, path)
	a, _ := x.([]any)
	return a
}

func obj(v any, path string) map[string]any {
	x, _ := get(v, path)
	o, _ := x.(map[string]any)
	return o
}

func has(v any, path string) bool {
	_, ok := get(v, path)
	return ok
}

// strs returns the strings of the array at path.
func strs(v any, path string) []string {
	var out []string
	for _, x := range arr(v, path) {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// norm turns any Go value into the decoded-JSON form (map[string]any,
// []any, float64 …) by a round trip, so values given in Go compare with
// values read from the wire.
func norm(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// equal says whether two decoded JSON values are the same value.
func equal(a, b any) bool {
	ab, err1 := json.Marshal(norm(a))
	bb, err2 := json.Marshal(norm(b))
	return err1 == nil && err2 == nil && string(ab) == string(bb)
}

// holds says whether got holds want: an object holds each key of want
// with a value that holds want's; arrays hold element by element, of the
// same length; other values are equal. It is how a fixture states the
// result it expects without naming every field.
func holds(got, want any) bool {
	got, want = norm(got), norm(want)
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !holds(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !holds(g[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return equal(got, want)
	}
}

// show renders a value for a problem line, clipped.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clip(b)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
