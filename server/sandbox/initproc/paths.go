package initproc

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// under is p (absolute) below root: p is cleaned as a rooted path first,
// so no ".." in it leads out of root.
func under(root, p string) string {
	var kept []string
	for _, e := range strings.Split(p, "/") {
		switch e {
		case "", ".":
		case "..":
			if len(kept) > 0 {
				kept = kept[:len(kept)-1]
			}
		default:
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return root
	}
	return strings.TrimSuffix(root, "/") + "/" + strings.Join(kept, "/")
}

// parent is the directory holding p.
func parent(p string) string {
	i := strings.LastIndexByte(strings.TrimSuffix(p, "/"), '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

var (
	errNotFound = errors.New("executable file not found in $PATH")
	errDot      = errors.New("cannot run executable found relative to current directory")
)

// lookPath finds the program of argv[0] as os/exec does: a name with a
// slash is used as it is (relative to the working directory); any other
// is looked up in the directories of $PATH (the command's environment is
// the init's by now), and one found through a relative entry of $PATH is
// refused.
func lookPath(file string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := os.Getenv("PATH")
	if path == "" {
		// No directory at all, as os/exec's filepath.SplitList has it,
		// not the working directory an empty entry of a longer $PATH
		// stands for: a program missing there is not found, rather than
		// refused as found relative to the working directory.
		return "", errNotFound
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + file
		if strings.HasPrefix(dir, "/") {
			// Cleaned as os/exec's filepath.Join cleans it: this is the
			// path that is checked and run, and the command's argv[0]
			// when its first step execs it ("/usr/bin//sh" or
			// "/opt/x/../bin/sh" is not).
			p = under("/", p)
		}
		if executable(p) == nil {
			if !strings.HasPrefix(dir, "/") {
				return "", errDot
			}
			return p, nil
		}
	}
	return "", errNotFound
}

// executable is os/exec's findExecutable: the kernel's own check for this
// process's effective ids, which also refuses a file on a noexec mount or
// one only another uid may run, and the mode bits only where that check is
// not available (ENOSYS) or filtered (EPERM).
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	m := fi.Mode()
	if m.IsDir() {
		return syscall.EISDIR
	}
	const (
		atFDCWD   = -100  // AT_FDCWD
		atEAccess = 0x200 // AT_EACCESS
		xOK       = 1     // X_OK
	)
	err = syscall.Faccessat(atFDCWD, p, xOK, atEAccess)
	if err == nil || (err != syscall.ENOSYS && err != syscall.EPERM) {
		return err
	}
	if m&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// wait reaps pid and gives how it ended and what it used.
func wait(pid int) (syscall.WaitStatus, syscall.Rusage) {
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		_, err := syscall.Wait4(pid, &ws, 0, &ru)
		if err != syscall.EINTR {
			return ws, ru
		}
	}
}
