package server_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/aephost/aep/conformance"
)

var hostChecker struct {
	once sync.Once
	c    *conformance.Checker
	err  error
}

// checker compiles the module's schemas/ together with the echo test
// namespace's schema, which the kernel tests' hosts also speak.
func checker(t testing.TB) *conformance.Checker {
	t.Helper()
	hostChecker.once.Do(func() {
		dir, err := conformance.SchemaDir()
		if err != nil {
			hostChecker.err = err
			return
		}
		fsys := fstest.MapFS{}
		for _, d := range []string{dir, filepath.Join("..", "internal", "testproto", "schemas")} {
			files, err := filepath.Glob(filepath.Join(d, "*.json"))
			if err != nil {
				hostChecker.err = err
				return
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					hostChecker.err = err
					return
				}
				fsys[filepath.Base(f)] = &fstest.MapFile{Data: b}
			}
		}
		hostChecker.c, hostChecker.err = conformance.LoadFS(fsys)
	})
	if hostChecker.err != nil {
		t.Fatalf("conformance: %v", hostChecker.err)
	}
	return hostChecker.c
}

// checkHostLine checks one line the host sent against the JSON Schemas with
// the conformance kit (issue 2: every message the host sends in the test
// suite). It may run on a transport goroutine, so it reports with Errorf.
func checkHostLine(t testing.TB, line []byte) {
	t.Helper()
	if err := checker(t).CheckHostLine(line); err != nil {
		t.Errorf("host line %s\n\tdoes not conform: %v", line, err)
	}
}
