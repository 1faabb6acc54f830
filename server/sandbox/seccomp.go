package sandbox

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/aephost/aep/server/sandbox/initproc"
)

// The system-call filter of every contained run (docs/SECURITY.md,
// Network). It is assembled here, in the host, from a policy
// (github.com/elastic/go-seccomp-bpf, pure Go), and handed to the run as
// raw BPF: in tiers namespaces and supervised the init installs it on the
// thread it forks the command from, after no_new_privs; in the bwrap tier
// bubblewrap installs it (--seccomp) before it starts the init. The init
// itself then imports nothing more than the system call.
//
// It refuses, unless the run was granted network:
//   - socket(2) and socketpair(2) of every family but AF_UNIX (EPERM);
//
// and always:
//   - io_uring_setup, io_uring_enter and io_uring_register (ENOSYS):
//     io_uring can make sockets without socket(2);
//   - clone3 (ENOSYS): its flags are in memory a filter cannot read, so
//     libc falls back to clone, whose flags it can;
//   - unshare(2) and clone(2) with CLONE_NEWUSER (EPERM), unless the
//     operator allows user namespaces (server.isolation.allow_user_namespaces):
//     a user namespace would hand the command the kernel's namespace
//     attack surface as "root";
//   - ptrace and process_vm_readv/writev (EPERM) in the supervised tier
//     without Landlock, where a command runs as the host's uid and nothing
//     else keeps it from tracing the host;
//   - every system call of another architecture's table (the 32-bit i386
//     ABI through int 0x80, x32), which would bypass the rules above (ENOSYS).

// filterKey names one variant of the filter.
type filterKey struct {
	network, userNS, noPtrace bool
}

var (
	filtersMu sync.Mutex
	filters   = map[filterKey][]byte{}
)

// filterFor returns the raw filter (struct sock_filter[]) of a run.
func filterFor(k filterKey) ([]byte, error) {
	filtersMu.Lock()
	defer filtersMu.Unlock()
	if f, ok := filters[k]; ok {
		return f, nil
	}
	f, err := assembleFilter(k)
	if err != nil {
		return nil, err
	}
	filters[k] = f
	return f, nil
}

func assembleFilter(k filterKey) ([]byte, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	errno := func(e syscall.Errno) seccomp.Action { return seccomp.ActionErrno | seccomp.Action(e) }
	groups := []seccomp.SyscallGroup{
		{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"}, Action: errno(syscall.ENOSYS)},
	}
	if !k.network {
		groups = append(groups, seccomp.SyscallGroup{Action: errno(syscall.EPERM), NamesWithCondtions: []seccomp.NameWithConditions{
			{Name: "socket", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
			{Name: "socketpair", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
		}})
	}
	if !k.userNS {
		groups = append(groups, seccomp.SyscallGroup{Action: errno(syscall.EPERM), NamesWithCondtions: []seccomp.NameWithConditions{
			{Name: "unshare", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
			{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
		}})
	}
	if k.noPtrace {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"ptrace", "process_vm_readv", "process_vm_writev"}, Action: errno(syscall.EPERM)})
	}
	policy := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	prog, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// The library lets a system call of another architecture through (its
	// jump goes to the default action): refuse those first.
	const archOffset, nrOffset = 4, 0
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(errno(syscall.ENOSYS))},
	}
	_ = nrOffset
	raw, err := bpf.Assemble(append(guard, prog...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}

// userNamespaces is server.isolation.allow_user_namespaces, set by the
// host at start ([AllowUserNamespaces]).
var userNamespaces atomic.Bool

// AllowUserNamespaces lets contained commands make user namespaces (some
// workloads, such as a browser's own sandbox, need them); off by default.
// It is the host's setting, for every run this process starts.
func AllowUserNamespaces(allow bool) { userNamespaces.Store(allow) }

var (
	seccompOnce sync.Once
	seccompOK   bool
)

// SeccompAvailable reports whether the kernel installs seccomp filters.
// Where it does not, a run that was not granted network does not run:
// nothing else keeps it off the network in the supervised tier.
func SeccompAvailable() bool {
	seccompOnce.Do(func() { seccompOK = initproc.SeccompAvailable() })
	return seccompOK
}

// DescribeNetwork says, for the start-up log, what keeps a run of mode m
// that was not granted network off it.
func DescribeNetwork(m Mode) string {
	mech, err := Mechanism(m)
	if err != nil {
		return "none: " + err.Error()
	}
	if !SeccompAvailable() {
		return "none: the kernel has no seccomp; runs not granted network are refused"
	}
	what := "seccomp (socket families but AF_UNIX, io_uring)"
	switch {
	case TierOf(mech) == TierNamespaces:
		what += " and an empty network namespace"
	case initproc.LandlockABI() >= 4:
		what += " and Landlock TCP rules"
	}
	return what
}

// SealInheritedFDs marks every descriptor of this process above the
// standard streams close-on-exec: one the host inherited from its own
// parent must reach no command (a Go program's own are close-on-exec
// already).
func SealInheritedFDs() { initproc.CloseOthersOnExec() }
