package main

import (
	"fmt"
	"io"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

func cmdConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "validate" {
		fmt.Fprintln(stderr, "Usage: aep config validate FILE")
		return errUsage
	}
	f := newFlags("config validate", stderr)
	f.Usage = func() {
		fmt.Fprintln(stderr, "Usage: aep config validate FILE\n\nChecks a configuration file without starting anything: YAML syntax, unknown keys (with their line), required plugin fields, that every cls names a module built into this binary, that each plugin's settings match its schema (schemas/config/, reported with file, line and key) and decode, and that each plugin serves its configured type.")
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
	// The same checks `aep serve` makes before it provisions anything.
	if err := server.CheckConfig(cfg, msg.Registry()); err != nil {
		return fmt.Errorf("%s: %w", f.Arg(0), err)
	}
	fmt.Fprintf(stdout, "%s: ok (%d plugins)\n", f.Arg(0), len(cfg.Plugins))
	return nil
}
