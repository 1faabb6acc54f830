package sandbox_test

import (
	"os"
	"testing"

	"github.com/aephost/aep/internal/uidlock"
	"github.com/aephost/aep/server/sandbox"
)

// TestMain holds the locks of the uids these tests run processes as (65534
// for tier b, the sandbox's uid for limits and fork bombs), so another
// package's tests as those uids cannot spend the same RLIMIT_NPROC
// allowance meanwhile. A helper re-run as uid 65534 runs under its
// parent's hold.
func TestMain(m *testing.M) {
	release := func() {}
	if os.Getenv(helperEnv) == "" {
		release = uidlock.Main(65534, sandbox.SandboxUID)
	}
	code := m.Run()
	release()
	os.Exit(code)
}
