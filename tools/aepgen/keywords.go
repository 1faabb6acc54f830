package main

import (
	"fmt"
	"sort"
	"strings"
)

// A place is where a keyword stands in a schema file. The walk in
// checkKeywords knows the place of every subschema, and refuses a keyword
// the table does not allow there.
type place uint16

const (
	inFile   place = 1 << iota // the top level of a schema file
	inDef                      // an entry of $defs
	inValue                    // a property, items, a prefixItems entry, an additionalProperties schema
	inBranch                   // an entry of anyOf or oneOf
	inIf                       // if, and the property conditions inside it
	inThen                     // then and else
	inRow                      // an entry of allOf
)

var placeNames = []struct {
	p    place
	name string
}{
	{inFile, "file"}, {inDef, "def"}, {inValue, "value"}, {inBranch, "branch"},
	{inIf, "if"}, {inThen, "then/else"}, {inRow, "allOf entry"},
}

func (p place) String() string {
	var out []string
	for _, n := range placeNames {
		if p&n.p != 0 {
			out = append(out, n.name)
		}
	}
	return strings.Join(out, ", ")
}

// keyword is one line of the table: a JSON Schema keyword (or one of ours)
// that aepgen understands, where it may stand, and what it generates. A
// schema using any other keyword, or one of these elsewhere, fails
// generation: a schema must never state a rule the generated code does not
// enforce. README.md is this table (TestReadmeIsTheTable).
type keyword struct {
	Name  string
	Where place
	Emits string
	// Fixture is the schema file of testdata/fixtures that uses the
	// keyword; its cases (<name>.cases beside it) accept and reject lines
	// through the generated code (package ./fixtures) and through a stock
	// validator.
	Fixture string
	// Checks marks keywords that refuse values: their fixture's cases
	// accept a line and reject one for that keyword (TestFixtureCasesCover).
	Checks bool
}

// keywords is the table. Keep it in the order of README.md.
var keywords = []keyword{
	// Structure.
	{"$schema", inFile, "nothing; must be JSON Schema 2020-12", "structure.json", false},
	{"$id", inFile, "the file's identity for go-jsonschema's output and for cross-file `$ref`", "structure.json", false},
	{"title", inFile, "nothing", "structure.json", false},
	{"description", inFile | inDef | inValue | inBranch | inThen | inRow, "doc comments on models, handler and client methods, and docs/protocol.md", "structure.json", false},
	{"$defs", inFile, "one Go model per object def (go-jsonschema), with `Validate()`; a scalar def (a string enum such as core.json's `Code`) is inlined where `$ref` names it", "structure.json", false},
	{"$ref", inDef | inValue | inThen, "to an object def: its struct, whose `Validate()` is called with the field path (`wire.Nest`) and whose required fields join `wire.Shape`; to a scalar def (core.json#/$defs/Code): the def's type and checks, inline; at a def or in `then`: only in files without messages (envelope.json)", "refs.json", true},
	{"type", inDef | inValue, "the Go type of a field (go-jsonschema). On a field decoded into `any` or `json.RawMessage` (several types, or `goJSONSchema`), `Validate()` checks the JSON type (`wire.KindOf`, `wire.RawKind`); `integer` fields also take `7.0` (JSON Schema's integers), in the decoder", "any.json", true},
	{"properties", inDef | inValue | inBranch | inIf | inThen, "struct fields; in `if`, conditions on them; in `then`/`else`, checks on them; in an `anyOf`/`oneOf` branch, `minItems` of a list the branch requires; on a value only in files without messages (nested objects of messages are $defs)", "structure.json", false},
	{"required", inDef | inBranch | inIf | inThen, "top level: `wire.Entry.Required`, checked by the decoder on the raw line (absent or `null` is refused); nested defs: `wire.Shape`; in branches, `if`, `then`, `else`: presence of optional (pointer, list, map) fields in `Validate()`", "structure.json", true},
	{"additionalProperties", inDef | inValue, "a schema: a Go map of that value type, values checked; `true` (request defs): states that unknown fields are ignored (nothing to generate: the decoder skips them); `false` is refused", "maps.json", true},
	// Strings.
	{"enum", inDef | inValue | inIf, "strings: a named Go type with constants (go-jsonschema) and a switch in `Validate()`; in `if`: a condition", "strings.json", true},
	{"const", inValue | inIf | inThen, "strings and booleans: an equality check in `Validate()`; in `if`: a condition; envelope.json's `proto` const: `wire.ProtoVersion`", "strings.json", true},
	{"minLength", inValue, "a check of the length in characters (`utf8.RuneCountInString`)", "strings.json", true},
	{"maxLength", inValue, "a check of the length in characters", "strings.json", true},
	{"pattern", inValue, "a package-level `regexp.MustCompile` and a `MatchString` check; the pattern must compile in Go's RE2 syntax (no lookaround or back-references), whose meaning matches ECMA-262's for the constructs RE2 has", "strings.json", true},
	{"format", inValue, "only `password`: marks a secret (docs/protocol.md); any other format fails generation", "strings.json", false},
	{"writeOnly", inValue, "marks a secret (docs/protocol.md)", "strings.json", false},
	// Numbers.
	{"minimum", inValue, "a check `>=`; integers compare as int64 (a bound outside int64 fails generation; int64's own range is implied by decoding and emits nothing)", "numbers.json", true},
	{"maximum", inValue, "a check `<=`, as minimum", "numbers.json", true},
	{"exclusiveMinimum", inValue, "a check `>`", "numbers.json", true},
	{"exclusiveMaximum", inValue, "a check `<`", "numbers.json", true},
	// Arrays.
	{"items", inValue, "the element type; every element's checks (after those of `prefixItems`) run in a loop with the path `field[i]`", "arrays.json", true},
	{"prefixItems", inValue, "checks of the first elements, each against its own schema", "arrays.json", true},
	{"minItems", inValue, "a check of `len`", "arrays.json", true},
	{"maxItems", inValue, "a check of `len`", "arrays.json", true},
	{"uniqueItems", inValue, "strings and integers: a set in `Validate()` refusing the first repeated item", "arrays.json", true},
	// Choices and conditions.
	{"anyOf", inDef, "branches of `required` (a required list may also need `minItems` in the branch's `properties`): at least one branch's fields present, checked in `Validate()`", "choices.json", true},
	{"oneOf", inDef, "branches as `anyOf`: exactly one branch's fields present", "choices.json", true},
	{"if", inDef | inThen | inRow, "a condition: `properties` with `const`/`enum` (string, boolean) and `required`; a property it tests must be required (by the def or by the `if`) or optional (a pointer)", "conditions.json", true},
	{"then", inDef | inThen | inRow, "checks run when `if` holds: `required`, `properties` checks, nested `if`", "conditions.json", true},
	{"else", inDef | inThen | inRow, "checks run when `if` does not hold", "conditions.json", true},
	{"allOf", inDef, "a list of conditionals (`if`/`then`/`else`), each checked", "conditions.json", true},
	// Values.
	{"default", inValue, "scalars: set by the message's constructor and by `ApplyDefaults()` (the direct codec); a default equal to Go's zero value emits nothing; a boolean default of `true` fails generation (omitempty could never send false)", "defaults.json", false},
	{"goJSONSchema", inDef | inValue, "go-jsonschema's Go type hint (`json.RawMessage`, `struct{}`, `map[string]string`); `{\"type\": \"any\"}` makes the field `interface{}`", "any.json", false},
	// Ours: messages and dispatch.
	{"x-aep-namespace", inFile, "the namespace of the file's types; files without it give no messages", "messages.json", false},
	{"x-aep-codes", inFile, "the error-code catalogue `{code: {retryable, description}}`: `wire.Code` constants, `wire.Codes`, `Code.Retryable()` (-codes) and docs/protocol.md; its file's `$defs/Code` enum must list the same codes", "messages.json", false},
	{"x-aep-capability", inFile | inDef, "the capability a namespace (or one type) needs; empty: always on", "messages.json", false},
	{"x-aep-kernel", inFile, "the kernel answers these types; no handler interface", "kernel.json", false},
	{"x-aep-type", inDef, "the wire type string: `MessageType()`, a registry entry (`wire.Entry`), a constructor", "messages.json", false},
	{"x-aep-kind", inDef, "`request`, `notification` (kernel namespaces only), `reply`, `event`", "messages.json", false},
	{"x-aep-reply", inDef, "the reply type of a request; a handler method and a typed client method", "messages.json", false},
	{"x-aep-merge", inDef, "a list field of the reply: broadcast replies are concatenated (`Merge`); with key, limit and cursor, one exact page (`Page`)", "messages.json", false},
	{"x-aep-fallback", inDef, "the reply sent when every plugin declines, emitted as a Go value (`Fallback`); a string `\"{{field}}\"` is the request's (required string) field", "messages.json", false},
	{"x-aep-aliases", inDef, "other type strings accepted for a request (`registry.Alias`)", "messages.json", false},
	{"x-aep-audit-target", inDef, "a string field naming what the request acts on: `AuditTarget()`", "messages.json", false},
	{"x-aep-owner", inDef, "the kind of claim whose owner answers the request alone: `wire.Entry.Owner`", "messages.json", false},
	{"x-aep-changes-state", inDef, "`true` on a request whose success changes the session's state a snapshot holds: `wire.Entry.ChangesState`, which moves the session's point (docs/DECISIONS.md, Points); the contract's AsyncAPI operation gets the tag `changes-state`; only on requests", "messages.json", false},
}

var keywordByName = func() map[string]*keyword {
	m := make(map[string]*keyword, len(keywords))
	for i := range keywords {
		m[keywords[i].Name] = &keywords[i]
	}
	return m
}()

// checkKeywords walks a schema file and fails on the first keyword that the
// table does not allow where it stands, naming the keyword, the file and the
// location.
func checkKeywords(path string, doc map[string]any) error {
	return walkKeywords(path, "", inFile, doc)
}

func walkKeywords(path, loc string, at place, node map[string]any) error {
	keys := make([]string, 0, len(node))
	for k := range node {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kw := keywordByName[k]
		here := loc + "/" + k
		if kw == nil {
			return fmt.Errorf("%s: keyword %q at %s is not in aepgen's table (tools/aepgen/README.md)", path, k, loc0(loc))
		}
		if kw.Where&at == 0 {
			return fmt.Errorf("%s: keyword %q at %s stands in a %s; aepgen supports it only in: %s (tools/aepgen/README.md)", path, k, loc0(loc), at, kw.Where)
		}
		v := node[k]
		var err error
		switch k {
		case "$defs":
			err = walkMap(path, here, inDef, v)
		case "properties":
			child := inValue
			if at == inIf {
				child = inIf
			}
			err = walkMap(path, here, child, v)
		case "items", "additionalProperties":
			if _, isBool := v.(bool); !isBool {
				err = walkOne(path, here, inValue, v)
			}
		case "prefixItems":
			err = walkList(path, here, inValue, v)
		case "anyOf", "oneOf":
			err = walkList(path, here, inBranch, v)
		case "allOf":
			err = walkList(path, here, inRow, v)
		case "if":
			err = walkOne(path, here, inIf, v)
		case "then", "else":
			err = walkOne(path, here, inThen, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func loc0(loc string) string {
	if loc == "" {
		return "the top level"
	}
	return loc
}

func walkOne(path, loc string, at place, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %s must be a schema object", path, loc)
	}
	return walkKeywords(path, loc, at, m)
}

func walkMap(path, loc string, at place, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %s must be an object", path, loc)
	}
	for _, k := range sortedKeys(m) {
		if err := walkOne(path, loc+"/"+k, at, m[k]); err != nil {
			return err
		}
	}
	return nil
}

func walkList(path, loc string, at place, v any) error {
	l, ok := v.([]any)
	if !ok {
		return fmt.Errorf("%s: %s must be a list", path, loc)
	}
	for i, e := range l {
		if err := walkOne(path, fmt.Sprintf("%s/%d", loc, i), at, e); err != nil {
			return err
		}
	}
	return nil
}

// readmeTable renders the table as README.md holds it.
func readmeTable() string {
	var b strings.Builder
	b.WriteString("| keyword | where | generates | fixture |\n|---|---|---|---|\n")
	for _, k := range keywords {
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` |\n", k.Name, k.Where, strings.ReplaceAll(k.Emits, "|", "\\|"), k.Fixture)
	}
	return b.String()
}
