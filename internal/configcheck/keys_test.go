package configcheck_test

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

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
