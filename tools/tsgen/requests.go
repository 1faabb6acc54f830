package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// request is one message an agent sends, with what answers it.
type request struct {
	Def   string // e.g. ToolCallReqMessage
	Type  string // e.g. tool/call/req
	Reply string // def of the reply; empty for a notification
	Event string // def of the namespace's event; empty when it has none
	// ChangesState: the operation carries the tag changes-state (its
	// successful reply takes the session's next point).
	ChangesState bool
}

// asyncDoc is the part of gen/contract/asyncapi.yaml read here: each
// operation the host receives, its message and its reply's messages.
type asyncDoc struct {
	Operations map[string]struct {
		Action   string   `yaml:"action"`
		Messages []refObj `yaml:"messages"`
		Tags     []struct {
			Name string `yaml:"name"`
		} `yaml:"tags"`
		Reply *struct {
			Messages []refObj `yaml:"messages"`
		} `yaml:"reply"`
	} `yaml:"operations"`
}

type refObj struct {
	Ref string `yaml:"$ref"`
}

func (r refObj) def() string { return r.Ref[strings.LastIndex(r.Ref, "/")+1:] }

// requestTable reads the requests and notifications from the AsyncAPI
// document. Each transport repeats the same operations; they are merged
// by message, and two transports disagreeing on a reply is an error.
func requestTable(asyncapi []byte) ([]request, error) {
	var doc asyncDoc
	if err := yaml.Unmarshal(asyncapi, &doc); err != nil {
		return nil, fmt.Errorf("parse asyncapi: %w", err)
	}
	byDef := map[string]request{}
	for name, op := range doc.Operations {
		if op.Action != "receive" {
			continue
		}
		if len(op.Messages) != 1 {
			return nil, fmt.Errorf("asyncapi operation %s: %d messages, want 1", name, len(op.Messages))
		}
		r := request{Def: op.Messages[0].def()}
		for _, tag := range op.Tags {
			r.ChangesState = r.ChangesState || tag.Name == "changes-state"
		}
		if op.Reply != nil {
			for _, m := range op.Reply.Messages {
				if d := m.def(); d != "ErrorMessage" {
					r.Reply = d
				}
			}
			if r.Reply == "" {
				r.Reply = "ErrorMessage"
			}
		}
		if prev, ok := byDef[r.Def]; ok && prev != r {
			return nil, fmt.Errorf("asyncapi: %s answered by %s and by %s", r.Def, prev.Reply, r.Reply)
		}
		byDef[r.Def] = r
	}
	out := make([]request, 0, len(byDef))
	for _, r := range byDef {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Def < out[j].Def })
	return out, nil
}

// constType is the `type` const of a message def.
func (e *emitter) constType(def string) (string, error) {
	s := e.defs[def]
	if s == nil || s.Properties["type"] == nil {
		return "", fmt.Errorf("%s is not a message of the bundle", def)
	}
	var t string
	if err := json.Unmarshal(s.Properties["type"].Const, &t); err != nil {
		return "", fmt.Errorf("%s: type is not a string const: %w", def, err)
	}
	return t, nil
}

// eventOf maps each agent message to its namespace's event def, through
// the per-namespace unions <Ns>AgentMessage and <Ns>HostMessage.
func (e *emitter) eventOf() (map[string]string, error) {
	out := map[string]string{}
	for name, s := range e.defs {
		ns, ok := strings.CutSuffix(name, "AgentMessage")
		if !ok || ns == "" {
			continue
		}
		host := e.defs[ns+"HostMessage"]
		if host == nil {
			return nil, fmt.Errorf("%s has no %sHostMessage", name, ns)
		}
		event := ""
		for _, m := range host.OneOf {
			d := m.Ref[strings.LastIndex(m.Ref, "/")+1:]
			t, err := e.constType(d)
			if err != nil {
				return nil, err
			}
			if strings.HasSuffix(t, "/event") {
				event = d
			}
		}
		for _, m := range s.OneOf {
			out[m.Ref[strings.LastIndex(m.Ref, "/")+1:]] = event
		}
	}
	return out, nil
}

// methodName is the camelCase of a request type without its /req suffix:
// tool/call/req → toolCall, env/step_batch/req → envStepBatch.
func methodName(typ string) string {
	typ = strings.TrimSuffix(typ, "/req")
	var b strings.Builder
	for i, w := range strings.FieldsFunc(typ, func(r rune) bool { return r == '/' || r == '_' }) {
		if i > 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		b.WriteString(w)
	}
	return b.String()
}

// bodyOptional tells whether a message needs no field beyond the envelope.
func (e *emitter) bodyOptional(def string) bool {
	for _, r := range e.defs[def].Required {
		if !slices.Contains(envelope, r) {
			return false
		}
	}
	return true
}

// requests writes the request table as types and data, and the Methods
// class with one typed method per request.
func (e *emitter) requests(reqs []request) error {
	events, err := e.eventOf()
	if err != nil {
		return err
	}
	type row struct {
		request
		typ, reply, event, method string
	}
	var rows, notes []row
	eventDefs := map[string]bool{}
	for _, r := range reqs {
		t, err := e.constType(r.Def)
		if err != nil {
			return err
		}
		x := row{request: r, typ: t}
		if r.Reply == "" {
			notes = append(notes, x)
			continue
		}
		if x.reply, err = e.constType(r.Reply); err != nil {
			return err
		}
		x.Event = events[r.Def]
		if x.Event != "" {
			eventDefs[x.Event] = true
			if x.event, err = e.constType(x.Event); err != nil {
				return err
			}
		}
		rows = append(rows, x)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].typ < rows[j].typ })
	sort.Slice(notes, func(i, j int) bool { return notes[i].typ < notes[j].typ })

	// One method per name: an alias type (env/data/add for
	// env/data/add/req) stays reachable through request() only.
	methods := map[string]int{}
	for i, r := range rows {
		m := methodName(r.typ)
		if j, ok := methods[m]; ok {
			if strings.HasSuffix(rows[j].typ, "/req") {
				continue
			}
			rows[j].method = ""
		}
		methods[m] = i
		rows[i].method = m
	}

	e.p("/** The envelope fields; the client sets them on every message it sends. */\n")
	e.p("export type EnvelopeField = %s;\n", quoteJoin(envelope))
	e.p("/** A message without its envelope: what a caller passes to send it. */\n")
	e.p("export type Body<M> = Omit<M, EnvelopeField>;\n\n")

	evs := make([]string, 0, len(eventDefs))
	for d := range eventDefs {
		evs = append(evs, d)
	}
	sort.Strings(evs)
	e.p("/** Any event a host sends while a request is in flight (spec §6). */\n")
	e.p("export type EventMessage =\n  | %s;\n\n", strings.Join(evs, "\n  | "))

	e.p("/** Every request type with its message, its reply and its event message. */\n")
	e.p("export interface RequestTypes {\n")
	for _, r := range rows {
		ev := "never"
		if r.Event != "" {
			ev = r.Event
		}
		e.p("  %q: { request: %s; reply: %s; event: %s };\n", r.typ, r.Def, r.Reply, ev)
	}
	e.p("}\n\n/** A type an agent sends and the host answers. */\nexport type RequestType = keyof RequestTypes;\n\n")

	e.p("/**\n * Each request type's reply type and event type, for routing at run time,\n * and whether its successful reply takes the session's next point\n * (changesState: the AsyncAPI operation's changes-state tag).\n */\n")
	e.p("export const requestTable: { readonly [T in RequestType]: { readonly reply: RequestTypes[T][\"reply\"][\"type\"]; readonly event: RequestTypes[T][\"event\"][\"type\"] | null; readonly changesState: boolean } } = {\n")
	for _, r := range rows {
		ev := "null"
		if r.event != "" {
			ev = fmt.Sprintf("%q", r.event)
		}
		e.p("  %q: { reply: %q, event: %s, changesState: %v },\n", r.typ, r.reply, ev, r.ChangesState)
	}
	e.p("};\n\n")

	e.p("/** Every notification type (no reply) with its message. */\n")
	e.p("export interface NotificationTypes {\n")
	for _, n := range notes {
		e.p("  %q: %s;\n", n.typ, n.Def)
	}
	e.p("}\n\n/** A type an agent sends that gets no reply. */\nexport type NotificationType = keyof NotificationTypes;\n\n")

	e.p("/**\n * One typed method per request type. A client implements request();\n * O is its per-request options (cancellation, events).\n */\n")
	e.p("export abstract class Methods<O> {\n")
	e.p("  /** Sends a request and resolves with its reply; an `error` reply rejects. */\n")
	e.p("  abstract request<T extends RequestType>(type: T, body: Body<RequestTypes[T][\"request\"]>, options?: O): Promise<RequestTypes[T][\"reply\"]>;\n")
	for _, r := range rows {
		if r.method == "" {
			continue
		}
		e.p("\n")
		e.doc("  ", e.defs[r.Def].Description)
		def := ""
		if e.bodyOptional(r.Def) {
			def = " = {}"
		}
		e.p("  %s(body: Body<%s>%s, options?: O): Promise<%s> {\n", r.method, r.Def, def, r.Reply)
		e.p("    return this.request(%q, body, options);\n  }\n", r.typ)
	}
	e.p("}\n")
	return nil
}

func quoteJoin(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " | ")
}
