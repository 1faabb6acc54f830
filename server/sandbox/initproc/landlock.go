package initproc

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Landlock confines the paths a tier (b) command can open without any
// privilege (Linux 5.13 and later): read and execute below [SystemPaths]
// and the caller's read-only paths, everything below the work directory,
// nothing else (not the data dir, the store, a config file, /proc of the
// host). From ABI 6 it also scopes signals and abstract unix sockets to
// the sandbox, so a command cannot signal the host.

const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446

	llExecute    = 1 << 0
	llWriteFile  = 1 << 1
	llReadFile   = 1 << 2
	llReadDir    = 1 << 3
	llRefer      = 1 << 13
	llTruncate   = 1 << 14
	llIoctlDev   = 1 << 15
	llScopeAll   = 1<<0 | 1<<1
	llBindTCP    = 1 << 0
	llConnectTCP = 1 << 1
	llRuleBelow  = 1
	llVersionFlg = 1
	oPath        = 0x200000 // O_PATH
)

var (
	llOnce sync.Once
	llABI  int
)

// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func LandlockABI() int {
	llOnce.Do(func() {
		r, _, e := syscall.RawSyscall(sysLandlockCreateRuleset, 0, 0, llVersionFlg)
		if e == 0 {
			llABI = int(r)
		}
	})
	return llABI
}

// handledFS is every file-system right the ABI knows.
func handledFS(abi int) uint64 {
	h := uint64(1<<13 - 1)
	if abi >= 2 {
		h |= llRefer
	}
	if abi >= 3 {
		h |= llTruncate
	}
	if abi >= 5 {
		h |= llIoctlDev
	}
	return h
}

// landlock restricts the calling thread (and what it forks afterwards):
// ro paths readable and executable, rw paths fully usable. Paths that do
// not exist are skipped. It needs no_new_privs, which it sets.
func landlock(ro, rw []string, noNetwork bool) error {
	abi := LandlockABI()
	if abi == 0 {
		return nil
	}
	handled := handledFS(abi)
	attr := struct{ fs, net, scoped uint64 }{fs: handled}
	size := uintptr(8)
	if abi >= 4 {
		size = 16
		if noNetwork {
			// TCP bind and connect handled, with no rule allowing any.
			attr.net = llBindTCP | llConnectTCP
		}
	}
	if abi >= 6 {
		attr.scoped, size = llScopeAll, 24
	}
	fd, _, e := syscall.RawSyscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer syscall.Close(int(fd))
	fileRights := uint64(llExecute | llWriteFile | llReadFile)
	if abi >= 3 {
		fileRights |= llTruncate
	}
	if abi >= 5 {
		fileRights |= llIoctlDev
	}
	add := func(p string, access uint64) error {
		fi, err := os.Stat(p)
		if err != nil {
			return nil
		}
		if !fi.IsDir() {
			access &= fileRights
		}
		f, err := os.OpenFile(p, os.O_RDONLY|oPath|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil
		}
		defer f.Close()
		rule := struct {
			allowed uint64
			fd      int32
		}{access, int32(f.Fd())}
		// struct landlock_path_beneath_attr is packed: 12 bytes.
		buf := (*[12]byte)(unsafe.Pointer(&rule))
		if _, _, e := syscall.RawSyscall6(sysLandlockAddRule, fd, llRuleBelow, uintptr(unsafe.Pointer(&buf[0])), 0, 0, 0); e != 0 {
			return fmt.Errorf("landlock rule for %s: %w", p, e)
		}
		return nil
	}
	for _, p := range ro {
		if err := add(p, llExecute|llReadFile|llReadDir); err != nil {
			return err
		}
	}
	for _, p := range rw {
		if err := add(p, handled); err != nil {
			return err
		}
	}
	for _, dev := range []string{"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"} {
		if err := add(dev, llReadFile|llWriteFile); err != nil {
			return err
		}
	}
	const prSetNoNewPrivs = 38
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); e != 0 {
		return fmt.Errorf("no_new_privs: %w", e)
	}
	if _, _, e := syscall.RawSyscall(sysLandlockRestrictSelf, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}
