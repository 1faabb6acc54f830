// Package configcheck checks a host configuration file against the JSON
// Schemas of schemas/config/: the file's own sections against kernel.json
// and each plugin's `config` against its module's schema. It reports
// every mistake with the file, line and dotted key it is at, which strict
// YAML decoding alone cannot do, and expands ${NAME} references in the
// file's values first. The kernel (server.ParseConfig) runs it before it
// decodes a file, so `aep config validate` and `aep serve` refuse the same
// files with the same messages.
package configcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one mistake in a configuration file.
type Problem struct {
	File string
	// Line is the line of the key (or list element) at fault; 0 when the
	// key is not in the file (a default it leads to is at fault).
	Line int
	// Key is the dotted path of the offending key from the top of the
	// file, e.g. plugins[0].config.servers[1].comand; empty for the file
	// as a whole.
	Key     string
	Message string
}

// At is a problem at the dotted key, not yet placed in a file: checks
// outside this package return it and [Document.Place] adds file and line.
func At(key, format string, args ...any) Problem {
	return Problem{Key: key, Message: fmt.Sprintf(format, args...)}
}

func (p Problem) Error() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", p.File, p.Line)
	case p.File != "":
		b.WriteString(p.File + ": ")
	case p.Line > 0:
		fmt.Fprintf(&b, "config:%d: ", p.Line)
	default:
		b.WriteString("config: ")
	}
	if p.Key != "" {
		b.WriteString(p.Key + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Is lets callers test for configuration problems with errors.Is.
func (p Problem) Is(target error) bool { return target == ErrProblems }

// Problems is every problem found in one file, in line order; it is an error.
type Problems []Problem

func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// ErrProblems is matched by errors.Is on a [Problem] or [Problems] value.
var ErrProblems = errors.New("config does not match its schema")

// Is lets callers test for schema problems with errors.Is.
func (ps Problems) Is(target error) bool { return target == ErrProblems }

// Document is a parsed configuration file, its ${NAME} references expanded.
type Document struct {
	// File names the file in messages ("" for text without a file).
	File string
	// Root is the document's top node (a mapping in a valid file); nil
	// for a file without content.
	Root *yaml.Node
}

// Parse reads one YAML document and expands the ${NAME} references of its
// values (expand.go). A syntax error, a second document or a reference to
// an unset variable is a [Problems] error.
func Parse(file string, data []byte) (*Document, error) {
	d := &Document{File: file}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		return nil, Problems{syntaxProblem(file, err)}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, Problems{{File: file, Line: next.Line, Message: "a second YAML document; a configuration file is one document"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Problems{syntaxProblem(file, err)}
	}
	if len(doc.Content) > 0 {
		d.Root = doc.Content[0]
	}
	if probs := expand(d); len(probs) > 0 {
		return nil, sortProblems(probs)
	}
	return d, nil
}

// syntaxProblem turns yaml.v3's "yaml: line N: …" into a problem at line N.
func syntaxProblem(file string, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if n, rest, ok := strings.Cut(msg, ": "); ok {
		if _, e := fmt.Sscanf(n, "line %d", &line); e == nil {
			msg = rest
		}
	}
	return Problem{File: file, Line: line, Message: "YAML: " + msg}
}

// Place gives every [Problem] in err (alone, in [Problems], or joined
// with errors.Join) this document's file and the line of its key, and
// returns them as one [Problems] in line order. Errors that are not
// problems are kept as they are, after the problems.
func (d *Document) Place(err error) error {
	if err == nil {
		return nil
	}
	if d == nil {
		d = &Document{} // no file: keys without lines
	}
	var probs Problems
	var others []error
	var walk func(error)
	walk = func(e error) {
		switch v := e.(type) {
		case Problem:
			probs = append(probs, d.place(v))
		case *Problem:
			probs = append(probs, d.place(*v))
		case Problems:
			for _, p := range v {
				probs = append(probs, d.place(p))
			}
		case interface{ Unwrap() []error }:
			for _, inner := range v.Unwrap() {
				walk(inner)
			}
		default:
			others = append(others, e)
		}
	}
	walk(err)
	if len(probs) == 0 {
		return err
	}
	probs = sortProblems(probs)
	if len(others) == 0 {
		return probs
	}
	return errors.Join(append([]error{probs}, others...)...)
}

func (d *Document) place(p Problem) Problem {
	if p.File == "" {
		p.File = d.File
	}
	if p.Line == 0 {
		p.Line = d.Line(p.Key)
	}
	return p
}

// Line is the line of the dotted key in the document (its nearest
// ancestor's when the key is not written), or 0.
func (d *Document) Line(key string) int {
	if d == nil || d.Root == nil {
		return 0
	}
	line, _ := locate(d.Root, pointer(key))
	return line
}

// pointer turns a dotted key (plugins[0].config.servers[1].id) into a
// JSON pointer (/plugins/0/config/servers/1/id).
func pointer(key string) string {
	var b strings.Builder
	for _, part := range strings.Split(key, ".") {
		if part == "" {
			continue
		}
		name, idx, _ := strings.Cut(part, "[")
		if name != "" {
			b.WriteString("/" + escape(name))
		}
		for idx != "" {
			n, rest, _ := strings.Cut(idx, "]")
			b.WriteString("/" + n)
			idx = strings.TrimPrefix(rest, "[")
		}
	}
	return b.String()
}

func sortProblems(ps Problems) Problems {
	// Stable: problems of one line keep the order they were found in.
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
	return ps
}

// Check parses a configuration file and checks it against its schemas:
// [Parse], then [Document.Check].
func Check(file string, data []byte) error {
	d, err := Parse(file, data)
	if err != nil {
		return err
	}
	return d.Check()
}
