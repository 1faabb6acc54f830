package sandbox_test

import (
	"errors"
	"os"
	"testing"

	"github.com/aephost/aep/server/sandbox"
)

// TestNoSeccompFailsClosed: on a kernel that installs no seccomp filter, a
// run that was not granted network does not start (nothing else keeps it
// off the network in the supervised tier); one granted network runs.
func TestNoSeccompFailsClosed(t *testing.T) {
	sandbox.WithoutSeccomp(t)
	for _, mode := range append(modes(t), sandbox.ModeSupervised) {
		t.Run(string(mode), func(t *testing.T) {
			// Traversable by the uid a supervised command runs as.
			dir, err := os.MkdirTemp("", "aep-noseccomp-")
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, 0o755)
			t.Cleanup(func() { os.RemoveAll(dir) })
			_, err = sandbox.Start(sandbox.Spec{Argv: []string{"true"}, Dir: dir, Sandboxed: true, Mode: mode})
			if !errors.Is(err, sandbox.ErrSetup) {
				t.Fatalf("a run without network on a kernel without seccomp: %v", err)
			}
			res, out, _ := run(t, sandbox.Spec{Argv: []string{"echo", "ran"}, Dir: dir, Sandboxed: true, Mode: mode, Network: true})
			if res.Outcome != sandbox.Exited || out != "ran\n" {
				t.Fatalf("a run granted network: %+v %q", res, out)
			}
		})
	}
}

// TestUserNamespacesOnlyWhenAllowed: a contained command cannot make a
// user namespace unless the host allows them
// (server.isolation.allow_user_namespaces).
func TestUserNamespacesOnlyWhenAllowed(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			for _, allow := range []bool{false, true} {
				sandbox.AllowUserNamespaces(allow)
				res, out, errOut := run(t, sandbox.Spec{Argv: []string{"unshare", "-U", "echo", "inside"}, Dir: t.TempDir(), Sandboxed: true, Mode: mode})
				made := res.Outcome == sandbox.Exited && res.ExitCode == 0 && out == "inside\n"
				if made != allow {
					t.Errorf("allow %v: %+v %q %q", allow, res, out, errOut)
				}
			}
			sandbox.AllowUserNamespaces(false)
		})
	}
}
