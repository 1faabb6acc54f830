package sandbox_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The init (server/sandbox/initproc) runs from its package's Go init
// function and must come before the packages it does not need: each one
// initialised first is CPU spent on every cold start and every spare. This
// binary links os/exec, path/filepath and the wire package (through the
// host's side of the sandbox); started as an init, it must end before any
// of them is initialised.
func TestInitRunsBeforeTheHostsPackages(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{"AEP_SANDBOX_INIT=not instructions", "GODEBUG=inittrace=1"}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Run(); err == nil {
		t.Fatal("the init took bad instructions")
	}
	var initialised []string
	for _, line := range strings.Split(errOut.String(), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			initialised = append(initialised, f[1])
		}
	}
	if len(initialised) == 0 {
		t.Fatalf("no init trace: %q", errOut.String())
	}
	for _, pkg := range initialised {
		switch pkg {
		case "os/exec", "path/filepath", "github.com/aephost/aep/wire", "github.com/aephost/aep/server/sandbox":
			t.Errorf("%s was initialised before the init ran (%d packages: %v)", pkg, len(initialised), initialised)
		}
	}
}
