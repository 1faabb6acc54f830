package mcpface_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/aephost/aep/capabilities/skills"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/mcpface"
)

// TestSkillsAsTools: every skill of the session is an MCP tool skill_<name>
// with the skill's input schema, called through skill/call (sandboxed, as
// any skill run); arguments the skill's schema refuses are a tool error.
func TestSkillsAsTools(t *testing.T) {
	cfg := aeptest.Config(func(c *server.Config) { c.MCPFace.Capabilities = []string{"skills"} })
	p := &skills.Plugin{Settings: skills.Settings{Dir: "../../capabilities/skills/testdata/skills", WorkRoot: t.TempDir()}}
	h := aeptest.NewHost(t, cfg, []server.PluginSpec{aeptest.Plugin("skills", p)})
	face := mcpface.New(h)
	t.Cleanup(face.Close)
	srv := httptest.NewServer(face)
	t.Cleanup(srv.Close)
	r := &rig{h: h, face: face, url: srv.URL + "/mcp"}
	for _, rev := range revisions {
		t.Run(rev, func(t *testing.T) {
			c, err := r.connect(t, rev, aeptest.Token)
			if err != nil {
				t.Fatal(err)
			}
			ctx := aeptest.Context(t)
			lr, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var echo *mcp.Tool
			for i, tl := range lr.Tools {
				if tl.Name == "skill_echo" {
					echo = &lr.Tools[i]
				}
				if !strings.HasPrefix(tl.Name, "skill_") {
					t.Errorf("tool %q listed with only the skills capability", tl.Name)
				}
			}
			if echo == nil {
				t.Fatalf("no skill_echo in %v", lr.Tools)
			}
			schema, _ := json.Marshal(echo.InputSchema)
			if !strings.Contains(string(schema), `"required":["text"]`) || !strings.Contains(echo.Description, "1.10.0") {
				t.Errorf("skill_echo: schema %s, description %q (want the skill's schema and newest version)", schema, echo.Description)
			}
			if echo.Annotations.ReadOnlyHint == nil || *echo.Annotations.ReadOnlyHint {
				t.Errorf("a skill runs code: readOnlyHint %v", echo.Annotations.ReadOnlyHint)
			}
			call := mcp.CallToolRequest{}
			call.Params.Name = "skill_echo"
			call.Params.Arguments = map[string]any{"text": "hi"}
			res, err := c.CallTool(ctx, call)
			if err != nil || res.IsError {
				t.Fatalf("skill_echo: %v %+v", err, res)
			}
			got, _ := json.Marshal(res.StructuredContent)
			if string(got) != `{"echo":{"text":"hi"},"version":"1.10.0"}` {
				t.Fatalf("skill_echo structured content %#v (text %s)", res.StructuredContent, callText(res))
			}
			call.Params.Arguments = map[string]any{"text": 7}
			res, err = c.CallTool(ctx, call)
			if err != nil || !res.IsError || !strings.Contains(callText(res), "schema_violation") {
				t.Fatalf("skill_echo with a number: %v %+v", err, res)
			}
		})
	}
}
