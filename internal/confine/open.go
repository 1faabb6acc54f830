package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/aephost/aep/wire"
)

// ErrNotRegular is the cause of an open of a FIFO, socket or device: the
// host opens only regular files and directories of an agent's, so nothing
// an agent plants (mkfifo by a command) can hold a host thread in open(2).
var ErrNotRegular = fmt.Errorf("not a regular file or directory: %w", wire.ErrInvalid)

// nonBlocking are the flags every host-side open adds: a FIFO opens at
// once (or refuses a writer with ENXIO), and no terminal becomes the
// host's.
const nonBlocking = syscall.O_NONBLOCK | syscall.O_NOCTTY

// Open opens name below root for the host, never blocking on what it
// finds: the open is non-blocking, and anything but a regular file or a
// directory is closed and refused with [ErrNotRegular] before the caller
// reads or writes it. flag and perm are os.OpenFile's; symlinks resolve
// inside root, as os.Root has them.
func Open(root *os.Root, name string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := root.OpenFile(name, flag|nonBlocking, perm)
	return regularOnly(name, f, err)
}

// OpenPath is [Open] for a host path the caller already confined (a walk
// below a session directory); a symlink as its last element is refused.
func OpenPath(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|nonBlocking|syscall.O_NOFOLLOW, perm)
	return regularOnly(path, f, err)
}

func regularOnly(name string, f *os.File, err error) (*os.File, error) {
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			// A FIFO with no reader, or a socket: neither is a file.
			return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() && !m.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
	}
	return f, nil
}
