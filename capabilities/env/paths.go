package env

import (
	"fmt"

	"github.com/aephost/aep/internal/confine"
)

// ErrPath marks a wire path that would leave its root (docs/DECISIONS.md, State: every
// wire path is confined to its root).
var ErrPath = confine.ErrPath

// cleanRel checks a relative wire path that must name something below its
// root, not the root itself. Symlinks are refused separately: every file
// access goes through an os.Root.
func cleanRel(field, p string) (string, error) {
	c, err := confine.Rel(field, p)
	if err == nil && c == "." {
		return "", fmt.Errorf("%s %q names the root itself: %w", field, p, ErrPath)
	}
	return c, err
}

var (
	within  = confine.Within
	rootErr = confine.RootError
)
