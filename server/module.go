package server

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/aephost/aep/wire"
)

// Plugin is a capability implementation. Its [ModuleInfo] says which module
// it is; which capabilities it serves follows from the generated handler
// interfaces it implements ([servedBy]), so a config can never claim more
// than the code does.
type Plugin interface {
	Module() ModuleInfo
}

// ModuleInfo describes a registered plugin implementation. A config entry's
// `cls` names it by ID (Go has no dynamic import, so modules register at
// init, as Caddy's do).
type ModuleInfo struct {
	// ID is the module's dotted name, e.g. "aep.tools.builtin".
	ID string
	// Capability is the capability the module is configured as by default
	// (its `type`); its handlers must serve it.
	Capability string
	// DefaultName, when set, puts the module in the configuration `aep
	// serve` uses without a `plugins` list, under this plugin name.
	DefaultName string
	// New returns a fresh, unprovisioned plugin. It must have no side effects.
	New func() Plugin
	// Namespaces, when set, is the generated registry of namespaces the
	// module brings with it (a capability whose schema is not in schemas/):
	// a host that loads the module serves and decodes them too.
	Namespaces *wire.Registry
	// Schemas, set with Namespaces, holds the JSON Schema files those
	// namespaces were generated from, at its root: the contract that
	// conformance checks (the aepconformance build) read the module's
	// messages against, as they read schemas/ for the built-in ones.
	Schemas fs.FS
}

var (
	modulesMu sync.RWMutex
	modules   = map[string]ModuleInfo{}
)

// RegisterModule makes a plugin implementation available to configs. It
// panics on a duplicate or malformed ID, at init, where the mistake is made.
func RegisterModule(p Plugin) {
	m := p.Module()
	if m.ID == "" || m.New == nil || strings.ContainsAny(m.ID, " /") {
		panic(fmt.Sprintf("server: invalid module %q", m.ID))
	}
	modulesMu.Lock()
	defer modulesMu.Unlock()
	if _, dup := modules[m.ID]; dup {
		panic(fmt.Sprintf("server: module %q registered twice", m.ID))
	}
	modules[m.ID] = m
}

// Modules returns the registered modules, sorted by ID.
func Modules() []ModuleInfo {
	modulesMu.RLock()
	defer modulesMu.RUnlock()
	out := make([]ModuleInfo, 0, len(modules))
	for _, m := range modules {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// moduleIDs returns the registered module IDs, sorted.
func moduleIDs() []string {
	ms := Modules()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func lookupModule(id string) (ModuleInfo, bool) {
	modulesMu.RLock()
	defer modulesMu.RUnlock()
	m, ok := modules[id]
	return m, ok
}

// servedBy returns the capabilities whose namespace handlers p implements
// in reg, sorted. The always-on session namespace counts as "session".
func servedBy(reg *wire.Registry, p Plugin) []string {
	seen := map[string]bool{}
	for _, e := range reg.Entries() {
		if e.Kind != wire.KindRequest || e.Kernel || e.Handles == nil || !e.Handles(p) {
			continue
		}
		c := e.Capability
		if c == "" {
			c = e.Namespace
		}
		seen[c] = true
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// checkType refuses a plugin configured as a capability its handlers do
// not serve (a `type: procs` would otherwise be reported enabled while
// nothing answers it). An empty type is a plugin that serves no namespace
// of its own, such as an audit observer.
func checkType(reg *wire.Registry, spec PluginSpec) error {
	if spec.Type == "" {
		return nil
	}
	want := CanonicalCapability(spec.Type)
	served := servedBy(reg, spec.Impl)
	for _, c := range served {
		if c == want {
			return nil
		}
	}
	list := strings.Join(served, ", ")
	if list == "" {
		list = "none"
	}
	return fmt.Errorf("type %q is not served by module %s (it serves: %s)", spec.Type, spec.Impl.Module().ID, list)
}

// implementing returns the plugins whose implementation is a T, in start
// order, each with its implementation as T: the one place the kernel asks
// which optional interfaces ([Snapshotter], [SessionObserver], …) a plugin has.
func implementing[T any](ps []*plugin) []pluginAs[T] {
	var out []pluginAs[T]
	for _, p := range ps {
		if v, ok := p.Impl.(T); ok {
			out = append(out, pluginAs[T]{p: p, v: v})
		}
	}
	return out
}

// pluginAs is a loaded plugin seen through one of its interfaces.
type pluginAs[T any] struct {
	p *plugin
	v T
}
