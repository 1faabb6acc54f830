package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/server"
)

// TestYAMLServersProxiedAsPlainTools pins a defect cluster of the prior
// Python SDK (reference/prior-python-sdk.md §7.9): its bridge ignored the
// `servers:` of the YAML config, and MCP tools never reached tool/list.
// Here a server declared only in the YAML config of `cls: aep.mcp.bridge`
// is connected at start-up, listed by mcp/server/list, and its tools are
// proxied as plain tools (spec §1 mcp): listed by tool/list and answered by
// tool/call, on the wire.
func TestYAMLServersProxiedAsPlainTools(t *testing.T) {
	cfg, err := server.ParseConfig(fmt.Appendf(nil, `server:
  auth_token: secret
plugins:
  - name: bridge
    type: mcp
    cls: aep.mcp.bridge
    config:
      servers:
        - id: y
          command: %q
          args: ["-test.run=^$"]
          env: {AEP_MCP_TEST_SERVER: y}
`, os.Args[0]))
	if err != nil {
		t.Fatal(err)
	}
	ctx := aeptest.Context(t)
	h, err := server.New(ctx, cfg, server.WithDataDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h.Close(cctx)
	})
	pipe, err := h.ConnectLines(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	ask := func(id, typ, body string) map[string]any {
		t.Helper()
		if body != "" {
			body = "," + body
		}
		line := fmt.Sprintf(`{"type":%q,"id":%q,"proto":"1.0","ts":1%s}`, typ, id, body)
		if err := pipe.WriteLine(ctx, []byte(line)); err != nil {
			t.Fatal(err)
		}
		for {
			raw, err := pipe.ReadLine(ctx)
			if err != nil {
				t.Fatalf("%s: no reply: %v", id, err)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if m["req_id"] != id {
				t.Fatalf("%s: got a line for %v: %s", id, m["req_id"], raw)
			}
			if !strings.HasSuffix(fmt.Sprint(m["type"]), "/event") {
				return m
			}
		}
	}
	if r := ask("h", "handshake/req", `"agent_id":"a","agent_caps":["mcp","tools"],"auth_token":"secret"`); r["ok"] != true {
		t.Fatalf("handshake: %v", r)
	}
	// The configured server may still be connecting when the host starts.
	var status string
	for i := 0; status != "ready"; i++ {
		r := ask(fmt.Sprintf("sl%d", i), "mcp/server/list/req", "")
		servers, _ := r["servers"].([]any)
		if len(servers) != 1 {
			t.Fatalf("mcp/server/list: %v", r)
		}
		s, _ := servers[0].(map[string]any)
		if s["server_id"] != "y" {
			t.Fatalf("server: %v", s)
		}
		status, _ = s["status"].(string)
		if status != "ready" && status != "connecting" {
			t.Fatalf("configured server not connected: %v", s)
		}
		if status != "ready" {
			time.Sleep(20 * time.Millisecond)
		}
	}
	l := ask("l", "tool/list/req", `"tags":["mcp"]`)
	tools, _ := l["tools"].([]any)
	var names []string
	for _, d := range tools {
		names = append(names, fmt.Sprint(d.(map[string]any)["name"]))
	}
	if !strings.Contains(","+strings.Join(names, ",")+",", ",y__echo,") {
		t.Fatalf("tool/list lacks the proxied y__echo: %v", names)
	}
	c := ask("c", "tool/call/req", `"tool_name":"y__echo","arguments":{"message":"hi"}`)
	res, _ := c["result"].(map[string]any)
	if c["type"] != "tool/call/resp" || res["success"] != true || res["summary"] != "y: hi" {
		t.Fatalf("tool/call: %v", c)
	}
}
