package main

import (
	"fmt"
	"io"

	"github.com/aephost/aep/internal/version"
	"github.com/aephost/aep/wire"
)

// cmdVersion prints the build internal/version resolves, the one the
// aep_build_info metric carries (docs/operating.md, Versions).
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	v := version.Get()
	fmt.Fprintf(stdout, "aep %s (commit %s, protocol %s, %s)\n", v.Version, v.Commit, wire.ProtoVersion, v.Go)
	if !v.Stamped() {
		fmt.Fprintln(stderr, "aep: this build does not say where it came from: build with -buildvcs=true in a git checkout, or stamp it (docs/operating.md, Versions)")
	}
	return nil
}
