package toolrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/aephost/aep/gen/msg"
)

// Option sets a field of a tool's definition at registration.
type Option func(*msg.ToolDefinition)

// Tags sets the tool's tags (spec §2.5).
func Tags(tags ...string) Option { return func(d *msg.ToolDefinition) { d.Tags = tags } }

// Version sets the tool's version (spec §9 rule 3).
func Version(v string) Option { return func(d *msg.ToolDefinition) { d.Version = v } }

// Deferred leaves the tool out of the default list (spec §2.5 defer_loading).
func Deferred() Option { return func(d *msg.ToolDefinition) { d.DeferLoading = true } }

// Streaming marks a tool that emits events while running.
func Streaming() Option { return func(d *msg.ToolDefinition) { d.Streaming = true } }

// Idempotent marks a tool that is safe to retry.
func Idempotent() Option { return func(d *msg.ToolDefinition) { d.Idempotent = true } }

// Resulter is implemented by output types that set result fields beyond
// data: exit_code, truncated, summary (process tools, capped readers).
type Resulter interface {
	ToolOutput() Output
}

// Register adds a typed tool: arguments are decoded into In (a struct whose
// json tags name the arguments; fields without omitempty are required; a
// `desc` tag describes a field), and Out becomes result.data. The input and
// output JSON Schemas and parameter lists are derived from the Go types.
// An argument that does not fit In gives a TOOL_ERROR naming the field.
// Emit events from fn with [Progress], [Status], [Log] or [Artifact].
func Register[In, Out any](r *Registry, name, description string, fn func(context.Context, In) (Out, error), opts ...Option) error {
	t, err := NewTyped(name, description, fn, opts...)
	if err != nil {
		return err
	}
	return r.Add(t)
}

// NewTyped builds the tool that [Register] adds, for callers that keep their
// own registry (toolkits).
func NewTyped[In, Out any](name, description string, fn func(context.Context, In) (Out, error), opts ...Option) (*Tool, error) {
	inT := reflect.TypeFor[In]()
	if inT.Kind() != reflect.Struct {
		return nil, fmt.Errorf("tools: %s: input type %s must be a struct", name, inT)
	}
	inSchema := SchemaOf(inT)
	outSchema := OutputSchemaOf(reflect.TypeFor[Out]())
	required := inSchema["required"].([]string)
	def := msg.ToolDefinition{
		Name: name, Description: description,
		InputParameters: Parameters(inSchema), OutputParameters: Parameters(outSchema),
		InputSchema: inSchema, OutputSchema: outSchema,
	}
	for _, o := range opts {
		o(&def)
	}
	run := func(ctx context.Context, args any) (Output, error) {
		in, err := decodeArgs[In](args, required)
		if err != nil {
			return Output{}, err
		}
		out, err := fn(ctx, in)
		if r, ok := any(out).(Resulter); ok {
			o := r.ToolOutput()
			switch {
			case err == nil:
				return o, nil
			case o.ExitCode != nil:
				// A process that ran and failed: its exit code and output
				// are the result (spec §2.6). Any other failure has no
				// result, only its error (spec §7).
				return o, &ExitError{Output: o, Err: err}
			}
			return Output{}, err
		}
		if err != nil {
			return Output{}, err
		}
		return Output{Data: out}, nil
	}
	return NewTool(def, run), nil
}

// ErrArguments is the cause of arguments that do not fit a tool's input.
var ErrArguments = errors.New("invalid arguments")

// decodeArgs turns the call's arguments into In. A direct-codec client may
// send an In (or *In) as is; anything else goes through JSON, strictly:
// unknown names and wrong types are errors naming the field.
func decodeArgs[In any](args any, required []string) (In, error) {
	var in In
	switch a := args.(type) {
	case In:
		return a, nil
	case *In:
		if a != nil {
			return *a, nil
		}
		args = nil
	}
	var m map[string]any
	switch a := args.(type) {
	case nil:
		m = map[string]any{}
	case map[string]any:
		m = a
	default:
		var raw []byte
		switch b := a.(type) {
		case json.RawMessage:
			raw = b
		case []byte:
			raw = b
		default:
			var err error
			if raw, err = json.Marshal(a); err != nil {
				return in, fmt.Errorf("%w: %v", ErrArguments, err)
			}
		}
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			return in, fmt.Errorf("%w: arguments must be a JSON object", ErrArguments)
		}
	}
	var missing []string
	for _, f := range required {
		if _, ok := m[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return in, fmt.Errorf("%w: missing required argument %s", ErrArguments, quoteList(missing))
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return in, fmt.Errorf("%w: %v", ErrArguments, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, argError(err)
	}
	return in, nil
}

func argError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%w: argument %q: expected %s, got %s", ErrArguments, te.Field, jsonKind(te.Type), te.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%w: unknown argument %s", ErrArguments, f)
	}
	return fmt.Errorf("%w: %v", ErrArguments, err)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// SchemaOf derives a JSON Schema (2020-12) from a Go type: structs become
// objects of their json-tagged fields (required unless omitempty, described
// by a `desc` tag), slices arrays, maps objects, and interfaces anything.
func SchemaOf(t reflect.Type) map[string]any {
	return schemaOf(t, map[reflect.Type]bool{}, false)
}

// OutputSchemaOf is SchemaOf for what a tool returns: a pointer, slice or
// map field without omitempty may also be null, since encoding/json writes
// a nil one so. Inputs keep SchemaOf's stricter form (an agent need not
// send null where it can send the value).
func OutputSchemaOf(t reflect.Type) map[string]any {
	return schemaOf(t, map[reflect.Type]bool{}, true)
}

func schemaOf(t reflect.Type, seen map[reflect.Type]bool, output bool) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), seen, output)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), seen, output)}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{"type": "object"} // recursive type: stop here
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		required := []string{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			s := schemaOf(f.Type, seen, output)
			if d := f.Tag.Get("desc"); d != "" {
				s["description"] = d
			}
			omitted := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
			if output && nullable(f.Type) && !omitted {
				// encoding/json writes a nil pointer, slice or map as null,
				// so the published schema must admit what the tool sends.
				if typ, ok := s["type"].(string); ok {
					s["type"] = []any{typ, "null"}
				}
			}
			props[name] = s
			if !omitted && f.Type.Kind() != reflect.Pointer {
				required = append(required, name)
			}
		}
		sort.Strings(required)
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	return map[string]any{}
}

// nullable reports a Go type whose zero value encoding/json writes as null.
func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	if s, ok := schemaOf(t, map[reflect.Type]bool{}, false)["type"].(string); ok {
		return s
	}
	return "value"
}
