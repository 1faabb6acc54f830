package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aephost/aep/conformance"
)

// runAEP runs the real binary and returns its stdout, stderr and exit code.
func runAEP(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // substring of stdout
		wantErr  string // substring of stderr
	}{
		// Without a plugins list the built-in capabilities load, as with no config.
		{"valid", []string{write("ok.yaml", "server:\n  auth_token: ${NOT_SET:-x}\n  max_parallel: 8\naudit:\n  max_backups: 3\n")}, 0, "ok (10 plugins)", ""},
		{"explicitly no plugins", []string{write("none.yaml", "plugins: []\n")}, 0, "ok (0 plugins)", ""},
		{"one plugin", []string{write("one.yaml", "plugins:\n  - name: t\n    type: tools\n    cls: aep.tools.builtin\n")}, 0, "ok (1 plugins)", ""},
		{"empty file", []string{write("empty.yaml", "")}, 0, "ok", ""},
		{"unknown key names its line", []string{write("bad.yaml", "server:\n  max_parallel: 8\n  bogus: 1\n")}, 1, "", `bad.yaml:3: server.bogus: unknown key "bogus"`},
		{"bad duration", []string{write("dur.yaml", "server:\n  limits:\n    idle_timeout: soon\n")}, 1, "", `dur.yaml:3: server.limits.idle_timeout: "soon" is not a duration`},
		{"unknown cls", []string{write("cls.yaml", "plugins:\n  - name: t\n    type: tools\n    cls: aep.nope.nothing\n")}, 1, "", `unknown cls "aep.nope.nothing"`},
		{"missing cls", []string{write("nocls.yaml", "plugins:\n  - name: t\n    type: tools\n")}, 1, "", "nocls.yaml:2: plugins[0].cls: missing"},
		{"bad transport", []string{write("tr.yaml", "transport:\n  type: carrier-pigeon\n")}, 1, "", "transport.type"},
		{"missing file", []string{filepath.Join(dir, "absent.yaml")}, 1, "", "no such file"},
		// What serve would refuse before provisioning, validate refuses too.
		{"type the plugin does not serve", []string{write("procs.yaml", "plugins:\n  - name: procs\n    type: procs\n    cls: aep.proc.builtin\n")}, 1, "", `procs.yaml:3: plugins[0].type: type "procs" is not served by module aep.proc.builtin (it serves: proc)`},
		{"setting the plugin does not have", []string{write("typo.yaml", "plugins:\n  - name: t\n    type: tools\n    cls: aep.tools.builtin\n    config:\n      exec: true\n      rooot: /tmp\n")}, 1, "", "rooot"},
		// A typo inside a plugin's settings is found by its schema
		// (schemas/config/mcp.json) and reported at its own line and key.
		{"typo in a plugin setting names line and key", []string{write("comand.yaml", "plugins:\n  - name: mcp\n    type: mcp\n    cls: aep.mcp.bridge\n    config:\n      servers:\n        - id: fs\n          comand: npx\n")}, 1, "", `comand.yaml:8: plugins[0].config.servers[0].comand: unknown key "comand"`},
		{"example configuration", []string{"../../aep.example.yaml"}, 0, "ok (10 plugins)", ""},
		{"no file argument", nil, 2, "", "Usage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runAEP(t, append([]string{"config", "validate"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) || !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
		})
	}
}

func TestSchemaCommand(t *testing.T) {
	onDisk, err := filepath.Glob("../../schemas/*.json")
	if err != nil || len(onDisk) == 0 {
		t.Fatalf("schemas on disk: %v %v", onDisk, err)
	}
	t.Run("the bundle", func(t *testing.T) {
		out, errOut, code := runAEP(t, "schema")
		want, _ := os.ReadFile("../../gen/contract/aep.schema.json")
		if code != 0 || out != string(want) {
			t.Fatalf("exit %d, output differs from gen/contract/aep.schema.json: %s", code, errOut)
		}
	})
	t.Run("asyncapi", func(t *testing.T) {
		out, errOut, code := runAEP(t, "schema", "--asyncapi")
		want, _ := os.ReadFile("../../gen/contract/asyncapi.yaml")
		if code != 0 || out != string(want) {
			t.Fatalf("exit %d, output differs from gen/contract/asyncapi.yaml: %s", code, errOut)
		}
	})
	t.Run("print all sources", func(t *testing.T) {
		out, errOut, code := runAEP(t, "schema", "--sources")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		n := 0
		for dec.More() {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				t.Fatalf("document %d: %v", n, err)
			}
			if _, ok := doc["$schema"]; !ok {
				t.Fatalf("document %d has no $schema", n)
			}
			n++
		}
		if n != len(onDisk) {
			t.Fatalf("printed %d schemas, %d on disk", n, len(onDisk))
		}
	})
	t.Run("print one", func(t *testing.T) {
		out, _, code := runAEP(t, "schema", "core")
		want, _ := os.ReadFile("../../schemas/core.json")
		if code != 0 || strings.TrimSpace(out) != strings.TrimSpace(string(want)) {
			t.Fatalf("exit %d, output differs from schemas/core.json", code)
		}
	})
	t.Run("unknown name", func(t *testing.T) {
		_, errOut, code := runAEP(t, "schema", "nope")
		if code != 1 || !strings.Contains(errOut, `no schema "nope"`) {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	t.Run("write to dir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "out")
		out, errOut, code := runAEP(t, "schema", "--out", dir)
		if code != 0 || out != "" {
			t.Fatalf("exit %d, stdout %q: %s", code, out, errOut)
		}
		for _, p := range onDisk {
			want, _ := os.ReadFile(p)
			got, err := os.ReadFile(filepath.Join(dir, filepath.Base(p)))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: written copy differs (%v)", filepath.Base(p), err)
			}
		}
		for _, name := range []string{"aep.schema.json", "asyncapi.yaml"} {
			want, _ := os.ReadFile(filepath.Join("../../gen/contract", name))
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: written copy differs (%v)", name, err)
			}
		}
	})
}

func TestVersionAndUsage(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{[]string{"version"}, 0, "aep ", ""},
		{[]string{"version"}, 0, "protocol 1.0", ""},
		{nil, 2, "", "Usage"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"help"}, 0, "aep serve", ""},
		{[]string{"serve", "--no-such-flag"}, 2, "", "flag provided but not defined"},
		{[]string{"serve", "-h"}, 0, "", "-data-dir DIR"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runAEP(t, tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) || !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
		})
	}
}

// TestServeRefusesBadConfig: serve fails at once, before listening, with the
// same messages as config validate.
func TestServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, body, wantErr string
	}{
		{"unknown key", "server:\n  listen: 127.0.0.1:0\n  colour: blue\n", `:3: server.colour: unknown key "colour"`},
		{"unknown cls", "plugins:\n  - name: x\n    type: tools\n    cls: aep.tools.nope\n", `unknown cls "aep.tools.nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runAEP(t, "serve", "--stdio", "--config", p, "--data-dir", filepath.Join(dir, "data"))
			if code != 1 || out != "" || !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("exit %d\nstdout: %q\nstderr: %s", code, out, errOut)
			}
		})
	}
}

// TestConformanceCommand: the kit's command line against aep over stdio,
// the JSON report with each check's level and citation, the fixture and
// baseline flags, the list of checks, and its usage errors. The kit's
// checks themselves are tested in conformance/.
func TestConformanceCommand(t *testing.T) {
	// A token the host finds in no snapshot by chance (it refuses to
	// write one holding its token).
	const token = "cli-conformance-token-5e1f"
	host := fmt.Sprintf("AEP_AUTH_TOKEN=%s exec %s serve --stdio --data-dir %s", token, bin, t.TempDir())
	t.Run("json", func(t *testing.T) {
		out, errOut, code := runAEP(t, "conformance", "--stdio", host, "--token", token, "--json", "--only", "memory,ping")
		var rep struct {
			OK      bool
			Results []struct{ Check, Level, Cites, Status, Note string }
		}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK || len(rep.Results) != len(conformance.Checks()) {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		statuses := map[string]string{}
		for _, r := range rep.Results {
			statuses[r.Check] = r.Status
			if r.Cites == "" || r.Level == "" || r.Status == "fail" {
				t.Errorf("%+v", r)
			}
		}
		if statuses["memory.roundtrip"] != "pass" || statuses["env.list"] != "skip" {
			t.Errorf("--only memory,ping: %v", statuses)
		}
	})
	t.Run("wrong token fails", func(t *testing.T) {
		out, _, code := runAEP(t, "conformance", "--stdio", host, "--token", "not-the-token")
		if code != 1 || !regexp.MustCompile(`FAIL +MUST +handshake `).MatchString(out) || !strings.Contains(out, "not conformant") {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
	t.Run("baseline", func(t *testing.T) {
		// The wrong token's failure, listed in a baseline: expected, and
		// the run passes.
		bl := filepath.Join(t.TempDir(), "baseline.json")
		if err := os.WriteFile(bl, []byte(`{"expected_failures": [{"check": "handshake", "reason": "the test gives a wrong token"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		out, _, code := runAEP(t, "conformance", "--stdio", host, "--token", "not-the-token", "--baseline", bl)
		if code != 0 || !strings.Contains(out, "XFAIL MUST   handshake") || !strings.Contains(out, "expected by the baseline: the test gives a wrong token") {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
	t.Run("list", func(t *testing.T) {
		out, _, code := runAEP(t, "conformance", "--list")
		if code != 0 || !strings.Contains(out, "MUST   isolation.state") || !strings.Contains(out, "needs fixture env.episode") {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
	for _, args := range [][]string{{"--fixture", "/no/such/file"}, {"--baseline", "/no/such/file"}, {"--only", "nope"}} {
		if _, errOut, code := runAEP(t, append([]string{"conformance", "--stdio", host, "--token", token}, args...)...); code != 1 || !strings.Contains(errOut, args[1]) {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	for _, args := range [][]string{{}, {"--url", "http://127.0.0.1:1", "--stdio", "x"}} {
		if _, errOut, code := runAEP(t, append([]string{"conformance"}, args...)...); code != 2 || !strings.Contains(errOut, "exactly one of") {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"--all-transports", "--stdio", "x"}, {"--all-transports", "--url", "http://127.0.0.1:1", "--exchange"}} {
		if _, errOut, code := runAEP(t, append([]string{"conformance"}, args...)...); code != 2 || !strings.Contains(errOut, "--all-transports") {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// TestConformanceAllTransports: --all-transports runs the kit over each
// transport aep serve offers (HTTP+SSE, single exchanges, WebSocket) and
// the --stdio command beside it, and compares the runs; from a ws:// URL
// it finds the same three.
func TestConformanceAllTransports(t *testing.T) {
	// aep serve offers HTTP+SSE, single exchanges and WebSocket; with
	// the stdio command beside it, four runs are compared.
	base := startServeHTTP(t, t.TempDir())
	stdioHost := fmt.Sprintf("AEP_AUTH_TOKEN=%s exec %s serve --stdio --data-dir %s", token, bin, t.TempDir())
	out, errOut, code := runAEP(t, "conformance", "--all-transports", "--url", base, "--stdio", stdioHost, "--token", token, "--only", "memory,ping")
	if code != 0 || !strings.Contains(out, "=== across stdio, http, exchange, websocket") ||
		!regexp.MustCompile(`PASS +MUST +transports\.agree .*\(\d+ compared\)`).MatchString(out) || !strings.Contains(out, "conformant over every transport") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	out, errOut, code = runAEP(t, "conformance", "--all-transports", "--url", "ws"+strings.TrimPrefix(base, "http")+"/ws", "--token", token, "--only", "ping", "--json")
	var c struct {
		OK      bool
		Reports []struct{ Transport string }
		Agree   struct{ Check, Status string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || !c.OK || len(c.Reports) != 3 || c.Agree.Check != "transports.agree" || c.Agree.Status != "pass" {
		t.Fatalf("--json from a ws:// URL: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
