// Package conformance judges any host of the protocol: its messages
// against schemas/, and its behaviour against the spec. The JSON Schema
// files are the contract, so lines are checked by a generic JSON Schema
// validator (santhosh-tekuri/jsonschema), independently of the generated Go
// models and validators the aep host itself decodes with.
//
// The kit ([Run], `aep conformance`) drives a running host through a
// [Target] (stdio, HTTP+SSE, single exchange, WebSocket) and reports one
// [Result] per check of [Checks], each MUST or SHOULD with the section it
// cites; a [Fixture] gives the host content some checks need, a
// [Baseline] the failures a host expects (docs/contract.md). The
// subpackage mutate breaks a real host one rule at a time, and kittest
// runs the kit against aep in tests.
//
// The line checker's API:
//   - [Load] compiles every schema file of a directory and [LoadFS] those of an
//     fs.FS; [SchemaDir] finds schemas/ of this module by walking up from the
//     working directory, so a test of any package can load it.
//   - [Checker.CheckHostLine] checks one line a host sent: the framing of
//     docs/DECISIONS.md, Wire (one JSON object on one line, UTF-8, no duplicate keys,
//     nothing after it), the envelope against envelope.json#/$defs/Envelope,
//     a req_id (every host message is a reply, an error or an event), and the
//     body against the def whose x-aep-type is the line's type, or the event
//     def of core.json for "<ns>/event". Unknown types and types only an agent
//     sends are violations.
//   - [Checker.CheckAgentLine] checks a line an agent sent the same way,
//     without the req_id rule, and only for types an agent may send.
//   - [NewRecorder] returns a [Recorder] for tests: it checks each line handed
//     to it against schemas/ of this module and fails the test on any
//     violation; [NewRecorderFor] does the same with a given Checker.
//
// Every failure is a [*Violation]. A transport test wires a Recorder in
// where lines cross:
//
//	rec := conformance.NewRecorder(t)
//	rec.Agent(line) // each line the agent writes
//	rec.Host(line)  // each line the host writes
//
// Schemas are read from disk only: $refs resolve between the files by their
// $id, and nothing is fetched over the network (docs/DECISIONS.md, Security defaults).
package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/aephost/aep/schemas"
	"github.com/aephost/aep/wire"
)

// Kinds of message, as the schemas' x-aep-kind spells them.
const (
	kindRequest      = "request"
	kindNotification = "notification"
	kindReply        = "reply"
	kindEvent        = "event"
)

// Checker validates wire lines against the compiled schemas. It is safe for
// concurrent use: compiled schemas are read-only.
type Checker struct {
	envelope *jsonschema.Schema
	event    *jsonschema.Schema
	types    map[string]*typeSchema // by x-aep-type and x-aep-aliases
	events   map[string]bool        // "<ns>/event" for every x-aep-namespace
}

type typeSchema struct {
	typ        string // the def's x-aep-type (an alias maps to its def's)
	loc        string // the def's absolute location, for messages
	kind       string
	schema     *jsonschema.Schema
	namespace  string // the file's x-aep-namespace
	capability string // x-aep-capability of the def, else of the file
	kernel     bool   // the file's x-aep-kernel: answered by the kernel itself
	reply      string // x-aep-reply of a request
	def        map[string]any
}

// Violation is a line that does not conform. Err is the cause: a
// *jsonschema.ValidationError when a schema failed, a wire.ErrSyntax error
// when the framing did.
type Violation struct {
	// Type is the line's `type`, when it could be read.
	Type   string
	Reason string
	Err    error
}

func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString("conformance: ")
	if v.Type != "" {
		fmt.Fprintf(&b, "%s: ", v.Type)
	}
	b.WriteString(v.Reason)
	if v.Err != nil {
		b.WriteString(": ")
		b.WriteString(describe(v.Err))
	}
	return b.String()
}

func (v *Violation) Unwrap() error { return v.Err }

// describe renders a schema failure on one line: each failing leaf as
// "at /pointer: reason", which is what a reader of a test log needs.
func describe(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e.Error()) // "at '/pointer': reason"
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(leaves, "; ")
}

// Load compiles every *.json schema file of dir.
func Load(dir string) (*Checker, error) {
	c, err := LoadFS(os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return c, nil
}

// LoadFS compiles every *.json schema file at the root of each fsys (for
// example an embed.FS holding schemas/); a file name may appear only once.
func LoadFS(fsyss ...fs.FS) (*Checker, error) {
	from := map[string]fs.FS{}
	var names []string
	for _, fsys := range fsyss {
		found, err := fs.Glob(fsys, "*.json")
		if err != nil {
			return nil, err
		}
		for _, n := range found {
			if _, dup := from[n]; dup {
				return nil, fmt.Errorf("conformance: schema file %s given twice", n)
			}
			from[n] = fsys
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("conformance: no schema files")
	}
	sort.Strings(names)
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.UseLoader(noNetwork{})
	type file struct {
		name, id string
		raw      map[string]any
	}
	var files []file
	ids := map[string]string{}
	for _, name := range names {
		b, err := fs.ReadFile(from[name], name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", name, err)
		}
		raw, _ := doc.(map[string]any)
		id, _ := raw["$id"].(string)
		if id == "" {
			return nil, fmt.Errorf("conformance: %s: no $id", name)
		}
		if other, ok := ids[id]; ok {
			return nil, fmt.Errorf("conformance: %s and %s have the same $id %s", other, name, id)
		}
		ids[id] = name
		if err := comp.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("conformance: %s: %w", name, err)
		}
		files = append(files, file{name: name, id: id, raw: raw})
	}
	idOf := func(name string) string {
		for _, f := range files {
			if f.name == name {
				return f.id
			}
		}
		return ""
	}

	var err error
	c := &Checker{types: map[string]*typeSchema{}, events: map[string]bool{}}
	envID := idOf("envelope.json")
	if envID == "" {
		return nil, errors.New("conformance: no envelope.json")
	}
	if c.envelope, err = comp.Compile(envID + "#/$defs/Envelope"); err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	for _, f := range files {
		if ns, _ := f.raw["x-aep-namespace"].(string); ns != "" {
			c.events[ns+"/event"] = true
		}
		defs, _ := f.raw["$defs"].(map[string]any)
		for _, name := range sortedKeys(defs) {
			def, _ := defs[name].(map[string]any)
			typ, _ := def["x-aep-type"].(string)
			kind, _ := def["x-aep-kind"].(string)
			loc := f.id + "#/$defs/" + escapePointer(name)
			if typ == "" {
				// The event body has a kind but no type of its own: the
				// envelope carries "<ns>/event".
				if kind == kindEvent {
					if c.event != nil {
						return nil, fmt.Errorf("conformance: two event defs, the second at %s", loc)
					}
					if c.event, err = comp.Compile(loc); err != nil {
						return nil, fmt.Errorf("conformance: %w", err)
					}
				}
				continue
			}
			switch kind {
			case kindRequest, kindNotification, kindReply, kindEvent:
			default:
				return nil, fmt.Errorf("conformance: %s: x-aep-kind %q", loc, kind)
			}
			sch, err := comp.Compile(loc)
			if err != nil {
				return nil, fmt.Errorf("conformance: %w", err)
			}
			ns, _ := f.raw["x-aep-namespace"].(string)
			capName, ok := def["x-aep-capability"].(string)
			if !ok {
				capName, _ = f.raw["x-aep-capability"].(string)
			}
			reply, _ := def["x-aep-reply"].(string)
			kernel, _ := f.raw["x-aep-kernel"].(bool)
			ts := &typeSchema{typ: typ, loc: loc, kind: kind, schema: sch, namespace: ns, capability: capName, kernel: kernel, reply: reply, def: def}
			aliases, _ := def["x-aep-aliases"].([]any)
			for _, t := range append([]any{typ}, aliases...) {
				t, _ := t.(string)
				if old, ok := c.types[t]; ok {
					return nil, fmt.Errorf("conformance: type %q defined at %s and %s", t, old.loc, loc)
				}
				c.types[t] = ts
			}
		}
	}
	if c.event == nil {
		// Schemas written before the event def carried x-aep-kind.
		if coreID := idOf("core.json"); coreID != "" {
			if c.event, err = comp.Compile(coreID + "#/$defs/Event"); err != nil {
				return nil, fmt.Errorf("conformance: %w", err)
			}
		}
	}
	return c, nil
}

// noNetwork refuses every URL: the schema files are registered up front,
// and a $ref that leaves them is an error rather than a download.
type noNetwork struct{}

func (noNetwork) Load(url string) (any, error) {
	return nil, fmt.Errorf("conformance: %s is not one of the schema files (no loading over the network)", url)
}

// Module returns the checker of this module's own schemas (the embedded
// schemas/), with the schema files of extra added: a test host that speaks
// a test namespace checks its lines against both.
func Module(extra ...fs.FS) (*Checker, error) {
	return LoadFS(append([]fs.FS{schemas.FS}, extra...)...)
}

// SchemaDir returns the schemas/ directory of the module that holds the
// working directory, found by walking up to the go.mod of
// github.com/aephost/aep. Tests run in their package's directory, so any
// test of the module finds it.
func SchemaDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isAEPModule(b) {
			return filepath.Join(dir, "schemas"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("conformance: no go.mod of github.com/aephost/aep above the working directory")
		}
		dir = parent
	}
}

func isAEPModule(gomod []byte) bool {
	for _, l := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == "github.com/aephost/aep" {
			return true
		}
	}
	return false
}

// Types returns every type string the schemas define, aliases included,
// sorted.
func (c *Checker) Types() []string {
	return sortedKeys(c.types)
}

// CheckHostLine checks one line a host sent. See the package doc.
func (c *Checker) CheckHostLine(line []byte) error {
	return c.check(line, true)
}

// CheckAgentLine checks one line an agent sent. See the package doc.
func (c *Checker) CheckAgentLine(line []byte) error {
	return c.check(line, false)
}

func (c *Checker) check(line []byte, host bool) error {
	// One line of NDJSON: a trailing newline ends it, any other newline
	// would split it in two for the peer. A host must not send a bare \r
	// either, since readers with universal newlines split on it; from an
	// agent it is JSON white space, which the host accepts.
	body := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	breaks := "\n"
	if host {
		breaks = "\r\n"
	}
	if i := bytes.IndexAny(body, breaks); i >= 0 {
		return &Violation{Reason: fmt.Sprintf("line break at byte %d inside the message", i)}
	}
	var sc wire.Scanned
	if err := wire.Scan(body, &sc); err != nil {
		return &Violation{Reason: "not one JSON object", Err: err}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return &Violation{Type: sc.Type, Reason: "not JSON", Err: err}
	}
	if err := c.envelope.Validate(v); err != nil {
		return &Violation{Type: sc.Type, Reason: "envelope does not match envelope.json", Err: err}
	}
	obj := v.(map[string]any)
	typ := obj["type"].(string) // the envelope schema made sure
	ts, known := c.types[typ]
	kind, sch := "", (*jsonschema.Schema)(nil)
	switch {
	case known:
		kind, sch = ts.kind, ts.schema
	case c.events[typ] && c.event != nil:
		kind, sch = kindEvent, c.event
	default:
		return &Violation{Type: typ, Reason: "unknown type"}
	}
	if host {
		if kind != kindReply && kind != kindEvent {
			return &Violation{Type: typ, Reason: fmt.Sprintf("a host never sends %s messages", kind)}
		}
		reqID, ok := obj["req_id"].(string)
		if !ok {
			return &Violation{Type: typ, Reason: "no req_id: every host message answers a request"}
		}
		// Only an error may leave req_id empty: it answers a line whose
		// id could not be read (core.json Error).
		if reqID == "" && typ != "error" {
			return &Violation{Type: typ, Reason: "empty req_id"}
		}
	} else if kind != kindRequest && kind != kindNotification {
		return &Violation{Type: typ, Reason: fmt.Sprintf("an agent never sends %s messages", kind)}
	}
	if err := sch.Validate(v); err != nil {
		loc := "the event def"
		if known {
			loc = ts.loc
		}
		return &Violation{Type: typ, Reason: "body does not match " + loc, Err: err}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// escapePointer escapes a $defs name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
