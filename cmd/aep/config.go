package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/aephost/aep/server"
)

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "validate" {
		fmt.Fprintln(stderr, "Usage: aep config validate FILE")
		return errUsage
	}
	f := newFlags("config validate", stderr)
	f.Usage = func() {
		fmt.Fprintln(stderr, "Usage: aep config validate FILE\n\nChecks a configuration file without starting anything: YAML syntax, unknown keys (with their line), required plugin fields, and that every cls names a module built into this binary.")
	}
	if err := parse(f, args[1:]); err != nil {
		return err
	}
	if f.NArg() != 1 {
		f.Usage()
		return errUsage
	}
	cfg, err := loadServeConfig(f.Arg(0))
	if err != nil {
		return err
	}
	if err := checkModules(cfg); err != nil {
		return fmt.Errorf("%s: %w", f.Arg(0), err)
	}
	fmt.Fprintf(stdout, "%s: ok (%d plugins)\n", f.Arg(0), len(cfg.Plugins))
	return nil
}

// checkModules reports a plugin whose cls no module of this binary
// registered, the mistake server.New would otherwise find at start-up.
func checkModules(cfg server.Config) error {
	known := map[string]bool{}
	mods := server.Modules()
	for _, m := range mods {
		known[m] = true
	}
	for _, p := range cfg.Plugins {
		if !known[p.Cls] {
			list := strings.Join(mods, ", ")
			if list == "" {
				list = "none"
			}
			return fmt.Errorf("plugin %q: unknown cls %q (registered: %s)", p.Name, p.Cls, list)
		}
	}
	return nil
}
