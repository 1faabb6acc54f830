package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// runAEPEnv runs the real binary with env added to a minimal environment
// and stdin empty, bounded by a minute, and returns stdout, stderr and
// the exit code.
func runAEPEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
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

// problems returns the lines of stderr that report a problem of file
// (FILE:LINE: key: message), without the command's prefix.
func problems(stderr, file string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if i := strings.Index(l, file+":"); i >= 0 {
			out = append(out, l[i:])
		}
	}
	slices.Sort(out)
	return out
}

// TestConfigMistakes: each mistake an operator makes in a configuration
// file is refused by `aep config validate` and by `aep serve` alike (the
// real binary, both), with the same problem lines, each naming the file,
// the line and the dotted key at fault. No secret written in a refused
// value is repeated.
func TestConfigMistakes(t *testing.T) {
	const plugin = "plugins:\n  - name: p\n    type: memory\n    cls: aep.memory.builtin\n"
	tests := []struct {
		name string
		yaml string
		env  []string
		want string // in every problem listing: "LINE: key: message"
	}{
		// The rows of the report that asked for this.
		{"misspelt postgres scheme and a bad port", "store:\n  dsn: postgress://aep:hunter2@db:99999/aep\n", nil, `2: store.dsn: unsupported store: scheme "postgress" (did you mean postgres?)`},
		{"libpq key/value DSN with a bad sslmode is PostgreSQL, refused", "store:\n  dsn: \"host=/x dbname=aep sslmode=bogus password=hunter2\"\n", nil, `2: store.dsn: PostgreSQL DSN: sslmode "bogus"`},
		{"DSN from an unset variable", "store:\n  dsn: \"${AEP_STORE_DSN}\"\n", nil, "2: store.dsn: ${AEP_STORE_DSN} is not set"},
		{"DSN from an empty variable", "store:\n  dsn: ${AEP_STORE_DSN}\n", []string{"AEP_STORE_DSN="}, "2: store.dsn: ${AEP_STORE_DSN} is not set (or is empty)"},
		{"DSN from a secret file's trailing newline", "store:\n  dsn: ${AEP_STORE_DSN}\n", []string{"AEP_STORE_DSN=postgres://aep:hunter2@db/aep\n"}, "2: store.dsn: the DSN begins or ends with white space"},
		{"negative max_sessions", "server:\n  limits:\n    max_sessions: -1\n", nil, "3: server.limits.max_sessions: want at least 1, got -1"},
		{"negative queue_size", "server:\n  limits:\n    queue_size: -64\n", nil, "3: server.limits.queue_size: want at least 1, got -64"},
		{"operator beyond loopback without a token", "operator:\n  listen: 0.0.0.0:19465\n", nil, "1: operator.token: required: operator.listen 0.0.0.0:19465 is not a loopback address"},
		{"enum value not allowed, no empty member listed", plugin + "    config:\n      working_full_policy: lru\n", nil, `6: plugins[0].config.working_full_policy: "lru" is not allowed; want one of: reject, evict_lru`},
		// A key typo in each section.
		{"typo at the top", "plugin: []\n", nil, `1: plugin: unknown key "plugin"; did you mean plugins?`},
		{"typo in server", "server:\n  max_paralel: 4\n", nil, `2: server.max_paralel: unknown key "max_paralel"; did you mean max_parallel?`},
		{"typo in server.limits", "server:\n  limits:\n    idle_timout: 5m\n", nil, `3: server.limits.idle_timout: unknown key "idle_timout"; did you mean idle_timeout?`},
		{"typo in server.tool_policy", "server:\n  tool_policy:\n    defers: [x]\n", nil, `3: server.tool_policy.defers: unknown key "defers"; did you mean defer?`},
		{"typo in server.isolation", "server:\n  isolation:\n    sandbx: auto\n", nil, `3: server.isolation.sandbx: unknown key "sandbx"; did you mean sandbox?`},
		{"typo in server.snapshots", "server:\n  snapshots:\n    keep_per_sesion: 3\n", nil, `3: server.snapshots.keep_per_sesion: unknown key "keep_per_sesion"; did you mean keep_per_session?`},
		{"typo in server.trajectories", "server:\n  trajectories:\n    recod: all\n", nil, `3: server.trajectories.recod: unknown key "recod"; did you mean record?`},
		{"typo in transport", "transport:\n  tpye: http\n", nil, `2: transport.tpye: unknown key "tpye"; did you mean type?`},
		{"typo in transport.http", "transport:\n  http:\n    write_timout: 5s\n", nil, `3: transport.http.write_timout: unknown key "write_timout"; did you mean write_timeout?`},
		{"typo in store", "store:\n  dns: x.db\n", nil, `2: store.dns: unknown key "dns"; did you mean dsn?`},
		{"typo in audit", "audit:\n  pth: /tmp/a.jsonl\n", nil, `2: audit.pth: unknown key "pth"; did you mean path?`},
		{"typo in operator", "operator:\n  tokn: x\n", nil, `2: operator.tokn: unknown key "tokn"; did you mean token?`},
		{"typo in mcp_face", "mcp_face:\n  enable: false\n", nil, `2: mcp_face.enable: unknown key "enable"; did you mean enabled?`},
		{"typo in a plugin entry", "plugins:\n  - name: p\n    type: memory\n    clss: aep.memory.builtin\n", nil, `4: plugins[0].clss: unknown key "clss"; did you mean cls?`},
		{"typo in plugin metadata", plugin + "    metadata: {priorty: 1}\n", nil, `5: plugins[0].metadata.priorty: unknown key "priorty"; did you mean priority?`},
		{"typo in plugin settings", plugin + "    config:\n      max_contnet_bytes: 10\n", nil, `6: plugins[0].config.max_contnet_bytes: unknown key "max_contnet_bytes"; did you mean max_content_bytes?`},
		// A wrong type in each section.
		{"wrong type: a section", "server: 8765\n", nil, "1: server: want a mapping (key: value lines), got the number 8765"},
		{"wrong type in server", "server:\n  max_parallel: four\n", nil, `2: server.max_parallel: want a whole number, got the string "four"`},
		{"wrong type in transport.http", "transport:\n  http:\n    max_header_bytes: lots\n", nil, `3: transport.http.max_header_bytes: want a whole number, got the string "lots"`},
		{"wrong type in store", "store:\n  dsn: [a.db]\n", nil, "2: store.dsn: want a string, got a list"},
		{"wrong type in audit", "audit:\n  enabled: \"yes please\"\n", nil, `2: audit.enabled: want true or false, got the string "yes please"`},
		{"wrong type in operator", "operator:\n  max_tool_labels: 1.5\n", nil, "2: operator.max_tool_labels: want a whole number, got the number 1.5"},
		{"wrong type in mcp_face", "mcp_face:\n  capabilities: tools\n", nil, `2: mcp_face.capabilities: want a list, got the string "tools"`},
		{"wrong type: plugins", "plugins:\n  name: p\n", nil, "1: plugins: want a list, got a mapping"},
		{"wrong type in plugin metadata", plugin + "    metadata: {priority: high}\n", nil, `5: plugins[0].metadata.priority: want a whole number, got the string "high"`},
		{"wrong type in plugin settings", plugin + "    config:\n      max_content_bytes: lots\n", nil, `6: plugins[0].config.max_content_bytes: want a whole number, got the string "lots"`},
		{"a secret's value is not repeated", "server:\n  auth_token: [hunter2]\n", nil, "2: server.auth_token: want a string, got a list"},
		// Plugins.
		{"unknown cls", "plugins:\n  - name: chains\n    type: chains\n    cls: aep.chains.bultin\n", nil, `4: plugins[0].cls: plugin "chains": unknown cls "aep.chains.bultin" (did you mean aep.chains.builtin?); registered: `},
		{"duplicate plugin name", plugin + "  - name: p\n    type: memory\n    cls: aep.memory.builtin\n", nil, `5: plugins[1].name: duplicate plugin name "p" (plugins[0] has it)`},
		{"plugin without cls", "plugins:\n  - name: p\n    type: memory\n", nil, "2: plugins[0].cls: missing: this key is required"},
		{"unknown capability type", "plugins:\n  - name: procs\n    type: procs\n    cls: aep.proc.builtin\n", nil, `3: plugins[0].type: type "procs" is not served by module aep.proc.builtin (it serves: proc)`},
		{"unknown capability in mcp_face", "mcp_face:\n  capabilities: [tools, toolz]\n", nil, `2: mcp_face.capabilities[1]: unknown capability "toolz"`},
		// Negative limits.
		{"negative plugin limit", "plugins:\n  - name: p\n    type: proc\n    cls: aep.proc.builtin\n    config:\n      max_procs: -1\n", nil, "6: plugins[0].config.max_procs: want at least 0, got -1"},
		{"zero where more than zero is wanted", "plugins:\n  - name: s\n    type: skills\n    cls: aep.skills.builtin\n    config:\n      register_limits: {timeout_seconds: 0}\n", nil, "6: plugins[0].config.register_limits.timeout_seconds: want more than 0, got 0"},
		{"negative snapshot count", "server:\n  snapshots:\n    keep_per_session: -1\n", nil, "3: server.snapshots.keep_per_session: want at least 0, got -1"},
		{"zero is not the default", "server:\n  max_parallel: 0\n", nil, "2: server.max_parallel: want at least 1, got 0"},
		{"past the maximum", "server:\n  limits:\n    max_message_bytes: 2000000000\n", nil, "3: server.limits.max_message_bytes: want at most 1073741824, got 2000000000"},
		// Durations.
		{"duration with a spelt-out unit", "server:\n  limits:\n    idle_timeout: 30 seconds\n", nil, `3: server.limits.idle_timeout: "30 seconds" is not a duration: a number with a unit (ns, us, ms, s, m, h), such as 30s, 5m or 1h30m`},
		{"duration without a unit", "operator:\n  drain_timeout: 30\n", nil, "2: operator.drain_timeout: want a duration: a number with a unit (ns, us, ms, s, m, h), such as 30s, 5m or 1h30m, got the number 30"},
		{"negative duration", "server:\n  snapshots:\n    max_age: -1h\n", nil, `3: server.snapshots.max_age: "-1h" is not a duration`},
		{"zero duration where it means nothing", "server:\n  limits:\n    request_timeout: 0s\n", nil, "3: server.limits.request_timeout: want at least 1ms, got 0s"},
		{"bad duration in plugin settings", "plugins:\n  - {name: e, type: env, cls: aep.env.builtin, config: {step_timeout: soon}}\n", nil, `2: plugins[0].config.step_timeout: "soon" is not a duration`},
		{"auto snapshots too often", "server:\n  snapshots:\n    auto_interval: 10ms\n", nil, "3: server.snapshots.auto_interval: 10ms: want 0s (off) or at least 1s"},
		// Formats and relations.
		{"transport type", "transport:\n  type: carrier-pigeon\n", nil, `2: transport.type: "carrier-pigeon" is not allowed; want one of: http, stdio, inprocess`},
		{"sandbox mode", "server:\n  isolation:\n    sandbox: docker\n", nil, `3: server.isolation.sandbox: "docker" is not allowed; want one of: auto, bwrap, namespaces, supervised`},
		{"listen without a port", "server:\n  listen: localhost\n", nil, `2: server.listen: "localhost": want host:port`},
		{"operator port out of range", "operator:\n  listen: 127.0.0.1:99999\n", nil, `2: operator.listen: "127.0.0.1:99999": port "99999": want a number from 0 to 65535`},
		{"trusted proxy not a CIDR", "server:\n  trusted_proxies: [10.0.0.0/33]\n", nil, `2: server.trusted_proxies[0]: "10.0.0.0/33": not a CIDR`},
		{"PROXY protocol without trusted proxies", "server:\n  proxy_protocol: true\n", nil, "2: server.proxy_protocol: needs server.trusted_proxies"},
		{"a deny pattern that never matches", "server:\n  tool_policy:\n    deny: [\"[run_command\"]\n", nil, `3: server.tool_policy.deny[0]: "[run_command": not a valid pattern`},
		{"host id", "server:\n  host_id: -aep-\n", nil, `2: server.host_id: "-aep-": want 1 to 63 letters, digits, dots and dashes`},
		{"OTLP endpoint", "operator:\n  otlp_endpoint: ftp://collector\n", nil, `2: operator.otlp_endpoint: "ftp://collector": want an http:// or https:// URL with a host`},
		{"token variable name", "mcp_face:\n  token_env: AEP TOKEN\n", nil, `2: mcp_face.token_env: "AEP TOKEN": want an environment variable name`},
		{"a second document", "server: {}\n---\nserver: {}\n", nil, "2: a second YAML document"},
		{"YAML syntax", "server:\n  listen: [127.0.0.1\n", nil, "1: YAML: did not find expected"},
	}
	dir := t.TempDir()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(dir, fmt.Sprintf("mistake%02d.yaml", i))
			if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			out, vErr, code := runAEPEnv(t, tc.env, "config", "validate", file)
			if code != 1 || out != "" {
				t.Fatalf("validate: exit %d, stdout %q, stderr:\n%s", code, out, vErr)
			}
			sOut, sErr, code := runAEPEnv(t, tc.env, "serve", "--stdio", "--config", file, "--data-dir", filepath.Join(dir, fmt.Sprintf("data%02d", i)))
			if code != 1 || sOut != "" {
				t.Fatalf("serve: exit %d, stdout %q, stderr:\n%s", code, sOut, sErr)
			}
			vp, sp := problems(vErr, file), problems(sErr, file)
			if len(vp) == 0 || !slices.Equal(vp, sp) {
				t.Fatalf("validate and serve differ:\nvalidate:\n%s\nserve:\n%s", vErr, sErr)
			}
			if !slices.ContainsFunc(vp, func(p string) bool { return strings.HasPrefix(p, file+":"+tc.want) }) {
				t.Errorf("no problem %q in:\n%s", file+":"+tc.want, strings.Join(vp, "\n"))
			}
			for _, p := range vp {
				if strings.Contains(p, "one of: ,") || strings.Contains(p, ", ,") {
					t.Errorf("an allowed list with an empty member: %s", p)
				}
			}
			if strings.Contains(vErr+sErr, "hunter2") {
				t.Errorf("a secret was repeated:\n%s\n%s", vErr, sErr)
			}
		})
	}
	if len(tests) < 30 {
		t.Errorf("%d mistakes; the table is to hold at least 30", len(tests))
	}
}

// TestConfigAccepted: what the rules allow is accepted by both commands:
// ${NAME:-default} with NAME unset, a libpq key/value DSN (PostgreSQL, not
// a file name), 0s where it means off, a number in a string setting.
func TestConfigAccepted(t *testing.T) {
	dir := t.TempDir()
	body := `server:
  auth_token: ${AEP_CFG_UNSET:-s3cret}
  listen: ${AEP_CFG_UNSET:-127.0.0.1:0}
  max_parallel: ${AEP_CFG_UNSET:-6}
  host_id: 123
  snapshots: {max_age: 0s, auto_interval: 0s}
  limits:
    idle_timeout:
operator:
  listen: 127.0.0.1:0
plugins:
  - name: p
    type: memory
    cls: aep.memory.builtin
    config:
      working_full_policy: ${AEP_CFG_UNSET:-evict_lru}
`
	file := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runAEPEnv(t, nil, "config", "validate", "--data-dir", filepath.Join(dir, "data"), file)
	if code != 0 || !strings.Contains(out, "ok (1 plugins)") || errOut != "" {
		t.Fatalf("validate: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// serve --stdio with stdin at its end starts, serves nothing and exits 0.
	_, errOut, code = runAEPEnv(t, nil, "serve", "--stdio", "--config", file, "--data-dir", filepath.Join(dir, "data"))
	if code != 0 || !strings.Contains(errOut, "host started") {
		t.Fatalf("serve: exit %d\nstderr: %s", code, errOut)
	}
	kv := filepath.Join(dir, "kv.yaml")
	if err := os.WriteFile(kv, []byte("store:\n  dsn: \"host=127.0.0.1 port=1 dbname=aep user=aep connect_timeout=2\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Reachability aside, the same file: a warning from validate, an
	// error from serve, both at store.dsn; no SQLite file is made.
	out, errOut, code = runAEPEnv(t, nil, "config", "validate", "--data-dir", filepath.Join(dir, "kvdata"), kv)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errOut, "warning: "+kv+":2: store.dsn: cannot reach the store (aep serve would refuse to start): postgres 127.0.0.1:1/aep") {
		t.Fatalf("validate: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, errOut, code = runAEPEnv(t, nil, "serve", "--stdio", "--config", kv, "--data-dir", filepath.Join(dir, "kvdata"))
	if code != 1 || !strings.Contains(errOut, kv+":2: store.dsn: cannot open the store: store: open postgres 127.0.0.1:1/aep") {
		t.Fatalf("serve: exit %d\nstderr: %s", code, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "kvdata")); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.Contains(e.Name(), "host=") }) {
		t.Errorf("a SQLite file was made of the key/value DSN: %v", ents)
	}
}

// TestConfigStoreReachable: a reachable PostgreSQL, in either form, gives
// validate no warning. It needs the PostgreSQL cluster of .ci/run.
func TestConfigStoreReachable(t *testing.T) {
	pw := os.Getenv("AEP_TEST_PG_PASSWORD")
	if pw == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("AEP_TEST_PG_PASSWORD is unset under CI")
		}
		t.Skip("no PostgreSQL (AEP_TEST_PG_PASSWORD unset)")
	}
	dir := t.TempDir()
	for i, dsn := range []string{
		"postgres://postgres:${PGPW}@127.0.0.1:5432/postgres?sslmode=disable",
		"host=127.0.0.1 port=5432 user=postgres password=${PGPW} dbname=postgres sslmode=disable",
	} {
		file := filepath.Join(dir, fmt.Sprintf("pg%d.yaml", i))
		if err := os.WriteFile(file, []byte("store:\n  dsn: \""+dsn+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := runAEPEnv(t, []string{"PGPW=" + pw}, "config", "validate", file)
		if code != 0 || !strings.Contains(out, "ok") || errOut != "" {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", dsn, code, out, errOut)
		}
	}
}

// TestServeStopsWhenOperatorCannotListen: an operator endpoint that
// cannot serve (its address taken) stops the host with an error instead
// of leaving it running without /metrics and one log line.
func TestServeStopsWhenOperatorCannotListen(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "op.yaml")
	body := "server:\n  auth_token: t\noperator:\n  listen: " + taken.Addr().String() + "\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, errOut, code := runAEPEnv(t, nil, "serve", "--config", file, "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errOut, "operator listen on "+taken.Addr().String()) {
		t.Fatalf("exit %d after %v\nstderr: %s", code, time.Since(start), errOut)
	}
}
