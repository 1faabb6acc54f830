// Package scenario holds the Go half of the scenario every SDK of aep runs
// (the Python half is sdk/python/tests/test_scenario.py): handshake, tool
// list and a call with streaming events, memory store and recall, an env
// episode to termination, a toolkit configure error, a cancelled call and
// protocol errors, against a real `aep` binary (internal/aepbin builds it)
// over each transport the Go client offers. It also logs the Go client's
// figure for the 10,000-step guess loop that sdk/python's training test
// runs, for docs/PERFORMANCE.md.
package scenario
