package toolkits

import "github.com/aephost/aep/server/sandbox"

// SetPathsConfined replaces the check of whether the sandbox confines
// paths, to play a host whose tier cannot (the supervised tier without
// Landlock); the returned func restores it.
func SetPathsConfined(f func(sandbox.Mode) (bool, error)) (restore func()) {
	old := pathsConfined
	pathsConfined = f
	return func() { pathsConfined = old }
}
