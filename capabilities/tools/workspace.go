package tools

import (
	"context"
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
	dir      string // absolute path of the root
	root     *os.Root
	readOnly bool              // a restricted subagent's view of its parent's files
	quota    func(int64) error // may n more bytes be written (nil: no bound)
}

type wsKey struct{}

// wsOf is the workspace of the call's session, put in its context by ToolCall.
func wsOf(ctx context.Context) *workspace { return ctx.Value(wsKey{}).(*workspace) }

// check refuses a write of n bytes to a read-only or full workspace.
func (w *workspace) check(n int64) error {
	if w.readOnly {
		return fmt.Errorf("%w: the workspace is read-only for this session", ErrPath)
	}
	if w.quota != nil {
		return w.quota(n)
	}
	return nil
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
