package server

// Plugin data directories (PluginEnv.DataDir). A plugin's directory is
// named by its instance key — its module ID, with "#2", "#3"… for further
// instances of the same module in config order — not by its configured
// name, so renaming a plugin in the config keeps it; the same key names
// the plugin's state in a snapshot (server/persist/stored.go).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// instanceKeys gives each plugin its instance key (see the file comment).
func instanceKeys(specs []PluginSpec) map[string]string {
	keys := make(map[string]string, len(specs))
	seen := map[string]int{}
	for _, sp := range specs {
		id := sp.Impl.Module().ID
		if id == "" {
			id = "plugin." + sp.Name // a module without an ID has only its name
		}
		seen[id]++
		if n := seen[id]; n > 1 {
			id = fmt.Sprintf("%s#%d", id, n)
		}
		keys[sp.Name] = id
	}
	return keys
}

// reservedDataNames are what the kernel keeps in the data directory; a
// plugin directory named like one is never moved. The first two are server/persist's: its file snapshots and session
// directories.
var reservedDataNames = []string{"snapshots", "sessions", "aep.db", "audit.jsonl"}

// movePluginDirs moves each plugin's data directory of an earlier release,
// named after the plugin, to the one named by its instance key.
func (h *Host) movePluginDirs(specs []PluginSpec) {
	if h.dataDir == "" {
		return
	}
	for _, sp := range specs {
		h.movePluginDir(sp.Name, h.keys[sp.Name])
	}
}

func (h *Host) movePluginDir(name, key string) {
	dir := filepath.Join(h.dataDir, key)
	old := filepath.Join(h.dataDir, name)
	if old == dir || slices.Contains(reservedDataNames, name) || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return
	}
	if fi, err := os.Lstat(old); err == nil && fi.IsDir() {
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			if err := os.Rename(old, dir); err != nil {
				h.log.Warn("plugin data directory not moved to its instance key", "plugin", name, "from", old, "to", dir, "err", err)
			} else {
				h.log.Info("plugin data directory moved to its instance key", "plugin", name, "to", dir)
			}
		}
	}
}
