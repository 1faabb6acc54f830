//go:build aepconformance

package server

import (
	"fmt"
	"io/fs"
	"sync"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/wire"
)

// With the aepconformance tag every message the host sends is encoded and
// checked against the module's schemas (and the echo test namespace's, and
// those of registered modules that bring their own: ModuleInfo.Schemas); a
// message that does not conform stops the test binary with the line and
// the reason, whichever test made the host send it.
func init() {
	var (
		once    sync.Once
		checker *conformance.Checker
		loadErr error
	)
	checkSent = func(p *wire.Packet) {
		once.Do(func() {
			extra := []fs.FS{testproto.Schemas()}
			for _, m := range Modules() {
				if m.Schemas != nil {
					extra = append(extra, m.Schemas)
				}
			}
			checker, loadErr = conformance.Module(extra...)
		})
		if loadErr != nil {
			panic(fmt.Sprintf("aepconformance: loading the schemas: %v", loadErr))
		}
		line, err := wire.Encode(&p.Envelope, p.Msg)
		if err != nil {
			panic(fmt.Sprintf("aepconformance: the host sends %s, which does not encode: %v", p.Type, err))
		}
		if err := checker.CheckHostLine(line); err != nil {
			panic(fmt.Sprintf("aepconformance: the host sent a line that does not conform to schemas/: %v\n%s", err, line))
		}
	}
}
