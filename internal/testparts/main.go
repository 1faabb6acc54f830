// Command testparts reports which of the optional parts the test suites
// use are present on this machine, and what `go test ./...` skips without
// each: `go test ./...` passes while skipping those tests, and hides a
// passing package's output, so this says what a green run did not cover.
// Run it from the repository's root:
//
//	go run ./internal/testparts
//
// .ci/run installs every part and sets CI, under which a missing part
// fails its tests instead of skipping them.
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// part is one optional piece of the machine and the tests that need it.
type part struct {
	name  string
	check func() (bool, string) // present, and what was found or is missing
	skips string                // what skips without it
	get   string                // how to get it
}

func main() {
	parts := []part{
		{"PostgreSQL", postgres,
			"every PostgreSQL variant: the store, memory, the sql toolkit, moves between hosts",
			"a server on 127.0.0.1:5432 and AEP_TEST_PG_PASSWORD (user postgres), or AEP_TEST_POSTGRES_DSN"},
		{"root", func() (bool, string) {
			return os.Geteuid() == 0, fmt.Sprintf("uid %d", os.Geteuid())
		}, "the sandbox's namespace and cgroup tiers (server/sandbox, proc, skills, the isolation tests)",
			"run the tests as root (a container is enough)"},
		{"bubblewrap", program("bwrap"), "the bwrap sandbox tier", "apt-get install bubblewrap"},
		{"HAProxy", program("haproxy"), "the proxied fleet and drain tests (e2e)", "apt-get install haproxy"},
		{"nginx", program("nginx"), "the proxied fleet and drain tests (e2e)", "apt-get install nginx"},
		{"MCP servers from npm", npmPart("AEP_TEST_MCP_EVERYTHING", "@modelcontextprotocol", "server-everything", "dist", "index.js"),
			"the MCP interop tests (capabilities/mcp, cmd/aep)", "(cd .ci/mcp && npm ci)"},
		{"MCP Inspector and SDK from npm", npmPart("AEP_TEST_MCP_INSPECTOR", ".bin", "mcp-inspector"),
			"the Inspector and MCP SDK client tests (cmd/aep)", "(cd .ci/mcp && npm ci)"},
		{"python3 with pydantic 2", python,
			"nothing in go test; the Python SDK's suite (sdk/python/README.md, Tests) needs it", "python3 and pip install 'pydantic>=2'"},
		{"Node.js and npm", program("node", "npm"),
			"nothing in go test; the TypeScript SDK's suite (sdk/typescript) needs them", "Node >= 20"},
	}
	missing := 0
	for _, p := range parts {
		ok, found := p.check()
		if ok {
			fmt.Printf("%-32s yes  %s\n", p.name, found)
			continue
		}
		missing++
		fmt.Printf("%-32s NO   %s\n%32s      skipped without it: %s\n%32s      to get it: %s\n", p.name, found, "", p.skips, "", p.get)
	}
	if missing > 0 {
		fmt.Printf("\n%d part(s) missing: go test ./... passes without running the tests that need them.\n", missing)
	} else {
		fmt.Println("\nEvery optional part is here: go test ./... runs every test.")
	}
	fmt.Println("Everything CI runs, installing what is missing (as root): .ci/run")
}

// program is present when every name is on PATH.
func program(names ...string) func() (bool, string) {
	return func() (bool, string) {
		var found []string
		for _, n := range names {
			p, err := exec.LookPath(n)
			if err != nil {
				return false, n + " not on PATH"
			}
			found = append(found, p)
		}
		return true, strings.Join(found, ", ")
	}
}

// npmPart is present at $envVar, else in .ci/mcp/node_modules, where the
// tests look.
func npmPart(envVar string, rel ...string) func() (bool, string) {
	return func() (bool, string) {
		p := os.Getenv(envVar)
		if p == "" {
			p = filepath.Join(append([]string{".ci", "mcp", "node_modules"}, rel...)...)
		}
		if _, err := os.Stat(p); err != nil {
			return false, p + " absent"
		}
		return true, p
	}
}

func postgres() (bool, string) {
	if dsn := os.Getenv("AEP_TEST_POSTGRES_DSN"); dsn != "" {
		return true, "AEP_TEST_POSTGRES_DSN set"
	}
	if os.Getenv("AEP_TEST_PG_PASSWORD") == "" {
		return false, "AEP_TEST_PG_PASSWORD unset"
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:5432", 2*time.Second)
	if err != nil {
		return false, "nothing answers on 127.0.0.1:5432"
	}
	c.Close()
	return true, "127.0.0.1:5432, AEP_TEST_PG_PASSWORD set"
}

func python() (bool, string) {
	out, err := exec.Command("python3", "-c", "import pydantic; print(pydantic.VERSION)").Output()
	if err != nil {
		return false, "python3 cannot import pydantic"
	}
	v := strings.TrimSpace(string(out))
	return strings.HasPrefix(v, "2."), "pydantic " + v
}
