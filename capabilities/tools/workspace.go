package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// workspace confines file access to one directory. Paths from the wire are
// checked before use (DESIGN State: no `..`, absolute paths or NUL bytes),
// and every access goes through an os.Root, which also refuses symlinks that
// lead out of the directory.
type workspace struct {
	dir  string // absolute path of the root
	root *os.Root
}

// ErrPath is the cause of a path that is not allowed in the workspace.
var ErrPath = errors.New("path not allowed")

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

// clean checks a wire path and returns it relative to the root ("." for the
// root itself). A sibling such as "../ws2" of root "ws" is refused by the
// `..` rule before any prefix comparison could be fooled by it.
func cleanPath(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrPath, p)
	}
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
		return "", fmt.Errorf("%w: %q is absolute; paths are relative to the workspace", ErrPath, p)
	}
	for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return "", fmt.Errorf("%w: %q contains \"..\"", ErrPath, p)
		}
	}
	return filepath.Clean(p), nil
}

// real returns the host path of a checked relative path after making sure,
// through the os.Root, that it resolves inside the workspace (for a command's
// working directory, which the OS opens itself).
func (w *workspace) real(rel string) (string, error) {
	fi, err := w.root.Stat(rel)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrPath, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %q is not a directory", ErrPath, rel)
	}
	return filepath.Join(w.dir, rel), nil
}
