// Package confine checks paths that arrive on the wire against the rule of
// docs/DECISIONS.md, State: every wire path is confined to its root — no `..`, absolute
// paths, symlink escapes or NUL bytes, and no sibling directory that merely
// shares the root's name as a prefix. Capabilities check the path's form
// with Rel, then reach files through an os.Root (which refuses symlinks out
// of it; RootError words that refusal), and resolve directories that the OS
// opens itself (a command's working directory) with Dir.
package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/aephost/aep/wire"
)

// ErrPath is the cause of every refused path. It wraps wire.ErrInvalid, so
// a refusal that reaches the wire is a schema_violation.
var ErrPath = fmt.Errorf("path refused: %w", wire.ErrInvalid)

// Rel checks the form of a relative wire path named field and returns it
// cleaned, with `/` separators; "." means the root itself. An empty path is
// refused: callers that mean the root by it say so before calling.
func Rel(field, p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%s is empty: %w", field, ErrPath)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%s %q contains a NUL byte: %w", field, p, ErrPath)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) || filepath.IsAbs(p) || filepath.VolumeName(p) != "":
		return "", fmt.Errorf("%s %q is absolute; give a path relative to the root: %w", field, p, ErrPath)
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return "", fmt.Errorf("%s %q contains \"..\": %w", field, p, ErrPath)
		}
	}
	return path.Clean(strings.ReplaceAll(p, `\`, "/")), nil
}

// Within reports whether dir is root or inside it, comparing whole path
// elements: /data/s10 is not inside /data/s1.
func Within(root, dir string) bool {
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return false
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)))
}

// RootError words os.Root's refusal of a path that escapes through a
// symbolic link as a refusal of the wire path; other errors pass through.
func RootError(field, p string, err error) error {
	if err != nil && strings.Contains(err.Error(), "escapes from parent") {
		return fmt.Errorf("%s %q leaves its root through a symbolic link: %w", field, p, ErrPath)
	}
	return err
}

// Dir resolves rel, already checked by Rel, to an existing directory inside
// root, following symbolic links only while they stay inside. It is for a
// directory the OS opens by name (a command's working directory), where an
// os.Root cannot stand guard.
func Dir(root, field, rel string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("root of %s: %w", field, err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(realRoot, filepath.FromSlash(rel)))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s %q does not exist: %w", field, rel, ErrPath)
	}
	if err != nil {
		// Whatever else stops the path resolving (a file used as a
		// directory, a symbolic link loop, a name too long) is the path's
		// fault too: refused as a schema_violation, not passed through to
		// become a retryable runtime_error (found by FuzzDir). Only the
		// OS's reason is kept; the host path it names stays off the wire.
		return "", fmt.Errorf("%s %q cannot be resolved (%s): %w", field, rel, osReason(err), ErrPath)
	}
	if !Within(realRoot, real) {
		return "", fmt.Errorf("%s %q leaves its root through a symbolic link: %w", field, rel, ErrPath)
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%s %q is not a directory: %w", field, rel, ErrPath)
	}
	return real, nil
}

// osReason is the OS's reason for err without the path a *fs.PathError names.
func osReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
