package server_test

import (
	"testing"

	"github.com/aephost/aep/wire"
)

// checkHostLine checks one line the host sent against the schemas.
func checkHostLine(t testing.TB, line []byte) {
	t.Helper()
	var sc wire.Scanned
	if err := wire.Scan(line, &sc); err != nil {
		t.Errorf("host sent a malformed line %q: %v", line, err)
	}
}
