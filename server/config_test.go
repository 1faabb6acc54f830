package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/server"
)

func TestConfigEnvExpansion(t *testing.T) {
	t.Setenv("AEP_TEST_TOKEN", "tok-from-env")
	t.Setenv("AEP_TEST_SET", "10.0.0.1:1")
	t.Setenv("AEP_TEST_EMPTY", "")
	os.Unsetenv("AEP_TEST_UNSET")
	cfg, err := server.ParseConfig([]byte(`
server:
  auth_token: ${AEP_TEST_TOKEN}
  listen: ${AEP_TEST_UNSET:-127.0.0.1:9999}
  allowed_origins: ["${AEP_TEST_SET:-ignored}", "x${AEP_TEST_EMPTY:-d}y", "$HOME", "${AEP_TEST_UNSET:-}z", "$${AEP_TEST_SET}"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.AuthToken != "tok-from-env" {
		t.Errorf("${ENV}: auth_token = %q", cfg.Server.AuthToken)
	}
	if cfg.Server.Listen != "127.0.0.1:9999" {
		t.Errorf("${UNSET:-default}: listen = %q", cfg.Server.Listen)
	}
	// A set variable wins over the default; an empty one takes it, as in
	// the shell; a bare $ is kept; ${NAME:-} is empty; $${ is a literal ${.
	want := []string{"10.0.0.1:1", "xdy", "$HOME", "z", "${AEP_TEST_SET}"}
	if strings.Join(cfg.Server.AllowedOrigins, "|") != strings.Join(want, "|") {
		t.Errorf("allowed_origins = %q, want %q", cfg.Server.AllowedOrigins, want)
	}
}

// TestConfigEnvUnset: a ${NAME} whose variable is unset or empty refuses
// the file, naming the key and line; the value of a variable stays within
// its key; an expanded unquoted value is typed anew.
func TestConfigEnvUnset(t *testing.T) {
	os.Unsetenv("AEP_TEST_UNSET")
	t.Setenv("AEP_TEST_EMPTY", "")
	for _, name := range []string{"AEP_TEST_UNSET", "AEP_TEST_EMPTY"} {
		_, err := server.ParseConfig([]byte("server:\n  auth_token: x\nstore:\n  dsn: \"${" + name + "}\"\n"))
		if err == nil || !strings.Contains(err.Error(), "config:4: store.dsn: ${"+name+"} is not set") {
			t.Errorf("%s: err = %v, want it refused at store.dsn, line 4", name, err)
		}
	}
	t.Setenv("AEP_TEST_INJECT", "x\n  max_parallel: 99")
	t.Setenv("AEP_TEST_N", "7")
	cfg, err := server.ParseConfig([]byte("# ${AEP_TEST_UNSET} in a comment is not expanded\nserver:\n  auth_token: ${AEP_TEST_INJECT}\n  max_parallel: ${AEP_TEST_N}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.AuthToken != "x\n  max_parallel: 99" || cfg.Server.MaxParallel != 7 {
		t.Errorf("auth_token %q, max_parallel %d", cfg.Server.AuthToken, cfg.Server.MaxParallel)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key names its line", "server:\n  auth_token: x\n  max_paralel: 3\n", []string{"config:3: server.max_paralel", "did you mean max_parallel?"}},
		{"unknown top-level key", "server:\n  auth_token: x\nplugin: []\n", []string{"config:3: plugin", "did you mean plugins?"}},
		{"unknown limits key", "server:\n  limits:\n    idle: 5s\n", []string{"config:3: server.limits.idle"}},
		{"unknown metadata key", "plugins:\n  - name: a\n    type: echo\n    cls: test.echo\n    metadata: {priorty: 1}\n", []string{"config:5: plugins[0].metadata.priorty", "did you mean priority?"}},
		{"bad duration", "server:\n  limits:\n    idle_timeout: soon\n", []string{"config:3: server.limits.idle_timeout", `"soon" is not a duration`, "such as 30s"}},
		{"plugin without cls", "plugins:\n  - {name: a, type: echo}\n", []string{"config:2: plugins[0].cls: missing"}},
		{"plugin without name", "plugins:\n  - {type: echo, cls: test.echo}\n", []string{"config:2: plugins[0].name: missing"}},
		{"duplicate plugin name", "plugins:\n  - {name: a, type: echo, cls: x}\n  - {name: a, type: echo, cls: y}\n", []string{"config:3: plugins[1].name", `duplicate plugin name "a"`}},
		{"unknown transport", "transport: {type: carrier-pigeon}\n", []string{"transport.type", "carrier-pigeon", "want one of: http, stdio, inprocess"}},
		{"negative files bound", "server:\n  snapshots: {files_max_bytes: -1}\n", []string{"server.snapshots.files_max_bytes: want at least 0, got -1"}},
		{"files bound past 1 GiB", "server:\n  snapshots: {files_max_bytes: 2147483648}\n", []string{"server.snapshots.files_max_bytes: want at most 1073741824, got 2147483648"}},
		{"negative entries bound", "server:\n  snapshots: {files_max_entries: -5}\n", []string{"server.snapshots.files_max_entries"}},
		{"auto interval too short", "server:\n  snapshots: {auto_interval: 10ms}\n", []string{"server.snapshots.auto_interval: 10ms", "at least 1s"}},
		{"crash window too short", "server:\n  snapshots: {crash_window: 50ms}\n", []string{"server.snapshots.crash_window: 50ms", "at least 200ms"}},
		{"a second document", "server: {}\n---\nserver: {}\n", []string{"config:2:", "a second YAML document"}},
		{"YAML syntax", "server:\n  listen: [\n", []string{"config:", "YAML"}},
		{"libpq key/value DSN is checked as PostgreSQL", "store: {dsn: \"host=/x dbname=aep sslmode=bogus\"}\n", []string{"config:1: store.dsn", "sslmode"}},
		{"misspelt scheme", "store: {dsn: \"postgress://u@h:99999/db\"}\n", []string{"store.dsn", `scheme "postgress"`, "did you mean postgres?"}},
		{"port out of range", "store: {dsn: \"postgres://u:hunter2@h:99999/db\"}\n", []string{"store.dsn", "PostgreSQL DSN"}},
		{"non-loopback operator without token", "operator: {listen: \"0.0.0.0:19465\"}\n", []string{"operator.token: required", "0.0.0.0:19465 is not a loopback address"}},
		{"zero is not the default", "server:\n  limits: {queue_size: 0}\n", []string{"server.limits.queue_size: want at least 1, got 0"}},
		{"bad deny pattern", "server:\n  tool_policy: {deny: [\"[run\"]}\n", []string{"server.tool_policy.deny[0]", "never match"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := server.ParseConfig([]byte(tt.yaml))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestConfigDefaults checks the default limits: max_parallel 4, queue 64,
// idle 30 min, unhandshaken 60 s, 10,000 sessions, 1 MiB messages, audit
// rotation at 10 MB with 5 backups.
func TestConfigDefaults(t *testing.T) {
	for _, src := range []string{"", "server: {}\n", "server:\n  limits: {}\naudit: {}\n"} {
		cfg, err := server.ParseConfig([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		s, l := cfg.Server, cfg.Server.Limits
		checks := []struct {
			name      string
			got, want any
		}{
			{"max_parallel", s.MaxParallel, 4},
			{"queue_size", l.QueueSize, 64},
			{"idle_timeout", time.Duration(l.IdleTimeout), 30 * time.Minute},
			{"handshake_timeout", time.Duration(l.HandshakeTimeout), 60 * time.Second},
			{"max_sessions", l.MaxSessions, 10000},
			{"max_message_bytes", l.MaxMessageBytes, 1 << 20},
			{"listen", s.Listen, "127.0.0.1:8765"},
			{"transport", cfg.Transport.Type, "http"},
			{"audit.max_size_mb", cfg.Audit.MaxSizeMB, 10},
			{"audit.max_backups", cfg.Audit.MaxBackups, 5},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("config %q: %s = %v, want %v", src, c.name, c.got, c.want)
			}
		}
	}
	// Values given win over defaults.
	cfg, err := server.ParseConfig([]byte("server:\n  max_parallel: 9\n  limits:\n    idle_timeout: 90s\n    queue_size: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.MaxParallel != 9 || time.Duration(cfg.Server.Limits.IdleTimeout) != 90*time.Second || cfg.Server.Limits.QueueSize != 3 {
		t.Errorf("given values lost: %+v", cfg.Server)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "aep.yaml")
	if err := os.WriteFile(good, []byte("server:\n  auth_token: t\n  max_parallel: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := server.LoadConfigFile(good)
	if err != nil || cfg.Server.MaxParallel != 2 || cfg.Server.AuthToken != "t" {
		t.Fatalf("LoadConfig = %+v, %v", cfg.Server, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := server.LoadConfigFile(bad); err == nil || !strings.Contains(err.Error(), bad+":2: server.nope") {
		t.Errorf("LoadConfig(bad) = %v, want the path and line", err)
	}
	if _, _, err := server.LoadConfigFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("LoadConfig of a missing file: want an error")
	}
}
