package proc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/proc"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

func TestSpawnRules(t *testing.T) {
	h := newHost(t, &proc.Plugin{Settings: proc.Settings{MaxProcs: 2}})
	ws := filepath.Join(h.DataDir(), "sessions")
	if err := os.MkdirAll(ws+"/s", 0o755); err != nil {
		t.Fatal(err)
	}
	c := aeptest.Connect(t, h, "proc")
	ctx := aeptest.Context(t)
	os.MkdirAll(ws+"/"+aeptest.Handle(t, c)+"/sub", 0o755)
	os.Symlink("/etc", ws+"/"+aeptest.Handle(t, c)+"/out")
	cases := []struct {
		name string
		req  msg.ProcSpawnReq
		code wire.Code
		sub  string
	}{
		{"parent dir", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: aeptest.Ptr("../s")}, wire.CodeSchemaViolation, "cwd"},
		{"absolute", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: aeptest.Ptr("/etc")}, wire.CodeSchemaViolation, "cwd"},
		{"symlink out", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: aeptest.Ptr("out")}, wire.CodeSchemaViolation, "leaves its root"},
		{"missing", msg.ProcSpawnReq{Argv: []string{"true"}, Cwd: aeptest.Ptr("nope")}, wire.CodeSchemaViolation, "cwd"},
		{"no such program", msg.ProcSpawnReq{Argv: []string{"/nonexistent/prog"}}, wire.CodeRuntimeError, "spawn"},
		{"not on PATH", msg.ProcSpawnReq{Argv: []string{"aep-no-such-program"}}, wire.CodeRuntimeError, "spawn"},
		{"not executable", msg.ProcSpawnReq{Argv: []string{"./sub"}}, wire.CodeRuntimeError, "spawn"},
		{"empty argv[0]", msg.ProcSpawnReq{Argv: []string{""}}, wire.CodeSchemaViolation, "argv"},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			_, err := c.ProcSpawn(ctx, &cs.req)
			we := aeptest.WantError(t, err, cs.code, cs.sub)
			// A program that cannot start is the agent's mistake: the
			// answer says which, naming only the argv[0] it sent.
			switch cs.name {
			case "no such program", "not on PATH":
				aeptest.WantReason(t, err, cs.code, "program_not_found")
			case "not executable":
				aeptest.WantReason(t, err, cs.code, "program_not_executable")
			}
			if strings.Contains(we.Message, ws) {
				t.Fatalf("the error names the host's workspace: %s", we.Message)
			}
		})
	}
	// The environment: allowlisted host variables and the request's, never LD_*.
	r, err := c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sh", "-c", `pwd; echo "${LD_PRELOAD:-none} ${BASH_ENV:-none} $FOO"`}, Cwd: aeptest.Ptr("sub"),
		Env: msg.ProcSpawnReqEnv{"LD_PRELOAD": "/tmp/evil.so", "BASH_ENV": "/tmp/x", "FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.DroppedEnv, ",") != "BASH_ENV,LD_PRELOAD" || r.Process.Cwd != "sub" {
		t.Fatalf("spawn: %+v", r)
	}
	wait(t, c, r.Process.ProcID)
	if out, _ := readAll(t, c, r.Process.ProcID); !strings.HasSuffix(out, "/sub\nnone none bar\n") {
		t.Fatalf("output %q", out)
	}
	// The cap on running processes.
	spawn(t, c, "sleep", "1000")
	spawn(t, c, "sleep", "1000")
	_, err = c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sleep", "1"}})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "limit")
	l, err := c.ProcList(ctx, &msg.ProcListReq{RunningOnly: true})
	if err != nil || len(l.Processes) != 2 {
		t.Fatalf("list: %+v %v", l, err)
	}
	_, err = c.ProcStatus(ctx, &msg.ProcStatusReq{ProcID: "p-nope"})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "not_found")
}

// TestEnvironmentAllowlist: a process inherits only the host variables on
// env_allow (loader variables dropped even when listed), HOME is its
// session directory as the contained process sees it, and argv reaches the program as it is, with no shell between.
func TestEnvironmentAllowlist(t *testing.T) {
	t.Setenv("AEP_AUDIT_LISTED", "listed-value")
	t.Setenv("AEP_AUDIT_UNLISTED", "must-not-leak")
	t.Setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
	h := newHost(t, &proc.Plugin{Settings: proc.Settings{EnvAllow: []string{"PATH", "AEP_AUDIT_LISTED", "GLIBC_TUNABLES"}}})
	c := aeptest.Connect(t, h, "proc")
	rec := spawn(t, c, "env")
	if _, err := wait(t, c, rec.ProcID); err != nil {
		t.Fatal(err)
	}
	out, _ := readAll(t, c, rec.ProcID)
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		// The sandbox's own: the run's marker, and the working directory
		// bubblewrap sets.
		if k != sandbox.RunMarker && k != "PWD" {
			env[k] = v
		}
	}
	home := filepath.Join(h.DataDir(), "sessions", aeptest.Handle(t, c))
	if mech, _ := sandbox.Mechanism(sandbox.ModeAuto); sandbox.TierOf(mech) == sandbox.TierNamespaces {
		home = sandbox.Workspace
	}
	want := map[string]string{"PATH": os.Getenv("PATH"), "AEP_AUDIT_LISTED": "listed-value", "HOME": home}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("environment %v, want only %v", env, want)
	}

	argv := []string{"printf", "%s|", "$HOME", "`id`", "a b", ";", "*", "$(true)"}
	rec = spawn(t, c, argv...)
	if _, err := wait(t, c, rec.ProcID); err != nil {
		t.Fatal(err)
	}
	if out, _ := readAll(t, c, rec.ProcID); out != strings.Join(argv[2:], "|")+"|" {
		t.Fatalf("argv went through a shell: %q", out)
	}
}
