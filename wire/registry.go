package wire

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Kind says who sends a message type and whether it is answered.
type Kind uint8

const (
	// KindRequest is sent by the agent and answered by exactly one reply.
	KindRequest Kind = iota + 1
	// KindNotification is sent by the agent and never answered (cancel, shutdown).
	KindNotification
	// KindReply is sent by the host in answer to a request.
	KindReply
	// KindEvent is sent by the host while a request is in flight.
	KindEvent
)

// AgentSends reports whether an agent may send messages of this kind.
func (k Kind) AgentSends() bool { return k == KindRequest || k == KindNotification }

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindReply:
		return "reply"
	case KindEvent:
		return "event"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Entry is one row of the type registry: everything the kernel needs to know
// about a message type. The generator emits one per message of schemas/.
type Entry struct {
	Type       string
	Kind       Kind
	Namespace  string
	Capability string // "" for types that need no capability (core, session)
	// Kernel marks types the kernel answers itself (handshake, ping, cancel, shutdown).
	Kernel bool
	// Reply is the reply type of a request.
	Reply string
	// Owner, when set, is the kind of claim (see server.Claim) whose owner
	// handles the request alone: the request's AuditTarget names what is
	// owned (x-aep-owner; tool/call is owned per tool name).
	Owner string
	// ChangesState marks a request whose success changes the session's
	// state that a snapshot holds (x-aep-changes-state): its reply takes
	// the session's next point (docs/DECISIONS.md, Points).
	ChangesState bool
	// Required lists the top-level fields that must be present.
	Required []string
	// NotNull lists the top-level fields whose schema does not allow null:
	// the decoder refuses a null there, as JSON Schema does, rather than
	// reading it as absent.
	NotNull []string
	// Shape checks required fields nested inside the message; nil if none.
	Shape *Shape
	// New returns a model filled with the schema's defaults.
	New func() Message
	// Handles reports whether a plugin implements this type's namespace handler.
	Handles func(plugin any) bool
	// Invoke calls the plugin's handler method for this type.
	Invoke func(ctx context.Context, plugin any, s Scope, req Message) (Message, error)
	// Merge, when set, concatenates the list field of src into dst (x-aep-merge):
	// broadcast replies of list types are merged.
	Merge func(dst, src Message)
	// Page, when set, makes a merged list reply one exact page: sorted by the
	// items' key, cut to the request's limit, with the cursor set when more
	// follow (x-aep-merge with key, limit and cursor).
	Page func(req, reply Message)
	// Fallback, when set, builds the reply sent when every plugin declines (x-aep-fallback).
	Fallback func(req Message) Message
}

// Namespace groups the types of one schema file.
type Namespace struct {
	Name       string // e.g. "tool"
	Capability string // e.g. "tools"; "" when always on
	Kernel     bool   // answered by the kernel
	Event      string // the namespace's event type, e.g. "tool/event"
}

// Registry maps type strings to entries (spec §1 dispatch rule 1).
type Registry struct {
	byType     map[string]*Entry
	namespaces map[string]*Namespace
	aliases    map[string]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byType: map[string]*Entry{}, namespaces: map[string]*Namespace{}, aliases: map[string]string{}}
}

// AddNamespace records a namespace; it panics on a conflicting duplicate,
// since registries are built at init from generated code.
func (r *Registry) AddNamespace(ns *Namespace) {
	if old, ok := r.namespaces[ns.Name]; ok && *old != *ns {
		panic(fmt.Sprintf("wire: namespace %q registered twice", ns.Name))
	}
	r.namespaces[ns.Name] = ns
}

// Add registers entries; a duplicate type panics.
func (r *Registry) Add(entries ...*Entry) {
	for _, e := range entries {
		if _, ok := r.byType[e.Type]; ok {
			panic(fmt.Sprintf("wire: type %q registered twice", e.Type))
		}
		r.byType[e.Type] = e
	}
	intern(entries)
}

// Alias makes alias resolve to the entry of target (for the spec's exact
// spellings such as `env/data/add`, docs/DECISIONS.md, Wire).
func (r *Registry) Alias(alias, target string) {
	if _, ok := r.byType[alias]; ok {
		panic(fmt.Sprintf("wire: alias %q shadows a type", alias))
	}
	r.aliases[alias] = target
}

// Lookup returns the entry of a type or alias, or nil.
func (r *Registry) Lookup(t string) *Entry {
	if e, ok := r.byType[t]; ok {
		return e
	}
	if a, ok := r.aliases[t]; ok {
		return r.byType[a]
	}
	return nil
}

// Namespace returns a namespace by name, or nil.
func (r *Registry) Namespace(name string) *Namespace { return r.namespaces[name] }

// NamespaceOf returns the namespace part of a type string.
func NamespaceOf(t string) string {
	if i := strings.IndexByte(t, '/'); i >= 0 {
		return t[:i]
	}
	return t
}

// Entries returns every entry sorted by type.
func (r *Registry) Entries() []*Entry {
	out := make([]*Entry, 0, len(r.byType))
	for _, e := range r.byType {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// Namespaces returns every namespace sorted by name.
func (r *Registry) Namespaces() []*Namespace {
	out := make([]*Namespace, 0, len(r.namespaces))
	for _, n := range r.namespaces {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Capabilities returns the capability names that namespaces require.
func (r *Registry) Capabilities() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range r.namespaces {
		if n.Capability != "" && !seen[n.Capability] {
			seen[n.Capability] = true
			out = append(out, n.Capability)
		}
	}
	sort.Strings(out)
	return out
}

// Requester sends a request and waits for its reply; the client implements
// it, and the generated typed methods call it.
type Requester interface {
	Request(ctx context.Context, req Message) (Message, error)
}

// FillTemplate returns a JSON template with every string value of the form
// "{{field}}" replaced by the JSON encoding of that top-level field of req
// (used by generated fallbacks).
func FillTemplate(tmpl string, req Message) []byte {
	if !strings.Contains(tmpl, `"{{`) {
		return []byte(tmpl)
	}
	raw, err := Marshal(req)
	var fields map[string]any
	if err == nil {
		_ = Unmarshal(raw, &fields)
	}
	out := tmpl
	for {
		i := strings.Index(out, `"{{`)
		if i < 0 {
			break
		}
		j := strings.Index(out[i:], `}}"`)
		if j < 0 {
			break
		}
		name := out[i+3 : i+j]
		v, _ := Marshal(fields[name])
		if fields[name] == nil {
			v = []byte(`""`)
		}
		out = out[:i] + string(v) + out[i+j+3:]
	}
	return []byte(out)
}

// Union returns a registry holding the entries of r and of others; a type
// defined twice panics.
func (r *Registry) Union(others ...*Registry) *Registry {
	out := NewRegistry()
	for _, src := range append([]*Registry{r}, others...) {
		for _, n := range src.namespaces {
			out.AddNamespace(n)
		}
		for _, e := range src.byType {
			out.Add(e)
		}
		for a, t := range src.aliases {
			out.aliases[a] = t
		}
	}
	return out
}
