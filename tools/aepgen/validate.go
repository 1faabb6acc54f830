package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// validatorGen emits the bodies of Validate(): one check per keyword of the
// table, on the Go value the decoder produced. Every keyword that reaches it
// is either turned into a check or refused with an error, so the generated
// code enforces exactly what the schema states.
type validatorGen struct {
	g        *generator
	w        *goFile
	patterns []patternVar
	depth    int // loop nesting, for index variable names
}

type patternVar struct{ name, expr string }

// fieldPath is the path of a value for FieldError: a format with one %d per
// enclosing list ("parts[%d].sha256") and the index variables.
type fieldPath struct {
	format string
	args   []string
}

func pathOf(name string) fieldPath { return fieldPath{format: name} }

func (p fieldPath) index(v string) fieldPath {
	return fieldPath{format: p.format + "[%d]", args: append(append([]string(nil), p.args...), v)}
}

func (p fieldPath) key(v string) fieldPath {
	return fieldPath{format: p.format + ".%s", args: append(append([]string(nil), p.args...), v)}
}

// expr is the Go expression of the path.
func (p fieldPath) expr(w *goFile) string {
	if len(p.args) == 0 {
		return strconv.Quote(p.format)
	}
	w.use("fmt")
	return fmt.Sprintf("fmt.Sprintf(%q, %s)", p.format, strings.Join(p.args, ", "))
}

func (v *validatorGen) fail(field fieldPath, reason string) string {
	v.w.use(wirePkg)
	return fmt.Sprintf("return &wire.FieldError{Field: %s, Reason: %q}\n", field.expr(v.w), reason)
}

// def emits the checks of one struct def.
func (v *validatorGen) def(f *schemaFile, name string, n *schemaNode, gs *goStruct) (string, error) {
	where := fmt.Sprintf("%s: $defs/%s", f.Path, name)
	if n.Ref != "" {
		return "", fmt.Errorf("%s: $ref at a def is for files without messages (envelope.json)", where)
	}
	var w bytes.Buffer
	agent := v.g.agent[n]
	for _, prop := range sortedKeys(n.Properties) {
		p := n.Properties[prop]
		fld := gs.Fields[prop]
		if fld == nil {
			return "", fmt.Errorf("%s: go-jsonschema made no field for property %q", where, prop)
		}
		if p.Ref == "" && len(p.types()) == 0 {
			return "", fmt.Errorf("%s/properties/%s: no type: state it, a list of every JSON type for any value", where, prop)
		}
		body, err := v.value(f, where+"/properties/"+prop, p, "m."+fld.Name, fld.Type, pathOf(prop), agent)
		if err != nil {
			return "", err
		}
		w.WriteString(body)
	}
	c := &condGen{v: v, f: f, where: where, n: n, gs: gs}
	for i, set := range [][]*schemaNode{n.AnyOf, n.OneOf} {
		if len(set) == 0 {
			continue
		}
		s, err := c.choice(set, i == 1)
		if err != nil {
			return "", err
		}
		w.WriteString(s)
	}
	if n.If != nil || n.Then != nil || n.Else != nil {
		s, err := c.conditional(n, where)
		if err != nil {
			return "", err
		}
		w.WriteString(s)
	}
	for i, row := range n.AllOf {
		s, err := c.conditional(row, fmt.Sprintf("%s/allOf/%d", where, i))
		if err != nil {
			return "", err
		}
		w.WriteString(s)
	}
	return w.String(), nil
}

// underlying returns the basic type of a Go type expression, following the
// named types go-jsonschema made ("ToolEventKind" → "string").
func (g *generator) underlying(t string) string {
	for i := 0; i < 8; i++ {
		u, ok := g.models.named[t]
		if !ok {
			return t
		}
		t = u
	}
	return t
}

var allTypes = []string{"array", "boolean", "null", "number", "object", "string"}

// value emits the checks of one value of Go type goType held in expr.
func (v *validatorGen) value(f *schemaFile, where string, n *schemaNode, expr, goType string, field fieldPath, agent bool) (string, error) {
	if strings.HasPrefix(goType, "*") {
		inner, err := v.value(f, where, n, "(*"+expr+")", goType[1:], field, agent)
		if err != nil || inner == "" {
			return "", err
		}
		return fmt.Sprintf("if %s != nil {\n%s}\n", expr, inner), nil
	}
	var w bytes.Buffer
	if n.Ref != "" {
		d, err := v.g.resolve(f, n)
		if err != nil {
			return "", err
		}
		if d.node.typeName() == "object" {
			if v.g.models.structs[d.name] == nil {
				return "", fmt.Errorf("%s: $ref %q names a def without a Go model", where, n.Ref)
			}
			if v.g.underlying(goType) != d.name && goType != d.name {
				return "", fmt.Errorf("%s: $ref %q: the field's Go type is %s", where, n.Ref, goType)
			}
			v.w.use(wirePkg)
			fmt.Fprintf(&w, "if err := %s.Validate(); err != nil { return wire.Nest(%s, err) }\n", expr, field.expr(v.w))
		} else {
			// A scalar def: its checks apply here, inline.
			s, err := v.value(d.file, d.file.Path+": $defs/"+d.name, d.node, expr, goType, field, agent)
			if err != nil {
				return "", err
			}
			w.WriteString(s)
		}
	}
	if len(n.Properties) > 0 {
		return "", fmt.Errorf("%s: properties on a value: a nested object of a message must be a $def", where)
	}
	u := v.g.underlying(goType)
	isAny := u == "interface{}" || u == "any" || u == "json.RawMessage"
	types := n.types()
	if isAny && len(types) > 0 && len(types) < len(allTypes) {
		quoted := make([]string, len(types))
		for i, t := range types {
			quoted[i] = strconv.Quote(t)
		}
		fn := "wire.KindIs"
		if u == "json.RawMessage" {
			fn = "wire.RawKindIs"
		}
		guard := ""
		if u != "json.RawMessage" && !contains(types, "null") {
			// nil is an absent field; a null the decoder refuses (wire.Entry.NotNull).
			guard = expr + " != nil && "
		}
		v.w.use(wirePkg)
		fmt.Fprintf(&w, "if %s!%s(%s, %s) {\n%s}\n", guard, fn, expr, strings.Join(quoted, ", "), v.fail(field, "must be of JSON type "+strings.Join(types, " or ")))
	}
	kind := goKind(u)
	// bad names a keyword that does not fit the Go type: never ignored.
	bad := func(kw string) error {
		return fmt.Errorf("%s: keyword %q does not apply to a field of Go type %s", where, kw, goType)
	}
	if n.Format != "" && n.Format != "password" {
		return "", fmt.Errorf("%s: format %q: aepgen supports only \"password\" (a secret)", where, n.Format)
	}
	// Strings.
	if len(n.Enum) > 0 {
		if kind != "string" {
			return "", bad("enum")
		}
		var quoted []string
		for _, e := range n.Enum {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("%s: enum values must be strings", where)
			}
			quoted = append(quoted, strconv.Quote(s))
		}
		fmt.Fprintf(&w, "switch string(%s) {\ncase %s:\ndefault:\n%s}\n", expr, strings.Join(quoted, ", "), v.fail(field, "must be one of "+strings.Join(quoted, ", ")))
	}
	if n.Const != nil {
		switch c := n.Const.(type) {
		case string:
			if kind != "string" {
				return "", bad("const")
			}
			fmt.Fprintf(&w, "if string(%s) != %q {\n%s}\n", expr, c, v.fail(field, "must be "+strconv.Quote(c)))
		case bool:
			if kind != "bool" {
				return "", bad("const")
			}
			not := ""
			if c {
				not = "!"
			}
			fmt.Fprintf(&w, "if %s%s {\n%s}\n", not, expr, v.fail(field, fmt.Sprintf("must be %v", c)))
		default:
			return "", fmt.Errorf("%s: const must be a string or a boolean", where)
		}
	}
	if n.Not != nil {
		if kind != "string" || n.Not.Pattern == nil {
			return "", bad("not (only {\"pattern\": …} on a string)")
		}
		if _, err := regexp.Compile(*n.Not.Pattern); err != nil {
			return "", fmt.Errorf("%s: pattern %q is not RE2 syntax: %w", where, *n.Not.Pattern, err)
		}
		name := v.patternName(where) + "Not"
		v.patterns = append(v.patterns, patternVar{name: name, expr: *n.Not.Pattern})
		fmt.Fprintf(&w, "if %s.MatchString(string(%s)) {\n%s}\n", name, expr, v.fail(field, "must not contain a match of the pattern "+*n.Not.Pattern))
	}
	if n.MinLength != nil || n.MaxLength != nil || n.Pattern != nil {
		if kind != "string" {
			return "", bad("minLength/maxLength/pattern")
		}
		if n.MinLength != nil {
			v.w.use("unicode/utf8")
			fmt.Fprintf(&w, "if utf8.RuneCountInString(string(%s)) < %d {\n%s}\n", expr, *n.MinLength, v.fail(field, fmt.Sprintf("must have at least %d characters", *n.MinLength)))
		}
		if n.MaxLength != nil {
			v.w.use("unicode/utf8")
			fmt.Fprintf(&w, "if utf8.RuneCountInString(string(%s)) > %d {\n%s}\n", expr, *n.MaxLength, v.fail(field, fmt.Sprintf("must have at most %d characters", *n.MaxLength)))
		}
		if n.Pattern != nil {
			if _, err := regexp.Compile(*n.Pattern); err != nil {
				return "", fmt.Errorf("%s: pattern %q is not RE2 syntax: %w", where, *n.Pattern, err)
			}
			name := v.patternName(where)
			v.patterns = append(v.patterns, patternVar{name: name, expr: *n.Pattern})
			fmt.Fprintf(&w, "if !%s.MatchString(string(%s)) {\n%s}\n", name, expr, v.fail(field, "must match the pattern "+*n.Pattern))
		}
	}
	// Numbers.
	bounds := []struct {
		kw   string
		num  *json.Number
		op   string // the failing comparison
		text string
	}{
		{"minimum", n.Minimum, "<", "must be at least "},
		{"exclusiveMinimum", n.ExclusiveMinimum, "<=", "must be greater than "},
		{"maximum", n.Maximum, ">", "must be at most "},
		{"exclusiveMaximum", n.ExclusiveMaximum, ">=", "must be less than "},
	}
	for _, b := range bounds {
		if b.num == nil {
			continue
		}
		if kind != "int" && kind != "float" {
			return "", bad(b.kw)
		}
		lit, err := v.g.numberLiteral(u, *b.num)
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", where, b.kw, err)
		}
		if kind == "int" && impliedByInt64(b.kw, lit) {
			continue // decoding into int64 already refuses what lies beyond
		}
		fmt.Fprintf(&w, "if %s %s %s {\n%s}\n", expr, b.op, lit, v.fail(field, b.text+b.num.String()))
	}
	if agent && (kind == "int" || kind == "float") {
		if (n.Minimum == nil && n.ExclusiveMinimum == nil) || (n.Maximum == nil && n.ExclusiveMaximum == nil) {
			return "", fmt.Errorf("%s: a number an agent sends must state its range (minimum or exclusiveMinimum, and maximum or exclusiveMaximum; an integer's widest is int64's)", where)
		}
	}
	// Arrays.
	if n.MinItems != nil || n.MaxItems != nil || n.UniqueItems || n.Items != nil || len(n.PrefixItems) > 0 {
		if kind != "slice" {
			return "", bad("items/prefixItems/minItems/maxItems/uniqueItems")
		}
		elem := strings.TrimPrefix(u, "[]")
		if n.MinItems != nil {
			fmt.Fprintf(&w, "if len(%s) < %d {\n%s}\n", expr, *n.MinItems, v.fail(field, fmt.Sprintf("must have at least %d items", *n.MinItems)))
		}
		if n.MaxItems != nil {
			fmt.Fprintf(&w, "if len(%s) > %d {\n%s}\n", expr, *n.MaxItems, v.fail(field, fmt.Sprintf("must have at most %d items", *n.MaxItems)))
		}
		for i, p := range n.PrefixItems {
			s, err := v.value(f, fmt.Sprintf("%s/prefixItems/%d", where, i), p, fmt.Sprintf("%s[%d]", expr, i), elem, field.index(strconv.Itoa(i)), agent)
			if err != nil {
				return "", err
			}
			if s != "" {
				fmt.Fprintf(&w, "if len(%s) > %d {\n%s}\n", expr, i, s)
			}
		}
		if n.UniqueItems {
			if k := goKind(v.g.underlying(elem)); k != "string" && k != "int" {
				return "", fmt.Errorf("%s: uniqueItems: aepgen compares strings and integers only, not %s", where, elem)
			}
			i := v.indexVar()
			fmt.Fprintf(&w, "{\nseen := make(map[%s]bool, len(%s))\nfor %s, x := range %s {\nif seen[x] {\n%s}\nseen[x] = true\n}\n}\n",
				elem, expr, i, expr, v.fail(field.index(i), "repeats an earlier item"))
			v.depth--
		}
		if n.Items != nil {
			i := v.indexVar()
			s, err := v.value(f, where+"/items", n.Items, expr+"["+i+"]", elem, field.index(i), agent)
			v.depth--
			if err != nil {
				return "", err
			}
			switch {
			case s == "":
			case len(n.PrefixItems) > 0:
				// JSON Schema 2020-12 §10.3.1.2: items applies only to the
				// elements after those prefixItems describes.
				fmt.Fprintf(&w, "for %s := %d; %s < len(%s); %s++ {\n%s}\n", i, len(n.PrefixItems), i, expr, i, s)
			default:
				fmt.Fprintf(&w, "for %s := range %s {\n%s}\n", i, expr, s)
			}
		}
	}
	// Maps.
	if a := n.AdditionalProperties; a != nil && a.Schema != nil {
		if kind != "map" {
			return "", bad("additionalProperties")
		}
		elem := u[strings.Index(u, "]")+1:]
		k := v.keyVar()
		s, err := v.value(f, where+"/additionalProperties", a.Schema, "x", elem, field.key(k), agent)
		v.depth--
		if err != nil {
			return "", err
		}
		if s != "" {
			fmt.Fprintf(&w, "for %s, x := range %s {\n%s}\n", k, expr, s)
		}
	}
	return w.String(), nil
}

func (v *validatorGen) indexVar() string {
	v.depth++
	return fmt.Sprintf("i%d", v.depth)
}

func (v *validatorGen) keyVar() string {
	v.depth++
	return fmt.Sprintf("k%d", v.depth)
}

// patternName names the compiled pattern of a location.
func (v *validatorGen) patternName(where string) string {
	_, loc, _ := strings.Cut(where, ": ")
	var b strings.Builder
	b.WriteString("pattern")
	for _, part := range strings.FieldsFunc(loc, func(r rune) bool { return r == '/' || r == '_' || r == '-' || r == '$' }) {
		switch part {
		case "defs", "properties":
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// goKind classifies a basic Go type for the checks.
func goKind(u string) string {
	switch {
	case u == "string":
		return "string"
	case u == "bool":
		return "bool"
	case u == "int" || u == "int64" || u == "int32":
		return "int"
	case u == "float64" || u == "float32":
		return "float"
	case strings.HasPrefix(u, "[]"):
		return "slice"
	case strings.HasPrefix(u, "map["):
		return "map"
	}
	return u
}

// numberLiteral renders a schema number as a Go constant for a value of the
// basic type u: an integer type needs an integer within int64.
func (g *generator) numberLiteral(u string, n json.Number) (string, error) {
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		return "", fmt.Errorf("%s is not a number", n)
	}
	if goKind(u) != "int" {
		if f, _ := r.Float64(); math.IsInf(f, 0) {
			return "", fmt.Errorf("%s is beyond float64", n)
		}
		return n.String(), nil
	}
	if !r.IsInt() || !r.Num().IsInt64() {
		return "", fmt.Errorf("%s is not an integer within int64 (the Go type of the field)", n)
	}
	return r.Num().String(), nil
}

// impliedByInt64 reports a bound that only restates int64's own range.
func impliedByInt64(kw, lit string) bool {
	switch kw {
	case "minimum":
		return lit == strconv.FormatInt(math.MinInt64, 10)
	case "maximum":
		return lit == strconv.FormatInt(math.MaxInt64, 10)
	}
	return false
}

// condGen emits the def-level choices and conditionals of one struct.
type condGen struct {
	v     *validatorGen
	f     *schemaFile
	where string
	n     *schemaNode
	gs    *goStruct
}

// presence returns the Go test that an optional field is present; fields
// that are always present (non-pointer scalars) cannot be tested.
func (c *condGen) presence(prop, where string) (string, error) {
	fld := c.gs.Fields[prop]
	if fld == nil {
		return "", fmt.Errorf("%s: %q is not a property of %s", where, prop, c.gs.Name)
	}
	// The underlying type decides: go-jsonschema names some maps and lists
	// (an object property with additionalProperties becomes a named map).
	u := c.v.g.underlying(fld.Type)
	if fld.Pointer || strings.HasPrefix(u, "[]") || strings.HasPrefix(u, "map[") || u == "json.RawMessage" || goKind(u) == "interface{}" {
		if u == "json.RawMessage" {
			return "len(m." + fld.Name + ") > 0", nil
		}
		return "m." + fld.Name + " != nil", nil
	}
	return "", fmt.Errorf("%s: %q is always present in Go (not a pointer, list or map), so its presence cannot be tested; make it optional without a default", where, prop)
}

// choice emits anyOf (at least one branch) or oneOf (exactly one branch) of
// required-field sets.
func (c *condGen) choice(branches []*schemaNode, one bool) (string, error) {
	kw := "anyOf"
	if one {
		kw = "oneOf"
	}
	var tests, names []string
	first := ""
	for i, b := range branches {
		where := fmt.Sprintf("%s/%s/%d", c.where, kw, i)
		if len(b.Required) == 0 || !onlyKeywords(b, "required", "description", "properties") {
			return "", fmt.Errorf("%s: aepgen supports branches that hold only required (and minItems of required lists)", where)
		}
		var parts, labels []string
		for _, r := range b.Required {
			p, err := c.presence(r, where)
			if err != nil {
				return "", err
			}
			label := r
			// A branch may ask more of a list it requires (memory/forget's
			// keys: at least one item), so an empty list does not count as
			// the branch's selector while it stays valid beside another.
			if pn := b.Properties[r]; pn != nil {
				if pn.MinItems == nil || !onlyKeywords(pn, "minItems", "description") || !strings.HasPrefix(c.gs.Fields[r].Type, "[]") {
					return "", fmt.Errorf("%s/properties/%s: aepgen supports only minItems of a list field in a branch", where, r)
				}
				p = fmt.Sprintf("len(m.%s) >= %d", c.gs.Fields[r].Name, *pn.MinItems)
				label = fmt.Sprintf("%s (at least %d item)", r, *pn.MinItems)
				if *pn.MinItems != 1 {
					label += "s"
				}
			}
			parts = append(parts, p)
			labels = append(labels, label)
		}
		for prop := range b.Properties {
			if !slices.Contains(b.Required, prop) {
				return "", fmt.Errorf("%s/properties/%s: a branch may constrain only fields it requires", where, prop)
			}
		}
		if first == "" {
			first = b.Required[0]
		}
		tests = append(tests, strings.Join(parts, " && "))
		names = append(names, strings.Join(labels, " and "))
	}
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	if !one {
		return fmt.Sprintf("if !(%s) {\n%s}\n", strings.Join(wrap(tests), " || "), c.v.fail(pathOf(first), "one of "+list+" is required")), nil
	}
	var w strings.Builder
	w.WriteString("{\nn := 0\n")
	for _, t := range tests {
		fmt.Fprintf(&w, "if %s { n++ }\n", t)
	}
	fmt.Fprintf(&w, "if n != 1 {\n%s}\n}\n", c.v.fail(pathOf(first), "exactly one of "+list+" is required"))
	return w.String(), nil
}

func wrap(tests []string) []string {
	out := make([]string, len(tests))
	for i, t := range tests {
		if strings.Contains(t, "&&") {
			t = "(" + t + ")"
		}
		out[i] = t
	}
	return out
}

// onlyKeywords reports whether a node uses no keyword beyond the given ones.
func onlyKeywords(n *schemaNode, allowed ...string) bool {
	b, _ := json.Marshal(n)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	for k, v := range m {
		if ok[k] || isEmptyJSON(v) {
			continue
		}
		return false
	}
	return true
}

func isEmptyJSON(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	case bool:
		return !t
	case []any:
		return len(t) == 0
	case map[string]any:
		for _, x := range t {
			if !isEmptyJSON(x) {
				return false
			}
		}
		return true
	}
	return false
}

// conditional emits if/then/else of a def or an allOf entry.
func (c *condGen) conditional(n *schemaNode, where string) (string, error) {
	if n.If == nil {
		return "", fmt.Errorf("%s: then or else without if", where)
	}
	if n.Then == nil && n.Else == nil {
		return "", fmt.Errorf("%s: if without then or else", where)
	}
	test, desc, err := c.test(n.If, where+"/if")
	if err != nil {
		return "", err
	}
	var then, els string
	if n.Then != nil {
		if then, err = c.consequence(n.Then, where+"/then", "required when "+desc); err != nil {
			return "", err
		}
	}
	if n.Else != nil {
		if els, err = c.consequence(n.Else, where+"/else", "required unless "+desc); err != nil {
			return "", err
		}
	}
	switch {
	case els == "":
		return fmt.Sprintf("if %s {\n%s}\n", test, then), nil
	case then == "":
		return fmt.Sprintf("if !(%s) {\n%s}\n", test, els), nil
	}
	return fmt.Sprintf("if %s {\n%s} else {\n%s}\n", test, then, els), nil
}

// test renders an if schema as a Go condition, with JSON Schema's meaning:
// a property condition holds when the property is absent, unless if lists
// it in required.
func (c *condGen) test(n *schemaNode, where string) (string, string, error) {
	if !onlyKeywords(n, "properties", "required") || (len(n.Properties) == 0 && len(n.Required) == 0) {
		return "", "", fmt.Errorf("%s: aepgen supports an if of properties (const or enum) and required", where)
	}
	inReq := map[string]bool{}
	for _, r := range n.Required {
		inReq[r] = true
	}
	defReq := map[string]bool{}
	for _, r := range c.n.Required {
		defReq[r] = true
	}
	var tests, descs []string
	for _, prop := range sortedKeys(n.Properties) {
		p := n.Properties[prop]
		fld := c.gs.Fields[prop]
		if fld == nil {
			return "", "", fmt.Errorf("%s: %q is not a property of %s", where, prop, c.gs.Name)
		}
		if !onlyKeywords(p, "const", "enum") || (p.Const == nil && len(p.Enum) == 0) {
			return "", "", fmt.Errorf("%s/properties/%s: aepgen supports a condition of const or enum on a string or boolean", where, prop)
		}
		val := "m." + fld.Name
		if fld.Pointer {
			val = "(*" + val + ")"
		}
		var alts []string
		vals := p.Enum
		if p.Const != nil {
			vals = []any{p.Const}
		}
		var shown []string
		kind := goKind(c.v.g.underlying(strings.TrimPrefix(fld.Type, "*")))
		for _, e := range vals {
			switch x := e.(type) {
			case string:
				if kind != "string" {
					return "", "", fmt.Errorf("%s/properties/%s: a string condition on a field of Go type %s", where, prop, fld.Type)
				}
				alts = append(alts, fmt.Sprintf("string(%s) == %q", val, x))
				shown = append(shown, strconv.Quote(x))
			case bool:
				if kind != "bool" {
					return "", "", fmt.Errorf("%s/properties/%s: a boolean condition on a field of Go type %s", where, prop, fld.Type)
				}
				if x {
					alts = append(alts, val)
				} else {
					alts = append(alts, "!"+val)
				}
				shown = append(shown, strconv.FormatBool(x))
			default:
				return "", "", fmt.Errorf("%s/properties/%s: aepgen supports string and boolean conditions", where, prop)
			}
		}
		match := strings.Join(alts, " || ")
		if len(alts) > 1 {
			match = "(" + match + ")"
		}
		descs = append(descs, prop+" is "+strings.Join(shown, " or "))
		switch {
		case defReq[prop] && !fld.Pointer:
			tests = append(tests, match)
		case fld.Pointer && inReq[prop]:
			tests = append(tests, "m."+fld.Name+" != nil && "+match)
		case fld.Pointer:
			tests = append(tests, "(m."+fld.Name+" == nil || "+match+")")
		default:
			return "", "", fmt.Errorf("%s/properties/%s: the field is always present in Go but optional in the schema, so an absent value cannot be told from a given one", where, prop)
		}
	}
	for _, r := range n.Required {
		if n.Properties[r] != nil {
			continue
		}
		if defReq[r] {
			continue // present whenever the message decoded
		}
		p, err := c.presence(r, where)
		if err != nil {
			return "", "", err
		}
		tests = append(tests, p)
		descs = append(descs, r+" is present")
	}
	if len(tests) == 0 {
		return "", "", fmt.Errorf("%s: the condition always holds", where)
	}
	return strings.Join(tests, " && "), strings.Join(descs, " and "), nil
}

// consequence emits the checks of a then or else.
func (c *condGen) consequence(n *schemaNode, where, reqReason string) (string, error) {
	if n.Ref != "" {
		return "", fmt.Errorf("%s: $ref in then/else is for files without messages (envelope.json)", where)
	}
	if !onlyKeywords(n, "required", "properties", "if", "then", "else", "description") {
		return "", fmt.Errorf("%s: aepgen supports required, properties and a nested if in then/else", where)
	}
	var w bytes.Buffer
	for _, r := range n.Required {
		p, err := c.presence(r, where)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&w, "if !(%s) {\n%s}\n", p, c.v.fail(pathOf(r), reqReason))
	}
	for _, prop := range sortedKeys(n.Properties) {
		fld := c.gs.Fields[prop]
		if fld == nil {
			return "", fmt.Errorf("%s: %q is not a property of %s", where, prop, c.gs.Name)
		}
		s, err := c.v.value(c.f, where+"/properties/"+prop, n.Properties[prop], "m."+fld.Name, fld.Type, pathOf(prop), false)
		if err != nil {
			return "", err
		}
		w.WriteString(s)
	}
	if n.If != nil || n.Then != nil || n.Else != nil {
		s, err := c.conditional(n, where)
		if err != nil {
			return "", err
		}
		w.WriteString(s)
	}
	return w.String(), nil
}

// sortedStrings returns a sorted copy.
func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
