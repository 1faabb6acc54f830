package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// syncBuf is a bytes.Buffer safe for the copying goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// modes are the confinement mechanisms tested on this machine; bwrap is
// skipped only when it is absent and CI is unset (under CI it must be there).
func modes(t *testing.T) []sandbox.Mode {
	t.Helper()
	out := []sandbox.Mode{sandbox.ModeNamespaces}
	if sandbox.BwrapPath() != "" {
		out = append(out, sandbox.ModeBwrap)
	} else if os.Getenv("CI") != "" {
		t.Fatal("bubblewrap (bwrap) is not installed; .ci/run installs it")
	} else {
		t.Log("bwrap not installed: only the namespaces mode is tested")
	}
	if os.Geteuid() != 0 {
		t.Skip("confined runs need root (namespaces and cgroups)")
	}
	return out
}

func run(t *testing.T, spec sandbox.Spec) (sandbox.Result, string, string) {
	t.Helper()
	var out, errb syncBuf
	spec.Stdout, spec.Stderr = &out, &errb
	p, err := sandbox.Start(spec)
	if err != nil {
		t.Fatalf("start %v: %v", spec.Argv, err)
	}
	p.Stdin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %v: %v", spec.Argv, err)
	}
	return res, out.String(), errb.String()
}

func TestPlainRun(t *testing.T) {
	var out syncBuf
	p, err := sandbox.Start(sandbox.Spec{Argv: []string{"cat"}, Stdout: &out, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdin.Write([]byte("round trip\n")); err != nil {
		t.Fatal(err)
	}
	p.Stdin.Close()
	res, err := p.Wait(context.Background())
	if err != nil || res.Outcome != sandbox.Exited || res.ExitCode != 0 || out.String() != "round trip\n" {
		t.Fatalf("cat: %+v %v %q", res, err, out.String())
	}
	if res.Err() != nil {
		t.Fatal(res.Err())
	}
}

func TestPlainOutcomes(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		argv    []string
		lim     sandbox.Limits
		signal  syscall.Signal
		outcome sandbox.Outcome
		code    int
		sig     syscall.Signal
	}{
		{"exit code", []string{"sh", "-c", "exit 7"}, sandbox.Limits{}, 0, sandbox.Exited, 7, 0},
		{"wall-clock timeout", []string{"sleep", "30"}, sandbox.Limits{Timeout: 100 * time.Millisecond}, 0, sandbox.Timeout, -1, syscall.SIGKILL},
		{"owner's signal", []string{"sleep", "30"}, sandbox.Limits{}, syscall.SIGTERM, sandbox.Signaled, -1, syscall.SIGTERM},
		{"crash", []string{"sh", "-c", "kill -SEGV $$"}, sandbox.Limits{}, 0, sandbox.Crashed, -1, syscall.SIGSEGV},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := sandbox.Start(sandbox.Spec{Argv: c.argv, Dir: dir, Limits: c.lim})
			if err != nil {
				t.Fatal(err)
			}
			if c.signal != 0 {
				time.Sleep(20 * time.Millisecond)
				if err := p.Signal(c.signal); err != nil {
					t.Fatal(err)
				}
			}
			res, _ := p.Wait(context.Background())
			if res.Outcome != c.outcome || res.ExitCode != c.code || res.Signal != c.sig {
				t.Fatalf("got %+v, want %s code %d signal %v", res, c.outcome, c.code, c.sig)
			}
		})
	}
}

// TestConfinedOutcomes runs the limits and confinement of docs/DECISIONS.md, Sandbox
// outcomes for real, in every available mode.
func TestConfinedOutcomes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	outside := t.TempDir() // not the run's work directory
	connect := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected", port)
	// namespaces-cold is the namespaces mode without spare inits (spare.go).
	for _, name := range append(modes(t), "namespaces-cold") {
		t.Run(string(name), func(t *testing.T) {
			mode := name
			if name == "namespaces-cold" {
				sandbox.WithoutSpares(t)
				mode = sandbox.ModeNamespaces
			}
			cases := []struct {
				name    string
				argv    []string
				lim     sandbox.Limits
				network bool
				outcome sandbox.Outcome
				code    int
				sig     syscall.Signal
				wire    wire.Code
				stdout  string
			}{
				{"exit code", []string{"sh", "-c", "exit 3"}, sandbox.Limits{}, false, sandbox.Exited, 3, 0, "", ""},
				{"exit 139 is not a crash", []string{"sh", "-c", "exit 139"}, sandbox.Limits{}, false, sandbox.Exited, 139, 0, "", ""},
				{"writes its work dir", []string{"sh", "-c", "echo hi > f && cat f"}, sandbox.Limits{}, false, sandbox.Exited, 0, 0, "", "hi\n"},
				{"SIGSEGV", []string{"sh", "-c", "kill -SEGV $$"}, sandbox.Limits{}, false, sandbox.Crashed, -1, syscall.SIGSEGV, wire.CodeSandboxCrash, ""},
				{"CPU loop", []string{"sh", "-c", "while :; do :; done"}, sandbox.Limits{CPUTime: time.Second, Timeout: 20 * time.Second}, false, sandbox.Timeout, -1, syscall.SIGXCPU, wire.CodeTimeout, ""},
				{"wall clock", []string{"sleep", "30"}, sandbox.Limits{Timeout: 200 * time.Millisecond}, false, sandbox.Timeout, -1, syscall.SIGKILL, wire.CodeTimeout, ""},
				{"memory", []string{"perl", "-e", `my @a; push @a, "x" x (1<<20) for 1..512; print "survived\n"`}, sandbox.Limits{MemoryBytes: 64 << 20, Timeout: 20 * time.Second}, false, sandbox.OutOfMemory, -1, syscall.SIGKILL, wire.CodeOutOfMemory, ""},
				{"write outside", []string{"sh", "-c", "echo x > " + filepath.Join(outside, "escape")}, sandbox.Limits{}, false, sandbox.Exited, 2, 0, "", ""},
				{"write /etc", []string{"sh", "-c", "echo x > /etc/aep-escape"}, sandbox.Limits{}, false, sandbox.Exited, 2, 0, "", ""},
				{"network", []string{"bash", "-c", connect}, sandbox.Limits{}, false, sandbox.Exited, 1, 0, "", ""},
				{"network allowed", []string{"bash", "-c", connect}, sandbox.Limits{}, true, sandbox.Exited, 0, 0, "", "connected\n"},
				{"descriptors by name", []string{"sh", "-c", "test -L /dev/stdout && test -d /dev/fd/ && echo o"}, sandbox.Limits{}, false, sandbox.Exited, 0, 0, "", "o\n"},
				{"own pid namespace", []string{"sh", "-c", "ps -e -o pid= | wc -l"}, sandbox.Limits{}, false, sandbox.Exited, 0, 0, "", ""},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					work := t.TempDir()
					res, out, errOut := run(t, sandbox.Spec{Argv: c.argv, Dir: work, Sandboxed: true, Mode: mode, Network: c.network, Limits: c.lim})
					if res.Outcome != c.outcome || res.ExitCode != c.code || res.Signal != c.sig {
						t.Fatalf("got %+v (stderr %q), want %s code %d signal %v", res, errOut, c.outcome, c.code, c.sig)
					}
					if c.wire != "" {
						if got := wire.AsError(res.Err()).Code; got != c.wire {
							t.Fatalf("wire code %s, want %s", got, c.wire)
						}
					} else if res.Err() != nil {
						t.Fatalf("unexpected error %v", res.Err())
					}
					if c.stdout != "" && out != c.stdout {
						t.Fatalf("stdout %q, want %q", out, c.stdout)
					}
					if c.name == "own pid namespace" {
						// ps itself, sh, wc and the init (and bwrap's pid 1) at most.
						if n := strings.TrimSpace(out); n == "" || len(n) > 1 {
							t.Fatalf("processes visible in the sandbox: %q", out)
						}
					}
				})
			}
			if _, err := os.Stat(filepath.Join(outside, "escape")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a write outside the work directory reached the host: %v", err)
			}
		})
	}
}

func TestSetupFailureRunsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	work := t.TempDir()
	mark := filepath.Join(work, "ran")
	cases := []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		{"unknown mode", sandbox.Spec{Mode: "docker"}, "unknown sandbox mode"},
		{"no such command", sandbox.Spec{Mode: sandbox.ModeNamespaces, Argv: []string{"/nonexistent/cmd"}}, "starting"},
		{"missing work dir", sandbox.Spec{Mode: sandbox.ModeNamespaces, Dir: "/nonexistent/dir"}, "work directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.spec
			s.Sandboxed = true
			if s.Argv == nil {
				s.Argv = []string{"sh", "-c", "touch " + mark}
			}
			if s.Dir == "" {
				s.Dir = work
			}
			_, err := sandbox.Start(s)
			if !errors.Is(err, sandbox.ErrSetup) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrSetup with %q", err, c.want)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("the command ran")
			}
		})
	}
}

// On a host where no cgroup can be made, confined runs are limited by
// rlimits: memory by RLIMIT_DATA, judged by the out-of-memory heuristic,
// and the other outcomes are as with cgroups.
func TestRlimitFallback(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			sandbox.WithoutCgroups(t)
			cases := []struct {
				name    string
				argv    []string
				lim     sandbox.Limits
				outcome sandbox.Outcome
				wire    wire.Code
				stdout  string
			}{
				{"within the limit", []string{"perl", "-e", `my $s = "x" x (8<<20); print "ok\n"`}, sandbox.Limits{MemoryBytes: 256 << 20, Timeout: 20 * time.Second}, sandbox.Exited, "", "ok\n"},
				{"over the limit", []string{"perl", "-e", `my @a; push @a, "x" x (1<<20) for 1..512; print "survived\n"`}, sandbox.Limits{MemoryBytes: 64 << 20, Timeout: 20 * time.Second}, sandbox.OutOfMemory, wire.CodeOutOfMemory, ""},
				{"plain failure is not memory", []string{"sh", "-c", "exit 3"}, sandbox.Limits{MemoryBytes: 64 << 20}, sandbox.Exited, "", ""},
				{"CPU", []string{"sh", "-c", "while :; do :; done"}, sandbox.Limits{CPUTime: time.Second, MemoryBytes: 64 << 20, Timeout: 20 * time.Second}, sandbox.Timeout, wire.CodeTimeout, ""},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					res, out, errOut := run(t, sandbox.Spec{Argv: c.argv, Dir: t.TempDir(), Sandboxed: true, Mode: mode, Limits: c.lim})
					if res.Outcome != c.outcome {
						t.Fatalf("got %+v (stderr %q), want %s", res, errOut, c.outcome)
					}
					if c.wire != "" {
						if got := wire.AsError(res.Err()).Code; got != c.wire {
							t.Fatalf("wire code %s, want %s", got, c.wire)
						}
					}
					if c.stdout != "" && out != c.stdout {
						t.Fatalf("stdout %q, want %q", out, c.stdout)
					}
				})
			}
		})
	}
}

// The rlimit fallback's out-of-memory verdict (docs/DECISIONS.md, Sandbox):
// only an abnormal end counts, and then a peak RSS of half the limit or a
// runtime's own out-of-memory words.
func TestMemoryFailureVerdict(t *testing.T) {
	const limit = 64 << 20
	tests := []struct {
		name         string
		signal, exit int
		rss          int64
		tail         string
		want         bool
	}{
		{"clean exit at high RSS", 0, 0, limit, "", false},
		{"clean exit with the words", 0, 0, 0, "Out of memory!", false},
		{"exit 1 near the limit", 0, 1, limit / 2, "", true},
		{"exit 1 small, no words", 0, 1, limit / 8, "some error", false},
		{"perl", 0, 1, 0, "Out of memory!\n", true},
		{"python", 0, 1, 0, "Traceback...\nMemoryError\n", true},
		{"glibc", 0, 1, 0, "mmap: Cannot allocate memory", true},
		{"c++", int(syscall.SIGABRT), 0, 0, "terminate called after throwing an instance of 'std::bad_alloc'", true},
		{"go", 0, 2, 0, "fatal error: runtime: out of memory", true},
		{"signal without signs", int(syscall.SIGSEGV), 0, 1 << 20, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandbox.MemoryFailure(tc.signal, tc.exit, tc.rss, limit, tc.tail); got != tc.want {
				t.Fatalf("MemoryFailure = %v, want %v", got, tc.want)
			}
		})
	}
}
