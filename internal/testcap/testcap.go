package testcap

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

func init() {
	server.RegisterModule(new(Plugin))
}

// ModuleID is the module's ID, the `cls` of its config entries.
const ModuleID = "test.testcap"

// DefaultMaxKeys is how many counters one session may hold by default.
const DefaultMaxKeys = 16

// Module registers the plugin as module test.testcap, the testcap
// capability, named testcap.builtin in the default configuration of a
// binary that links it. Its namespace is not in schemas/, so the module
// brings its generated registry and the schema it came from along: a host
// that loads it decodes and routes testcap/* without being told.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{
		ID: ModuleID, Capability: "testcap", DefaultName: "testcap.builtin",
		New:        func() server.Plugin { return new(Plugin) },
		Namespaces: Registry(),
		Schemas:    schemaFS(),
	}
}

//go:embed schemas/testcap.json
var schemaFiles embed.FS

// schemaFS is the capability's schema file at the root, for conformance
// checks of what the host sends.
func schemaFS() fs.FS {
	sub, err := fs.Sub(schemaFiles, "schemas")
	if err != nil {
		panic(err) // the embedded directory exists: a build-time fact
	}
	return sub
}

// Plugin serves the testcap namespace: named counters, one set per
// session. Its exported fields are its settings (the `config` of its
// plugin entry, decoded strictly).
type Plugin struct {
	// MaxKeys caps the counters of one session; a new key beyond it is
	// denied. 0 means DefaultMaxKeys.
	MaxKeys int `yaml:"max_keys"`

	counters *server.SessionState[counters]
}

// counters is one session's state. The kernel's SessionState creates it
// on first use and drops it when the session ends.
type counters struct {
	mu     sync.Mutex
	totals map[string]int
	at     map[string]time.Time
}

var _ TestcapHandler = (*Plugin)(nil)

// Provision sets the defaults and takes the per-session container from the
// kernel, which then owns its cleanup.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	if p.MaxKeys < 0 {
		return fmt.Errorf("max_keys %d: must not be negative", p.MaxKeys)
	}
	if p.MaxKeys == 0 {
		p.MaxKeys = DefaultMaxKeys
	}
	p.counters = server.NewSessionState(env, func(string) *counters {
		return &counters{totals: map[string]int{}, at: map[string]time.Time{}}
	}, nil)
	return nil
}

// TestcapAdd adds to a counter of the sender's session.
func (p *Plugin) TestcapAdd(ctx context.Context, s wire.Scope, req *TestcapAddReq) (*TestcapAddResp, error) {
	c, err := p.counters.GetOrCreate(s.SessionID())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.totals[req.Key]; !ok && len(c.totals) >= p.MaxKeys {
		// ErrDenied: the agent reads this text, as runtime_error with
		// detail.reason "denied" (wire.AsError).
		return nil, fmt.Errorf("counter %q: the session holds %d counters, the most allowed: %w", req.Key, p.MaxKeys, wire.ErrDenied)
	}
	c.totals[req.Key] += req.By
	now := time.Now()
	c.at[req.Key] = now
	return &TestcapAddResp{Key: req.Key, Total: c.totals[req.Key], UpdatedAt: wire.Epoch(now)}, nil
}

// TestcapGet reads a counter of the sender's session.
func (p *Plugin) TestcapGet(ctx context.Context, s wire.Scope, req *TestcapGetReq) (*TestcapGetResp, error) {
	c, ok := p.counters.Get(s.SessionID())
	if ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		if total, found := c.totals[req.Key]; found {
			return &TestcapGetResp{Key: req.Key, Total: total, UpdatedAt: wire.Epoch(c.at[req.Key])}, nil
		}
	}
	// ErrNotFound: runtime_error with detail.reason "not_found".
	return nil, fmt.Errorf("counter %q: %w", req.Key, wire.ErrNotFound)
}
