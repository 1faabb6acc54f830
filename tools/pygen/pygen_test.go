package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// TestCommitted: sdk/python/aep holds exactly what the generator writes
// from the committed bundle.
func TestCommitted(t *testing.T) {
	bundle, err := os.ReadFile(filepath.Join(root, "gen/contract/aep.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := generate(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, "sdk/python/aep", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("sdk/python/aep/%s is stale: run go generate ./...", name)
		}
	}
}

// TestNewOptionalFieldReachesPython is the fixture for the drift gate: an
// optional property added to tool/call/req in a copy of schemas/ goes
// through the same two generators `go generate` runs (aepcontract, then
// pygen) and appears in the Python model as an optional field and in the
// typed method as a keyword argument; when python3 with pydantic 2 is
// there, the generated module is imported and the field checked live.
func TestNewOptionalFieldReachesPython(t *testing.T) {
	dir := t.TempDir()
	schemas := filepath.Join(dir, "schemas")
	if err := os.CopyFS(schemas, os.DirFS(filepath.Join(root, "schemas"))); err != nil {
		t.Fatal(err)
	}
	toolsPath := filepath.Join(schemas, "tools.json")
	raw, err := os.ReadFile(toolsPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	callReq := doc["$defs"].(map[string]any)["ToolCallReq"].(map[string]any)
	callReq["properties"].(map[string]any)["priority_hint"] = map[string]any{
		"type": "integer", "description": "A fixture field.",
	}
	raw, err = json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(toolsPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	contract := filepath.Join(dir, "contract")
	cmd := exec.Command("go", "run", "./tools/aepcontract", "-schemas", schemas, "-out", contract)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("aepcontract: %v\n%s", err, out)
	}
	pkg := filepath.Join(dir, "aep")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run(filepath.Join(contract, "aep.schema.json"), pkg); err != nil {
		t.Fatal(err)
	}
	models, err := os.ReadFile(filepath.Join(pkg, "_models.py"))
	if err != nil {
		t.Fatal(err)
	}
	methods, err := os.ReadFile(filepath.Join(pkg, "_methods.py"))
	if err != nil {
		t.Fatal(err)
	}
	cls := section(string(models), "class ToolCallReqMessage(Model):", "\nclass ")
	if !strings.Contains(cls, "    priority_hint: Optional[int] = None\n") {
		t.Errorf("ToolCallReqMessage has no optional priority_hint:\n%s", cls)
	}
	meth := section(string(methods), "async def tool_call(", "async def ")
	for _, want := range []string{"priority_hint: Optional[int] = None,", `"priority_hint": priority_hint`} {
		if !strings.Contains(meth, want) {
			t.Errorf("tool_call lacks %q:\n%s", want, meth)
		}
	}
	// The committed models do not have it: the fixture is what added it.
	committed, err := os.ReadFile(filepath.Join(root, "sdk/python/aep/_models.py"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(committed), "priority_hint") {
		t.Fatal("the committed models already have the fixture's field")
	}

	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the generated module was checked as text only")
	}
	if err := os.WriteFile(filepath.Join(pkg, "__init__.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check := `
import json, sys
import pydantic
assert pydantic.VERSION.startswith("2."), pydantic.VERSION
from aep import _models as m
f = m.ToolCallReqMessage.model_fields["priority_hint"]
assert not f.is_required()
msg = m.ToolCallReqMessage(id="1", ts=1.0, tool_name="echo", priority_hint=3)
wire = json.loads(msg.model_dump_json(exclude_unset=True))
assert wire["priority_hint"] == 3, wire
print("ok")
`
	c := exec.Command(py, "-c", check)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if strings.Contains(string(out), "No module named 'pydantic'") {
		t.Skip("python3 has no pydantic: the generated module was checked as text only")
	}
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python check: %v\n%s", err, out)
	}
}

func section(s, start, next string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, next); j >= 0 {
		s = s[:j]
	}
	return s
}

// TestMappingErrors: shapes the emitter cannot map faithfully stop
// generation instead of producing a loose model.
func TestMappingErrors(t *testing.T) {
	cases := []struct {
		name, bundle, want string
	}{
		{"no defs", `{}`, "no $defs"},
		{"inline object", `{"$defs": {"A": {"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "string"}}}}},
			"AgentMessage": {"oneOf": [{"$ref": "#/$defs/A"}]}, "HostMessage": {"oneOf": [{"$ref": "#/$defs/A"}]}}}`, "object with properties inside a def"},
		{"dangling ref", `{"$defs": {"A": {"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}}}}`, "is not a def of the bundle"},
		{"no unions", `{"$defs": {"A": {"type": "object", "properties": {"x": {"type": "string"}}}}}`, "no HostMessage union"},
		{"reply missing", `{"$defs": {
			"QReqMessage": {"type": "object", "description": "` + "`q/req`" + ` (request).", "properties": {"type": {"const": "q/req"}}},
			"AgentMessage": {"oneOf": [{"$ref": "#/$defs/QReqMessage"}]}, "HostMessage": {"oneOf": []}}}`, "reply q/resp is not a HostMessage"},
		{"keyword collision", `{"$defs": {
			"QReqMessage": {"type": "object", "description": "` + "`q/req`" + ` (request).", "properties": {"type": {"const": "q/req"}, "call_timeout": {"type": "number"}}},
			"QRespMessage": {"type": "object", "properties": {"type": {"const": "q/resp"}}},
			"AgentMessage": {"oneOf": [{"$ref": "#/$defs/QReqMessage"}]}, "HostMessage": {"oneOf": [{"$ref": "#/$defs/QRespMessage"}]}}}`, "collides with a method keyword"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := generate([]byte(c.bundle))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}
