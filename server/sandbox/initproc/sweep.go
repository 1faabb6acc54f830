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
