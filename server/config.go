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
	// Operator is the operator's surface: metrics, traces, drain (server/observe.go).
	Operator OperatorConfig `yaml:"operator"`
	// MCPFace configures aep as an MCP server (server/mcpface, docs/mcp.md).
	MCPFace MCPFaceConfig `yaml:"mcp_face"`
}

// MCPFaceConfig is the mcp_face block: what an MCP client reaches through
// `/mcp` and `aep mcp --stdio`. Every MCP session is backed by one aep
// session that handshakes with Capabilities; the client never sees more.
type MCPFaceConfig struct {
	// Enabled mounts /mcp on `aep serve` (default true).
	Enabled *bool `yaml:"enabled"`
	// AgentID is the agent_id of the aep sessions (default "mcp").
	AgentID string `yaml:"agent_id"`
	// Capabilities are requested in each session's handshake (default
	// tools, memory, env, skills, toolkits, mcp).
	Capabilities []string `yaml:"capabilities"`
	// Tools lists path.Match patterns of the tool names exposed; empty
	// exposes every tool of the session. server.tool_policy still applies.
	Tools []string `yaml:"tools"`
	// TokenEnv names the environment variable `aep mcp --stdio` reads the
	// shared token from (default AEP_AUTH_TOKEN); over HTTP the token is
	// always an Authorization: Bearer header.
	TokenEnv string `yaml:"token_env"`
}

// IsEnabled reports enabled, which defaults to true.
func (c MCPFaceConfig) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

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
	// TrustedProxies lists the CIDRs of proxies whose word on the client's
	// address is taken: the PROXY protocol header of a connection from
	// one, or else the X-Forwarded-For header of its requests. Empty: the
	// peer's own address counts (docs/SECURITY.md, The edge).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ProxyProtocol requires a PROXY protocol header (v1 or v2) on every
	// connection from a trusted proxy and takes the client's address from
	// it; without it, X-Forwarded-For of a trusted proxy's requests is used.
	ProxyProtocol bool `yaml:"proxy_protocol"`
	// Snapshots sets how long snapshots are kept (server/snapshotlist.go).
	Snapshots SnapshotConfig `yaml:"snapshots"`
	// Trajectories sets which sessions' trajectories are recorded and how
	// long they are kept (server/trajectory.go).
	Trajectories TrajectoryConfig `yaml:"trajectories"`
	// HostID names this host inside every transport session id it issues,
	// "s-<host_id>-<32 hex>", so a standard proxy in front of several hosts
	// routes a session's requests to its host by configuration alone
	// (docs/deploy.md, deploy/). Default: the machine's host name.
	HostID string `yaml:"host_id"`
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
	// MaxPendingSessions bounds the sessions that wait for their handshake;
	// a new one evicts the oldest when it is full. They do not count
	// against max_sessions, so they cannot lock agents out.
	MaxPendingSessions int `yaml:"max_pending_sessions"`
	// SessionBufferBytes bounds what the host holds for one session's
	// reader (the HTTP replay buffer).
	SessionBufferBytes int `yaml:"session_buffer_bytes"`
	// PendingBufferBytes is that bound for a session that has not
	// handshaken: it only ever gets errors and the handshake's reply.
	PendingBufferBytes int `yaml:"pending_buffer_bytes"`
	// FailedHandshakeBurst failed handshakes are allowed per client address
	// (and 5 per session) before further attempts are refused unchecked;
	// one more is allowed every FailedHandshakeInterval.
	FailedHandshakeBurst    int      `yaml:"failed_handshake_burst"`
	FailedHandshakeInterval Duration `yaml:"failed_handshake_interval"`
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
	Type string     `yaml:"type"`
	HTTP HTTPConfig `yaml:"http"`
}

// HTTPConfig holds the HTTP transport's deadlines and header limit. They
// apply per route: a stream is never cut by a server-wide write timeout,
// each of its writes has WriteTimeout instead (docs/SECURITY.md).
type HTTPConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadBodyTimeout bounds reading a request's body once its headers are in.
	ReadBodyTimeout Duration `yaml:"read_body_timeout"`
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// WriteTimeout bounds writing a whole response, and each write of a stream.
	WriteTimeout Duration `yaml:"write_timeout"`
	// MaxHeaderBytes bounds a request's header block.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
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

				MaxPendingSessions:      256,
				SessionBufferBytes:      4 << 20,
				PendingBufferBytes:      64 << 10,
				FailedHandshakeBurst:    10,
				FailedHandshakeInterval: Duration(time.Second),
			},
		},
		Transport: TransportConfig{Type: "http", HTTP: HTTPConfig{
			ReadHeaderTimeout: Duration(10 * time.Second),
			ReadBodyTimeout:   Duration(10 * time.Second),
			IdleTimeout:       Duration(15 * time.Second),
			WriteTimeout:      Duration(15 * time.Second),
			MaxHeaderBytes:    16 << 10,
		}},
		Audit: AuditConfig{MaxSizeMB: 10, MaxBackups: 5},
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
	orInt(&l.MaxPendingSessions, dl.MaxPendingSessions)
	orInt(&l.SessionBufferBytes, dl.SessionBufferBytes)
	orInt(&l.PendingBufferBytes, dl.PendingBufferBytes)
	orInt(&l.FailedHandshakeBurst, dl.FailedHandshakeBurst)
	orDur(&l.FailedHandshakeInterval, dl.FailedHandshakeInterval)
	if s.HostID == "" {
		s.HostID = defaultHostID()
	}
	if c.Transport.Type == "" {
		c.Transport.Type = d.Transport.Type
	}
	th, dh := &c.Transport.HTTP, d.Transport.HTTP
	orDur(&th.ReadHeaderTimeout, dh.ReadHeaderTimeout)
	orDur(&th.ReadBodyTimeout, dh.ReadBodyTimeout)
	orDur(&th.IdleTimeout, dh.IdleTimeout)
	orDur(&th.WriteTimeout, dh.WriteTimeout)
	orInt(&th.MaxHeaderBytes, dh.MaxHeaderBytes)
	if c.Audit.MaxSizeMB <= 0 {
		c.Audit.MaxSizeMB = d.Audit.MaxSizeMB
	}
	if c.Audit.MaxBackups <= 0 {
		c.Audit.MaxBackups = d.Audit.MaxBackups
	}
	return c
}

// hostIDPattern is what server.host_id may be: a DNS label's characters
// plus dots, so a host name or a pod name fits, and nothing a proxy's
// header matching or a path would have to escape.
var hostIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$`)

// defaultHostID is the machine's host name when it is a valid host id,
// else "aep": each host of a deployment should have its own, which a
// container's or pod's host name is.
func defaultHostID() string {
	if name, err := os.Hostname(); err == nil && hostIDPattern.MatchString(name) {
		return name
	}
	return "aep"
}

func orInt(v *int, d int) {
	if *v <= 0 {
		*v = d
	}
}

func orDur(v *Duration, d Duration) {
	if *v <= 0 {
		*v = d
	}
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
	if id := c.Server.HostID; id != "" && !hostIDPattern.MatchString(id) {
		return fmt.Errorf("config: server.host_id %q: want 1 to 63 letters, digits, dots and dashes, beginning and ending with a letter or digit", id)
	}
	if c.Server.ProxyProtocol && len(c.Server.TrustedProxies) == 0 {
		return fmt.Errorf("config: server.proxy_protocol needs server.trusted_proxies: the proxies whose header is read")
	}
	for i, p := range c.Server.TrustedProxies {
		if _, err := ParseTrustedProxy(p); err != nil {
			return fmt.Errorf("config: server.trusted_proxies[%d]: %w", i, err)
		}
	}
	switch c.Transport.Type {
	case "", "http", "stdio", "inprocess":
	default:
		return fmt.Errorf("config: transport.type %q: want http, stdio or inprocess", c.Transport.Type)
	}
	if err := c.Server.Trajectories.check(); err != nil {
		return err
	}
	return c.Server.Snapshots.check()
}
