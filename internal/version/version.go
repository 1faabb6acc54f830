// Package version says which build of aep is running: the version and
// commit stamped at build time with -ldflags, else what the Go toolchain
// recorded of the source's version control (debug.ReadBuildInfo), and the
// Go version. `aep version` prints it and the aep_build_info metric
// carries it, so the two always agree (docs/operating.md, Versions).
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Stamped at release builds, e.g. by the Dockerfile:
//
//	go build -ldflags "-X github.com/aephost/aep/internal/version.version=v1.2.3 -X github.com/aephost/aep/internal/version.commit=$(git rev-parse HEAD)" ./cmd/aep
var (
	version = ""
	commit  = ""
)

// Info is the running build.
type Info struct {
	// Version is the stamped version; else the module version the Go
	// toolchain derived from version control (v0.0.0-<date>-<rev>, with
	// +dirty for a modified tree); else devel-<rev>; else "devel".
	Version string
	// Commit is the stamped commit, else the VCS revision (with -dirty
	// for a modified tree), else "unknown".
	Commit string
	// Go is the Go version the binary was built with.
	Go string
}

// Get returns the running build's Info.
func Get() Info {
	return resolve(version, commit, readBuildInfo())
}

// readBuildInfo is debug.ReadBuildInfo, nil when the binary has none.
func readBuildInfo() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

// resolve picks the version and commit from what was stamped, falling back
// to the build info's module version and vcs settings.
func resolve(stampedVersion, stampedCommit string, bi *debug.BuildInfo) Info {
	out := Info{Version: strings.TrimSpace(stampedVersion), Commit: strings.TrimSpace(stampedCommit), Go: runtime.Version()}
	var mod, rev string
	dirty := false
	if bi != nil {
		mod = bi.Main.Version
		if bi.GoVersion != "" {
			out.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if out.Commit == "" {
		switch {
		case rev != "" && dirty:
			out.Commit = rev + "-dirty"
		case rev != "":
			out.Commit = rev
		default:
			out.Commit = "unknown"
		}
	}
	if out.Version == "" {
		short := rev
		if len(short) > 12 {
			short = short[:12]
		}
		switch {
		case mod != "" && mod != "(devel)":
			out.Version = mod
		case short != "" && dirty:
			out.Version = "devel-" + short + "+dirty"
		case short != "":
			out.Version = "devel-" + short
		default:
			out.Version = "devel"
		}
	}
	return out
}

// Stamped reports whether the build says where it came from: a stamped
// version or commit, or a VCS revision.
func (i Info) Stamped() bool { return i.Commit != "unknown" }
