package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// fallback returns the Go source of a request's Fallback: a function that
// builds the reply of x-aep-fallback as a Go value. "{{field}}" stands for
// the request's field of that name, which must be a required string.
func (g *generator) fallback(w *goFile, m, reply *message) (string, error) {
	lb := &literal{g: g, w: w, where: fmt.Sprintf("%s: %s: x-aep-fallback", m.file.Path, m.name), req: g.models.structs[m.name], reqDef: m.node}
	v, err := lb.value(reply.name, map[string]any(m.node.XFallback), "")
	if err != nil {
		return "", err
	}
	if lb.usesReq {
		return fmt.Sprintf("func(r wire.Message) wire.Message {\nreq := r.(*%s)\nreturn &%s\n}", m.name, v), nil
	}
	return fmt.Sprintf("func(wire.Message) wire.Message { return &%s }", v), nil
}

type literal struct {
	g       *generator
	w       *goFile
	where   string
	req     *goStruct
	reqDef  *schemaNode
	usesReq bool
}

// value renders v as a Go expression of type t.
func (l *literal) value(t string, v any, at string) (string, error) {
	fail := func(why string) (string, error) {
		return "", fmt.Errorf("%s%s: %s", l.where, at, why)
	}
	if strings.HasPrefix(t, "*") {
		inner, err := l.value(t[1:], v, at)
		if err != nil {
			return "", err
		}
		l.g.usesPtr = true
		return "ptrTo(" + inner + ")", nil
	}
	if gs := l.g.models.structs[t]; gs != nil {
		obj, ok := v.(map[string]any)
		if !ok {
			return fail("an object is needed for " + t)
		}
		var fields []string
		for _, k := range sortedKeys(obj) {
			f := gs.Fields[k]
			if f == nil {
				return fail(fmt.Sprintf("%s has no field %q", t, k))
			}
			s, err := l.value(f.Type, obj[k], at+"."+k)
			if err != nil {
				return "", err
			}
			fields = append(fields, f.Name+": "+s)
		}
		return t + "{" + strings.Join(fields, ", ") + "}", nil
	}
	u := l.g.underlying(t)
	named := u != t
	conv := func(s string) string {
		if named {
			return t + "(" + s + ")"
		}
		return s
	}
	switch {
	case strings.HasPrefix(u, "[]"):
		list, ok := v.([]any)
		if !ok {
			return fail("a list is needed")
		}
		var elems []string
		for i, e := range list {
			s, err := l.value(u[2:], e, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return "", err
			}
			elems = append(elems, s)
		}
		return conv(u + "{" + strings.Join(elems, ", ") + "}"), nil
	case u == "string":
		s, ok := v.(string)
		if !ok {
			return fail("a string is needed")
		}
		if strings.HasPrefix(s, "{{") && strings.HasSuffix(s, "}}") {
			name := s[2 : len(s)-2]
			f := l.req.Fields[name]
			required := false
			for _, r := range l.reqDef.Required {
				required = required || r == name
			}
			if f == nil || f.Type != "string" || !required {
				return fail(fmt.Sprintf("{{%s}} must name a required string field of the request", name))
			}
			l.usesReq = true
			return conv("req." + f.Name), nil
		}
		if strings.Contains(s, "{{") {
			return fail("a template must be a whole string, {{field}}")
		}
		return conv(strconv.Quote(s)), nil
	case u == "bool":
		b, ok := v.(bool)
		if !ok {
			return fail("a boolean is needed")
		}
		return conv(strconv.FormatBool(b)), nil
	case goKind(u) == "int" || goKind(u) == "float":
		n, ok := v.(json.Number)
		if !ok {
			return fail("a number is needed")
		}
		lit, err := l.g.numberLiteral(u, n)
		if err != nil {
			return fail(err.Error())
		}
		return conv(lit), nil
	case u == "json.RawMessage":
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		l.w.use("encoding/json")
		return conv("json.RawMessage(" + strconv.Quote(string(b)) + ")"), nil
	}
	return fail("aepgen cannot write a value of Go type " + t)
}
