package sandbox_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/aephost/aep/server/sandbox"
)

// A spare init's mount namespace is a copy of the host's when it started.
// A file system mounted on the work directory since then is what the host
// sees there; the spare sees the directory below it. The spare must refuse
// the run and the run start cold, seeing what the host sees.
func TestSpareWithStaleViewStartsCold(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "which"), []byte("below the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sandbox.WaitSpare(t)
	if err := syscall.Mount("tmpfs", work, "tmpfs", 0, "mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(work, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(work, "which"), []byte("on the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, out, errOut := run(t, sandbox.Spec{Argv: []string{"cat", "which"}, Dir: work, Sandboxed: true, Mode: sandbox.ModeNamespaces})
	if res.Outcome != sandbox.Exited || res.ExitCode != 0 || out != "on the mount\n" {
		t.Fatalf("got %+v, stdout %q, stderr %q; want the file the host sees", res, out, errOut)
	}
}

// Spare inits serve one run each: consecutive runs see their own work
// directories and none sees a file another run left in /tmp.
func TestSpareServesOneRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the namespaces mode needs root")
	}
	for i, name := range []string{"first", "second", "third"} {
		sandbox.WaitSpare(t)
		work := t.TempDir()
		os.WriteFile(filepath.Join(work, "name"), []byte(name), 0o644)
		script := `test ! -e /tmp/left && echo x > /tmp/left && cat /workspace/name`
		res, out, errOut := run(t, sandbox.Spec{Argv: []string{"sh", "-c", script}, Dir: work, Sandboxed: true, Mode: sandbox.ModeNamespaces})
		if res.Outcome != sandbox.Exited || res.ExitCode != 0 || out != name {
			t.Fatalf("run %d: %+v, stdout %q, stderr %q", i, res, out, errOut)
		}
	}
}
