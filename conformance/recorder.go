package conformance

import (
	"sync"
	"testing"
)

// Recorder checks the lines a test sees cross a transport and fails the test
// on each violation. Its methods may be called from any goroutine, such as a
// transport's reader and writer loops; they check the line before returning
// and keep no reference to it, so a caller may reuse its buffer.
//
// Lines handed over after the test has finished (by goroutines still
// draining a transport) are not checked: testing.TB cannot report them.
type Recorder struct {
	tb      testing.TB
	checker *Checker

	mu         sync.Mutex
	done       bool
	host       int
	agent      int
	violations []error
}

// NewRecorder returns a Recorder checking lines against the schemas/ of this
// module (see [SchemaDir]), compiled once per process. It stops the test at
// once if the schemas cannot be loaded, so it must be called from the test's
// goroutine.
func NewRecorder(tb testing.TB) *Recorder {
	tb.Helper()
	c, err := moduleChecker()
	if err != nil {
		tb.Fatalf("conformance: %v", err)
	}
	return NewRecorderFor(tb, c)
}

// NewRecorderFor returns a Recorder checking lines with c.
func NewRecorderFor(tb testing.TB, c *Checker) *Recorder {
	r := &Recorder{tb: tb, checker: c}
	tb.Cleanup(func() {
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
	})
	return r
}

// Host checks a line the host sent and fails the test if it does not
// conform.
func (r *Recorder) Host(line []byte) { r.record(true, line) }

// Agent checks a line an agent sent and fails the test if it does not
// conform.
func (r *Recorder) Agent(line []byte) { r.record(false, line) }

func (r *Recorder) record(host bool, line []byte) {
	var err error
	if host {
		err = r.checker.CheckHostLine(line)
	} else {
		err = r.checker.CheckAgentLine(line)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	if host {
		r.host++
	} else {
		r.agent++
	}
	if err == nil {
		return
	}
	r.violations = append(r.violations, err)
	from := "agent"
	if host {
		from = "host"
	}
	// Errorf, not Fatalf: this may run on a transport goroutine.
	r.tb.Errorf("%s line %s\n\t%v", from, truncate(line, 512), err)
}

// Counts returns how many host and agent lines were checked, so a test can
// make sure its transport was wired to the Recorder at all.
func (r *Recorder) Counts() (host, agent int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.host, r.agent
}

// Violations returns the violations found so far.
func (r *Recorder) Violations() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.violations...)
}

func truncate(line []byte, n int) string {
	if len(line) <= n {
		return string(line)
	}
	return string(line[:n]) + "…"
}

var module struct {
	once    sync.Once
	checker *Checker
	err     error
}

// moduleChecker compiles schemas/ of this module once per process: test
// binaries create many Recorders.
func moduleChecker() (*Checker, error) {
	module.once.Do(func() {
		dir, err := SchemaDir()
		if err != nil {
			module.err = err
			return
		}
		module.checker, module.err = Load(dir)
	})
	return module.checker, module.err
}
