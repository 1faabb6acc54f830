package sandbox

import "testing"

// WithoutCgroups makes confined runs of the test behave as on a host where
// no cgroup can be made, so the rlimit fallbacks are what limits them.
func WithoutCgroups(t testing.TB) {
	saved := findLayout()
	hostLayout = layout{why: "disabled by the test"}
	t.Cleanup(func() { hostLayout = saved })
}

// MemoryFailure exposes the rlimit fallback's out-of-memory verdict.
func MemoryFailure(signal, exit int, maxRSS, limit int64, stderrTail string) bool {
	return memoryFailure(&report{Signal: signal, Exit: exit, MaxRSS: maxRSS}, limit, stderrTail)
}
