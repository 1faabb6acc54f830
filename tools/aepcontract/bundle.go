package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// BundleID is the $id of the bundle; $refs inside it are all local.
const BundleID = "https://aephost.dev/contract/aep.schema.json"

// Kinds of message as the sources' x-aep-kind spells them.
const (
	kindRequest      = "request"
	kindNotification = "notification"
	kindReply        = "reply"
	kindEvent        = "event"
)

// source is one schema file of schemas/.
type source struct {
	name string // file name, e.g. "tools.json"
	raw  map[string]any
}

// message is one wire type of the contract.
type message struct {
	Type      string // the wire type, e.g. "tool/call/req"
	Kind      string
	Namespace string
	Reply     string // requests: the reply type
	Def       string // its definition's name in the bundle
	AliasOf   string // an alias's canonical type
	// ChangesState marks a request whose success changes the session's
	// state (x-aep-changes-state): its AsyncAPI operation carries the tag
	// changes-state, which the SDK generators read.
	ChangesState bool
	body         map[string]any
	file         string
}

// contract is everything read from schemas/: the bundle and the AsyncAPI
// document are both written from it.
type contract struct {
	messages   []*message          // sorted by type
	byType     map[string]*message //
	namespaces []string            // sorted
	defs       map[string]any      // non-message defs, by bundle name
	codes      []errorCode         // sorted by code
	envelope   map[string]any      // envelope.json's Envelope properties
	// replyEnvelope is envelope.json's Reply properties: a host message
	// carries only these of the envelope's fields (not an agent's
	// traceparent).
	replyEnvelope map[string]any
}

type errorCode struct {
	Code        string
	Retryable   bool
	Description string
	// Reasons are the retryable table's detail.reason values of the code
	// (schemas/errors/retryable.json), each with its own retryable.
	Reasons map[string]bool
}

// retryTable is schemas/errors/retryable.json: retryable per error code,
// overridden per detail.reason.
type retryTable struct {
	Description string `json:"description"`
	Codes       map[string]struct {
		Retryable *bool `json:"retryable"`
		Reasons   map[string]struct {
			Retryable *bool  `json:"retryable"`
			Why       string `json:"why"`
		} `json:"reasons"`
	} `json:"codes"`
}

// retryTableFile is the retryable table, relative to the schema directory.
const retryTableFile = "errors/retryable.json"

func loadRetryTable(dir string) (*retryTable, error) {
	p := filepath.Join(dir, retryTableFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var t retryTable
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &t, nil
}

// applyRetryTable gives each code its reasons and checks that the table
// and the catalogue agree: the same codes, the same retryable per code.
func (c *contract) applyRetryTable(t *retryTable) error {
	seen := map[string]bool{}
	for i := range c.codes {
		e := &c.codes[i]
		row, ok := t.Codes[e.Code]
		if !ok {
			return fmt.Errorf("%s: code %q of the catalogue has no row", retryTableFile, e.Code)
		}
		seen[e.Code] = true
		if row.Retryable == nil || *row.Retryable != e.Retryable {
			return fmt.Errorf("%s: code %q: retryable must be %v, as the catalogue (x-aep-codes) says", retryTableFile, e.Code, e.Retryable)
		}
		for reason, r := range row.Reasons {
			if r.Retryable == nil {
				return fmt.Errorf("%s: %s reason %q has no retryable", retryTableFile, e.Code, reason)
			}
			if e.Reasons == nil {
				e.Reasons = map[string]bool{}
			}
			e.Reasons[reason] = *r.Retryable
		}
	}
	for code := range t.Codes {
		if !seen[code] {
			return fmt.Errorf("%s: code %q is not in the catalogue (x-aep-codes)", retryTableFile, code)
		}
	}
	return nil
}

// reserved are names a stock generator would turn into an identifier that
// shadows a built-in of a target language (TypeScript's globals, Python's
// builtins): a def named so fails generation until renames maps it.
var reserved = map[string]bool{
	"Error": true, "Event": true, "Object": true, "Array": true, "String": true,
	"Number": true, "Boolean": true, "Symbol": true, "Function": true,
	"Promise": true, "Map": true, "Set": true, "Date": true, "Record": true,
	"Request": true, "Response": true, "Headers": true, "Message": true,
	"Node": true, "Element": true, "Document": true, "Window": true,
	"Exception": true, "Type": true, "Any": true, "Dict": true, "List": true,
}

// renames gives a bundle name to source defs whose own name would clash or
// mislead in a bundle of every file (key: "file.json#Def"). Empty while no
// def needs one; generation fails naming the def when one does.
var renames = map[string]string{}

// catalogueKey is core.json's enum of error codes, when the sources have
// one: the bundle's ErrorCode replaces it, written from x-aep-codes with
// each code's retryable, and $refs to it point there.
const catalogueKey = "core.json#Code"

// skipDefs are source defs the bundle does not carry as such.
var skipDefs = map[string]bool{
	"envelope.json#Envelope": true, // merged into every message
	"envelope.json#Reply":    true, // merged into every reply and event
}

func loadSources(dir string) ([]source, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []source
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		// A JSON file without $schema is a data file (a table the host
		// reads), not a schema.
		if _, ok := raw["$schema"]; !ok {
			continue
		}
		out = append(out, source{name: filepath.Base(p), raw: raw})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no schema files in %s", dir)
	}
	return out, nil
}

// typeName turns a wire type into a definition name: "tool/call/req" →
// "ToolCallReqMessage", "error" → "ErrorMessage". The suffix keeps message
// names apart from body shapes ("tool/event" vs tools.json's ToolEvent) and
// from every language's built-ins.
func typeName(t string) string {
	return pascal(t) + "Message"
}

func pascal(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if r == '/' || r == '_' || r == '-' || r == '.' {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(r))
			up = false
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func readContract(sources []source) (*contract, error) {
	c := &contract{byType: map[string]*message{}, defs: map[string]any{}}
	// Bundle names of every source def, for $ref rewriting.
	names := map[string]string{} // "file.json#Def" → bundle name
	owner := map[string]string{} // bundle name → "file.json#Def"
	claim := func(name, key string) error {
		if reserved[name] {
			return fmt.Errorf("%s: the bundle name %q shadows a built-in of a target language; add it to renames", key, name)
		}
		if other, ok := owner[name]; ok {
			return fmt.Errorf("%s and %s both become %q in the bundle; add one to renames", other, key, name)
		}
		owner[name] = key
		return nil
	}
	var eventBody map[string]any
	var eventKey string
	for _, s := range sources {
		if ns, _ := s.raw["x-aep-namespace"].(string); ns != "" {
			c.namespaces = append(c.namespaces, ns)
		}
		if codes, ok := s.raw["x-aep-codes"].(map[string]any); ok {
			for code, v := range codes {
				m, _ := v.(map[string]any)
				r, _ := m["retryable"].(bool)
				d, _ := m["description"].(string)
				c.codes = append(c.codes, errorCode{Code: code, Retryable: r, Description: d})
			}
		}
		defs, _ := s.raw["$defs"].(map[string]any)
		for _, dn := range sortedKeys(defs) {
			def, _ := defs[dn].(map[string]any)
			key := s.name + "#" + dn
			if skipDefs[key] {
				switch dn {
				case "Envelope":
					c.envelope, _ = def["properties"].(map[string]any)
				case "Reply":
					c.replyEnvelope, _ = def["properties"].(map[string]any)
				}
				continue
			}
			typ, _ := def["x-aep-type"].(string)
			kind, _ := def["x-aep-kind"].(string)
			if typ == "" && kind == kindEvent {
				if eventBody != nil {
					return nil, fmt.Errorf("two event bodies: %s and %s", eventKey, key)
				}
				eventBody, eventKey = def, key
				continue
			}
			if typ != "" {
				ns, _ := s.raw["x-aep-namespace"].(string)
				reply, _ := def["x-aep-reply"].(string)
				aliases, _ := def["x-aep-aliases"].([]any)
				changes, _ := def["x-aep-changes-state"].(bool)
				for i, t := range append([]any{typ}, aliases...) {
					t, _ := t.(string)
					m := &message{Type: t, Kind: kind, Namespace: ns, Reply: reply, Def: typeName(t), body: def, file: s.name, ChangesState: changes}
					if i > 0 {
						m.AliasOf = typ
					}
					if _, dup := c.byType[t]; dup {
						return nil, fmt.Errorf("%s: type %q defined twice", key, t)
					}
					if err := claim(m.Def, key); err != nil {
						return nil, err
					}
					c.byType[t] = m
					c.messages = append(c.messages, m)
				}
				continue
			}
			if key == catalogueKey {
				// The bundle writes ErrorCode itself, with retryable.
				names[key] = "ErrorCode"
				continue
			}
			name := dn
			if r, ok := renames[key]; ok {
				name = r
			}
			if err := claim(name, key); err != nil {
				return nil, err
			}
			names[key] = name
		}
	}
	if c.envelope == nil {
		return nil, fmt.Errorf("no envelope.json#/$defs/Envelope")
	}
	if eventBody == nil {
		return nil, fmt.Errorf("no event body (a def with x-aep-kind event and no x-aep-type)")
	}
	if len(c.codes) == 0 {
		return nil, fmt.Errorf("no x-aep-codes")
	}
	sort.Slice(c.codes, func(i, j int) bool { return c.codes[i].Code < c.codes[j].Code })
	sort.Strings(c.namespaces)
	for _, ns := range c.namespaces {
		t := ns + "/event"
		if _, dup := c.byType[t]; dup {
			return nil, fmt.Errorf("type %q is both a def and the event of namespace %s", t, ns)
		}
		m := &message{Type: t, Kind: kindEvent, Namespace: ns, Def: typeName(t), body: eventBody, file: strings.SplitN(eventKey, "#", 2)[0]}
		if err := claim(m.Def, eventKey+" as "+t); err != nil {
			return nil, err
		}
		c.byType[t] = m
		c.messages = append(c.messages, m)
	}
	sort.Slice(c.messages, func(i, j int) bool { return c.messages[i].Type < c.messages[j].Type })
	for _, m := range c.messages {
		// A body field named as an envelope field would be two fields of
		// one name in one JSON object (the wire encoder splices both).
		if props, ok := m.body["properties"].(map[string]any); ok && m.Kind != kindEvent {
			for pk := range props {
				_, env := c.envelope[pk]
				_, reply := c.replyEnvelope[pk]
				if (reply && !agentSends(m.Kind) && pk != "req_id") || (env && !slices.Contains([]string{"type", "id", "proto", "ts", "req_id"}, pk)) {
					return nil, fmt.Errorf("%s (%s): body field %q is an envelope field (envelope.json); name it otherwise", m.Type, m.file, pk)
				}
			}
		}
		if m.Kind == kindRequest {
			r, ok := c.byType[m.Reply]
			if !ok || r.Kind != kindReply {
				return nil, fmt.Errorf("%s: reply %q is not a reply type", m.Type, m.Reply)
			}
		}
	}
	for _, n := range []string{"ErrorCode", "AgentMessage", "HostMessage"} {
		if err := claim(n, "the bundle"); err != nil {
			return nil, err
		}
	}
	for _, ns := range c.namespaces {
		for _, n := range []string{pascal(ns) + "AgentMessage", pascal(ns) + "HostMessage"} {
			if err := claim(n, "the bundle"); err != nil {
				return nil, err
			}
		}
	}

	// Non-message defs, cleaned and with $refs rewritten to the bundle.
	for _, s := range sources {
		defs, _ := s.raw["$defs"].(map[string]any)
		for _, dn := range sortedKeys(defs) {
			name, ok := names[s.name+"#"+dn]
			if !ok {
				continue
			}
			v, err := clean(defs[dn], s.name, names)
			if err != nil {
				return nil, err
			}
			c.defs[name] = v
		}
	}
	// Every error code, wherever an error body names one, is the catalogue.
	if eb, ok := c.defs["ErrorBody"].(map[string]any); ok {
		codeProp(eb)
	}
	for _, m := range c.messages {
		b, err := clean(m.body, m.file, names)
		if err != nil {
			return nil, err
		}
		m.body = b.(map[string]any)
	}
	return c, nil
}

// codeProp makes an error body's `code` the ErrorCode catalogue.
func codeProp(def map[string]any) {
	props, _ := def["properties"].(map[string]any)
	if props == nil {
		return
	}
	props["code"] = map[string]any{"$ref": "#/$defs/ErrorCode"}
}

// standardFormats are the formats JSON Schema 2020-12 defines (§7.3); any
// other (the sources' "password", an OpenAPI term) is left out of the
// bundle, since strict validators refuse unknown formats. writeOnly, a
// standard keyword, still marks the secret.
var standardFormats = map[string]bool{
	"date-time": true, "date": true, "time": true, "duration": true,
	"email": true, "idn-email": true, "hostname": true, "idn-hostname": true,
	"ipv4": true, "ipv6": true, "uri": true, "uri-reference": true,
	"iri": true, "iri-reference": true, "uuid": true, "uri-template": true,
	"json-pointer": true, "relative-json-pointer": true, "regex": true,
}

// clean copies a schema value with our keywords (x-aep-*, go-jsonschema's
// goJSONSchema) dropped and every $ref pointed into the bundle.
func clean(v any, file string, names map[string]string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			// A $ref alone: stock generators (json-schema-to-typescript,
			// quicktype) make a numbered copy of the target's type for a
			// $ref with siblings (ChainNodeError1), so annotations beside
			// it are dropped; the target's own description stays.
			target, err := rewriteRef(ref, file, names)
			if err != nil {
				return nil, err
			}
			return map[string]any{"$ref": target}, nil
		}
		out := map[string]any{}
		for k, x := range v {
			switch {
			case strings.HasPrefix(k, "x-aep-"), k == "goJSONSchema":
				continue
			case k == "format":
				if f, _ := x.(string); !standardFormats[f] {
					continue
				}
			case k == "$ref":
				ref, _ := x.(string)
				target, err := rewriteRef(ref, file, names)
				if err != nil {
					return nil, err
				}
				out[k] = target
				continue
			}
			// Under properties, $defs and the like the keys are names, not
			// keywords: a property may be called "format".
			if k == "properties" || k == "patternProperties" || k == "$defs" || k == "dependentSchemas" {
				m, _ := x.(map[string]any)
				nm := map[string]any{}
				for pk, pv := range m {
					c, err := clean(pv, file, names)
					if err != nil {
						return nil, err
					}
					nm[pk] = c
				}
				out[k] = nm
				continue
			}
			c, err := clean(x, file, names)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := clean(x, file, names)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	default:
		return v, nil
	}
}

func rewriteRef(ref, file string, names map[string]string) (string, error) {
	target, frag, ok := strings.Cut(ref, "#")
	if !ok || !strings.HasPrefix(frag, "/$defs/") {
		return "", fmt.Errorf("%s: $ref %q: only refs to a $defs entry are bundled", file, ref)
	}
	if target == "" {
		target = file
	}
	target = filepath.Base(target)
	def := strings.TrimPrefix(frag, "/$defs/")
	name, ok := names[target+"#"+def]
	if !ok {
		return "", fmt.Errorf("%s: $ref %q names no bundled def", file, ref)
	}
	return "#/$defs/" + name, nil
}

// agentSends reports whether an agent sends messages of this kind.
func agentSends(kind string) bool { return kind == kindRequest || kind == kindNotification }

// wholeMessage is one wire type as a complete message: the envelope's
// fields beside the body's, type as a const, req_id required on what a
// host sends. A host message is closed (additionalProperties false): the
// contract's strict check. An agent message stays open, as the host
// ignores fields it does not know (docs/DECISIONS.md, Wire).
func (c *contract) wholeMessage(m *message) map[string]any {
	props := map[string]any{}
	for k, v := range c.envelope {
		if _, host := c.replyEnvelope[k]; !agentSends(m.Kind) && !host {
			continue
		}
		props[k] = v
	}
	if m.Kind == kindReply {
		// Fields only a host's reply carries (point).
		for k, v := range c.replyEnvelope {
			if _, ok := props[k]; !ok {
				props[k] = v
			}
		}
	}
	typeProp := map[string]any{"type": "string", "const": m.Type}
	if d, ok := c.envelope["type"].(map[string]any)["description"]; ok {
		typeProp["description"] = d
	}
	props["type"] = typeProp
	required := map[string]bool{"type": true, "id": true, "proto": true, "ts": true}
	if !agentSends(m.Kind) {
		required["req_id"] = true
	}
	out := map[string]any{"type": "object"}
	for k, v := range m.body {
		switch k {
		case "properties":
			for pk, pv := range v.(map[string]any) {
				if _, env := c.envelope[pk]; env {
					continue // the envelope's own field wins
				}
				props[pk] = pv
			}
		case "required":
			for _, r := range v.([]any) {
				required[r.(string)] = true
			}
		case "type", "title", "additionalProperties", "unevaluatedProperties":
		default:
			out[k] = v
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if rules, ok := requiredChoice(kw, out[kw]); ok {
			delete(out, kw)
			out["allOf"] = append(asList(out["allOf"]), rules...)
		}
	}
	if m.Type == "error" {
		codeProp(map[string]any{"properties": props})
		out["allOf"] = append(asList(out["allOf"]), c.retryableRules()...)
	}
	desc, _ := out["description"].(string)
	switch {
	case m.AliasOf != "":
		desc = fmt.Sprintf("`%s`, accepted as `%s`. %s", m.Type, m.AliasOf, desc)
	case m.Kind == kindEvent:
		desc = fmt.Sprintf("`%s`: an event of a %s request. %s", m.Type, m.Namespace, desc)
	default:
		desc = fmt.Sprintf("`%s` (%s). %s", m.Type, m.Kind, desc)
	}
	out["description"] = strings.TrimSpace(desc)
	out["properties"] = props
	out["required"] = sortedKeys(required)
	if agentSends(m.Kind) {
		out["additionalProperties"] = true
	} else {
		out["additionalProperties"] = false
	}
	return out
}

// requiredChoice restates an anyOf or oneOf whose branches list required
// fields, each perhaps with constraints on them (the sources' selector
// rules: memory/forget, chain/run, env/spaces), with `not`, which means the
// same: anyOf B1…Bn is "not every Bi failing", oneOf adds "no two Bi both
// holding". Stock generators turn an object-level anyOf/oneOf into an
// intersection with a numbered type (MemoryForgetReqMessage1); `not` they
// leave alone.
func requiredChoice(kw string, v any) ([]any, bool) {
	branches, ok := v.([]any)
	if !ok || len(branches) == 0 {
		return nil, false
	}
	for _, b := range branches {
		m, ok := b.(map[string]any)
		if !ok {
			return nil, false
		}
		req, ok := m["required"].([]any)
		if !ok || len(req) == 0 {
			return nil, false
		}
		for k := range m {
			if k != "required" && k != "description" && k != "properties" {
				return nil, false
			}
		}
		// Constraints only on the branch's required fields, never a type:
		// the message's own properties give the shape.
		props, _ := m["properties"].(map[string]any)
		for name, c := range props {
			if !slices.Contains(req, any(name)) {
				return nil, false
			}
			if cm, ok := c.(map[string]any); !ok || cm["type"] != nil || cm["$ref"] != nil {
				return nil, false
			}
		}
	}
	var failing []any
	for _, b := range branches {
		failing = append(failing, map[string]any{"not": b})
	}
	out := []any{map[string]any{"not": map[string]any{"allOf": failing}}}
	if kw == "oneOf" {
		for i := range branches {
			for j := i + 1; j < len(branches); j++ {
				out = append(out, map[string]any{"not": map[string]any{"allOf": []any{branches[i], branches[j]}}})
			}
		}
	}
	return out, true
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// retryableRules states the retryable table as if/then pairs, so a
// standard validator refuses `retryable: true` on parse_error, or on a
// runtime_error whose detail.reason is "denied": one pair per listed
// reason, and one for the code with any other reason or none.
func (c *contract) retryableRules() []any {
	then := func(r bool) map[string]any {
		return map[string]any{"properties": map[string]any{"retryable": map[string]any{"const": r}}}
	}
	var out []any
	for _, e := range c.codes {
		reasons := sortedKeys(e.Reasons)
		for _, reason := range reasons {
			out = append(out, map[string]any{
				"if": map[string]any{
					"properties": map[string]any{
						"code": map[string]any{"const": e.Code},
						"detail": map[string]any{
							"properties": map[string]any{"reason": map[string]any{"const": reason}},
							"required":   []any{"reason"},
						},
					},
					"required": []any{"code", "detail"},
				},
				"then": then(e.Reasons[reason]),
			})
		}
		cond := map[string]any{
			"properties": map[string]any{"code": map[string]any{"const": e.Code}},
			"required":   []any{"code"},
		}
		if len(reasons) > 0 {
			listed := make([]any, len(reasons))
			for i, r := range reasons {
				listed[i] = r
			}
			cond["properties"].(map[string]any)["detail"] = map[string]any{
				"not": map[string]any{
					"properties": map[string]any{"reason": map[string]any{"enum": listed}},
					"required":   []any{"reason"},
				},
			}
		}
		out = append(out, map[string]any{"if": cond, "then": then(e.Retryable)})
	}
	return out
}

func (c *contract) errorCode() map[string]any {
	var enum []any
	var retry, noRetry []string
	for _, e := range c.codes {
		enum = append(enum, e.Code)
		if e.Retryable {
			retry = append(retry, e.Code)
		} else {
			noRetry = append(noRetry, e.Code)
		}
	}
	return map[string]any{
		"type": "string",
		"enum": enum,
		"description": fmt.Sprintf("An error's code (spec §7). Retryable: %s. Not retryable: %s. "+
			"ErrorMessage states each code's retryable as a rule.",
			strings.Join(retry, ", "), strings.Join(noRetry, ", ")),
	}
}

func refTo(name string) map[string]any { return map[string]any{"$ref": "#/$defs/" + name} }

func union(desc string, ms []*message) map[string]any {
	var l []any
	for _, m := range ms {
		l = append(l, refTo(m.Def))
	}
	return map[string]any{"description": desc, "oneOf": l}
}

// filter returns the messages for which keep holds, in type order.
func (c *contract) filter(keep func(*message) bool) []*message {
	var out []*message
	for _, m := range c.messages {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// bundle is the whole JSON Schema document.
func (c *contract) bundle() map[string]any {
	defs := map[string]any{}
	for k, v := range c.defs {
		defs[k] = v
	}
	defs["ErrorCode"] = c.errorCode()
	for _, m := range c.messages {
		defs[m.Def] = c.wholeMessage(m)
	}
	defs["AgentMessage"] = union("Any message an agent sends: requests and notifications. `type` tells them apart.",
		c.filter(func(m *message) bool { return agentSends(m.Kind) }))
	defs["HostMessage"] = union("Any message a host sends: replies (error included) and events, each with req_id. `type` tells them apart.",
		c.filter(func(m *message) bool { return !agentSends(m.Kind) }))
	for _, ns := range c.namespaces {
		if a := c.filter(func(m *message) bool { return m.Namespace == ns && agentSends(m.Kind) }); len(a) > 0 {
			defs[pascal(ns)+"AgentMessage"] = union(fmt.Sprintf("The messages of namespace %s an agent sends.", ns), a)
		}
		defs[pascal(ns)+"HostMessage"] = union(fmt.Sprintf("The messages of namespace %s a host sends (error is core's).", ns),
			c.filter(func(m *message) bool { return m.Namespace == ns && !agentSends(m.Kind) }))
	}
	return map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         BundleID,
		"title":       "AepMessage",
		"description": "Every wire message of the Agent-Environment Protocol 1.0, whole: envelope and body in one object, `type` a const. Generated by tools/aepcontract from schemas/; do not edit. A line an agent sends validates against AgentMessage, a line a host sends against HostMessage (closed: a field the contract does not name is refused).",
		"oneOf":       []any{refTo("AgentMessage"), refTo("HostMessage")},
		"$defs":       defs,
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
