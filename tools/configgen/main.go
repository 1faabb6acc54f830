// Command configgen generates each built-in plugin's Go settings type and
// the operator's reference docs/config.md from the JSON Schemas in
// schemas/config/ (one file per plugin module). Its mapping rules are in
// README.md beside it. It reads only its input directory and writes only
// the files the schemas name, so `go generate ./...` reproduces them
// byte for byte.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

func main() {
	schemas := flag.String("schemas", "schemas/config", "directory of the plugin settings schemas")
	root := flag.String("root", ".", "module root; x-go-package directories are relative to it")
	docs := flag.String("docs", "docs/config.md", "operator reference to write")
	flag.Parse()
	if err := run(*schemas, *root, *docs); err != nil {
		fmt.Fprintln(os.Stderr, "configgen:", err)
		os.Exit(1)
	}
}

// Schema is the subset of JSON Schema 2020-12 the settings schemas use,
// plus the generator's x- keywords (README.md).
type Schema struct {
	Title                string             `json:"title"`
	Description          string             `json:"description"`
	Type                 string             `json:"type"`
	Properties           map[string]*Schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *Schema            `json:"items"`
	Ref                  string             `json:"$ref"`
	Defs                 map[string]*Schema `json:"$defs"`
	Default              json.RawMessage    `json:"default"`
	Examples             []json.RawMessage  `json:"examples"`
	Enum                 []string           `json:"enum"`
	Pattern              string             `json:"pattern"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	ExclusiveMinimum     *float64           `json:"exclusiveMinimum"`
	WriteOnly            bool               `json:"writeOnly"`

	Module      string `json:"x-aep-module"`
	Kernel      bool   `json:"x-aep-kernel"`
	MinDuration string `json:"x-aep-min-duration"`
	GoPackage   string `json:"x-go-package"`
	GoName      string `json:"x-go-name"`
	GoType      string `json:"x-go-type"`
	GoPointer   bool   `json:"x-go-pointer"`
	GoFile      string `json:"x-go-file"`

	order []string // property names in file order
}

// file is one parsed schema file.
type file struct {
	name string // base name without .json
	path string // as given, for headers and docs
	s    *Schema
}

func run(dir, root, docsPath string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	var files []file
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s, err := parse(data)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if (s.Module == "") == !s.Kernel || s.GoPackage == "" || s.Type != "object" {
			return fmt.Errorf("%s: a settings schema is an object with x-go-package and either x-aep-module or x-aep-kernel", p)
		}
		for _, e := range enums(s) {
			if e == "" {
				return fmt.Errorf("%s: an enum has an empty member; leave the key out instead (README.md)", p)
			}
		}
		files = append(files, file{name: strings.TrimSuffix(filepath.Base(p), ".json"), path: filepath.ToSlash(p), s: s})
	}
	for _, f := range files {
		src, err := goFile(f)
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		name := f.s.GoFile
		if name == "" {
			name = "settings.gen.go"
		}
		out := filepath.Join(root, filepath.FromSlash(f.s.GoPackage), name)
		if err := os.WriteFile(out, src, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(docsPath, docsFile(files), 0o644)
}

// parse decodes a schema keeping the file order of every properties
// object, so generated fields and docs follow the schema's order.
func parse(data []byte) (*Schema, error) {
	var s Schema
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	if err := orderProps(&s, raw); err != nil {
		return nil, err
	}
	return &s, nil
}

func orderProps(s *Schema, raw map[string]json.RawMessage) error {
	if p, ok := raw["properties"]; ok {
		keys, err := objectKeys(p)
		if err != nil {
			return err
		}
		s.order = keys
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(p, &sub); err != nil {
			return err
		}
		for _, k := range keys {
			if err := recurse(s.Properties[k], sub[k]); err != nil {
				return err
			}
		}
	}
	if d, ok := raw["$defs"]; ok {
		var sub map[string]json.RawMessage
		if err := json.Unmarshal(d, &sub); err != nil {
			return err
		}
		for k, v := range sub {
			if err := recurse(s.Defs[k], v); err != nil {
				return err
			}
		}
	}
	if it, ok := raw["items"]; ok {
		return recurse(s.Items, it)
	}
	return nil
}

func recurse(s *Schema, data json.RawMessage) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil // a boolean schema has no properties
	}
	return orderProps(s, raw)
}

// objectKeys returns the keys of a JSON object in file order.
func objectKeys(data []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// initialisms are the words Go spells in capitals (Effective Go, names).
var initialisms = map[string]string{"id": "ID", "url": "URL", "urls": "URLs", "mb": "MB", "cpu": "CPU", "sqlite": "SQLite", "lru": "LRU", "dsn": "DSN", "http": "HTTP", "otlp": "OTLP", "mcp": "MCP"}

// enums returns every enum member of s and the schemas below it.
func enums(s *Schema) []string {
	if s == nil {
		return nil
	}
	out := append([]string(nil), s.Enum...)
	for _, p := range s.Properties {
		out = append(out, enums(p)...)
	}
	for _, d := range s.Defs {
		out = append(out, enums(d)...)
	}
	return append(out, enums(s.Items)...)
}

// goName is x-go-name, else the key in CamelCase with initialisms.
func goName(key string, s *Schema) string {
	if s.GoName != "" {
		return s.GoName
	}
	var b strings.Builder
	for _, w := range strings.Split(key, "_") {
		if v, ok := initialisms[w]; ok {
			b.WriteString(v)
		} else if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// goType maps a property schema to a Go type, recording imports.
func goType(s *Schema, imports map[string]bool) (string, error) {
	t, err := baseType(s, imports)
	if err != nil {
		return "", err
	}
	if s.GoPointer {
		t = "*" + t
	}
	return t, nil
}

func baseType(s *Schema, imports map[string]bool) (string, error) {
	if s.GoType != "" {
		// "import/path.Name" names a type of another package; a bare name
		// ("int64") is predeclared.
		if i := strings.LastIndex(s.GoType, "."); i > 0 && strings.Contains(s.GoType, "/") {
			imp := s.GoType[:i]
			imports[imp] = true
			// gopkg.in/yaml.v3 is package yaml: a version suffix is
			// not part of the package name.
			pkg, _, _ := strings.Cut(path.Base(imp), ".")
			return pkg + "." + s.GoType[i+1:], nil
		}
		return s.GoType, nil
	}
	if s.Ref != "" {
		const pre = "#/$defs/"
		if !strings.HasPrefix(s.Ref, pre) {
			return "", fmt.Errorf("$ref %q: only local #/$defs/ references", s.Ref)
		}
		return strings.TrimPrefix(s.Ref, pre), nil
	}
	switch s.Type {
	case "string":
		return "string", nil
	case "integer":
		return "int", nil
	case "number":
		return "float64", nil
	case "boolean":
		return "bool", nil
	case "array":
		if s.Items == nil {
			return "", fmt.Errorf("array without items")
		}
		it, err := goType(s.Items, imports)
		return "[]" + it, err
	case "object":
		var add Schema
		if len(s.AdditionalProperties) > 0 && json.Unmarshal(s.AdditionalProperties, &add) == nil && add.Type != "" {
			v, err := goType(&add, imports)
			return "map[string]" + v, err
		}
	}
	return "", fmt.Errorf("type %q has no Go mapping (add x-go-type)", s.Type)
}

// goFile renders the package's settings.gen.go: Settings plus one type per $defs entry.
func goFile(f file) ([]byte, error) {
	imports := map[string]bool{}
	var body bytes.Buffer
	root := "Settings"
	if f.s.GoName != "" {
		root = f.s.GoName
	}
	doc := fmt.Sprintf("%s is the `config` of a plugin of module %s (%s): %s", root, f.s.Module, f.path, f.s.Description)
	if f.s.Kernel {
		doc = fmt.Sprintf("%s is the %s (%s): %s", root, lowerFirst(f.s.Title), f.path, f.s.Description)
	}
	if err := writeStruct(&body, root, doc, f.s, imports); err != nil {
		return nil, err
	}
	defs := make([]string, 0, len(f.s.Defs))
	for k := range f.s.Defs {
		defs = append(defs, k)
	}
	sort.Strings(defs)
	for _, k := range defs {
		d := f.s.Defs[k]
		if err := writeStruct(&body, k, k+" is "+lowerFirst(d.Description), d, imports); err != nil {
			return nil, fmt.Errorf("$defs/%s: %w", k, err)
		}
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "// Code generated by configgen from %s. DO NOT EDIT.\n\n", f.path)
	fmt.Fprintf(&out, "package %s\n\n", path.Base(f.s.GoPackage))
	if len(imports) > 0 {
		var imps []string
		for i := range imports {
			imps = append(imps, i)
		}
		sort.Strings(imps)
		out.WriteString("import (\n")
		for _, i := range imps {
			fmt.Fprintf(&out, "\t%q\n", i)
		}
		out.WriteString(")\n\n")
	}
	out.Write(body.Bytes())
	return format.Source(out.Bytes())
}

func writeStruct(b *bytes.Buffer, name, doc string, s *Schema, imports map[string]bool) error {
	comment(b, "", doc)
	fmt.Fprintf(b, "type %s struct {\n", name)
	for _, k := range s.order {
		p := s.Properties[k]
		t, err := goType(p, imports)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		fn := goName(k, p)
		d := fn + ": " + p.Description
		if len(p.Default) > 0 {
			d += " Default: " + string(p.Default) + "."
		}
		comment(b, "\t", d)
		fmt.Fprintf(b, "\t%s %s `yaml:%q`\n", fn, t, k)
	}
	b.WriteString("}\n\n")
	return nil
}

// comment writes text as a // comment wrapped near 76 columns.
func comment(b *bytes.Buffer, indent, text string) {
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > 76 {
			fmt.Fprintf(b, "%s// %s\n", indent, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		fmt.Fprintf(b, "%s// %s\n", indent, line)
	}
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// docsFile renders docs/config.md: the kernel's sections first, one per
// top-level key of the kernel schema, then one section per plugin module;
// one row per key (nested objects as dotted keys), with type, default,
// example and meaning.
func docsFile(files []file) []byte {
	var b bytes.Buffer
	b.WriteString("<!-- Code generated by configgen from schemas/config/. DO NOT EDIT. -->\n\n")
	b.WriteString("# Configuration\n\n")
	b.WriteString("`aep serve --config FILE` reads one YAML file. Its own sections (`server`, `transport`, `store`, `audit`, `plugins`, `operator`, `mcp_face`) are described by `schemas/config/kernel.json`, and each plugin's `config` by its module's schema in `schemas/config/`; this page and the Go types that hold the settings are generated from them (`go generate ./...`, tools/configgen). ")
	b.WriteString("`aep.example.yaml` at the repository root sets every section and configures every built-in plugin, annotated.\n\n")
	b.WriteString("## Rules\n\n")
	b.WriteString("- `aep config validate FILE` makes every check `aep serve` makes before it starts anything and reports each mistake as `FILE:LINE: dotted.key: message`; `aep serve` refuses the same files with the same messages. The one difference: a store that cannot be reached is a warning from `validate` and an error at `serve`.\n")
	b.WriteString("- Unknown keys are errors, with a suggestion when a known key is close. A value of the wrong type, outside its range or not one of its allowed values is an error.\n")
	b.WriteString("- A default is taken only when the key is absent; a key with no value (`key:` or `key: null`) is absent. Where 0 would mean nothing sensible the range starts at 1, so 0 is refused rather than silently replaced.\n")
	b.WriteString("- Durations are Go duration strings: numbers with units (`ns`, `us`, `ms`, `s`, `m`, `h`), such as `30s`, `5m` or `1h30m`; never negative, and `0s` only where the meaning says what it does.\n")
	b.WriteString("- `${NAME}` in a value is replaced by the environment variable `NAME`; when it is unset or empty the file is refused. `${NAME:-default}` gives `default` instead (`${NAME:-}`: empty). `$${` writes a literal `${`. Only values are expanded, never keys or comments, and an expanded value stays within its key.\n")
	b.WriteString("- Paths shown as `<data-dir>` are below `aep serve --data-dir`; `<plugin>` is the plugin's name. Secrets (marked below) are never logged or repeated in an error.\n\n")
	sort.Slice(files, func(i, j int) bool {
		if files[i].s.Kernel != files[j].s.Kernel {
			return files[i].s.Kernel
		}
		return files[i].s.Module < files[j].s.Module
	})
	plugins := false
	for _, f := range files {
		if f.s.Kernel {
			for _, k := range f.s.order {
				p := f.s.Properties[k]
				sec, key := p, k
				if p.Items != nil {
					sec, key = p.Items, k+"[]"
				}
				def := resolve(f.s, sec)
				fmt.Fprintf(&b, "## `%s`\n\n%s\n\nSchema: `%s`.\n\n", key, p.Description, f.path)
				b.WriteString("| key | type | default | example | meaning |\n|---|---|---|---|---|\n")
				rows(&b, f.s, def, key+".")
				b.WriteString("\n")
			}
			continue
		}
		if !plugins {
			plugins = true
			b.WriteString("# Plugin settings\n\n")
			b.WriteString("Each entry of `plugins[]` names a module (`cls`) and holds its settings under `config`, checked against the module's schema. ")
			b.WriteString("Modules without a schema (third-party or test modules) are checked by decoding their settings strictly.\n\n")
		}
		fmt.Fprintf(&b, "## `%s`\n\n%s\n\nSchema: `%s`.\n\n", f.s.Module, f.s.Description, f.path)
		b.WriteString("| key | type | default | example | meaning |\n|---|---|---|---|---|\n")
		rows(&b, f.s, f.s, "")
		b.WriteString("\n")
	}
	return b.Bytes()
}

// resolve follows a local $ref.
func resolve(root, s *Schema) *Schema {
	if s != nil && s.Ref != "" {
		return root.Defs[strings.TrimPrefix(s.Ref, "#/$defs/")]
	}
	return s
}

func rows(b *bytes.Buffer, root, s *Schema, prefix string) {
	for _, k := range s.order {
		p := s.Properties[k]
		key := prefix + k
		typ, sub, sep := docType(root, p)
		def := "—"
		if len(p.Default) > 0 {
			var c bytes.Buffer
			if json.Compact(&c, p.Default) == nil {
				def = "`" + c.String() + "`"
			}
		}
		ex := "—"
		if len(p.Examples) > 0 {
			var c bytes.Buffer
			if json.Compact(&c, p.Examples[0]) == nil {
				ex = "`" + c.String() + "`"
			}
		}
		desc := p.Description
		if len(p.Enum) > 0 {
			desc += " One of: " + strings.Join(quoteAll(p.Enum), ", ") + "."
		}
		desc += rangeText(p)
		if p.WriteOnly {
			desc += " A secret: never logged or repeated in an error."
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", key, typ, cell(def), cell(ex), cell(desc))
		if sub != nil {
			rows(b, root, sub, key+sep)
		}
	}
}

// rangeText says a property's bounds in words.
func rangeText(p *Schema) string {
	num := func(f *float64) string { return strconv.FormatFloat(*f, 'f', -1, 64) }
	switch {
	case p.MinDuration != "":
		return " At least " + p.MinDuration + "."
	case p.ExclusiveMinimum != nil:
		return " More than " + num(p.ExclusiveMinimum) + "."
	case p.Minimum != nil && p.Maximum != nil:
		return " From " + num(p.Minimum) + " to " + num(p.Maximum) + "."
	case p.Minimum != nil:
		return " At least " + num(p.Minimum) + "."
	case p.Maximum != nil:
		return " At most " + num(p.Maximum) + "."
	}
	return ""
}

// docType names a property's type for readers, and returns the object
// schema whose keys get rows of their own and the separator of their keys.
func docType(root, p *Schema) (string, *Schema, string) {
	switch {
	case p.GoType != "" && strings.HasSuffix(p.GoType, "Duration"):
		return "duration", nil, ""
	case p.Ref != "":
		return "object", resolve(root, p), "."
	case p.Type == "array" && p.Items != nil && p.Items.Ref != "":
		return "list of objects", resolve(root, p.Items), "[]."
	case p.Type == "array" && p.Items != nil:
		return "list of " + p.Items.Type, nil, ""
	case p.Type == "object" && len(p.AdditionalProperties) > 0 && string(p.AdditionalProperties) != "false":
		return "map of string", nil, ""
	}
	return p.Type, nil, ""
}

func quoteAll(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, "`"+s+"`")
		}
	}
	return out
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
