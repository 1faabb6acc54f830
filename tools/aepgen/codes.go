package main

import (
	"fmt"
	"sort"
	"strings"
)

// retryRow is one row of the retry table of errors.json: an error code, a
// detail.reason (empty for the code's own row) and whether a retry can
// succeed.
type retryRow struct {
	code, reason string
	retryable    bool
	description  string
}

// errorCatalogue is what errors.json states: the codes, the reasons and the
// retry table.
type errorCatalogue struct {
	file    *schemaFile
	codes   []string
	reasons []string
	rows    []retryRow
}

// catalogue reads errors.json: $defs/Code (enum), $defs/Reason (enum) and
// $defs/Retryable, whose allOf rows have exactly two forms:
//
//	{"if": {"properties": {"code": {"const": C}, "detail": {"properties": {"reason": {"not": {"enum": [R…]}}}}}}, "then": {"properties": {"retryable": {"const": V}}}}
//	{"if": {"required": ["detail"], "properties": {"code": {"const": C}, "detail": {"required": ["reason"], "properties": {"reason": {"const": R}}}}}, "then": …}
//
// The first is the code's row (its detail part only when the code has
// reason rows, listing exactly them); the second a reason's row. Every
// other shape fails generation.
func (g *generator) catalogue() (*errorCatalogue, error) {
	var f *schemaFile
	for _, x := range g.files {
		if x.Base == "errors" {
			f = x
		}
	}
	if f == nil {
		return nil, fmt.Errorf("no errors.json among the schema files")
	}
	c := &errorCatalogue{file: f}
	bad := func(where, why string) error {
		return fmt.Errorf("%s: %s: %s (the retry table's forms are documented in tools/aepgen/codes.go)", f.Path, where, why)
	}
	enum := func(name string) ([]string, error) {
		d := f.Defs[name]
		if d == nil || d.typeName() != "string" || len(d.Enum) == 0 {
			return nil, bad("$defs/"+name, "must be a string enum")
		}
		var out []string
		for _, e := range d.Enum {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out, nil
	}
	var err error
	if c.codes, err = enum("Code"); err != nil {
		return nil, err
	}
	if c.reasons, err = enum("Reason"); err != nil {
		return nil, err
	}
	isCode, isReason := setOf(c.codes), setOf(c.reasons)
	table := f.Defs["Retryable"]
	if table == nil || len(table.AllOf) == 0 {
		return nil, bad("$defs/Retryable", "needs allOf rows")
	}
	codeRow := map[string]int{}
	notList := map[string][]string{}
	seen := map[[2]string]bool{}
	used := map[string]bool{}
	for i, row := range table.AllOf {
		where := fmt.Sprintf("$defs/Retryable/allOf/%d", i)
		if row.If == nil || row.Then == nil || row.Else != nil || row.Description == "" {
			return nil, bad(where, "a row is if, then and a description")
		}
		codeC := row.If.Properties["code"]
		if codeC == nil || codeC.Const == nil {
			return nil, bad(where, "if needs properties.code.const")
		}
		code, _ := codeC.Const.(string)
		if !isCode[code] {
			return nil, bad(where, fmt.Sprintf("%q is not in $defs/Code", code))
		}
		ret := row.Then.Properties["retryable"]
		v, ok := any(nil), false
		if ret != nil {
			v, ok = ret.Const.(bool)
		}
		if !ok || len(row.Then.Properties) != 1 {
			return nil, bad(where, "then must be properties.retryable.const, a boolean")
		}
		r := retryRow{code: code, retryable: v.(bool), description: row.Description}
		detail := row.If.Properties["detail"]
		switch {
		case detail == nil:
			if len(row.If.Required) != 0 {
				return nil, bad(where, "a code's row requires nothing")
			}
		case len(row.If.Required) == 0:
			// The code's row, for reasons without rows of their own.
			rc := detail.Properties["reason"]
			if rc == nil || rc.Not == nil || len(rc.Not.Enum) == 0 || len(detail.Required) != 0 {
				return nil, bad(where, "a code's row names the reasons it leaves to their rows as detail.properties.reason.not.enum")
			}
			for _, e := range rc.Not.Enum {
				s, _ := e.(string)
				notList[code] = append(notList[code], s)
			}
		default:
			rc := detail.Properties["reason"]
			if strings.Join(row.If.Required, ",") != "detail" || strings.Join(detail.Required, ",") != "reason" || rc == nil || rc.Const == nil {
				return nil, bad(where, "a reason's row requires detail and detail.reason, and gives reason's const")
			}
			r.reason, _ = rc.Const.(string)
			if !isReason[r.reason] {
				return nil, bad(where, fmt.Sprintf("%q is not in $defs/Reason", r.reason))
			}
			used[r.reason] = true
		}
		key := [2]string{r.code, r.reason}
		if seen[key] {
			return nil, bad(where, fmt.Sprintf("a second row for %s %s", r.code, r.reason))
		}
		seen[key] = true
		if r.reason == "" {
			codeRow[code] = len(c.rows)
		}
		c.rows = append(c.rows, r)
	}
	for _, code := range c.codes {
		if _, ok := codeRow[code]; !ok {
			return nil, bad("$defs/Retryable", fmt.Sprintf("no row for code %s", code))
		}
		var own []string
		for _, r := range c.rows {
			if r.code == code && r.reason != "" {
				own = append(own, r.reason)
			}
		}
		if strings.Join(sortedStrings(own), ",") != strings.Join(sortedStrings(notList[code]), ",") {
			return nil, bad("$defs/Retryable", fmt.Sprintf("the row of %s must leave exactly its reason rows (%s) to them", code, strings.Join(sortedStrings(own), ", ")))
		}
	}
	for _, r := range c.reasons {
		if !used[r] {
			return nil, bad("$defs/Reason", fmt.Sprintf("reason %q has no row in $defs/Retryable", r))
		}
	}
	return c, nil
}

func setOf(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return m
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

// codes emits the error catalogue and the retry table of errors.json as Go
// for package pkg (wire).
func (g *generator) codes(pkg string) ([]byte, error) {
	c, err := g.catalogue()
	if err != nil {
		return nil, err
	}
	w := newGoFile()
	w.WriteString("// Code is a protocol error code (spec §7).\ntype Code string\n\nconst (\n")
	seen := map[string]string{}
	defaultOf := map[string]retryRow{}
	for _, r := range c.rows {
		if r.reason == "" {
			defaultOf[r.code] = r
		}
	}
	codes := sortedStrings(c.codes)
	for _, code := range codes {
		id := "Code" + camel(code)
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("codes %q and %q map to one constant", prev, code)
		}
		seen[id] = code
		fmt.Fprintf(w, "// %s: %s\n%s Code = %q\n", id, defaultOf[code].description, id, code)
	}
	w.WriteString(")\n\n// Codes lists every error code.\nvar Codes = []Code{")
	for _, code := range codes {
		fmt.Fprintf(w, "Code%s, ", camel(code))
	}
	w.WriteString("}\n\n// Reasons of detail.reason that the retry table knows (errors.json#/$defs/Reason).\nconst (\n")
	for _, r := range sortedStrings(c.reasons) {
		id := "Reason" + camel(r)
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("%q and %q map to one constant", prev, r)
		}
		seen[id] = r
		fmt.Fprintf(w, "%s = %q\n", id, r)
	}
	w.WriteString(")\n\n// Retryable reports whether retrying an error of this code without a\n// detail.reason can succeed: the spec §7 value (errors.json#/$defs/Retryable).\nfunc (c Code) Retryable() bool {\nswitch c {\ncase ")
	var yes []string
	for _, code := range codes {
		if defaultOf[code].retryable {
			yes = append(yes, "Code"+camel(code))
		}
	}
	w.WriteString(strings.Join(yes, ", "))
	w.WriteString(":\nreturn true\n}\nreturn false\n}\n\n")
	w.WriteString("// RetryableFor reports whether retrying an error of code c whose\n// detail.reason is reason (\"\" for none) can succeed: the row of the reason\n// where errors.json#/$defs/Retryable has one, else the code's row.\nfunc RetryableFor(c Code, reason string) bool {\nswitch {\n")
	rows := append([]retryRow(nil), c.rows...)
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].code != rows[j].code {
			return rows[i].code < rows[j].code
		}
		return rows[i].reason < rows[j].reason
	})
	for _, r := range rows {
		if r.reason == "" {
			continue
		}
		fmt.Fprintf(w, "case c == Code%s && reason == Reason%s:\n// %s\nreturn %v\n", camel(r.code), camel(r.reason), r.description, r.retryable)
	}
	w.WriteString("}\nreturn c.Retryable()\n}\n")
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
