package initproc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Children lists the pids whose parent is ppid.
func Children(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses and may hold anything.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 {
			if pp, _ := strconv.Atoi(f[1]); pp == ppid {
				out = append(out, pid)
			}
		}
	}
	return out
}

// sweepOwn ends every descendant of the calling process (the init, which
// is their subreaper) and reaps them, until none is left.
func sweepOwn() {
	self := os.Getpid()
	for round := 0; round < 200; round++ {
		kids := Children(self)
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range kids {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
}

// endNamespace ends every other process of the calling init's PID
// namespace, whose pid 1 it is (kill(-1) there reaches them all, and
// nothing leaves a PID namespace), reaps them until none is left, and
// points the init's stderr at /dev/null, so that once the command's
// processes are gone nothing holds the run's output pipes. It says
// whether all of that was done.
func endNamespace() bool {
	for {
		_ = syscall.Kill(-1, syscall.SIGKILL)
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err == syscall.ECHILD {
			break
		}
	}
	null, err := syscall.Open("/dev/null", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(null)
	return syscall.Dup3(null, 2, 0) == nil
}
