package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the host configuration (spec §2.10, docs/DECISIONS.md, Plugins and configuration).
type Config struct {
	Server    ServerConfig    `yaml:"server"`
	Transport TransportConfig `yaml:"transport"`
	Store     StoreConfig     `yaml:"store"`
	Audit     AuditConfig     `yaml:"audit"`
	Plugins   []PluginConfig  `yaml:"plugins"`
}

// ServerConfig holds the kernel's own settings.
type ServerConfig struct {
	Listen string `yaml:"listen"`
	// AuthToken is the shared secret of spec §5 rule 1.
	AuthToken      string     `yaml:"auth_token"`
	MaxParallel    int        `yaml:"max_parallel"`
	AllowedOrigins []string   `yaml:"allowed_origins"`
	Limits         Limits     `yaml:"limits"`
	ToolPolicy     ToolPolicy `yaml:"tool_policy"`
	// Isolation configures session directories and contained processes
	// (server/sessionfs.go, docs/SECURITY.md).
	Isolation IsolationConfig `yaml:"isolation"`
	// Snapshots sets how long snapshots are kept (server/snapshotlist.go).
	Snapshots SnapshotConfig `yaml:"snapshots"`
}

// Limits bound what one session and the whole host may use (docs/DECISIONS.md, Dispatch defaults).
type Limits struct {
	// QueueSize is how many admitted requests may wait beyond max_parallel
	// before further ones are refused as overloaded.
	QueueSize int `yaml:"queue_size"`
	// IdleTimeout closes a handshaken session with nothing in flight.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// HandshakeTimeout closes a session that has not handshaken.
	HandshakeTimeout Duration `yaml:"handshake_timeout"`
	MaxSessions      int      `yaml:"max_sessions"`
	MaxMessageBytes  int      `yaml:"max_message_bytes"`
	// RequestTimeout is the deadline of every request's context.
	RequestTimeout Duration `yaml:"request_timeout"`
	// MaxDepth bounds nested internal dispatch (chains in chains, subagents).
	MaxDepth int `yaml:"max_depth"`
}

// ToolPolicy allows or denies tools by name or tag pattern (path.Match
// syntax); deny wins, and an empty allow list allows everything (spec §5 rule 6).
// Defer marks the tools it matches `defer_loading: true` (spec §2.5): they
// leave the default tool list and are found by a search with
// include_deferred, and stay callable by name.
type ToolPolicy struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
	Defer []string `yaml:"defer"`
}

// TransportConfig selects the transport: "http" (default), "stdio" or "inprocess".
type TransportConfig struct {
	Type string `yaml:"type"`
}

// StoreConfig selects the persistent store; an empty DSN means SQLite under the data directory.
type StoreConfig struct {
	DSN string `yaml:"dsn"`
}

// AuditConfig configures the audit log (spec §8: rotation at 10 MB, 5 backups).
type AuditConfig struct {
	Enabled    *bool  `yaml:"enabled"`
	Path       string `yaml:"path"`
	MaxSizeMB  int    `yaml:"max_size_mb"`
	MaxBackups int    `yaml:"max_backups"`
}

// PluginConfig is one entry of plugins[] (spec §2.10).
type PluginConfig struct {
	Name     string         `yaml:"name"`
	Type     string         `yaml:"type"`
	Cls      string         `yaml:"cls"`
	Metadata PluginMetadata `yaml:"metadata"`
	// Config holds the plugin's own settings, decoded strictly into the plugin.
	Config yaml.Node `yaml:"config"`
}

// PluginMetadata holds the dispatch settings of a plugin (spec §1 dispatch rules 2–4).
type PluginMetadata struct {
	Enabled   *bool `yaml:"enabled"`
	Priority  int   `yaml:"priority"`
	Exclusive bool  `yaml:"exclusive"`
}

// IsEnabled reports metadata.enabled, which defaults to true.
func (m PluginMetadata) IsEnabled() bool { return m.Enabled == nil || *m.Enabled }

// Duration is a time.Duration written in YAML as "30s", "5m".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Defaults returns the configuration of the default limits (docs/DECISIONS.md, Dispatch), with no plugins.
func Defaults() Config {
	return Config{
		Server: ServerConfig{
			Listen:      "127.0.0.1:8765",
			MaxParallel: 4,
			Limits: Limits{
				QueueSize:        64,
				IdleTimeout:      Duration(30 * time.Minute),
				HandshakeTimeout: Duration(60 * time.Second),
				MaxSessions:      10000,
				MaxMessageBytes:  1 << 20,
				RequestTimeout:   Duration(10 * time.Minute),
				MaxDepth:         8,
			},
		},
		Transport: TransportConfig{Type: "http"},
		Audit:     AuditConfig{MaxSizeMB: 10, MaxBackups: 5},
	}
}

// withDefaults fills zero values of c from Defaults.
func (c Config) withDefaults() Config {
	d := Defaults()
	s, l, dl := &c.Server, &c.Server.Limits, d.Server.Limits
	if s.Listen == "" {
		s.Listen = d.Server.Listen
	}
	if s.MaxParallel <= 0 {
		s.MaxParallel = d.Server.MaxParallel
	}
	if l.QueueSize <= 0 {
		l.QueueSize = dl.QueueSize
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = dl.IdleTimeout
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = dl.HandshakeTimeout
	}
	if l.MaxSessions <= 0 {
		l.MaxSessions = dl.MaxSessions
	}
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = dl.MaxMessageBytes
	}
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = dl.RequestTimeout
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = dl.MaxDepth
	}
	if c.Transport.Type == "" {
		c.Transport.Type = d.Transport.Type
	}
	if c.Audit.MaxSizeMB <= 0 {
		c.Audit.MaxSizeMB = d.Audit.MaxSizeMB
	}
	if c.Audit.MaxBackups <= 0 {
		c.Audit.MaxBackups = d.Audit.MaxBackups
	}
	return c
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// ExpandEnv replaces ${NAME} and ${NAME:-default} with environment values.
// A bare $ is left alone so values such as passwords may contain it.
func ExpandEnv(b []byte) []byte {
	return envRef.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := envRef.FindSubmatch(m)
		if v, ok := os.LookupEnv(string(sub[1])); ok {
			return []byte(v)
		}
		return sub[3]
	})
}

// ParseConfig decodes YAML strictly: unknown keys are errors that name the line.
func ParseConfig(data []byte) (Config, error) {
	cfg := Defaults()
	dec := yaml.NewDecoder(bytes.NewReader(ExpandEnv(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := cfg.check(); err != nil {
		return Config{}, err
	}
	return cfg.withDefaults(), nil
}

// LoadConfig reads and parses a YAML configuration file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

func (c Config) check() error {
	names := map[string]bool{}
	for i, p := range c.Plugins {
		if p.Name == "" {
			return fmt.Errorf("config: plugins[%d]: name is required", i)
		}
		if names[p.Name] {
			return fmt.Errorf("config: plugins[%d]: duplicate plugin name %q", i, p.Name)
		}
		names[p.Name] = true
		if p.Cls == "" {
			return fmt.Errorf("config: plugin %q: cls is required", p.Name)
		}
		if p.Type == "" {
			return fmt.Errorf("config: plugin %q: type is required", p.Name)
		}
	}
	switch c.Transport.Type {
	case "", "http", "stdio", "inprocess":
	default:
		return fmt.Errorf("config: transport.type %q: want http, stdio or inprocess", c.Transport.Type)
	}
	if c.Server.Snapshots.KeepPerSession < 0 || c.Server.Snapshots.MaxAge < 0 {
		return errors.New("config: server.snapshots: keep_per_session and max_age must not be negative")
	}
	return nil
}
