package main_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runAdmin runs `aep admin args…` with env (and PATH) as its environment.
func runAdmin(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"admin"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestAdminCommandLine: `aep admin` explains itself and refuses what it
// cannot do before it reaches a host: a missing token (never taken from a
// flag), a missing address, a missing or extra handle, a bad flag value;
// a host that does not answer is an error too. The API itself is tested
// against the real binary (internal/aepbin TestAdminAPIWithTheBinary).
func TestAdminCommandLine(t *testing.T) {
	// A port with nothing behind it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	tok := "AEP_OPERATOR_TOKEN=operator-token-0123456789"
	for _, c := range []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no command", nil, nil, 2, "Usage: aep admin COMMAND"},
		{"help", nil, []string{"-h"}, 0, "Commands:"},
		{"unknown command", nil, []string{"evict"}, 2, `unknown command "evict"`},
		{"no token", nil, []string{"list", "--addr", dead}, 1, "AEP_OPERATOR_TOKEN is not set"},
		{"no token flag", []string{tok}, []string{"list", "--addr", dead, "--token", "x"}, 2, "flag provided but not defined: -token"},
		{"no address", []string{tok}, []string{"list"}, 1, "give --addr or set AEP_OPERATOR_ADDR"},
		{"inspect without a handle", []string{tok}, []string{"inspect", "--addr", dead}, 2, "give one session handle"},
		{"terminate with two", []string{tok}, []string{"terminate", "h-a", "h-b", "--addr", dead}, 2, "give one session handle"},
		{"list with an argument", []string{tok}, []string{"list", "extra", "--addr", dead}, 2, "takes no arguments"},
		{"drain, bad --snapshot", []string{tok, "AEP_OPERATOR_ADDR=" + dead}, []string{"drain", "--snapshot", "maybe"}, 1, `--snapshot "maybe": want true or false`},
		{"nothing listening", []string{tok, "AEP_OPERATOR_ADDR=" + dead}, []string{"inspect", "h-a", "--json"}, 1, "the admin API did not answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runAdmin(t, c.env, c.args...)
			if code != c.wantCode || !strings.Contains(stderr, c.wantErr) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, c.wantCode, c.wantErr)
			}
		})
	}
}
