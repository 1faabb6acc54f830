// Package e2e tests the edge of a real aep host from outside: a binary built
// without -race (so memory is measured as it is in production), started as
// a subprocess with `aep serve` and the default configuration unless a test
// says otherwise, spoken to over real HTTP on 127.0.0.1 (docs/SECURITY.md,
// The edge). Set AEP_E2E_BIN to test another build of aep.
package e2e
