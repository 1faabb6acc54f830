package persist

// Putting a snapshot's files in place: extracted beside the session
// directory they replace, then swapped in by rename, so a restore or a
// fork either gets every file of the archive or changes nothing.

import (
	"fmt"
	"os"
	"path/filepath"
)

// stagedFiles is an archive extracted beside the session directory it
// is to replace (stageFiles): commit puts it in place, discard drops it.
type stagedFiles struct {
	dir, stage string
	bytes      int64
	entries    int
	// leftover is why the replaced directory could not be removed after
	// a commit (logged; the restore stands).
	leftover error
}

// stageFiles extracts archive into a fresh directory beside dir (on the
// same file system, so that it can take dir's place by rename); on error
// nothing is left behind and dir is untouched.
func stageFiles(archive []byte, dir string, lim filesLimits) (*stagedFiles, error) {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(parent, ".restore-")
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(stage)
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	n, entries, err := extractArchive(archive, root, lim)
	root.Close()
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	return &stagedFiles{dir: dir, stage: stage, bytes: n, entries: entries}, nil
}

// discard removes the staged files.
func (sf *stagedFiles) discard() { os.RemoveAll(sf.stage) }

// commit replaces the session directory with the staged files: two
// renames, the old directory aside and the new one in its place; if the
// second fails the old one is put back. A process still writing in the
// old directory writes into the copy set aside, which is then removed.
func (sf *stagedFiles) commit() error {
	old := ""
	if _, err := os.Lstat(sf.dir); err == nil {
		old = sf.stage + ".old"
		if err := os.Rename(sf.dir, old); err != nil {
			sf.discard()
			return err
		}
	}
	if err := os.Rename(sf.stage, sf.dir); err != nil {
		sf.discard()
		if old != "" {
			if rerr := os.Rename(old, sf.dir); rerr != nil {
				return fmt.Errorf("%w; putting the old directory back also failed: %v", err, rerr)
			}
		}
		return err
	}
	if old != "" {
		sf.leftover = os.RemoveAll(old)
	}
	return nil
}
