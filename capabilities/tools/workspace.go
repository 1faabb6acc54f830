package tools

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aephost/aep/internal/confine"
)

// workspace confines file access to one directory. Paths from the wire are
// checked before use (docs/DECISIONS.md, State: no `..`, absolute paths or NUL bytes),
// and every access goes through an os.Root, which also refuses symlinks that
// lead out of the directory.
type workspace struct {
	dir  string // absolute path of the root
	root *os.Root
}

// ErrPath is the cause of a path that is not allowed in the workspace.
var ErrPath = confine.ErrPath

func openWorkspace(dir string) (*workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	r, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &workspace{dir: abs, root: r}, nil
}

// cleanPath checks a wire path and returns it relative to the root; an
// empty path means the root itself (".").
func cleanPath(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	return confine.Rel("path", p)
}

// real returns the host path of a checked relative directory, resolved
// inside the workspace (for a command's working directory, which the OS
// opens itself).
func (w *workspace) real(rel string) (string, error) {
	return confine.Dir(w.dir, "cwd", rel)
}
