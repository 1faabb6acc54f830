// Package toolkits is the toolkits capability (spec §2.8, 2.9, part 3):
// bundles of tools with a shared configuration described by a JSON Schema.
// A session configures a toolkit with toolkit/configure; only then do its
// tools appear in that session's tool/list with `toolkit` set, and they run
// through the shared mechanics of server/toolrun. The one built-in toolkit
// is `sql` (SQLite or PostgreSQL). Module "aep.toolkits.builtin".
package toolkits

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/kaptinlin/jsonschema"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server/toolrun"
)

// Toolkit describes one toolkit and how to start it.
type Toolkit struct {
	Name, Description, Category, Version string
	Alias                                *string
	Tags                                 []string
	// Schema is the configuration's JSON Schema (spec §2.8).
	Schema map[string]any
	// Tools names the bundled tools; Open must return exactly these.
	Tools []string
	// Open connects the backend for one session with a validated config.
	Open func(ctx context.Context, place Place, cfg map[string]any) (Backend, error)

	compiled *jsonschema.Schema
}

// Place is where a session's toolkit keeps its files: the session's own
// directory (docs/SECURITY.md, Session directories and subagents).
type Place struct {
	// Dir is the session directory's host path.
	Dir string
	// ReadOnly is set for a restricted subagent, which may not write there.
	ReadOnly bool
	// Session is the session's handle, whose budget the toolkit's work
	// spends.
	Session string
}

// Backend is one session's running toolkit.
type Backend interface {
	// Tools returns the toolkit's tools bound to this backend.
	Tools() []*toolrun.Tool
	// Alive checks the backend connection (running vs configured, spec §2.8 states).
	Alive(ctx context.Context) bool
	Close() error
}

// compile prepares the schema validator with network loaders removed
// (docs/DECISIONS.md, Security defaults: validators never load references over the network).
func (k *Toolkit) compile() error {
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	raw, err := json.Marshal(k.Schema)
	if err != nil {
		return err
	}
	s, err := c.Compile(raw)
	if err != nil {
		return fmt.Errorf("toolkit %s: schema: %w", k.Name, err)
	}
	// Without loaders the library leaves a non-local $ref unresolved and
	// validates as if it were absent; refuse it, so no constraint of the
	// schema is silently skipped.
	if refs := s.UnresolvedReferenceURIs(); len(refs) > 0 {
		return fmt.Errorf("toolkit %s: schema: $ref %s cannot be resolved (references are never fetched)", k.Name, strings.Join(refs, ", "))
	}
	k.compiled = s
	return nil
}

// Secrets returns the names of the schema's secret properties: writeOnly
// true or format password (docs/DECISIONS.md, State).
func (k *Toolkit) Secrets() []string {
	var out []string
	props, _ := k.Schema["properties"].(map[string]any)
	for name, p := range props {
		pm, _ := p.(map[string]any)
		if pm["writeOnly"] == true || pm["format"] == "password" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// validate applies spec §2.9 rules 2 and 3 with the messages they ask for,
// then the whole schema. Messages name fields and allowed values only, never
// the values given, so a secret is never echoed.
func (k *Toolkit) validate(cfg map[string]any) (map[string]any, error) {
	props, _ := k.Schema["properties"].(map[string]any)
	// Defaults first, so a required field with a default is never missing.
	full := map[string]any{}
	for name, p := range props {
		if d, ok := p.(map[string]any)["default"]; ok {
			full[name] = d
		}
	}
	for n, v := range cfg {
		full[n] = v
	}
	var missing []string
	for _, r := range requiredOf(k.Schema) {
		v, ok := cfg[r]
		if !ok || v == nil || v == "" {
			if _, hasDefault := props[r].(map[string]any)["default"]; !ok && hasDefault {
				continue
			}
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("missing required fields: %s", strings.Join(missing, ", "))
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		enum, ok := props[n].(map[string]any)["enum"].([]any)
		v, set := full[n]
		if !ok || !set {
			continue
		}
		found := false
		allowed := make([]string, len(enum))
		for i, e := range enum {
			allowed[i] = fmt.Sprint(e)
			if fmt.Sprint(e) == fmt.Sprint(v) {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("field %q must be one of: %s", n, strings.Join(allowed, ", "))
		}
	}
	res := k.compiled.Validate(full)
	if !res.IsValid() {
		var where []string
		for _, d := range res.ToList().Details {
			if !d.Valid && d.InstanceLocation != "" {
				where = append(where, d.InstanceLocation)
			}
		}
		sort.Strings(where)
		if len(where) == 0 {
			where = []string{"/"}
		}
		return nil, fmt.Errorf("config does not match the toolkit schema at %s", strings.Join(dedupe(where), ", "))
	}
	return full, nil
}

func requiredOf(schema map[string]any) []string {
	switch r := schema["required"].(type) {
	case []string:
		return r
	case []any:
		out := make([]string, 0, len(r))
		for _, v := range r {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// definition reports k for a session.
func (k *Toolkit) definition(configured, running bool) msg.ToolkitDefinition {
	state := msg.ToolkitDefinitionStateInstalled
	switch {
	case running:
		state = msg.ToolkitDefinitionStateRunning
	case configured:
		state = msg.ToolkitDefinitionStateConfigured
	}
	tags := k.Tags
	if tags == nil {
		tags = []string{}
	}
	return msg.ToolkitDefinition{
		Name: k.Name, Alias: k.Alias, Description: k.Description, Category: k.Category,
		Tags: tags, IconSvg: nil, Schema: k.Schema, Tools: k.Tools,
		Configured: configured, Version: k.Version, State: state,
	}
}

// scrub removes every secret value from text, for driver errors that might
// quote a connection string (spec §2.9 rule 6, spec §5 rule 5).
func scrub(text string, cfg map[string]any, secrets []string) string {
	for _, s := range secrets {
		if v, ok := cfg[s].(string); ok && v != "" {
			text = strings.ReplaceAll(text, v, "***")
		}
	}
	return text
}
