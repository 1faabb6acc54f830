package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// codeInfo is one entry of x-aep-codes: spec §7's retry flag and the
// code's meaning.
type codeInfo struct {
	Retryable   bool   `json:"retryable"`
	Description string `json:"description"`
}

// errorCatalogue is the error-code catalogue: x-aep-codes of the one file
// that has it, whose $defs/Code enum lists exactly the same codes, so
// messages refer to the catalogue through "$ref": "#/$defs/Code" and a
// stock validator refuses a code outside it.
type errorCatalogue struct {
	file  *schemaFile
	codes map[string]codeInfo
}

func (g *generator) catalogue() (*errorCatalogue, error) {
	var c *errorCatalogue
	for _, f := range g.files {
		raw, ok := f.Raw["x-aep-codes"]
		if !ok {
			continue
		}
		if c != nil {
			return nil, fmt.Errorf("x-aep-codes in both %s and %s", c.file.Path, f.Path)
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		c = &errorCatalogue{file: f}
		if err := json.Unmarshal(b, &c.codes); err != nil {
			return nil, fmt.Errorf("%s: x-aep-codes: %w", f.Path, err)
		}
	}
	if c == nil {
		return nil, fmt.Errorf("no schema file has x-aep-codes")
	}
	d := c.file.Defs["Code"]
	if d == nil || d.typeName() != "string" || len(d.Enum) == 0 {
		return nil, fmt.Errorf("%s: $defs/Code must be a string enum of the codes of x-aep-codes", c.file.Path)
	}
	var enum []string
	for _, e := range d.Enum {
		s, _ := e.(string)
		enum = append(enum, s)
	}
	if strings.Join(sortedStrings(enum), ",") != strings.Join(sortedKeys(c.codes), ",") {
		return nil, fmt.Errorf("%s: $defs/Code's enum (%s) and x-aep-codes (%s) must list the same codes", c.file.Path, strings.Join(sortedStrings(enum), ", "), strings.Join(sortedKeys(c.codes), ", "))
	}
	return c, nil
}

func camel(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "_") {
		if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String()
}

// codes emits the error-code catalogue as Go constants of package pkg (wire).
func (g *generator) codes(pkg string) ([]byte, error) {
	c, err := g.catalogue()
	if err != nil {
		return nil, err
	}
	w := newGoFile()
	w.WriteString("// Code is a protocol error code (spec §7).\ntype Code string\n\nconst (\n")
	names := sortedKeys(c.codes)
	seen := map[string]string{}
	for _, code := range names {
		id := "Code" + camel(code)
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("codes %q and %q map to one constant", prev, code)
		}
		seen[id] = code
		fmt.Fprintf(w, "// %s: %s\n%s Code = %q\n", id, c.codes[code].Description, id, code)
	}
	w.WriteString(")\n\n// Codes lists every error code.\nvar Codes = []Code{")
	for _, code := range names {
		fmt.Fprintf(w, "Code%s, ", camel(code))
	}
	w.WriteString("}\n\n// Retryable reports whether retrying can succeed (spec §7 table).\nfunc (c Code) Retryable() bool {\nswitch c {\ncase ")
	var yes []string
	for _, code := range names {
		if c.codes[code].Retryable {
			yes = append(yes, "Code"+camel(code))
		}
	}
	w.WriteString(strings.Join(yes, ", "))
	w.WriteString(":\nreturn true\n}\nreturn false\n}\n")
	return w.source(c.file.Path, c.file.Hash, pkg), nil
}

// envelope emits the constants of envelope.json#/$defs/Envelope that the
// decoder enforces on every message: the protocol version (proto's const)
// and the range of ts. The decoder checks the required fields type, id,
// proto and ts by hand, so generation fails if the schema requires others.
func (g *generator) envelope(pkg string) ([]byte, error) {
	var f *schemaFile
	for _, x := range g.files {
		if x.Base == "envelope" {
			f = x
		}
	}
	if f == nil || f.Defs["Envelope"] == nil {
		return nil, fmt.Errorf("no envelope.json with $defs/Envelope among the schema files")
	}
	env := f.Defs["Envelope"]
	if strings.Join(sortedStrings(env.Required), ",") != "id,proto,ts,type" {
		return nil, fmt.Errorf("%s: Envelope must require exactly type, id, proto and ts, which the decoder checks (wire.Decode)", f.Path)
	}
	proto, _ := env.Properties["proto"].Const.(string)
	ts := env.Properties["ts"]
	if proto == "" || ts == nil || ts.Minimum == nil || ts.Maximum == nil || ts.typeName() != "number" {
		return nil, fmt.Errorf("%s: Envelope needs proto's const and ts's minimum and maximum", f.Path)
	}
	for _, p := range []string{"type", "id"} {
		if n := env.Properties[p]; n == nil || n.MinLength == nil || *n.MinLength != 1 || n.typeName() != "string" {
			return nil, fmt.Errorf("%s: Envelope's %s must be a string of minLength 1, as the decoder checks", f.Path, p)
		}
	}
	min, err := g.numberLiteral("float64", *ts.Minimum)
	if err != nil {
		return nil, err
	}
	max, err := g.numberLiteral("float64", *ts.Maximum)
	if err != nil {
		return nil, err
	}
	w := newGoFile()
	fmt.Fprintf(w, "// ProtoVersion is the protocol version every envelope carries (spec §9 rule 1).\nconst ProtoVersion = %q\n\n", proto)
	fmt.Fprintf(w, "// The range of the envelope's ts, Unix epoch seconds: a finite number, and\n// a time a clock can show.\nconst (\nMinTS = %s\nMaxTS = %s\n)\n", min, max)
	return w.source(f.Path, f.Hash, pkg), nil
}
