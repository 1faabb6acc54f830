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

	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/store"
)

// IsEnabled reports enabled, which defaults to true.
func (c MCPFaceConfig) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// IsEnabled reports enabled, which defaults to true.
func (c OpenEnvFaceConfig) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

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
		Log:   LogConfig{Format: "text", Level: "info"},
	}
}

// minOperatorToken is the shortest operator.token accepted.
const minOperatorToken = 16

// defaultDrainTimeout is operator.drain_timeout when unset.
const defaultDrainTimeout = 30 * time.Second

// defaultStoreWait is server.snapshots.store_wait when unset (the same as
// server/persist's own default).
const defaultStoreWait = 10 * time.Second

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
	if c.Log.Format == "" {
		c.Log.Format = d.Log.Format
	}
	if c.Log.Level == "" {
		c.Log.Level = d.Log.Level
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
	// The defaults the code applies where these are used, filled here too
	// so a configuration written back (yaml.Marshal) is one its schema
	// accepts, and Host.Config shows what is in force.
	if s.Isolation.Sandbox == "" {
		s.Isolation.Sandbox = sandbox.ModeAuto
	}
	if s.Isolation.SessionQuotaBytes <= 0 {
		s.Isolation.SessionQuotaBytes = defaultSessionQuota
	}
	orInt(&s.Snapshots.FilesMaxEntries, defaultFilesMaxEntries)
	orDur(&s.Snapshots.StoreWait, Duration(defaultStoreWait))
	orInt(&s.Snapshots.DrainParallel, defaultDrainParallel)
	b, db := &s.Budgets, defaultBudgets
	orInt(&b.Files, db.Files)
	orInt(&b.LeafWork, db.LeafWork)
	orDur(&b.LeafWait, db.LeafWait)
	orInt64(&b.SandboxMemoryBytes, db.SandboxMemoryBytes)
	orInt64(&b.ProcessMemoryBytes, db.ProcessMemoryBytes)
	orInt64(&b.WorkingMemoryBytes, db.WorkingMemoryBytes)
	orInt64(&b.PersistentMemoryBytes, db.PersistentMemoryBytes)
	orInt64(&b.HostPersistentMemoryBytes, db.HostPersistentMemoryBytes)
	if s.Trajectories.Record == "" {
		s.Trajectories.Record = "opt_in"
	}
	orInt(&s.Trajectories.MaxRecordsPerSession, defaultMaxTrajectoryRecords)
	orInt(&c.Operator.MaxToolLabels, defaultMaxToolLabels)
	orDur(&c.Operator.DrainTimeout, Duration(defaultDrainTimeout))
	if c.MCPFace.AgentID == "" {
		c.MCPFace.AgentID = "mcp"
	}
	if c.MCPFace.TokenEnv == "" {
		c.MCPFace.TokenEnv = "AEP_AUTH_TOKEN"
	}
	if c.OpenEnvFace.AgentID == "" {
		c.OpenEnvFace.AgentID = "openenv"
	}
	return c
}

// hostIDPattern is what server.host_id may be: a DNS label's characters
// plus dots, so a host name or a pod name fits, and nothing a proxy's
// header matching or a path would have to escape.
var hostIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$`)

// defaultHostID is the host name when it fits hostIDPattern, else "aep".
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

func orInt64(v *int64, d int64) {
	if *v <= 0 {
		*v = d
	}
}

func orDur(v *Duration, d Duration) {
	if *v <= 0 {
		*v = d
	}
}

// ParseConfig checks and decodes a configuration given as text; see
// [LoadConfigFile].
func ParseConfig(data []byte) (Config, error) {
	cfg, _, err := ParseConfigFile("", data)
	return cfg, err
}

// LoadConfigFile reads a YAML configuration file, checks it and decodes
// it (see [ParseConfigFile]), and returns the parsed document too, so
// a later check ([CheckConfig]) can name the lines of its problems
// ([configcheck.Document.Place]).
func LoadConfigFile(path string) (Config, *configcheck.Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfigFile(path, data)
}

// ParseConfigFile checks a configuration file (named file in messages)
// and decodes it. The checks, in order, each reporting every problem it
// finds with file, line and dotted key ([configcheck.Problems]): YAML
// syntax and ${NAME} references (an unset variable is an error unless
// written ${NAME:-default}); the file's sections against
// schemas/config/kernel.json and each plugin's settings against its
// module's schema (types, ranges, allowed values, durations, unknown
// keys); then what a schema cannot say (the checks of [Config.check]).
// The document is then decoded strictly into a Config whose absent
// settings take their defaults.
func ParseConfigFile(file string, data []byte) (Config, *configcheck.Document, error) {
	doc, err := configcheck.Parse(file, data)
	if err != nil {
		return Config{}, nil, err
	}
	if err := doc.Check(); err != nil {
		return Config{}, nil, err
	}
	cfg := Defaults()
	if doc.Root != nil {
		// Strict decoding after the schema passed: a key the schema
		// knows but Config lacks is a generator bug, still refused.
		raw, err := yaml.Marshal(doc.Root)
		if err != nil {
			return Config{}, nil, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, nil, configcheck.Problems{{File: file, Message: err.Error()}}
		}
	}
	if err := cfg.check(); err != nil {
		return Config{}, nil, doc.Place(err)
	}
	return cfg.withDefaults(), doc, nil
}

// check makes the checks of a configuration that its schema cannot say:
// relations between keys, and for a Config built in Go rather than read
// from a file, the formats its schema would have checked. Each problem
// names its dotted key ([configcheck.At]); all are returned, joined.
func (c Config) check() error {
	var probs []error
	add := func(key, format string, args ...any) {
		probs = append(probs, configcheck.At(key, format, args...))
	}
	names := map[string]int{}
	for i, p := range c.Plugins {
		at := fmt.Sprintf("plugins[%d]", i)
		switch {
		case p.Name == "":
			add(at+".name", "missing: every plugin needs a name")
		default:
			if j, dup := names[p.Name]; dup {
				add(at+".name", "duplicate plugin name %q (plugins[%d] has it); each plugin needs its own", p.Name, j)
			} else {
				names[p.Name] = i
			}
		}
		if p.Cls == "" {
			add(at+".cls", "missing: every plugin needs a cls, the module it is")
		}
		if p.Type == "" {
			add(at+".type", "missing: every plugin needs a type, the capability it serves")
		}
	}
	if id := c.Server.HostID; id != "" && !hostIDPattern.MatchString(id) {
		add("server.host_id", "%q: want 1 to 63 letters, digits, dots and dashes, beginning and ending with a letter or digit", id)
	}
	if c.Server.ProxyProtocol && len(c.Server.TrustedProxies) == 0 {
		add("server.proxy_protocol", "needs server.trusted_proxies: the proxies whose header is read")
	}
	for i, p := range c.Server.TrustedProxies {
		if _, err := parseTrustedProxy(p); err != nil {
			add(fmt.Sprintf("server.trusted_proxies[%d]", i), "%v", err)
		}
	}
	switch c.Transport.Type {
	case "", "http", "stdio", "inprocess":
	default:
		add("transport.type", "%q: want http, stdio or inprocess", c.Transport.Type)
	}
	if c.Store.DSN != "" {
		if _, err := store.ParseDSN(c.Store.DSN); err != nil {
			add("store.dsn", "%v", err)
		}
	}
	// /metrics tells whoever reaches it how busy the host is and which
	// tools it runs: beyond loopback it needs a token (docs/operating.md).
	if l := c.Operator.Listen; l != "" && c.Operator.Token == "" && !configcheck.Loopback(l) {
		add("operator.token", "required: operator.listen %s is not a loopback address, and /metrics there would be open to anyone who reaches it; set operator.token (e.g. ${AEP_OPERATOR_TOKEN}) or listen on 127.0.0.1", l)
	}
	// The token opens the admin API, which acts as any tenant: a short
	// one is refused rather than guessed (docs/SECURITY.md, Admin API).
	if tok := c.Operator.Token; tok != "" && len(tok) < minOperatorToken {
		add("operator.token", "%d bytes: want at least %d; it opens the admin API, which acts as any tenant (e.g. `openssl rand -hex 24`)", len(tok), minOperatorToken)
	}
	probs = append(probs, c.Server.Trajectories.check()...)
	probs = append(probs, c.Server.Snapshots.check()...)
	return errors.Join(probs...)
}
