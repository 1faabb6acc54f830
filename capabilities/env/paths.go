package env

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/aephost/aep/wire"
)

// ErrPath marks a wire path that would leave its root (DESIGN State: every
// wire path is confined to its root).
var ErrPath = fmt.Errorf("path refused: %w", wire.ErrInvalid)

// cleanRel checks a relative wire path syntactically and returns it cleaned,
// with `/` separators. Symlinks are refused separately: every file access
// goes through an os.Root, which will not follow a link out of its root.
func cleanRel(field, p string) (string, error) {
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
	c := path.Clean(strings.ReplaceAll(p, `\`, "/"))
	if c == "." {
		return "", fmt.Errorf("%s %q names the root itself: %w", field, p, ErrPath)
	}
	return c, nil
}

// within reports whether dir is inside root or is root, comparing whole path
// elements: /data/s10 is not inside /data/s1.
func within(root, dir string) bool {
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return false
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)))
}

// rootErr rewrites os.Root's escape errors into a clear refusal.
func rootErr(field, p string, err error) error {
	if err != nil && strings.Contains(err.Error(), "escapes from parent") {
		return fmt.Errorf("%s %q leaves its root through a symbolic link: %w", field, p, ErrPath)
	}
	return err
}
