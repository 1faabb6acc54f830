// Package testcap is a capability for tests only, built exactly the way a
// real capability is added (docs/architecture.md, Adding a capability):
// its schema is schemas/testcap.json beside this file, aepgen generates the
// models, registry entries and handler interface into this package, and
// the plugin registers itself at init. It is linked only into the tests of
// capabilities/all, by one blank import there, so `aep serve` never serves
// its namespace.
package testcap

//go:generate go run ../../tools/aepgen -schemas schemas -out . -pkg testcap
