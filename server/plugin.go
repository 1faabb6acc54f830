package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/aephost/aep/internal/configcheck"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// PluginEnv is what a plugin learns about its host when it is provisioned.
type PluginEnv struct {
	// Name is the plugin's name from the config.
	Name string
	// Type is the capability named by the config entry.
	Type string
	// DataDir is the plugin's own directory, <data dir>/<instance key>:
	// named by its module, not its name, so a rename keeps it
	// (server/datadir.go); "" on a host without a data directory.
	DataDir string
	Logger  *slog.Logger
	// Claims is the host's register of owned names (tools, environments…).
	Claims *Claims
	// Host gives access to kernel services (audit subscription, sessions).
	Host *Host
	// Store is the host's shared persistent store (its ent client serves
	// every entity of ent/schema), or nil on a host without one; see package
	// server/store.
	Store *store.Store
}

// Provisioner is implemented by plugins that need set-up after their
// settings are decoded: opening files, connecting, starting goroutines.
type Provisioner interface {
	Provision(ctx context.Context, env PluginEnv) error
}

// Validator is implemented by plugins that check their settings after provisioning.
type Validator interface {
	Validate() error
}

// CleanerUpper is implemented by plugins that hold resources. Cleanup runs
// when the host stops, and also when a later lifecycle step fails, so a
// partly started plugin never leaks (unlike caddy #7067).
type CleanerUpper interface {
	Cleanup() error
}

// SessionObserver is implemented by plugins that keep per-session state;
// SessionClosed runs when a session ends for any reason.
type SessionObserver interface {
	SessionClosed(sessionID string)
}

// PluginSpec describes one plugin instance to the host: from a config entry,
// or given directly (tests, embedding).
type PluginSpec struct {
	Name      string
	Type      string // capability named by the plugin
	Priority  int
	Exclusive bool
	Impl      Plugin
}

// plugin is one loaded instance.
type plugin struct {
	PluginSpec
	order int // position in the config, for ties in priority
}

// decodeSettings decodes a plugin's `config` node strictly into impl.
func decodeSettings(node *yaml.Node, impl any) error {
	if node == nil || node.Kind == 0 {
		return nil
	}
	// Decoding to plain values first resolves aliases to anchors elsewhere
	// in the file (another plugin's config, say), which marshalling the
	// node on its own would leave dangling; yaml.v3 bounds the expansion.
	var plain any
	if err := node.Decode(&plain); err != nil {
		return err
	}
	raw, err := yaml.Marshal(plain)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(impl); err != nil {
		return err
	}
	return nil
}

// instantiate builds the plugins of cfg from registered modules, and
// says where in cfg.Plugins each came from. Every plugin is tried, so one
// call reports each unknown cls and each plugin's settings that do not
// decode, as problems at their keys.
func instantiate(cfg Config) ([]PluginSpec, []int, error) {
	var out []PluginSpec
	var at []int
	var probs []error
	for i, pc := range cfg.Plugins {
		if !pc.Metadata.IsEnabled() {
			continue
		}
		m, ok := lookupModule(pc.Cls)
		if !ok {
			msg := fmt.Sprintf("unknown cls %q", pc.Cls)
			if near := configcheck.Suggest(pc.Cls, moduleIDs()); near != "" {
				msg += " (did you mean " + near + "?)"
			}
			probs = append(probs, configcheck.At(fmt.Sprintf("plugins[%d].cls", i), "plugin %q: %s; registered: %s", pc.Name, msg, strings.Join(moduleIDs(), ", ")))
			continue
		}
		impl := m.New()
		if err := decodeSettings(&pc.Config, impl); err != nil {
			probs = append(probs, configcheck.At(fmt.Sprintf("plugins[%d].config", i), "plugin %q: config: %s", pc.Name, decodeReason(err)))
			continue
		}
		out = append(out, PluginSpec{Name: pc.Name, Type: pc.Type, Priority: pc.Metadata.Priority, Exclusive: pc.Metadata.Exclusive, Impl: impl})
		at = append(at, i)
	}
	return out, at, errors.Join(probs...)
}

// decodeReason words a strict decoding error of a plugin's settings
// without yaml.v3's line numbers, which count lines of the settings
// re-encoded (decodeSettings), not of the file.
func decodeReason(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	reasons := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		if _, rest, ok := strings.Cut(e, ": "); ok && strings.HasPrefix(e, "line ") {
			e = rest
		}
		reasons[i] = e
	}
	return strings.Join(reasons, "; ")
}

// CheckConfig checks everything about cfg that [New] checks before it
// provisions anything: the kernel settings, that every `cls` is a
// registered module, that each plugin's settings decode strictly, that
// each plugin's handlers serve its configured `type`, and that
// mcp_face.capabilities are capabilities of reg. `aep config validate`
// runs it, so a file it accepts is one `aep serve` starts with. Problems
// name their dotted keys ([configcheck.At]); every one found is returned.
func CheckConfig(cfg Config, reg *wire.Registry) error {
	if err := cfg.check(); err != nil {
		return err
	}
	specs, at, err := instantiate(cfg)
	var probs []error
	if err != nil {
		probs = append(probs, err)
	}
	// As in New: a module's own namespaces count towards what it serves.
	reg = withModuleNamespaces(reg, specs)
	for i, spec := range specs {
		if err := checkType(reg, spec); err != nil {
			probs = append(probs, configcheck.At(fmt.Sprintf("plugins[%d].type", at[i]), "%v", err))
		}
	}
	known := reg.Capabilities()
	for i, c := range cfg.MCPFace.Capabilities {
		if !slices.Contains(known, CanonicalCapability(c)) {
			probs = append(probs, configcheck.At(fmt.Sprintf("mcp_face.capabilities[%d]", i), "unknown capability %q; known: %s", c, strings.Join(known, ", ")))
		}
	}
	return errors.Join(probs...)
}

// start provisions and validates plugins in order. On failure every plugin
// touched so far, the failing one included, is cleaned up.
func start(ctx context.Context, reg *wire.Registry, specs []PluginSpec, env func(PluginSpec) PluginEnv, claims *Claims) ([]*plugin, error) {
	for _, spec := range specs {
		if spec.Impl == nil {
			return nil, fmt.Errorf("plugin %q: no implementation", spec.Name)
		}
		if err := checkType(reg, spec); err != nil {
			return nil, fmt.Errorf("plugin %q: %w", spec.Name, err)
		}
	}
	var started []*plugin
	fail := func(p PluginSpec, err error) ([]*plugin, error) {
		cleanup(append(started, &plugin{PluginSpec: p}))
		return nil, fmt.Errorf("plugin %q: %w", p.Name, err)
	}
	for i, spec := range specs {
		if pv, ok := spec.Impl.(Provisioner); ok {
			if err := pv.Provision(ctx, env(spec)); err != nil {
				return fail(spec, fmt.Errorf("provision: %w", err))
			}
		}
		if v, ok := spec.Impl.(Validator); ok {
			if err := v.Validate(); err != nil {
				return fail(spec, fmt.Errorf("validate: %w", err))
			}
		}
		if c, ok := spec.Impl.(Claimer); ok {
			for _, cl := range c.Claims() {
				if err := claims.Claim("", cl, spec.Name); err != nil {
					return fail(spec, err)
				}
			}
		}
		started = append(started, &plugin{PluginSpec: spec, order: i})
	}
	return started, nil
}

// cleanup runs Cleanup of plugins in reverse start order.
func cleanup(ps []*plugin) error {
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		if c, ok := ps[i].Impl.(CleanerUpper); ok {
			if err := c.Cleanup(); err != nil {
				errs = append(errs, fmt.Errorf("plugin %q: cleanup: %w", ps[i].Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// route is the dispatch table row of one type.
type route struct {
	entry     *wire.Entry
	plugins   []*plugin // descending priority, ties in config order
	exclusive bool      // plugins holds the one exclusive plugin
}

// buildRoutes maps every plugin-served request type to its plugins
// (spec §1 dispatch rules 2–4).
func buildRoutes(reg *wire.Registry, ps []*plugin) map[string]*route {
	routes := map[string]*route{}
	for _, e := range reg.Entries() {
		if e.Kind != wire.KindRequest || e.Kernel || e.Handles == nil {
			continue
		}
		r := &route{entry: e}
		for _, p := range ps {
			if e.Handles(p.Impl) {
				r.plugins = append(r.plugins, p)
			}
		}
		sort.SliceStable(r.plugins, func(i, j int) bool {
			if r.plugins[i].Priority != r.plugins[j].Priority {
				return r.plugins[i].Priority > r.plugins[j].Priority
			}
			return r.plugins[i].order < r.plugins[j].order
		})
		// The highest-priority exclusive plugin handles its types alone (spec §1 rule 4).
		for i, p := range r.plugins {
			if p.Exclusive {
				r.plugins = r.plugins[i : i+1]
				r.exclusive = true
				break
			}
		}
		routes[e.Type] = r
	}
	return routes
}
