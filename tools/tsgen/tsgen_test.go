package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository root, two levels above this package.
var root = filepath.Join("..", "..")

func readContract(t *testing.T, dir string) (bundle, asyncapi []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "aep.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(filepath.Join(dir, "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b, a
}

// interfaceBlock returns the body of `export interface name { … }`.
func interfaceBlock(t *testing.T, src []byte, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?ms)^export interface ` + name + ` \{\n(.*?)^\}`)
	m := re.FindSubmatch(src)
	if m == nil {
		t.Fatalf("no interface %s in the output", name)
	}
	return string(m[1])
}

// The committed file is what the generator writes for the committed
// contract (CI's drift gate checks the same through go generate).
func TestCommittedOutputIsCurrent(t *testing.T) {
	b, a := readContract(t, filepath.Join(root, "gen", "contract"))
	got, err := generate(b, a)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "sdk", "typescript", "src", "messages.gen.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("sdk/typescript/src/messages.gen.ts is stale: run go generate ./...")
	}
}

// Fields of the real contract map as the README says.
func TestMapping(t *testing.T) {
	b, a := readContract(t, filepath.Join(root, "gen", "contract"))
	src, err := generate(b, a)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		iface, line string
	}{
		{"ToolCallReqMessage", `  type: "tool/call/req";`},
		{"ToolCallReqMessage", `  tool_name: string;`},
		{"ToolCallReqMessage", `  streaming?: boolean;`},
		{"ToolCallReqMessage", `  arguments?: null | JsonObject;`},
		{"ToolCallReqMessage", `  req_id?: string;`},
		{"ToolCallRespMessage", `  req_id: string;`},
		{"ToolCallRespMessage", `  result: ToolResult;`},
		{"ToolEventMessage", `  kind: "progress" | "status" | "artifact" | "log";`},
		{"ErrorMessage", `  code: ErrorCode;`},
		{"ErrorMessage", `  detail?: JsonValue;`},
		{"EnvStepRespMessage", `  observation: JsonValue;`},
		{"HandshakeRespMessage", `  accepted_caps: CapabilityEntry[];`},
		{"LearnFeedbackRespMessage", `  ids: number[];`},
	}
	for _, tt := range tests {
		t.Run(tt.iface+tt.line, func(t *testing.T) {
			if !strings.Contains(interfaceBlock(t, src, tt.iface), tt.line+"\n") {
				t.Errorf("%s lacks %q", tt.iface, tt.line)
			}
		})
	}
	for _, want := range []string{
		`  "tool/call/req": { request: ToolCallReqMessage; reply: ToolCallRespMessage; event: ToolEventMessage };`,
		`  "ping": { request: PingMessage; reply: PongMessage; event: CoreEventMessage };`,
		`  "cancel": CancelMessage;`,
		`  toolCall(body: Body<ToolCallReqMessage>, options?: O): Promise<ToolCallRespMessage> {`,
		`  envStepBatch(body: Body<EnvStepBatchReqMessage>, options?: O): Promise<EnvStepBatchRespMessage> {`,
		`  envList(body: Body<EnvListReqMessage> = {}, options?: O): Promise<EnvListRespMessage> {`,
		`    return this.request("env/data/add/req", body, options);`,
		`  timeout: true,`,
		`  cancelled: false,`,
	} {
		if !bytes.Contains(src, []byte(want+"\n")) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The alias env/data/add is in the table but has no method of its own.
	if bytes.Contains(src, []byte(`this.request("env/data/add", `)) {
		t.Error("the alias env/data/add got a method")
	}
}

// A new optional field in schemas/ reaches the TypeScript types through
// the two generators go generate runs (aepcontract, then tsgen), as an
// optional property, and changes nothing that was required.
func TestNewOptionalFieldReachesTypeScript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go run ./tools/aepcontract")
	}
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
	call := doc["$defs"].(map[string]any)["ToolCallReq"].(map[string]any)
	call["properties"].(map[string]any)["priority_hint"] = map[string]any{
		"type": "integer", "minimum": 0, "description": "A fixture field: scheduling priority.",
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
	b, a := readContract(t, contract)
	after, err := generate(b, a)
	if err != nil {
		t.Fatal(err)
	}
	b0, a0 := readContract(t, filepath.Join(root, "gen", "contract"))
	before, err := generate(b0, a0)
	if err != nil {
		t.Fatal(err)
	}
	was, is := interfaceBlock(t, before, "ToolCallReqMessage"), interfaceBlock(t, after, "ToolCallReqMessage")
	if strings.Contains(was, "priority_hint") {
		t.Fatal("the committed types already have the fixture field")
	}
	const field = "  /** A fixture field: scheduling priority. */\n  priority_hint?: number;\n"
	if !strings.Contains(is, field) {
		t.Fatalf("ToolCallReqMessage lacks the new optional field:\n%s", is)
	}
	if strings.Replace(is, field, "", 1) != was {
		t.Errorf("ToolCallReqMessage changed beyond the new field:\nbefore:\n%s\nafter:\n%s", was, is)
	}
}
