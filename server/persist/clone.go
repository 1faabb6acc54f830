package persist

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/confine"
)

// cloneTree copies the directories and regular files of src into dst,
// each file as a copy-on-write clone (FICLONE) where the file system
// allows, else byte by byte; it reports "reflink" when every file was
// cloned and "copy" when any was copied. Symbolic links are neither
// followed nor copied (they could name files outside the directory), as
// in copyTree.
func cloneTree(src, dst string) (msg.SessionForkRespCopy, error) {
	root, err := os.OpenRoot(src)
	if err != nil {
		return "", err
	}
	defer root.Close()
	mode := msg.SessionForkRespCopyReflink
	files := 0
	err = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dst, p)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o700)
		case e.Type().IsRegular():
			files++
			cloned, err := cloneFile(root, p, target)
			if errors.Is(err, confine.ErrNotRegular) {
				return nil // a FIFO by now: not copied, as one found by the walk
			}
			if err != nil {
				return err
			}
			if !cloned {
				mode = msg.SessionForkRespCopyCopy
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if files == 0 {
		return msg.SessionForkRespCopyNone, nil
	}
	return mode, nil
}

// cloneFile makes target a clone of root's file p, or a copy when the file
// system cannot clone (no reflinks, another device); it reports which.
func cloneFile(root *os.Root, p, target string) (bool, error) {
	in, err := confine.Open(root, p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return false, err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err == nil {
		return true, out.Close()
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, err
	}
	return false, out.Close()
}
