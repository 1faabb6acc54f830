package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// npmBin returns a program .ci/run installs from npm (.ci/mcp/package.json):
// from envVar or the install folder. Absent, the test skips unless CI is
// set, where it fails.
func npmBin(t *testing.T, envVar string, rel ...string) string {
	t.Helper()
	p := os.Getenv(envVar)
	if p == "" {
		p, _ = filepath.Abs(filepath.Join(append([]string{"..", "..", ".ci", "mcp", "node_modules"}, rel...)...))
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed: %v; .ci/run installs it", p, err)
		}
		t.Skipf("%s not installed; set %s or run .ci/run", p, envVar)
	}
	return p
}

func inspectorBin(t *testing.T) string {
	return npmBin(t, "AEP_TEST_MCP_INSPECTOR", ".bin", "mcp-inspector")
}

// inspect runs the MCP Inspector's CLI mode and returns its stdout.
func inspect(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, inspectorBin(t), append([]string{"--cli"}, args...)...)
	cmd.Env = append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "catalog.json"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("inspector %v: %w\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
	}
	return out.String(), nil
}

// serveHTTPProc starts `aep serve` on a loopback port and returns its
// address; the process is stopped when the test ends.
func serveHTTPProc(t *testing.T, args ...string) string {
	t.Helper()
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...)...)
	cmd.Env = append(os.Environ(), "AEP_AUTH_TOKEN="+token)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("aep serve stderr:\n%s", stderr)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, `msg="HTTP transport serving"`) {
				_, a, _ := strings.Cut(l, "addr=")
				return strings.Fields(a)[0]
			}
		}
	}
	t.Fatalf("aep serve did not report its address:\n%s", stderr)
	return ""
}

// The MCP Inspector (a client nobody here wrote) lists and calls aep's
// tools over `aep mcp --stdio`, with the token from the environment.
func TestInspectorStdio(t *testing.T) {
	inspectorBin(t)
	data := t.TempDir()
	// The host's token is in its config; the client's comes from the
	// environment the client gives the process it spawns.
	cfg := filepath.Join(t.TempDir(), "aep.yaml")
	if err := os.WriteFile(cfg, []byte("server: {auth_token: "+token+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The server's command goes after "--": its --config is not the
	// Inspector's.
	run := func(tok string, args ...string) (string, error) {
		return inspect(t, append(append([]string{"-e", "AEP_AUTH_TOKEN=" + tok}, args...), "--", bin, "mcp", "--stdio", "--config", cfg, "--data-dir", data)...)
	}
	out, err := run(token, "--method", "tools/list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"read_file"`, `"memory_store"`, `"env_reset"`, `"readOnlyHint"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("tools/list lacks %s:\n%s", want, out)
		}
	}
	// --tool-arg takes every value up to the next option: it goes first.
	out, err = run(token, "--tool-arg", "key=greeting", `content="hello from MCP"`, "--method", "tools/call", "--tool-name", "memory_store")
	if err != nil || strings.Contains(out, `"isError": true`) {
		t.Fatalf("memory_store: %v\n%s", err, out)
	}
	// Semantic memory persists across sessions (a new process, same data).
	out, err = run(token, "--method", "resources/read", "--uri", "aep://memory/semantic/greeting")
	if err != nil || !strings.Contains(out, "hello from MCP") {
		t.Fatalf("resources/read: %v\n%s", err, out)
	}
	// A wrong token: the kernel refuses the handshake and the command fails.
	if _, err := run("wrong", "--method", "tools/list"); err == nil {
		t.Fatal("the inspector listed tools with a wrong token")
	}
}

// The Inspector over `aep serve`'s /mcp (streamable HTTP, bearer token);
// without the token, or from a foreign Origin, /mcp refuses.
func TestInspectorHTTP(t *testing.T) {
	inspectorBin(t)
	addr := serveHTTPProc(t)
	url := "http://" + addr + "/mcp"
	auth := "Authorization: Bearer " + token
	out, err := inspect(t, url, "--transport", "http", "--header", auth, "--method", "tools/list")
	if err != nil || !strings.Contains(out, `"list_dir"`) {
		t.Fatalf("tools/list: %v\n%s", err, out)
	}
	out, err = inspect(t, url, "--transport", "http", "--header", auth, "--method", "tools/call", "--tool-name", "list_dir", "--tool-arg", "path=.")
	if err != nil || strings.Contains(out, `"isError": true`) {
		t.Fatalf("tools/call: %v\n%s", err, out)
	}
	if _, err := inspect(t, url, "--transport", "http", "--method", "tools/list"); err == nil {
		t.Fatal("the inspector listed tools without a token")
	}
	// A wrong token: the Inspector exits saying so, and does not start an
	// OAuth flow (there is no OAuth metadata to find).
	out, err = inspect(t, url, "--transport", "http", "--header", "Authorization: Bearer wrong-"+token, "--method", "tools/list")
	if err == nil || !strings.Contains(err.Error(), "the bearer token is wrong") || strings.Contains(strings.ToLower(err.Error()), "oauth flow") {
		t.Fatalf("inspector with a wrong token: %v\n%s", err, out)
	}
	// The same on the wire: a plain 401 saying why, no resource_metadata in
	// the challenge, and no OAuth discovery document on the host.
	for _, tc := range []struct{ name, auth, want string }{
		{"wrong token", "Bearer wrong-" + token, "the bearer token is wrong"},
		{"no token", "", "no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch := resp.Header.Get("WWW-Authenticate")
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), tc.want) || strings.Contains(ch, "resource_metadata") {
				t.Fatalf("%d %q %s", resp.StatusCode, ch, b)
			}
		})
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
		"/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/mcp", "/.well-known/openid-configuration"} {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"no token", map[string]string{}, http.StatusUnauthorized},
		{"foreign origin", map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}, http.StatusForbidden},
		{"foreign host", map[string]string{"Authorization": "Bearer " + token, "Host": "evil.example"}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.header {
				if k == "Host" {
					req.Host = v
					continue
				}
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// Both directions at once: server-everything from npm is bridged into aep
// by the mcp capability, and served back out on /mcp, where the Inspector
// calls it and mcp-go's client gets the progress of its long operation.
func TestServerEverythingRoundTrip(t *testing.T) {
	inspectorBin(t)
	everything := npmBin(t, "AEP_TEST_MCP_EVERYTHING", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	cfg := filepath.Join(t.TempDir(), "aep.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
plugins:
  - {name: tools, type: tools, cls: aep.tools.builtin}
  - name: mcp.bridge
    type: mcp
    cls: aep.mcp.bridge
    config:
      connect_timeout: 60
      servers:
        - {id: everything, command: node, args: [%q, stdio]}
mcp_face:
  capabilities: [tools, mcp]
`, everything)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := serveHTTPProc(t, "--config", cfg)
	url := "http://" + addr + "/mcp"
	out, err := inspect(t, url, "--transport", "http", "--header", "Authorization: Bearer "+token,
		"--method", "tools/call", "--tool-name", "everything__echo", "--tool-arg", "message=round trip")
	if err != nil || !strings.Contains(out, "Echo: round trip") {
		t.Fatalf("echo through aep: %v\n%s", err, out)
	}
	for _, rev := range []string{mcp.ProtocolVersion20251125, mcp.ProtocolVersion20260728} {
		t.Run(rev, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
			if err != nil {
				t.Fatal(err)
			}
			c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(rev))
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			init := mcp.InitializeRequest{}
			init.Params.ClientInfo = mcp.Implementation{Name: "round-trip", Version: "1"}
			init.Params.ProtocolVersion = rev
			if _, err := c.Initialize(ctx, init); err != nil {
				t.Fatal(err)
			}
			if c.ProtocolVersion() != rev {
				t.Fatalf("negotiated %s", c.ProtocolVersion())
			}
			var mu sync.Mutex
			var progress []float64
			c.OnNotification(func(n mcp.JSONRPCNotification) {
				if n.Method == string(mcp.MethodNotificationProgress) {
					mu.Lock()
					p, _ := n.Params.AdditionalFields["progress"].(float64)
					progress = append(progress, p)
					mu.Unlock()
				}
			})
			req := mcp.CallToolRequest{}
			req.Params.Name = "everything__trigger-long-running-operation"
			req.Params.Arguments = map[string]any{"duration": 1, "steps": 4}
			req.Params.Meta = &mcp.Meta{ProgressToken: "rt"}
			res, err := c.CallTool(ctx, req)
			if err != nil || res.IsError {
				t.Fatalf("long operation: %v %+v", err, res)
			}
			mu.Lock()
			defer mu.Unlock()
			// server-everything reports each step; mcp-go's client may miss
			// the first event of an upgraded stream (server/mcpface tests).
			if len(progress) < 2 {
				t.Fatalf("progress notifications: %v", progress)
			}
		})
	}
}

// A client built on the MCP TypeScript SDK (.ci/mcp/sdk-client.mjs) calls
// run_command through aep serve's /mcp asking for progress and logs: each
// line of the command's output reaches it as a progress notification
// carrying the line and as a log notification at the line's level (stdout
// info, stderr error), before the result. A wrong token fails the client
// with the host's message.
func TestMCPSDKClientGetsRunCommandOutput(t *testing.T) {
	npmBin(t, "AEP_TEST_MCP_SDK", "@modelcontextprotocol", "sdk", "package.json")
	script, err := filepath.Abs(filepath.Join("..", "..", ".ci", "mcp", "sdk-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found, though the SDK is installed")
	}
	url := "http://" + serveHTTPProc(t) + "/mcp"
	run := func(tok string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, script, url, tok, "run_command", `{"argv":["sh","-c","echo one; echo two; echo three >&2"]}`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("%w: %s", err, errb.String())
		}
		return out.String(), nil
	}
	out, err := run(token)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Progress []struct {
			Progress float64 `json:"progress"`
			Message  string  `json:"message"`
		} `json:"progress"`
		Logs []struct {
			Level string         `json:"level"`
			Data  map[string]any `json:"data"`
		} `json:"logs"`
		Result struct {
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The progress value is the order the face sent them in.
	sort.Slice(got.Progress, func(i, j int) bool { return got.Progress[i].Progress < got.Progress[j].Progress })
	var lines, logs []string
	for _, p := range got.Progress {
		lines = append(lines, p.Message)
	}
	for _, l := range got.Logs {
		logs = append(logs, fmt.Sprintf("%s:%v:%v", l.Level, l.Data["stream"], l.Data["message"]))
	}
	sort.Strings(logs)
	// stdout and stderr are read apart, so only stdout's lines keep their
	// order relative to each other.
	sorted := slices.Sorted(slices.Values(lines))
	if fmt.Sprint(sorted) != "[one three two]" || slices.Index(lines, "one") > slices.Index(lines, "two") ||
		fmt.Sprint(logs) != "[error:stderr:three info:stdout:one info:stdout:two]" ||
		got.Result.StructuredContent["stdout"] != "one\ntwo\n" {
		t.Fatalf("progress %v, logs %v, result %v", lines, logs, got.Result.StructuredContent)
	}
	if _, err := run("wrong-" + token); err == nil || !strings.Contains(err.Error(), "the bearer token is wrong") {
		t.Fatalf("a wrong token: %v", err)
	}
}
