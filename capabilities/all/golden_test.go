package all_test

import (
	"os"
	"path/filepath"
	"testing"

	_ "github.com/aephost/aep/capabilities/all"
	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/internal/golden"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/store"
)

// TestGolden replays each testdata/golden/*.txtar archive against a host
// built from the archive's config.yaml with the real capability plugins
// (every module capabilities/all links in), a fresh data directory and a
// real SQLite store, and compares the normalised transcript with the
// archive's host section: the wire-level golden files of every capability
// namespace. Package internal/golden documents the
// archive format and the script language; run with -update to rewrite the
// host sections, then read every changed transcript against the spec.
func TestGolden(t *testing.T) {
	c, err := conformance.Module()
	if err != nil {
		t.Fatal(err)
	}
	golden.Harness{
		NewHost:        newHost,
		Check:          c.CheckHostLine,
		IDFields:       idFields,
		VolatileFields: volatileFields,
	}.Run(t)
}

// idFields are the fields whose values are ids the host draws at random.
// Each keeps its identity in a transcript as <field:N>, which a script
// sends back to mean the same id.
var idFields = []string{
	"memory_id", "episode_id", "proc_id", "batch_id", "snapshot_id",
	"subagent_id", "auth_token",
}

// volatileFields are the fields whose values differ from run to run:
// wall-clock times, durations and process ids.
var volatileFields = []string{
	"duration_ms", "created_at", "updated_at", "started_at", "ended_at",
	"pid", "expires_at",
	"last_called", "mean_duration_ms", "p95_duration_ms",
}

// newHost builds the archive's host the way `aep serve` does (cmd/aep):
// the configured plugins, the data directory and the shared store, here
// SQLite under the archive's temporary directory.
func newHost(a *golden.Archive) (*server.Host, map[string]golden.Step, error) {
	for _, p := range a.Config.Plugins {
		if p.Type == "skills" {
			needSandbox(a.T)
		}
	}
	dataDir := filepath.Join(a.TmpDir, "data")
	st, err := store.Open(a.Ctx, "", dataDir)
	if err != nil {
		return nil, nil, err
	}
	a.T.Cleanup(func() { st.Close() })
	h, err := server.New(a.Ctx, a.Config, server.WithDataDir(dataDir), server.WithStore(st))
	return h, nil, err
}

// needSandbox skips an archive whose skills cannot run here: skills always
// run sandboxed, which needs root; under CI bwrap must be installed, so
// the transcript is the one the bwrap mechanism gives.
func needSandbox(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the skills sandbox needs root (namespaces, cgroups)")
	}
	if sandbox.BwrapPath() == "" && os.Getenv("CI") != "" {
		t.Fatal("bubblewrap (bwrap) is not installed; .ci/run installs it")
	}
}
