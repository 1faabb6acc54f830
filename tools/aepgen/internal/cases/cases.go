// Package cases reads the accept/reject cases of aepgen's fixtures
// (tools/aepgen/testdata/fixtures/<name>.cases): whole agent lines that the
// code generated from the fixture schemas must accept or reject. Two tests
// read them: tools/aepgen checks that every keyword of its table that makes
// a check has cases, and tools/aepgen/fixtures runs them through the
// generated registry and a stock JSON Schema validator.
//
// A case is one line of the file:
//
//	accept <keyword>[,<keyword>…] <line> [=> <body>]
//	reject <keyword> <field> <line>
//
// <line> is one JSON object, an agent's whole message. <body>, when given,
// is the JSON the decoded message marshals to (what defaults filled in).
// <field> is the field path the rejection names (detail.field, as
// "path[1].x"), or "-" for an error that names no field. Blank lines and
// lines starting with # are comments.
package cases

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Case is one accept or reject case.
type Case struct {
	// Pos is "file:line", for test names and failures.
	Pos      string
	Accept   bool
	Keywords []string
	// Field is the path a rejection names; "" for an error without one.
	Field string
	// Line is the agent's message, byte for byte as written.
	Line []byte
	// Body is the JSON an accepted line decodes to, or nil when not stated.
	Body []byte
}

// Read parses a cases file.
func Read(path string) ([]Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Case
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		c, err := parse(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		c.Pos = fmt.Sprintf("%s:%d", path, n)
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func parse(text string) (Case, error) {
	var c Case
	verb, rest, _ := strings.Cut(text, " ")
	kws, rest, _ := strings.Cut(rest, " ")
	if kws == "" {
		return c, fmt.Errorf("a case names the keywords it shows")
	}
	c.Keywords = strings.Split(kws, ",")
	switch verb {
	case "accept":
		c.Accept = true
	case "reject":
		if len(c.Keywords) != 1 {
			return c, fmt.Errorf("a rejection names the one keyword it breaks")
		}
		var field string
		field, rest, _ = strings.Cut(rest, " ")
		if field != "-" {
			c.Field = field
		}
	default:
		return c, fmt.Errorf("a case starts with accept or reject, not %q", verb)
	}
	// The line ends where its JSON object ends; json.RawMessage keeps its
	// bytes (duplicate keys, 7.0, 1e999 stay as written).
	dec := json.NewDecoder(strings.NewReader(rest))
	var line json.RawMessage
	if err := dec.Decode(&line); err != nil {
		return c, fmt.Errorf("the message is not one JSON value: %w", err)
	}
	if len(line) == 0 || line[0] != '{' {
		return c, fmt.Errorf("the message must be a JSON object")
	}
	c.Line = []byte(strings.TrimSpace(rest[:dec.InputOffset()]))
	tail := strings.TrimSpace(rest[dec.InputOffset():])
	switch {
	case tail == "":
	case c.Accept && strings.HasPrefix(tail, "=>"):
		body := strings.TrimSpace(strings.TrimPrefix(tail, "=>"))
		if !json.Valid([]byte(body)) {
			return c, fmt.Errorf("the decoded body after => is not JSON")
		}
		c.Body = []byte(body)
	default:
		return c, fmt.Errorf("unexpected text after the message: %q", tail)
	}
	return c, nil
}
