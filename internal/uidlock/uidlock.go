// Package uidlock serialises tests, across test binaries, that run
// processes as one unprivileged uid. RLIMIT_NPROC counts every process of a
// uid machine-wide, so a fork-bomb test as uid 65534 in one package would
// spend the allowance of another package's test running as 65534 at the
// same time (go test runs packages in parallel).
package uidlock

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

var (
	mu   sync.Mutex
	held = map[int]*holder{} // per uid: this process's hold, shared by its tests
)

type holder struct {
	f     *os.File
	count int
}

// Hold takes the machine-wide lock of uid for the rest of tb, waiting for
// any other test binary that holds it. Tests of one binary share the hold
// (a test may start several hosts as the uid), so it never waits on itself.
func Hold(tb testing.TB, uid int) {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	h := held[uid]
	if h == nil {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("aep-test-uid-%d.lock", uid))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			tb.Fatalf("uid lock: %v", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			tb.Fatalf("uid lock: %v", err)
		}
		h = &holder{f: f}
		held[uid] = h
	}
	h.count++
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if h.count--; h.count == 0 {
			_ = syscall.Flock(int(h.f.Fd()), syscall.LOCK_UN)
			h.f.Close()
			delete(held, uid)
		}
	})
}

// Main takes the machine-wide locks of uids for a whole test binary, from
// its TestMain; the returned function releases them.
func Main(uids ...int) (release func()) {
	var files []*os.File
	for _, uid := range uids {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("aep-test-uid-%d.lock", uid))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			continue // not root, or no temp dir: the tests that need the uid skip
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			continue
		}
		files = append(files, f)
	}
	return func() {
		for _, f := range files {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
		}
	}
}
