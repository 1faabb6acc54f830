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
  allowed_origins: ["${AEP_TEST_SET:-ignored}", "x${AEP_TEST_EMPTY:-d}y", "$HOME", "${AEP_TEST_UNSET}z"]
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
	// A set variable wins over the default, even when empty; a bare $ is kept;
	// an unset variable without default expands to nothing.
	want := []string{"10.0.0.1:1", "xy", "$HOME", "z"}
	if strings.Join(cfg.Server.AllowedOrigins, "|") != strings.Join(want, "|") {
		t.Errorf("allowed_origins = %q, want %q", cfg.Server.AllowedOrigins, want)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key names its line", "server:\n  auth_token: x\n  max_paralel: 3\n", []string{"line 3", "max_paralel"}},
		{"unknown top-level key", "server:\n  auth_token: x\nplugin: []\n", []string{"line 3", "plugin"}},
		{"unknown limits key", "server:\n  limits:\n    idle: 5s\n", []string{"line 3", "idle"}},
		{"unknown metadata key", "plugins:\n  - name: a\n    type: echo\n    cls: test.echo\n    metadata: {priorty: 1}\n", []string{"line 5", "priorty"}},
		{"bad duration", "server:\n  limits:\n    idle_timeout: soon\n", []string{"line 3", "soon"}},
		{"plugin without cls", "plugins:\n  - {name: a, type: echo}\n", []string{`plugin "a"`, "cls is required"}},
		{"plugin without name", "plugins:\n  - {type: echo, cls: test.echo}\n", []string{"plugins[0]", "name is required"}},
		{"duplicate plugin name", "plugins:\n  - {name: a, type: echo, cls: x}\n  - {name: a, type: echo, cls: y}\n", []string{"plugins[1]", `duplicate plugin name "a"`}},
		{"unknown transport", "transport: {type: carrier-pigeon}\n", []string{"carrier-pigeon"}},
		{"negative files bound", "server:\n  snapshots: {files_max_bytes: -1}\n", []string{"files_max_bytes -1"}},
		{"files bound past 1 GiB", "server:\n  snapshots: {files_max_bytes: 2147483648}\n", []string{"files_max_bytes 2147483648", "held in memory"}},
		{"negative entries bound", "server:\n  snapshots: {files_max_entries: -5}\n", []string{"files_max_entries"}},
		{"auto interval too short", "server:\n  snapshots: {auto_interval: 10ms}\n", []string{"auto_interval 10ms", "at least 1s"}},
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
	cfg, err := server.LoadConfig(good)
	if err != nil || cfg.Server.MaxParallel != 2 || cfg.Server.AuthToken != "t" {
		t.Fatalf("LoadConfig = %+v, %v", cfg.Server, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadConfig(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("LoadConfig(bad) = %v, want the path and line", err)
	}
	if _, err := server.LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("LoadConfig of a missing file: want an error")
	}
}
