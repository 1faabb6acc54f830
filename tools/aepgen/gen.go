package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

type defRef struct {
	file *schemaFile
	name string
	node *schemaNode
}

// message is one def with x-aep-type.
type message struct {
	defRef
	kind string
}

type generator struct {
	files  []*schemaFile
	models *goModels
	pkg    string
	defs   map[string]*defRef // "base#Name"
	byType map[string]*message
	// agent holds the defs an agent's message can contain (requests,
	// notifications and every def they reach), whose numbers must state
	// their range.
	agent map[*schemaNode]bool
	// usesPtr is set when a fallback needs the package's ptrTo helper.
	usesPtr bool
}

func (g *generator) index() error {
	g.defs = map[string]*defRef{}
	g.byType = map[string]*message{}
	for _, f := range g.files {
		for name, n := range f.Defs {
			d := &defRef{file: f, name: name, node: n}
			g.defs[f.Base+"#"+name] = d
			if n.XType == "" {
				continue
			}
			if f.Namespace == "" {
				return fmt.Errorf("%s: %s has x-aep-type but the file has no x-aep-namespace", f.Path, name)
			}
			switch n.XKind {
			case "request", "notification", "reply", "event":
			default:
				return fmt.Errorf("%s: %s: x-aep-kind must be request, notification, reply or event", f.Path, name)
			}
			if n.XKind == "notification" && !f.Kernel {
				return fmt.Errorf("%s: %s: notifications exist only in kernel namespaces", f.Path, name)
			}
			if _, dup := g.byType[n.XType]; dup {
				return fmt.Errorf("%s: type %q defined twice", f.Path, n.XType)
			}
			g.byType[n.XType] = &message{defRef: *d, kind: n.XKind}
		}
	}
	for _, t := range sortedKeys(g.byType) {
		m := g.byType[t]
		agentSends := m.kind == "request" || m.kind == "notification"
		if open := m.node.AdditionalProperties != nil && m.node.AdditionalProperties.Open; open != agentSends {
			if agentSends {
				return fmt.Errorf("%s: %s: an agent's message must state \"additionalProperties\": true (unknown fields are ignored, envelope.json)", m.file.Path, m.name)
			}
			return fmt.Errorf("%s: %s: only agents' messages are open; a host's message states nothing (a strict check closes it, envelope.json)", m.file.Path, m.name)
		}
		if m.kind != "request" {
			continue
		}
		if m.node.XReply == "" {
			return fmt.Errorf("%s: request %s has no x-aep-reply", m.file.Path, t)
		}
		r := g.byType[m.node.XReply]
		if r == nil || r.kind != "reply" {
			return fmt.Errorf("%s: reply %q of %s is not a reply type", m.file.Path, m.node.XReply, t)
		}
	}
	g.agent = map[*schemaNode]bool{}
	for _, m := range g.byType {
		if m.kind == "request" || m.kind == "notification" {
			if err := g.markAgent(m.file, m.node); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkModels checks what needs go-jsonschema's output.
func (g *generator) checkModels() error {
	for _, t := range sortedKeys(g.byType) {
		m := g.byType[t]
		if g.models.structs[m.name] == nil {
			return fmt.Errorf("%s: go-jsonschema made no struct for %s (give it \"type\": \"object\")", m.file.Path, m.name)
		}
		if m.node.XChangesState && m.kind != "request" {
			return fmt.Errorf("%s: x-aep-changes-state on %s, which is no request", m.file.Path, m.name)
		}
		if m.kind != "request" {
			continue
		}
		r := g.byType[m.node.XReply]
		if t := m.node.XAuditTarget; t != "" {
			f := g.models.structs[m.name].Fields[t]
			if f == nil || strings.TrimPrefix(f.Type, "*") != "string" {
				return fmt.Errorf("%s: x-aep-audit-target %q of %s is not a string field", m.file.Path, t, m.name)
			}
		}
		if m.node.XOwner != "" && m.node.XAuditTarget == "" {
			return fmt.Errorf("%s: x-aep-owner of %s needs x-aep-audit-target", m.file.Path, m.name)
		}
		if mr := m.node.XMerge; mr.Field != "" {
			f := g.models.structs[r.name].Fields[mr.Field]
			if f == nil || !strings.HasPrefix(f.Type, "[]") {
				return fmt.Errorf("%s: x-aep-merge %q of %s is not a list field of %s", m.file.Path, mr.Field, t, r.name)
			}
			if mr.Key != "" || mr.Limit != "" || mr.Cursor != "" {
				item := g.models.structs[strings.TrimPrefix(f.Type, "[]")]
				lf, cf := g.models.structs[m.name].Fields[mr.Limit], g.models.structs[r.name].Fields[mr.Cursor]
				switch {
				case item == nil || item.Fields[mr.Key] == nil || item.Fields[mr.Key].Type != "string":
					return fmt.Errorf("%s: x-aep-merge key %q of %s is not a string field of the list items", m.file.Path, mr.Key, t)
				case lf == nil || strings.TrimPrefix(lf.Type, "*") != "int":
					return fmt.Errorf("%s: x-aep-merge limit %q of %s is not an integer field of the request", m.file.Path, mr.Limit, t)
				case cf == nil || cf.Type != "*string":
					return fmt.Errorf("%s: x-aep-merge cursor %q of %s is not an optional string field of the reply", m.file.Path, mr.Cursor, t)
				}
			}
		}
	}
	return nil
}

// markAgent records n and every def it reaches as part of agents' messages.
func (g *generator) markAgent(f *schemaFile, n *schemaNode) error {
	if n == nil || g.agent[n] {
		return nil
	}
	g.agent[n] = true
	if n.Ref != "" {
		d, err := g.resolve(f, n)
		if err != nil {
			return err
		}
		return g.markAgent(d.file, d.node)
	}
	for _, p := range n.Properties {
		if err := g.markAgent(f, p); err != nil {
			return err
		}
	}
	for _, p := range n.PrefixItems {
		if err := g.markAgent(f, p); err != nil {
			return err
		}
	}
	if n.AdditionalProperties != nil {
		if err := g.markAgent(f, n.AdditionalProperties.Schema); err != nil {
			return err
		}
	}
	return g.markAgent(f, n.Items)
}

// resolve follows $ref to its def.
func (g *generator) resolve(from *schemaFile, n *schemaNode) (*defRef, error) {
	base, name, err := refTarget(from, n.Ref)
	if err != nil {
		return nil, err
	}
	d := g.defs[base+"#"+name]
	if d == nil {
		return nil, fmt.Errorf("%s: unresolved $ref %q", from.Path, n.Ref)
	}
	return d, nil
}

// goFile collects one generated Go file: its body and the imports the body
// uses, so the file imports exactly what it needs.
type goFile struct {
	bytes.Buffer
	imports map[string]bool
}

func newGoFile() *goFile { return &goFile{imports: map[string]bool{}} }

func (w *goFile) use(path string) { w.imports[path] = true }

// source returns the whole file: header, package clause, imports, body.
func (w *goFile) source(source, hash, pkg string) []byte {
	var out bytes.Buffer
	if source != "" {
		fmt.Fprintf(&out, "// Code generated by aepgen from %s (sha256 %s). DO NOT EDIT.\n\n", source, hash)
	} else {
		fmt.Fprintf(&out, "// Code generated by aepgen. DO NOT EDIT.\n\n")
	}
	fmt.Fprintf(&out, "package %s\n\n", pkg)
	if len(w.imports) > 0 {
		var std, other []string
		for _, p := range sortedKeys(w.imports) {
			if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
				other = append(other, p)
			} else {
				std = append(std, p)
			}
		}
		out.WriteString("import (\n")
		for _, p := range std {
			fmt.Fprintf(&out, "%q\n", p)
		}
		if len(std) > 0 && len(other) > 0 {
			out.WriteString("\n")
		}
		for _, p := range other {
			fmt.Fprintf(&out, "%q\n", p)
		}
		out.WriteString(")\n\n")
	}
	out.Write(w.Bytes())
	return out.Bytes()
}

const wirePkg = "github.com/aephost/aep/wire"

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (g *generator) messagesOf(f *schemaFile) []*message {
	var out []*message
	for _, name := range sortedKeys(f.Defs) {
		if n := f.Defs[name]; n.XType != "" {
			out = append(out, g.byType[n.XType])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node.XType < out[j].node.XType })
	return out
}

func (g *generator) file(f *schemaFile) ([]byte, error) {
	w := newGoFile()
	msgs := g.messagesOf(f)

	for _, m := range msgs {
		fmt.Fprintf(w, "// MessageType returns %q.\nfunc (*%s) MessageType() string { return %q }\n\n", m.node.XType, m.name, m.node.XType)
		g.accessors(w, m)
	}
	// The event body has no type of its own: the envelope carries the
	// namespace's `<ns>/event` type, so MessageType is empty.
	for _, name := range sortedKeys(f.Defs) {
		if n := f.Defs[name]; n.XType == "" && n.XKind == "event" && g.models.structs[name] != nil {
			fmt.Fprintf(w, "// MessageType is empty: the envelope of an event carries its namespace's event type.\nfunc (*%s) MessageType() string { return \"\" }\n\n", name)
		}
	}
	// Validators for every struct def of the file, so nested values validate too.
	v := &validatorGen{g: g, w: w}
	for _, name := range sortedKeys(f.Defs) {
		gs := g.models.structs[name]
		if gs == nil {
			continue
		}
		body, err := v.def(f, name, f.Defs[name], gs)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "// Validate checks the value constraints of %s's schema.\nfunc (m *%s) Validate() error {\n", name, name)
		if body == "" {
			w.WriteString("return nil\n}\n\n")
			continue
		}
		fmt.Fprintf(w, "if m == nil { return nil }\n%sreturn nil\n}\n\n", body)
	}
	if len(v.patterns) > 0 {
		w.use("regexp")
		w.WriteString("// Patterns of the schema's `pattern` keywords, compiled once.\nvar (\n")
		for _, p := range v.patterns {
			fmt.Fprintf(w, "%s = regexp.MustCompile(%q)\n", p.name, p.expr)
		}
		w.WriteString(")\n\n")
	}
	for _, m := range msgs {
		defs, err := g.defaults(m)
		if err != nil {
			return nil, err
		}
		var init []string
		for _, d := range defs {
			init = append(init, d.field+": "+d.lit)
		}
		w.use(wirePkg)
		fmt.Fprintf(w, "func new%s() wire.Message { return &%s{%s} }\n\n", m.name, m.name, strings.Join(init, ", "))
		if len(defs) > 0 {
			// A Go value handed over by the direct codec never went through
			// the constructor: zero fields that have a default take it.
			fmt.Fprintf(w, "// ApplyDefaults sets the schema defaults of fields left at their zero value.\nfunc (m *%s) ApplyDefaults() {\n", m.name)
			for _, d := range defs {
				fmt.Fprintf(w, "if m.%s == %s { m.%s = %s }\n", d.field, d.zero, d.field, d.lit)
			}
			w.WriteString("}\n\n")
		}
	}

	iface := !f.Kernel
	handler := methodName(f.Namespace) + "Handler"
	if iface {
		fmt.Fprintf(w, "// %s is implemented by plugins that serve the %q namespace", handler, f.Namespace)
		if f.Capability != "" {
			fmt.Fprintf(w, " (capability %q)", f.Capability)
		}
		w.WriteString(".\n// A handler may return wire.ErrDecline to leave a broadcast request to other plugins.\n")
		fmt.Fprintf(w, "type %s interface {\n", handler)
		for _, m := range msgs {
			if m.kind != "request" {
				continue
			}
			reply := g.byType[m.node.XReply]
			w.use("context")
			fmt.Fprintf(w, "// %s answers %s with %s.\n", methodName(m.node.XType), m.node.XType, reply.node.XType)
			fmt.Fprintf(w, "%s(ctx context.Context, s wire.Scope, req *%s) (*%s, error)\n", methodName(m.node.XType), m.name, reply.name)
		}
		w.WriteString("}\n\n")
	}

	w.use(wirePkg)
	w.WriteString("func init() {\n")
	fmt.Fprintf(w, "registry.AddNamespace(&wire.Namespace{Name: %q, Capability: %q, Kernel: %v, Event: %q})\n", f.Namespace, f.Capability, f.Kernel, f.Namespace+"/event")
	w.WriteString("registry.Add(\n")
	for _, m := range msgs {
		if err := g.entry(w, f, m, iface, handler); err != nil {
			return nil, err
		}
	}
	w.WriteString(")\n")
	for _, m := range msgs {
		for _, a := range m.node.XAliases {
			fmt.Fprintf(w, "registry.Alias(%q, %q)\n", a, m.node.XType)
		}
	}
	w.WriteString("}\n\n")

	for _, m := range msgs {
		if m.kind != "request" {
			continue
		}
		reply := g.byType[m.node.XReply]
		meth := methodName(m.node.XType)
		w.use("context")
		w.use("fmt")
		fmt.Fprintf(w, "// %s sends %s and waits for %s.\n", meth, m.node.XType, reply.node.XType)
		fmt.Fprintf(w, "func (c Client) %s(ctx context.Context, req *%s) (*%s, error) {\n", meth, m.name, reply.name)
		fmt.Fprintf(w, "r, err := c.Requester.Request(ctx, req)\nif err != nil { return nil, err }\n")
		fmt.Fprintf(w, "resp, ok := r.(*%s)\nif !ok { return nil, fmt.Errorf(\"%s: unexpected reply %%T\", r) }\nreturn resp, nil\n}\n\n", reply.name, m.node.XType)
	}
	return w.source(f.Path, f.Hash, g.pkg), nil
}

func (g *generator) entry(w *goFile, f *schemaFile, m *message, iface bool, handler string) error {
	n := m.node
	capability := f.Capability
	if n.XCapability != "" {
		capability = n.XCapability
	}
	kind := map[string]string{"request": "wire.KindRequest", "notification": "wire.KindNotification", "reply": "wire.KindReply", "event": "wire.KindEvent"}[m.kind]
	fmt.Fprintf(w, "&wire.Entry{\nType: %q,\nKind: %s,\nNamespace: %q,\nCapability: %q,\nKernel: %v,\n", n.XType, kind, f.Namespace, capability, f.Kernel)
	if n.XReply != "" {
		fmt.Fprintf(w, "Reply: %q,\n", n.XReply)
	}
	if n.XOwner != "" {
		fmt.Fprintf(w, "Owner: %q,\n", n.XOwner)
	}
	if n.XChangesState {
		fmt.Fprintf(w, "ChangesState: true,\n")
	}
	if len(n.Required) > 0 {
		req := append([]string(nil), n.Required...)
		sort.Strings(req)
		fmt.Fprintf(w, "Required: %#v,\n", req)
	}
	if nn := g.notNull(f, n); len(nn) > 0 {
		fmt.Fprintf(w, "NotNull: %#v,\n", nn)
	}
	shape, err := g.shape(f, n, true)
	if err != nil {
		return err
	}
	if shape != "" {
		fmt.Fprintf(w, "Shape: %s,\n", shape)
	}
	fmt.Fprintf(w, "New: new%s,\n", m.name)
	if iface && m.kind == "request" {
		reply := g.byType[n.XReply]
		w.use("context")
		fmt.Fprintf(w, "Handles: func(p any) bool { _, ok := p.(%s); return ok },\n", handler)
		fmt.Fprintf(w, "Invoke: func(ctx context.Context, p any, s wire.Scope, req wire.Message) (wire.Message, error) {\nr, err := p.(%s).%s(ctx, s, req.(*%s))\nif r == nil { return nil, err }\nreturn r, err\n},\n", handler, methodName(n.XType), m.name)
		if mr := n.XMerge; mr.Field != "" {
			fld := g.models.structs[reply.name].Fields[mr.Field]
			if mr.Key == "" {
				fmt.Fprintf(w, "Merge: func(dst, src wire.Message) { d, s := dst.(*%s), src.(*%s); d.%s = append(d.%s, s.%s...) },\n", reply.name, reply.name, fld.Name, fld.Name, fld.Name)
			} else {
				item := g.models.structs[strings.TrimPrefix(fld.Type, "[]")]
				key := item.Fields[mr.Key].Name
				lf, cf := g.models.structs[m.name].Fields[mr.Limit], g.models.structs[reply.name].Fields[mr.Cursor]
				// A plugin that has more than its page says so with its cursor;
				// the merged reply keeps that fact until Page sets the real cursor.
				fmt.Fprintf(w, "Merge: func(dst, src wire.Message) { d, s := dst.(*%s), src.(*%s); d.%s = append(d.%s, s.%s...); if s.%s != nil { d.%s = s.%s } },\n",
					reply.name, reply.name, fld.Name, fld.Name, fld.Name, cf.Name, cf.Name, cf.Name)
				limit := "req." + lf.Name
				if lf.Pointer {
					limit = "0\nif req." + lf.Name + " != nil { limit = *req." + lf.Name + " }"
				}
				w.use("sort")
				fmt.Fprintf(w, `Page: func(rq, rp wire.Message) {
req, resp := rq.(*%s), rp.(*%s)
sort.SliceStable(resp.%s, func(i, j int) bool { return resp.%s[i].%s < resp.%s[j].%s })
limit := %s
more := resp.%s != nil
if limit > 0 && len(resp.%s) > limit {
resp.%s = resp.%s[:limit]
more = true
}
resp.%s = nil
if more && len(resp.%s) > 0 {
last := resp.%s[len(resp.%s)-1].%s
resp.%s = &last
}
},
`, m.name, reply.name, fld.Name, fld.Name, key, fld.Name, key, limit, cf.Name, fld.Name, fld.Name, fld.Name, cf.Name, fld.Name, fld.Name, fld.Name, key, cf.Name)
			}
		}
		if n.XFallback != nil {
			src, err := g.fallback(w, m, reply)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "Fallback: %s,\n", src)
		}
	}
	w.WriteString("},\n")
	return nil
}

// shape builds the wire.Shape literal for required fields below the top level.
func (g *generator) shape(f *schemaFile, n *schemaNode, top bool) (string, error) {
	if n.Ref != "" {
		d, err := g.resolve(f, n)
		if err != nil {
			return "", err
		}
		return g.shape(d.file, d.node, false)
	}
	var parts []string
	if !top && len(n.Required) > 0 {
		req := append([]string(nil), n.Required...)
		sort.Strings(req)
		parts = append(parts, fmt.Sprintf("Required: %#v", req))
	}
	if !top {
		// As at the top level (wire.Entry.NotNull): a null the Go model
		// would read as absent is refused where the schema excludes it.
		if nn := g.notNull(f, n); len(nn) > 0 {
			parts = append(parts, fmt.Sprintf("NotNull: %#v", nn))
		}
		if n.Items != nil && !contains(g.typesOf(f, n.Items), "null") {
			parts = append(parts, "ItemNotNull: true")
		}
	}
	var props []string
	for _, k := range sortedKeys(n.Properties) {
		s, err := g.shape(f, n.Properties[k], false)
		if err != nil {
			return "", err
		}
		if s != "" {
			props = append(props, fmt.Sprintf("%q: %s", k, s))
		}
	}
	if len(props) > 0 {
		parts = append(parts, "Props: map[string]*wire.Shape{"+strings.Join(props, ", ")+"}")
	}
	if n.Items != nil {
		s, err := g.shape(f, n.Items, false)
		if err != nil {
			return "", err
		}
		if s != "" {
			parts = append(parts, "Items: "+s)
		}
	}
	if len(parts) == 0 {
		return "", nil
	}
	return "&wire.Shape{" + strings.Join(parts, ", ") + "}", nil
}

// defaultField is one field a message's constructor sets.
type defaultField struct {
	field, lit, zero string
}

// defaults returns the scalar defaults of a message, as Go literals made
// from the schema's values. A default equal to Go's zero value is left out:
// the field starts there anyway.
func (g *generator) defaults(m *message) ([]defaultField, error) {
	gs := g.models.structs[m.name]
	var out []defaultField
	for _, prop := range sortedKeys(m.node.Properties) {
		p := m.node.Properties[prop]
		if p.Default == nil {
			continue
		}
		fld := gs.Fields[prop]
		if fld == nil || fld.Pointer {
			continue
		}
		var d defaultField
		d.field = fld.Name
		switch v := p.Default.(type) {
		case string:
			d.lit, d.zero = strconv.Quote(v), `""`
		case bool:
			if v {
				// omitempty drops false, so the default would always win.
				return nil, fmt.Errorf("%s: %s.%s: a boolean default of true cannot be overridden with false; give no default and treat absent as true in the handler", m.file.Path, m.name, prop)
			}
			continue
		case json.Number:
			lit, err := g.numberLiteral(g.underlying(fld.Type), v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s.%s: default: %w", m.file.Path, m.name, prop, err)
			}
			d.lit, d.zero = lit, "0"
		default:
			continue // lists and objects start empty; the handler documents their default
		}
		if d.lit == d.zero || d.lit == "0.0" {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

func (g *generator) packageFile(usesPtr bool) []byte {
	w := newGoFile()
	w.use(wirePkg)
	w.WriteString("var registry = wire.NewRegistry()\n\n")
	w.WriteString("// Registry returns the type registry of every message of this package.\nfunc Registry() *wire.Registry { return registry }\n\n")
	w.WriteString("// Client has one typed method per request type; it sends through a wire.Requester.\ntype Client struct{ wire.Requester }\n")
	if usesPtr {
		w.WriteString("\n// ptrTo returns a pointer to a copy of v, for optional fields of fallback replies.\nfunc ptrTo[T any](v T) *T { return &v }\n")
	}
	return w.source("", "", g.pkg)
}

// accessors gives the kernel typed access to body fields it cares about
// without reflection: correlation_id for audit, session_id for the
// session check of docs/DECISIONS.md, Wire.
func (g *generator) accessors(w *goFile, m *message) {
	gs := g.models.structs[m.name]
	for _, pm := range [][2]string{{"correlation_id", "GetCorrelationID"}, {"session_id", "BodySessionID"}} {
		prop, meth := pm[0], pm[1]
		if m.kind != "request" {
			continue
		}
		f := gs.Fields[prop]
		if f == nil || strings.TrimPrefix(f.Type, "*") != "string" {
			continue
		}
		stringAccessor(w, m.name, meth, prop, f)
	}
	if t := m.node.XAuditTarget; t != "" && m.kind == "request" {
		if f := gs.Fields[t]; f != nil && strings.TrimPrefix(f.Type, "*") == "string" {
			stringAccessor(w, m.name, "AuditTarget", t, f)
		}
	}
}

func stringAccessor(w *goFile, model, meth, prop string, f *goField) {
	fmt.Fprintf(w, "// %s returns the %s field.\nfunc (m *%s) %s() string {\n", meth, prop, model, meth)
	if f.Pointer {
		fmt.Fprintf(w, "if m.%s == nil { return \"\" }\nreturn *m.%s\n}\n\n", f.Name, f.Name)
	} else {
		fmt.Fprintf(w, "return m.%s\n}\n\n", f.Name)
	}
}

// notNull lists the properties of n whose schema does not allow null, for
// the decoder (wire.Entry.NotNull at the top level, wire.Shape below).
func (g *generator) notNull(f *schemaFile, n *schemaNode) []string {
	var out []string
	for _, prop := range sortedKeys(n.Properties) {
		if !contains(g.typesOf(f, n.Properties[prop]), "null") {
			out = append(out, prop)
		}
	}
	return out
}

// typesOf is the JSON types a value's schema allows, through a $ref.
func (g *generator) typesOf(f *schemaFile, p *schemaNode) []string {
	types := p.types()
	if p.Ref != "" {
		if d, err := g.resolve(f, p); err == nil {
			types = d.node.types()
		}
	}
	return types
}
