package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/aephost/aep/gen/msg"
)

// generated runs the generator over this module's schemas/.
func generated(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := generate("../../schemas")
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func compileBundle(t *testing.T, bundle []byte) *jsonschema.Compiler {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(bundle))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(BundleID, doc); err != nil {
		t.Fatal(err)
	}
	return c
}

func compileDef(t *testing.T, c *jsonschema.Compiler, def string) *jsonschema.Schema {
	t.Helper()
	s, err := c.Compile(BundleID + "#/$defs/" + def)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCommitted: gen/contract holds exactly what the generator writes.
func TestCommitted(t *testing.T) {
	for name, want := range generated(t) {
		got, err := os.ReadFile(filepath.Join("../../gen/contract", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("gen/contract/%s is stale: run go generate ./...", name)
		}
	}
}

// TestStandardOnly: nothing of ours in the bundle, and every $ref local.
func TestStandardOnly(t *testing.T) {
	var doc any
	if err := json.Unmarshal(generated(t)[bundleFile], &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if strings.HasPrefix(k, "x-") || k == "goJSONSchema" {
					if !strings.HasSuffix(path, "/properties") {
						t.Errorf("%s: keyword %s", path, k)
					}
				}
				if k == "format" {
					if f, ok := x.(string); ok && !standardFormats[f] {
						t.Errorf("%s: format %q is not JSON Schema's", path, f)
					}
				}
				if k == "$ref" {
					if r, _ := x.(string); !strings.HasPrefix(r, "#/$defs/") {
						t.Errorf("%s: $ref %q leaves the bundle", path, r)
					}
				}
				walk(path+"/"+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"/[]", x)
			}
		}
	}
	walk("", doc)
}

// TestEveryType: one whole-message def per registry type, alias and
// namespace event, each in the union of its direction.
func TestEveryType(t *testing.T) {
	var doc struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Const any `json:"const"`
			} `json:"properties"`
			Required []string `json:"required"`
			OneOf    []struct {
				Ref string `json:"$ref"`
			} `json:"oneOf"`
			AllOf []struct {
				If struct {
					Properties map[string]struct {
						Const string `json:"const"`
					} `json:"properties"`
				} `json:"if"`
				Then struct {
					Ref string `json:"$ref"`
				} `json:"then"`
			} `json:"allOf"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(generated(t)[bundleFile], &doc); err != nil {
		t.Fatal(err)
	}
	// The union a validator takes dispatches on type (if/then), the one a
	// generator takes (Any…) is a oneOf; both hold the same members.
	members := func(union string) map[string]bool {
		out := map[string]bool{}
		for _, r := range doc.Defs["Any"+union].OneOf {
			out[strings.TrimPrefix(r.Ref, "#/$defs/")] = true
		}
		dispatched := map[string]bool{}
		for _, rule := range doc.Defs[union].AllOf {
			def := strings.TrimPrefix(rule.Then.Ref, "#/$defs/")
			dispatched[def] = true
			if typ := rule.If.Properties["type"].Const; doc.Defs[def].Properties["type"].Const != typ {
				t.Errorf("%s: the rule for type %q applies %s", union, typ, def)
			}
		}
		if !maps.Equal(out, dispatched) {
			t.Errorf("%s dispatches to %d messages, Any%s holds %d", union, len(dispatched), union, len(out))
		}
		return out
	}
	agent, host := members("AgentMessage"), members("HostMessage")
	reg := msg.Registry()
	types := map[string]bool{}
	for _, e := range reg.Entries() {
		types[e.Type] = e.Kind.AgentSends()
	}
	for _, ns := range reg.Namespaces() {
		types[ns.Event] = false
	}
	for _, alias := range []string{"env/data/add", "env/data/get", "env/data/reset"} {
		if e := reg.Lookup(alias); e != nil {
			types[alias] = e.Kind.AgentSends()
		}
	}
	for typ, agentSends := range types {
		def := typeName(typ)
		d, ok := doc.Defs[def]
		if !ok {
			t.Errorf("%s: no def %s", typ, def)
			continue
		}
		if c := d.Properties["type"].Const; c != typ {
			t.Errorf("%s: type const %v", def, c)
		}
		hasReqID := false
		for _, r := range d.Required {
			hasReqID = hasReqID || r == "req_id"
		}
		if !agentSends && !hasReqID {
			t.Errorf("%s: req_id required = %v", def, hasReqID)
		}
		if agentSends && (!agent[def] || host[def]) || !agentSends && (!host[def] || agent[def]) {
			t.Errorf("%s: in AgentMessage %v, in HostMessage %v", def, agent[def], host[def])
		}
	}
	if n := len(agent) + len(host); n != len(types) {
		t.Errorf("unions hold %d types, the registry %d", n, len(types))
	}
}

// TestNames: every def name is an identifier as it stands, so generators
// need neither to mangle it nor to number it (Envelope1), and none is a
// built-in of a target language.
func TestNames(t *testing.T) {
	var doc struct {
		Defs map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(generated(t)[bundleFile], &doc); err != nil {
		t.Fatal(err)
	}
	ident := regexp.MustCompile(`^[A-Z][A-Za-z]*[a-z]$|^[A-Z][A-Za-z]*[A-Z]{2,}[a-z]*$`)
	lower := map[string]string{}
	for name := range doc.Defs {
		if !ident.MatchString(name) || reserved[name] {
			t.Errorf("def name %q", name)
		}
		if other, ok := lower[strings.ToLower(name)]; ok {
			t.Errorf("%s and %s differ only in case", name, other)
		}
		lower[strings.ToLower(name)] = name
	}
}

// TestMessages: whole messages are checked whole; each line names the rule
// it tests.
func TestMessages(t *testing.T) {
	c := compileBundle(t, generated(t)[bundleFile])
	agent, host := compileDef(t, c, "AgentMessage"), compileDef(t, c, "HostMessage")
	cases := []struct {
		name   string
		host   bool
		line   string
		accept bool
	}{
		{"a tool call", false, `{"type":"tool/call/req","id":"1","proto":"1.0","ts":1,"tool_name":"echo","arguments":{}}`, true},
		{"an agent's unknown field is ignored", false, `{"type":"tool/call/req","id":"1","proto":"1.0","ts":1,"tool_name":"echo","arguments":{},"future":1}`, true},
		{"a tool call body under env/step/req", false, `{"type":"env/step/req","id":"1","proto":"1.0","ts":1,"tool_name":"echo","arguments":{}}`, false},
		{"an agent sends a reply", false, `{"type":"pong","id":"1","proto":"1.0","ts":1,"req_id":"p"}`, false},
		{"a wrong proto", false, `{"type":"ping","id":"1","proto":"2.0","ts":1}`, false},
		{"chain/run by name", false, `{"type":"chain/run/req","id":"1","proto":"1.0","ts":1,"name":"c"}`, true},
		{"chain/run with neither name nor chain", false, `{"type":"chain/run/req","id":"1","proto":"1.0","ts":1}`, false},
		{"chain/run by chain", false, `{"type":"chain/run/req","id":"1","proto":"1.0","ts":1,"chain":{"nodes":[{"id":"a","kind":"action","request":{"type":"ping"}}]}}`, true},
		{"chain/run with both", false, `{"type":"chain/run/req","id":"1","proto":"1.0","ts":1,"name":"c","chain":{"nodes":[{"id":"a","kind":"action","request":{"type":"ping"}}]}}`, false},
		{"memory/forget by keys", false, `{"type":"memory/forget/req","id":"1","proto":"1.0","ts":1,"memory_id":"m","keys":["a"]}`, true},
		{"memory/forget with empty keys only", false, `{"type":"memory/forget/req","id":"1","proto":"1.0","ts":1,"memory_id":"m","keys":[]}`, false},
		{"memory/forget with empty keys and a tier", false, `{"type":"memory/forget/req","id":"1","proto":"1.0","ts":1,"memory_id":"m","keys":[],"tier":"working"}`, true},
		{"memory/forget with no selector", false, `{"type":"memory/forget/req","id":"1","proto":"1.0","ts":1,"memory_id":"m"}`, false},
		{"a pong", true, `{"type":"pong","id":"1","proto":"1.0","ts":1,"req_id":"p","uptime_seconds":3}`, true},
		{"a reply without req_id", true, `{"type":"pong","id":"1","proto":"1.0","ts":1,"uptime_seconds":3}`, false},
		{"a host sends a request", true, `{"type":"tool/call/req","id":"1","proto":"1.0","ts":1,"req_id":"x","tool_name":"echo","arguments":{}}`, false},
		{"an error", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"parse_error","message":"m","retryable":false}`, true},
		{"parse_error retryable", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"parse_error","message":"m","retryable":true}`, false},
		{"runtime_error retryable, no reason", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"runtime_error","message":"m","retryable":true}`, true},
		{"runtime_error overloaded retryable", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"runtime_error","message":"m","retryable":true,"detail":{"reason":"overloaded"}}`, true},
		{"runtime_error denied not retryable", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"runtime_error","message":"m","retryable":false,"detail":{"reason":"denied"}}`, true},
		{"runtime_error denied retryable", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"runtime_error","message":"m","retryable":true,"detail":{"reason":"denied"}}`, false},
		{"runtime_error unlisted reason takes the code's value", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"runtime_error","message":"m","retryable":false,"detail":{"reason":"elsewhere"}}`, false},
		{"parse_error too_large retryable", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"parse_error","message":"m","retryable":true,"detail":{"reason":"too_large"}}`, false},
		{"a code outside the catalogue", true, `{"type":"error","id":"1","proto":"1.0","ts":1,"req_id":"x","code":"oops","message":"m","retryable":false}`, false},
		{"a host's unknown field", true, `{"type":"pong","id":"1","proto":"1.0","ts":1,"req_id":"p","uptime_seconds":3,"extra":1}`, false},
		{"a tool event", true, `{"type":"tool/event","id":"1","proto":"1.0","ts":1,"req_id":"x","kind":"log","data":{"level":"info","message":"m"},"seq":0}`, true},
		{"an event without seq", true, `{"type":"skill/event","id":"1","proto":"1.0","ts":1,"req_id":"x","kind":"log","data":{}}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			s := agent
			if tc.host {
				s = host
			}
			err = s.Validate(v)
			if (err == nil) != tc.accept {
				t.Errorf("accepted = %v, want %v (%v)", err == nil, tc.accept, err)
			}
		})
	}
}

// TestRefusals: a def name that shadows a built-in or clashes fails
// generation, naming the def.
func TestRefusals(t *testing.T) {
	cases := []struct{ name, file, want string }{
		{"built-in", `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://x/a.json","$defs":{"Error":{"type":"object"}}}`, `a.json#Error`},
		{"clash", `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://x/a.json","$defs":{"ToolEvent":{"type":"object"}}}`, `both become "ToolEvent"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"envelope.json", "core.json", "tools.json"} {
				b, err := os.ReadFile(filepath.Join("../../schemas", f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := generate(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestRetryTableAgrees: the retryable table and the catalogue of codes
// must name the same codes with the same retryable, or generation fails
// naming the code.
func TestRetryTableAgrees(t *testing.T) {
	cases := []struct{ name, table, want string }{
		{"a code flipped", `{"codes":{"parse_error":{"retryable":true}}}`, `"parse_error": retryable must be false`},
		{"a code unknown to the catalogue", `{"codes":{"teapot":{"retryable":false}}}`, `"teapot" is not in the catalogue`},
		{"a reason without retryable", `{"codes":{"timeout":{"retryable":true,"reasons":{"slow":{"why":"w"}}}}}`, `reason "slow" has no retryable`},
		{"an unknown key", `{"codez":{}}`, `unknown field "codez"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS("../../schemas")); err != nil {
				t.Fatal(err)
			}
			// Start from the real table and apply the case over it.
			var table map[string]any
			b, err := os.ReadFile(filepath.Join(dir, retryTableFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &table); err != nil {
				t.Fatal(err)
			}
			var patch map[string]any
			if err := json.Unmarshal([]byte(tc.table), &patch); err != nil {
				t.Fatal(err)
			}
			for k, v := range patch {
				if codes, ok := v.(map[string]any); ok && k == "codes" {
					for code, row := range codes {
						table["codes"].(map[string]any)[code] = row
					}
					continue
				}
				table[k] = v
			}
			b, _ = json.Marshal(table)
			if err := os.WriteFile(filepath.Join(dir, retryTableFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = generate(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestAsyncAPI: every request has a receive operation per transport whose
// reply is its reply type (or error), and every payload is a bundle def.
func TestAsyncAPI(t *testing.T) {
	files := generated(t)
	var bundle struct {
		Defs map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(files[bundleFile], &bundle); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Operations map[string]struct {
			Action   string
			Messages []map[string]string
			Reply    struct{ Messages []map[string]string }
		}
		Components struct {
			Messages map[string]struct {
				Name          string
				Payload       map[string]string
				CorrelationID map[string]string `yaml:"correlationId"`
			}
		}
	}
	if err := yaml.Unmarshal(files[asyncAPIFile], &doc); err != nil {
		t.Fatal(err)
	}
	for name, m := range doc.Components.Messages {
		def, ok := strings.CutPrefix(m.Payload["$ref"], bundleFile+"#/$defs/")
		if _, in := bundle.Defs[def]; !ok || !in || def != name {
			t.Errorf("message %s: payload %v", name, m.Payload)
		}
		if m.CorrelationID["location"] == "" {
			t.Errorf("message %s: no correlationId", name)
		}
	}
	for _, e := range msg.Registry().Entries() {
		if e.Kind.String() != "request" {
			continue
		}
		for _, tr := range transports {
			op, ok := doc.Operations[operationName(tr, e.Type)]
			if !ok {
				t.Errorf("%s over %s: no operation", e.Type, tr.ID)
				continue
			}
			if op.Action != "receive" || len(op.Messages) != 1 || !strings.HasSuffix(op.Messages[0]["$ref"], "/"+typeName(e.Type)) {
				t.Errorf("%s over %s: %+v", e.Type, tr.ID, op)
			}
			if len(op.Reply.Messages) == 0 || !strings.HasSuffix(op.Reply.Messages[0]["$ref"], "/"+typeName(e.Reply)) {
				t.Errorf("%s over %s: reply %+v", e.Type, tr.ID, op.Reply)
			}
		}
	}
}

// TestEnvelopeFieldInABody: a body field named as a field of the
// envelope (a reply's point) would be a second member of that name in the
// wire object the encoder splices: generation stops, naming it.
func TestEnvelopeFieldInABody(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"envelope.json", "core.json", "tools.json", "errors/retryable.json"} {
		b, err := os.ReadFile(filepath.Join("../../schemas", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "tools.json" {
			// The first properties after the reply's type are its own.
			i := bytes.Index(b, []byte(`"x-aep-type": "tool/list/resp"`))
			j := bytes.Index(b[max(i, 0):], []byte(`"properties": {`))
			if i < 0 || j < 0 {
				t.Fatal("tools.json has no tool/list/resp with properties")
			}
			at := i + j + len(`"properties": {`)
			b = append(b[:at:at], append([]byte(`"point": {"type": "integer"}, `), b[at:]...)...)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := generate(dir)
	if err == nil || !strings.Contains(err.Error(), `body field "point" is an envelope field`) {
		t.Fatalf("err = %v, want it to name the body field point", err)
	}
}
