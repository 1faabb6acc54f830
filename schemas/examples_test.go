package schemas_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kaptinlin/jsonschema"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// example is one file of schemas/examples: a whole agent line under the
// directory of its type, named valid--<note> or invalid--<keyword>[--<path>][+<note>].
type example struct {
	file    string // relative to schemas/examples
	typ     string
	valid   bool
	keyword string
	path    string
	line    []byte
}

func loadExamples(t *testing.T) []example {
	t.Helper()
	var out []example
	err := filepath.WalkDir("examples", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".json" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("examples", p)
		rel = filepath.ToSlash(rel)
		ex := example{file: rel, typ: filepath.ToSlash(filepath.Dir(rel)), line: bytes.TrimRight(b, "\n")}
		name, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(p), ".json"), "+") // +<note>
		parts := strings.Split(name, "--")
		switch {
		case parts[0] == "valid" && len(parts) >= 2:
			ex.valid = true
		case parts[0] == "invalid" && len(parts) >= 2 && len(parts) <= 3:
			ex.keyword = parts[1]
			if len(parts) >= 3 {
				ex.path = parts[2]
			}
		default:
			return fmt.Errorf("%s: an example is named valid--<note> or invalid--<keyword>[--<path>][+<note>]", rel)
		}
		if bytes.Count(ex.line, []byte("\n")) > 0 {
			return fmt.Errorf("%s: an example is one line", rel)
		}
		out = append(out, ex)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no examples")
	}
	return out
}

// schemaFiles reads every schema file of this directory, by file name.
func schemaFiles(t *testing.T) map[string]map[string]any {
	t.Helper()
	names, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if _, ok := m["$schema"]; ok {
			out[n] = m
		}
	}
	return out
}

// agentDef is a def an agent sends: its file, def name and wire type.
type agentDef struct{ file, def, typ string }

func agentDefs(files map[string]map[string]any) []agentDef {
	var out []agentDef
	for _, f := range sortedKeys(files) {
		defs, _ := files[f]["$defs"].(map[string]any)
		for _, d := range sortedKeys(defs) {
			n := defs[d].(map[string]any)
			if k := n["x-aep-kind"]; k == "request" || k == "notification" {
				out = append(out, agentDef{f, d, n["x-aep-type"].(string)})
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// agentMessageSchema is what a stock validator checks an agent line
// against: the envelope, and the body def of the line's type.
func agentMessageSchema(t *testing.T, files map[string]map[string]any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme) // every reference is one of these files
	}
	for _, f := range sortedKeys(files) {
		b, _ := json.Marshal(files[f])
		if _, err := c.Compile(b); err != nil {
			t.Fatalf("compile %s: %v", f, err)
		}
	}
	var branches []any
	for _, d := range agentDefs(files) {
		branches = append(branches, map[string]any{
			"required":   []string{"type"},
			"properties": map[string]any{"type": map[string]any{"const": d.typ}},
			"$ref":       "../" + d.file + "#/$defs/" + d.def,
		})
	}
	whole := map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"$id":     "https://aephost.dev/schemas/examples/agent-message.json",
		"allOf":   []any{map[string]any{"$ref": "../envelope.json#/$defs/Envelope"}},
		"oneOf":   branches,
	}
	b, _ := json.Marshal(whole)
	s, err := c.Compile(b)
	if err != nil {
		t.Fatalf("compile the agent message schema: %v", err)
	}
	return s
}

// loadUnstatable reads the table of UNSTATABLE.md: example file → rule.
func loadUnstatable(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("examples", "UNSTATABLE.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) != 3 || cells[1] == "" || cells[2] == "" {
			t.Fatalf("UNSTATABLE.md: a row needs example, rule and why: %q", l)
		}
		out[strings.Trim(cells[0], "`")] = cells[1]
	}
	if len(out) == 0 {
		t.Fatal("UNSTATABLE.md lists no example")
	}
	return out
}

// TestExamplesAgree runs every example through a stock JSON Schema
// validator and through the host's decoder: both must give the verdict the
// example's name states, except on the rules of UNSTATABLE.md, which only
// the host can enforce.
func TestExamplesAgree(t *testing.T) {
	files := schemaFiles(t)
	s := agentMessageSchema(t, files)
	unst := loadUnstatable(t)
	exs := loadExamples(t)
	byFile := map[string]bool{}
	for _, ex := range exs {
		byFile[ex.file] = true
	}
	for f := range unst {
		if !byFile[f] {
			t.Errorf("UNSTATABLE.md names %s, which is not an example", f)
		}
	}
	for _, ex := range exs {
		t.Run(ex.file, func(t *testing.T) {
			var sc wire.Scanned
			_, _, hostErr := msg.Registry().Decode(ex.line, &sc)
			if rule, ok := unst[ex.file]; ok {
				if ex.valid || hostErr == nil {
					t.Fatalf("%s (%s) must be an invalid example the host refuses; host: %v", ex.file, rule, hostErr)
				}
				return
			}
			res := s.Validate(ex.line)
			if res.IsValid() != ex.valid {
				t.Errorf("stock validator: valid=%v, the example says %v: %v", res.IsValid(), ex.valid, res.Errors)
			}
			if (hostErr == nil) != ex.valid {
				t.Errorf("host decoder: %v; the example says valid=%v", hostErr, ex.valid)
			}
		})
	}
}

// rule is one thing an invalid example must break: a keyword at an
// instance path ("feedbacks.0.type"; an array's item is 0, a map's value k).
type rule struct{ keyword, path string }

// rulesOf walks a schema node the way an instance nests, following $ref
// across files, and lists its required fields, enums, consts, bounds,
// patterns, choices (anyOf, oneOf: one rule breaking every branch) and
// conditionals (then).
func rulesOf(files map[string]map[string]any, file string, n map[string]any, path []string, out map[rule]bool) {
	for depth := 0; depth < 16; depth++ {
		ref, ok := n["$ref"].(string)
		if !ok {
			break
		}
		f, ptr, _ := strings.Cut(ref, "#")
		if f != "" {
			file = f
		}
		var cur any = files[file]
		for _, seg := range strings.Split(strings.Trim(ptr, "/"), "/") {
			cur = cur.(map[string]any)[seg]
		}
		n = cur.(map[string]any)
	}
	p := strings.Join(path, ".")
	for _, kw := range []string{"enum", "const", "minLength", "maxLength", "pattern", "not", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "uniqueItems", "anyOf", "oneOf"} {
		if _, ok := n[kw]; ok {
			out[rule{kw, p}] = true
		}
	}
	if _, ok := n["if"]; ok {
		out[rule{"then", p}] = true
	}
	if _, ok := n["allOf"]; ok {
		out[rule{"then", p}] = true
	}
	req, _ := n["required"].([]any)
	for _, r := range req {
		out[rule{"required", strings.Join(append(append([]string(nil), path...), r.(string)), ".")}] = true
	}
	props, _ := n["properties"].(map[string]any)
	for _, k := range sortedKeys(props) {
		rulesOf(files, file, props[k].(map[string]any), append(append([]string(nil), path...), k), out)
	}
	if it, ok := n["items"].(map[string]any); ok {
		rulesOf(files, file, it, append(append([]string(nil), path...), "0"), out)
	}
	if ap, ok := n["additionalProperties"].(map[string]any); ok {
		rulesOf(files, file, ap, append(append([]string(nil), path...), "k"), out)
	}
}

// TestExamplesCover checks that every agent-sent type has a valid example
// and that every rule of its schema (and of the envelope) is broken by an
// invalid example named after it, and that no invalid example names a rule
// its type's schema does not have.
func TestExamplesCover(t *testing.T) {
	files := schemaFiles(t)
	unst := loadUnstatable(t)
	exs := loadExamples(t)
	env := map[rule]bool{}
	rulesOf(files, "envelope.json", files["envelope.json"]["$defs"].(map[string]any)["Envelope"].(map[string]any), nil, env)
	envSeen := map[rule]bool{}
	agent := map[string]map[rule]bool{}
	for _, d := range agentDefs(files) {
		rs := map[rule]bool{}
		rulesOf(files, d.file, files[d.file]["$defs"].(map[string]any)[d.def].(map[string]any), nil, rs)
		agent[d.typ] = rs
	}
	seen := map[string]map[rule]bool{}
	valid := map[string]bool{}
	for _, ex := range exs {
		rs, isAgent := agent[ex.typ]
		if !isAgent {
			if ex.valid {
				t.Errorf("%s: %s is not sent by agents, so it has no valid example", ex.file, ex.typ)
			}
			continue
		}
		if ex.valid {
			valid[ex.typ] = true
			continue
		}
		r := rule{ex.keyword, ex.path}
		switch {
		case rs[r]:
			if seen[ex.typ] == nil {
				seen[ex.typ] = map[rule]bool{}
			}
			seen[ex.typ][r] = true
		case env[r]:
			envSeen[r] = true
		case ex.keyword == "type", unst[ex.file] != "":
			// a wrong JSON type, or a rule no schema states
		default:
			t.Errorf("%s: names %s at %q, which the schema of %s does not have", ex.file, ex.keyword, ex.path, ex.typ)
		}
	}
	for _, typ := range sortedKeys(agent) {
		if !valid[typ] {
			t.Errorf("%s: no valid example", typ)
		}
		for r := range agent[typ] {
			if !seen[typ][r] {
				t.Errorf("%s: no invalid example breaks %s at %q (name one invalid--%s--%s.json)", typ, r.keyword, r.path, r.keyword, r.path)
			}
		}
	}
	for r := range env {
		if !envSeen[r] {
			t.Errorf("envelope: no invalid example breaks %s at %q", r.keyword, r.path)
		}
	}
}
