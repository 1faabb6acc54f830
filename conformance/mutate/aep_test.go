//go:build aepkit || aepmutants

// What the suites against a real aep share: the binary's cleanup and the
// targets a mutant is put in front of.

package mutate_test

import (
	"os"
	"strings"
	"testing"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/conformance/kittest"
	"github.com/aephost/aep/conformance/mutate"
	"github.com/aephost/aep/internal/aepbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	aepbin.Cleanup()
	os.Exit(code)
}

// target puts mu in front of the aep at base, reached over the transport
// named: an HTTP bug through a proxy, a message bug by wrapping the
// target's connections.
func target(t *testing.T, base, transport string, mu mutate.Mutant) conformance.Target {
	t.Helper()
	if mu.HTTP != nil {
		b, stop, err := mutate.Proxy(base, mu)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		base = b
	}
	var tg conformance.Target
	switch transport {
	case "http":
		tg = conformance.HTTPTarget(base, nil)
	case "exchange":
		tg = conformance.ExchangeTarget(base, nil)
	case "websocket":
		tg = conformance.WebSocketTarget("ws"+strings.TrimPrefix(base, "http")+"/ws", nil)
	case "stdio":
		tg = kittest.Stdio(t)
		if !needsMCP(mu) {
			tg = kittest.StdioWithoutMCP(t)
		}
	default:
		t.Fatalf("transport %q", transport)
	}
	return mutate.Wrap(tg, mu)
}

// needsMCP says whether mu's scenarios are the mcp capability's: over
// stdio the others run against aep without its MCP server, which each
// stdio session would otherwise start.
func needsMCP(mu mutate.Mutant) bool {
	for _, c := range mu.Checks() {
		if strings.HasPrefix(c, "mcp.") {
			return true
		}
	}
	return false
}
