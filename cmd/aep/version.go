package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/aephost/aep/wire"
)

// version is set at release builds with -ldflags "-X main.version=v1.2.3";
// otherwise the module version and VCS revision from the build info are shown.
var version = ""

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "aep %s (protocol %s, %s)\n", buildVersion(), wire.ProtoVersion, runtime.Version())
	return nil
}

func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev != "" && (v == "" || v == "(devel)"):
		return "devel-" + rev + dirty
	case v == "":
		return "(devel)"
	}
	return v
}
