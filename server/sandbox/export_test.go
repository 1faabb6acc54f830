package sandbox

import (
	"testing"
	"time"
)

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

// WithoutSpares makes every confined run of the test start cold.
func WithoutSpares(t testing.TB) {
	sparesDisabled.Store(true)
	t.Cleanup(func() { sparesDisabled.Store(false) })
}

// WaitSpare makes a spare init ready and waits until it is.
func WaitSpare(t testing.TB) {
	t.Helper()
	Prewarm(ModeNamespaces)
	for i := 0; i < 1000 && len(spares.pool) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if len(spares.pool) == 0 {
		t.Fatal("no spare init became ready")
	}
}

// SetSpareRefillDelay changes how long a run on a spare runs before the
// next spare is made anyway.
func SetSpareRefillDelay(t testing.TB, d time.Duration) {
	saved := spareRefillDelay
	spareRefillDelay = d
	t.Cleanup(func() { spareRefillDelay = saved })
}

// Spares tells how many spares are ready and whether one is being made.
func Spares() (ready int, making bool) {
	return len(spares.pool), spares.making.Load()
}

// EndedOnReport is how many runs so far had their result on the init's
// report that its PID namespace is empty, before the init's exit.
func EndedOnReport() int64 { return endedOnReport.Load() }

// WithoutSeccomp makes confined runs of the test behave as on a kernel
// that installs no seccomp filter.
func WithoutSeccomp(t testing.TB) {
	SeccompAvailable()
	seccompOK = false
	t.Cleanup(func() { seccompOK = true })
}
