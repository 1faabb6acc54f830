package initproc

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

const (
	seccompSetModeFilter   = 1
	seccompGetActionAvail  = 2
	seccompRetErrno        = 0x00050000
	prSetNoNewPrivsSeccomp = 38
)

// SeccompAvailable reports whether the kernel installs seccomp filters
// that return an errno.
func SeccompAvailable() bool {
	action := uint32(seccompRetErrno)
	_, _, e := syscall.RawSyscall(sysSeccomp, seccompGetActionAvail, 0, uintptr(unsafe.Pointer(&action)))
	return e == 0
}

// installSeccomp installs raw (struct sock_filter[]) on the calling
// thread, which the command is forked from. The filter was assembled by
// the host (server/sandbox/seccomp.go); no_new_privs, which seccomp
// requires of an unprivileged thread, is set first.
func installSeccomp(raw []byte) error {
	if len(raw) == 0 || len(raw)%8 != 0 || len(raw)/8 > 4096 {
		return errors.New("malformed filter")
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivsSeccomp, 1, 0); e != 0 {
		return e
	}
	prog := struct {
		len    uint16
		filter unsafe.Pointer
	}{uint16(len(raw) / 8), unsafe.Pointer(&raw[0])}
	if _, _, e := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return e
	}
	return nil
}

// CloseOthersOnExec marks every descriptor above the standard streams
// close-on-exec, so that only what a run passes on purpose (syscall's
// Files) reaches the command.
func CloseOthersOnExec() {
	const closeRangeCloexec = 1 << 2
	if _, _, e := syscall.RawSyscall(sysCloseRange, 3, ^uintptr(0)>>1, closeRangeCloexec); e == 0 {
		return
	}
	// Kernels before 5.11: one by one.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
