//go:build race

package wire_test

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts of code that pools (the JSON encoder) are not exact.
const raceEnabled = true
