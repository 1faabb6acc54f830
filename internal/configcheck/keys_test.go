package configcheck_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	_ "github.com/aephost/aep/capabilities/all" // every built-in module registers itself
	"github.com/aephost/aep/internal/configcheck"
	configschemas "github.com/aephost/aep/schemas/config"
	"github.com/aephost/aep/server"
)

// goKeys lists the YAML keys a settings value decodes, nested objects as
// key[].sub (slices) or key.sub, following inline embedding.
func goKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if !f.IsExported() || tag == "-" || tag == "" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if opts == "inline" {
			out = append(out, goKeys(f.Type, prefix)...)
			continue
		}
		key := prefix + name
		out = append(out, key)
		ft := f.Type
		sep := "."
		if ft.Kind() == reflect.Slice {
			sep = "[]."
		}
		// Only the host's own struct types nest; Duration and Mode are scalars.
		if el := elem(ft); el.Kind() == reflect.Struct && el.PkgPath() == t.PkgPath() {
			out = append(out, goKeys(ft, key+sep)...)
		}
	}
	return out
}

func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

type jschema struct {
	Module     string              `json:"x-aep-module"`
	Kernel     bool                `json:"x-aep-kernel"`
	Type       string              `json:"type"`
	Properties map[string]*jschema `json:"properties"`
	Items      *jschema            `json:"items"`
	Ref        string              `json:"$ref"`
	Defs       map[string]*jschema `json:"$defs"`
}

func schemaKeys(root, s *jschema, prefix string) []string {
	var out []string
	for k, p := range s.Properties {
		out = append(out, prefix+k)
		sub, sep := p, "."
		if p.Items != nil {
			sub, sep = p.Items, "[]."
		}
		if sub.Ref != "" {
			sub = root.Defs[strings.TrimPrefix(sub.Ref, "#/$defs/")]
		}
		if sub != nil && len(sub.Properties) > 0 {
			out = append(out, schemaKeys(root, sub, prefix+k+sep)...)
		}
	}
	return out
}

// TestEveryKeyInSchemaAndDocs checks that every key of every built-in
// plugin's Go settings appears in its schema and in docs/config.md, and
// that no schema key lacks a Go field: the three never drift apart.
func TestEveryKeyInSchemaAndDocs(t *testing.T) {
	docs, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	byModule := map[string]*jschema{}
	names, _ := fsGlob()
	for _, n := range names {
		data, err := configschemas.FS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		var s jschema
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if s.Kernel {
			continue // TestKernelKeysInSchemaDocsAndExample
		}
		byModule[s.Module] = &s
	}
	builtins := 0
	for _, m := range server.Modules() {
		if m.DefaultName == "" {
			continue // test modules
		}
		builtins++
		t.Run(m.ID, func(t *testing.T) {
			s, ok := byModule[m.ID]
			if !ok {
				t.Fatalf("no schema in schemas/config/ names x-aep-module %q", m.ID)
			}
			gk := goKeys(reflect.TypeOf(m.New()), "")
			if len(gk) == 0 {
				t.Fatalf("module %s has no settings keys", m.ID)
			}
			sk := schemaKeys(s, s, "")
			sort.Strings(gk)
			sort.Strings(sk)
			if !reflect.DeepEqual(gk, sk) {
				t.Errorf("Go settings keys %v\nschema keys %v", gk, sk)
			}
			section := docSection(string(docs), m.ID)
			if section == "" {
				t.Fatalf("docs/config.md has no section for %s", m.ID)
			}
			for _, k := range gk {
				if !strings.Contains(section, "| `"+k+"` |") {
					t.Errorf("docs/config.md, %s: no row for key %s", m.ID, k)
				}
			}
		})
	}
	if builtins != len(byModule) {
		t.Errorf("%d built-in modules, %d settings schemas", builtins, len(byModule))
	}
}

func fsGlob() ([]string, error) {
	ents, err := configschemas.FS.ReadDir(".")
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			out = append(out, e.Name())
		}
	}
	return out, err
}

func docSection(doc, module string) string {
	_, rest, ok := strings.Cut(doc, "## `"+module+"`")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestExampleValid checks that aep.example.yaml configures every built-in
// module and that each plugin's settings match its schema.
func TestExampleValid(t *testing.T) {
	data, err := os.ReadFile("../../aep.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := configcheck.Check("aep.example.yaml", data); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins []struct {
			Cls    string         `yaml:"cls"`
			Config map[string]any `yaml:"config"`
		} `yaml:"plugins"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range cfg.Plugins {
		seen[p.Cls] = true
	}
	for _, m := range server.Modules() {
		if m.DefaultName != "" && !seen[m.ID] {
			t.Errorf("aep.example.yaml has no plugin of module %s", m.ID)
		}
	}
}

func kernelSchema(t *testing.T) *jschema {
	t.Helper()
	data, err := configschemas.FS.ReadFile("kernel.json")
	if err != nil {
		t.Fatal(err)
	}
	var s jschema
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestKernelKeysInSchemaDocsAndExample checks that the Go type of the
// host configuration (server.Config) has exactly the keys of
// schemas/config/kernel.json, that docs/config.md has a row (or, for a
// top-level section, a heading) for each, and that aep.example.yaml sets
// every section and shows every key, set or in a comment: a kernel
// setting added anywhere but the schema fails here.
func TestKernelKeysInSchemaDocsAndExample(t *testing.T) {
	s := kernelSchema(t)
	gk := goKeys(reflect.TypeOf(server.Config{}), "")
	sk := schemaKeys(s, s, "")
	sort.Strings(gk)
	sort.Strings(sk)
	if !reflect.DeepEqual(gk, sk) {
		t.Errorf("server.Config keys %v\nkernel.json keys %v", gk, sk)
	}
	docs, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../aep.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(example, &doc); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := prefix + n.Content[i].Value
				set[k] = true
				if k != "plugins[].config" {
					walk(n.Content[i+1], k+".")
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, strings.TrimSuffix(prefix, ".")+"[].")
			}
		}
	}
	walk(&doc, "")
	sections := map[string]bool{}
	var collect func(sc *jschema, prefix string)
	collect = func(sc *jschema, prefix string) {
		for k, p := range sc.Properties {
			sub, sep := p, "."
			if p.Items != nil {
				sub, sep = p.Items, "[]."
			}
			if sub.Ref != "" {
				sections[prefix+k] = true
				collect(s.Defs[strings.TrimPrefix(sub.Ref, "#/$defs/")], prefix+k+sep)
			}
		}
	}
	collect(s, "")
	for _, k := range sk {
		top := !strings.ContainsAny(k, ".[")
		if top {
			if !strings.Contains(string(docs), "## `"+k+"`") && !strings.Contains(string(docs), "## `"+k+"[]`") {
				t.Errorf("docs/config.md: no section for %s", k)
			}
		} else if !strings.Contains(string(docs), "| `"+k+"` |") {
			t.Errorf("docs/config.md: no row for %s", k)
		}
		if sections[k] && !set[k] {
			t.Errorf("aep.example.yaml does not set the section %s", k)
			continue
		}
		leaf := k[strings.LastIndexAny(k, ".]")+1:]
		commented := regexp.MustCompile(`(?m)^\s*#\s*(- )?` + regexp.QuoteMeta(leaf) + `:`)
		if !set[k] && !commented.Match(example) {
			t.Errorf("aep.example.yaml shows no %s, set or in a comment", k)
		}
	}
}

// TestKernelDefaultsAreTheCodes: every default kernel.json documents is
// the value a file without the key gets (server.ParseConfig), so
// docs/config.md never promises a default the code does not apply. A
// default in <angle brackets> names a place ("<data-dir>/…") and is
// skipped, as is a pointer left nil (its default applies where it is used).
func TestKernelDefaultsAreTheCodes(t *testing.T) {
	cfg, err := server.ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	data, err := configschemas.FS.ReadFile("kernel.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Ref     string          `json:"$ref"`
				Default json.RawMessage `json:"default"`
				GoType  string          `json:"x-go-type"`
			} `json:"properties"`
		} `json:"$defs"`
		Properties map[string]struct {
			Ref string `json:"$ref"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	checked := 0
	var walk func(def string, prefix string, val map[string]any)
	walk = func(def, prefix string, val map[string]any) {
		for k, p := range s.Defs[def].Properties {
			key := prefix + k
			if p.Ref != "" {
				sub, _ := val[k].(map[string]any)
				walk(strings.TrimPrefix(p.Ref, "#/$defs/"), key+".", sub)
				continue
			}
			if len(p.Default) == 0 || strings.Contains(string(p.Default), "<") || val[k] == nil {
				continue
			}
			var want any
			if err := json.Unmarshal(p.Default, &want); err != nil {
				t.Fatal(err)
			}
			have := val[k]
			if strings.HasSuffix(p.GoType, "Duration") {
				w, _ := time.ParseDuration(want.(string))
				h, _ := time.ParseDuration(fmt.Sprint(have))
				want, have = w, h
			} else if n, ok := want.(float64); ok {
				want, have = n, toFloat(have)
			}
			if !reflect.DeepEqual(want, have) {
				t.Errorf("%s: kernel.json says the default is %v, a file without it gets %v", key, want, have)
			}
			checked++
		}
	}
	for k, p := range s.Properties {
		if p.Ref != "" {
			sub, _ := got[k].(map[string]any)
			walk(strings.TrimPrefix(p.Ref, "#/$defs/"), k+".", sub)
		}
	}
	if checked < 30 {
		t.Errorf("only %d defaults compared", checked)
	}
}

func toFloat(v any) any {
	switch n := v.(type) {
	case int:
		return float64(n)
	case int64:
		return float64(n)
	case uint64:
		return float64(n)
	}
	return v
}
