package server_test

import (
	"sync"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/internal/testproto"
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
		hostChecker.c, hostChecker.err = conformance.Module(testproto.Schemas())
	})
	if hostChecker.err != nil {
		t.Fatalf("conformance: %v", hostChecker.err)
	}
	return hostChecker.c
}

// checkHostLine checks one line the host sent against the JSON Schemas with
// the conformance kit ( every message the host sends in the test
// suite). It may run on a transport goroutine, so it reports with Errorf.
func checkHostLine(t testing.TB, line []byte) {
	t.Helper()
	if err := checker(t).CheckHostLine(line); err != nil {
		t.Errorf("host line %s\n\tdoes not conform: %v", line, err)
	}
}

// TestHostCheckRejects makes sure the check above is not vacuous: it knows
// the echo namespace and refuses what its schema refuses.
func TestHostCheckRejects(t *testing.T) {
	c := checker(t)
	good := `{"type":"echo/say/resp","id":"x","proto":"1.0","ts":1,"req_id":"r","text":"a","by":"e1"}`
	if err := c.CheckHostLine([]byte(good)); err != nil {
		t.Fatalf("valid echo reply refused: %v", err)
	}
	for _, bad := range []string{
		`{"type":"echo/say/resp","id":"x","proto":"1.0","ts":1,"req_id":"r","text":"a"}`,
		`{"type":"echo/say/resp","id":"x","proto":"1.0","ts":1,"text":"a","by":"e1"}`,
		`{"type":"error","id":"x","proto":"1.0","ts":1,"code":"parse_error","message":"m","retryable":false}`,
		`{"type":"echo/event","id":"x","proto":"1.0","ts":1,"req_id":"r","kind":"progress","data":{}}`,
	} {
		if err := c.CheckHostLine([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
