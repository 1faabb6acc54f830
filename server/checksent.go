package server

import "github.com/aephost/aep/wire"

// checkSent, when set, sees every message the host sends to any session on
// any transport before it goes out. Only a build with the aepconformance
// tag sets it (checksent_conformance.go): the test suite run with that tag
// checks every message the host sends against schemas/ (the
// conformance kit), and normal builds pay one nil check.
var checkSent func(p *wire.Packet)
