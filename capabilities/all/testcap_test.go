package all_test

// The test capability of internal/ is linked into this package's tests
// only, never into a binary users run: its one line is the import below
// (docs/architecture.md, Adding a capability).
import _ "github.com/aephost/aep/internal/testcap"
