package wire

import "fmt"

// Shape is the nested part of a schema that decoding into Go values cannot
// check by itself: required keys of objects inside the message, and keys
// (or array items) whose schema does not allow null, which decoding would
// read as absent. The generator emits one only for messages that have such
// keys.
type Shape struct {
	Required []string
	// NotNull lists this object's keys whose value may not be null.
	NotNull []string
	// ItemNotNull says this array's items may not be null.
	ItemNotNull bool
	Props       map[string]*Shape
	Items       *Shape
}

func (s *Shape) notNull(key string) bool {
	for _, k := range s.NotNull {
		if k == key {
			return true
		}
	}
	return false
}

// isNull reports whether the value at w.i is the literal null.
func (w *walker) isNull() bool {
	return w.i+4 <= len(w.b) && string(w.b[w.i:w.i+4]) == "null"
}

// checkShape walks an already scanned line along shape.
func checkShape(line []byte, shape *Shape) error {
	w := walker{b: line}
	w.ws()
	return w.check(shape, "")
}

type walker struct {
	b []byte
	i int
}

func (w *walker) ws() {
	for w.i < len(w.b) && (w.b[w.i] == ' ' || w.b[w.i] == '\t' || w.b[w.i] == '\n' || w.b[w.i] == '\r') {
		w.i++
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// check consumes one value at w.i, checking it against shape when it is an
// object or array; values of other kinds are left to the decoder.
func (w *walker) check(shape *Shape, path string) error {
	if shape == nil || w.i >= len(w.b) {
		w.skip()
		return nil
	}
	switch w.b[w.i] {
	case '{':
		w.i++
		seen := make(map[string]bool, len(shape.Required))
		for {
			w.ws()
			if w.b[w.i] == '}' {
				w.i++
				break
			}
			if w.b[w.i] == ',' {
				w.i++
				continue
			}
			ks := w.i
			w.skip()
			key := unquote(w.b[ks+1 : w.i-1])
			seen[key] = true
			w.ws()
			w.i++ // ':'
			w.ws()
			if w.isNull() && shape.notNull(key) {
				return &FieldError{Field: join(path, key), Reason: "must not be null"}
			}
			if err := w.check(shape.Props[key], join(path, key)); err != nil {
				return err
			}
		}
		for _, r := range shape.Required {
			if !seen[r] {
				f := join(path, r)
				return &FieldError{Field: f, Reason: "required field is missing"}
			}
		}
	case '[':
		w.i++
		for n := 0; ; {
			w.ws()
			if w.b[w.i] == ']' {
				w.i++
				break
			}
			if w.b[w.i] == ',' {
				w.i++
				continue
			}
			if shape.ItemNotNull && w.isNull() {
				return &FieldError{Field: fmt.Sprintf("%s[%d]", path, n), Reason: "must not be null"}
			}
			if err := w.check(shape.Items, fmt.Sprintf("%s[%d]", path, n)); err != nil {
				return err
			}
			n++
		}
	default:
		w.skip()
	}
	return nil
}

// skip consumes one value of a line that Scan has already accepted.
func (w *walker) skip() {
	if w.i >= len(w.b) {
		return
	}
	switch w.b[w.i] {
	case '"':
		w.i++
		for w.b[w.i] != '"' {
			if w.b[w.i] == '\\' {
				w.i++
			}
			w.i++
		}
		w.i++
	case '{', '[':
		depth := 0
		for {
			switch w.b[w.i] {
			case '"':
				w.skip()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.i++
			if depth == 0 {
				return
			}
		}
	default:
		for w.i < len(w.b) {
			switch w.b[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			w.i++
		}
	}
}
