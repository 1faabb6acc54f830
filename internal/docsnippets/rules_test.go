package docsnippets

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// kind is how a snippet runs (run_test.go).
type kind string

const (
	// kindServer starts the README's host (`go run ./cmd/aep serve`) and
	// keeps it on 127.0.0.1:8765 for the snippets after it, with the token
	// it printed as their AEP_AUTH_TOKEN, as a reader who pasted it.
	kindServer kind = "server"
	// kindShell runs the block with bash (-e -o pipefail).
	kindShell kind = "shell"
	// kindBench runs a block of benchmark commands once each: every
	// -benchtime set to 1x and every -count to 1 (and their -test. forms),
	// with PostgreSQL only when the block says to set AEP_TEST_PG_PASSWORD.
	kindBench kind = "bench"
	// kindPip runs pip install lines in their offline form: Debian's
	// python3 -m pip with --no-build-isolation --no-index --no-deps, into
	// a scratch directory.
	kindPip kind = "pip"
	// kindNpm runs the block with npm's offline mode, from npm's cache.
	kindNpm kind = "npm"
	// kindGo runs a Go program (or a fragment inside prelude and
	// postlude) from a directory of this module.
	kindGo kind = "go"
	// kindPython runs a Python program with the SDK on PYTHONPATH.
	kindPython kind = "python"
	// kindTS compiles a TypeScript module with the SDK's tsc, importing the
	// built aep-client, and runs it with node.
	kindTS kind = "ts"
	// kindConfig validates a configuration with `aep config validate`.
	kindConfig kind = "config"
	// kindMessage decodes a message with the host's registry and sends it
	// to a real host (aep serve --stdio), which must answer it with its
	// reply, not an error.
	kindMessage kind = "message"
	// kindEnvproto decodes every → and ← line of a transcript with the
	// envproto registry.
	kindEnvproto kind = "envproto"
)

// rule says how the snippets of file whose text contains contains run; an
// empty contains matches every snippet of file in lang.
type rule struct {
	file, lang, contains string
	kind                 kind
	// needsHost: the README's host must be running, and AEP_AUTH_TOKEN is
	// its token. noToken: AEP_AUTH_TOKEN is unset (the token given in
	// code must be the one that counts).
	needsHost, noToken bool
	// npmProject: the directory whose package.json and node_modules the
	// snippet's cwd gets, so npx finds the pinned tools there.
	npmProject string
	// files: a file the snippet leaves in its cwd, and what it must hold.
	files map[string]string
	// want: what the output (stdout and stderr) must contain.
	want []string
	// prelude and postlude surround a Go fragment.
	prelude, postlude string
}

// rules: every snippet that runs. Order does not matter: snippets run in
// the order of Files, each file top to bottom.
var rules = []rule{
	// README.md
	{file: "README.md", lang: "sh", contains: "go run ./cmd/aep serve", kind: kindServer},
	{file: "README.md", lang: "sh", contains: "localhost:8765/session", kind: kindShell, needsHost: true,
		want: []string{`{"ok":true}`, `"type":"handshake/resp"`, `"ok":true,"session_id"`, `"type":"env/reset/resp"`, `"type":"tool/call/resp"`}},
	{file: "README.md", lang: "go", contains: "client.InProcess(h, client.JSON, nil)", kind: kindGo,
		want: []string{"[{true tools} {false chains}]\nfalse TOOL_ERROR\n"}},
	{file: "README.md", lang: "sh", contains: "go install ./cmd/aep", kind: kindShell, noToken: true,
		want: []string{"hello from a spawned host"}},
	{file: "README.md", lang: "sh", contains: "go run ./internal/testparts", kind: kindShell,
		want: []string{"PostgreSQL", "bubblewrap", ".ci/run"}},
	{file: "README.md", lang: "go", contains: "EnvStepReq", kind: kindGo, want: []string{" episodes, mean reward 1.00"}},

	// sdk/python/README.md
	{file: "sdk/python/README.md", lang: "sh", contains: `export PYTHONPATH="$PWD/sdk/python"`, kind: kindShell, want: []string{"aep 0.1.0 pydantic 2."}},
	{file: "sdk/python/README.md", lang: "sh", contains: "pip install ./sdk/python", kind: kindPip, want: []string{"Successfully installed aep-0.1.0"}},
	{file: "sdk/python/README.md", lang: "python", contains: "aep.Client.stdio(", kind: kindPython, noToken: true,
		want: []string{"… hello", "hello\n"}},
	{file: "sdk/python/README.md", lang: "python", contains: "AsyncClient.websocket", kind: kindPython, needsHost: true,
		want: []string{"tool/event"}},
	{file: "sdk/python/README.md", lang: "python", contains: "c.fork(8)", kind: kindPython, needsHost: true, want: []string{"[]", "8 complete"}},
	{file: "sdk/python/README.md", lang: "python", contains: "AEPVectorEnv", kind: kindPython, needsHost: true, want: []string{"reward 1.0"}},

	// sdk/typescript/README.md
	{file: "sdk/typescript/README.md", lang: "sh", contains: "npm ci && npm run build", kind: kindNpm},
	{file: "sdk/typescript/README.md", lang: "ts", contains: "envStep({ episode_id: ep.episode_id, action: guess })", kind: kindTS, needsHost: true,
		want: []string{"reward 1", "log {"}},
	{file: "sdk/typescript/README.md", lang: "ts", contains: "aep.fork(8)", kind: kindTS, needsHost: true, want: []string{"[]"}},

	// docs/*.md
	{file: "docs/PERFORMANCE.md", lang: "sh", kind: kindBench, want: []string{"PASS"}},
	{file: "docs/chains.md", lang: "json", contains: `"chain/run/req"`, kind: kindMessage, want: []string{`"success":true`}},
	{file: "docs/contract.md", lang: "sh", contains: "npx json-schema-to-typescript@16.0.0", kind: kindShell, npmProject: ".ci",
		files: map[string]string{"aep.schema.json": `"HostMessage"`, "aep.ts": "export type AnyHostMessage ="}},
	{file: "docs/contract.md", lang: "sh", contains: "aep conformance --url http://127.0.0.1:8765\n", kind: kindShell, needsHost: true, want: []string{"conformant"}},
	{file: "docs/contract.md", lang: "sh", contains: "--all-transports", kind: kindShell, needsHost: true, want: []string{"=== across http, exchange, websocket", "conformant over every transport"}},
	{file: "docs/contract.md", lang: "sh", contains: "conformance/aep/aep.yaml", kind: kindShell, want: []string{", 0 MUST failed, 0 SHOULD failed,", "\nconformant"}},
	{file: "docs/env.md", lang: "go", contains: "type Mine struct", kind: kindGo, prelude: mineProgramPrelude, postlude: mineProgramPostlude,
		want: []string{"at 10 after 10 steps, reward 10"}},
	{file: "docs/env.md", lang: "", contains: "envproto/spec/req", kind: kindEnvproto},
	{file: "docs/mcp.md", lang: "sh", contains: "npx @modelcontextprotocol/inspector@0.22.0", kind: kindShell, needsHost: true, npmProject: ".ci/mcp",
		want: []string{`"name": "list_dir"`, `"stored"`}},
	{file: "docs/subagents.md", lang: "json", contains: `"subagent/spawn/req"`, kind: kindMessage, want: []string{`"type":"subagent/spawn/resp"`}},
	// Every configuration in every file is validated.
	{file: "*", lang: "yaml", kind: kindConfig, want: []string{": ok ("}},
}

// notRun lists every snippet marked `<!-- not-run: reason -->`, by file
// and reason: a new marker must be added here, with its reason, to pass.
var notRun = map[string][]string{
	"README.md": {
		"a diagram",
		`the whole Go suite, which .ci/run's "go test" step runs (with -race)`,
	},
	"sdk/python/README.md": {
		"needs hosts behind a proxy at proxy:8700; tests/test_move.py runs this against real hosts behind a forwarder",
		`the whole suite, which .ci/run's "Python SDK" step runs`,
	},
	"sdk/typescript/README.md": {
		"needs hosts behind a proxy at proxy:8700; test/move.test.ts runs this against real hosts behind a forwarder",
	},
	"docs/inspector.md": {
		"the lines serve prints at start-up; TestBrowserHostAndTimeline opens the same page",
		`needs Chromium; .ci/run's "inspector in Chromium" step runs the same test`,
	},
	"docs/PERFORMANCE.md": {
		`the Python SDK suite, which .ci/run's "Python SDK" step runs, printing these figures`,
		"needs an XFS file system with reflinks mounted at /mnt/xfs-reflink",
		"run A's benchmark again in five processes, one after another; run A is run",
		"compares the test binaries of two commits with benchstat; BenchmarkEchoDirect itself runs in the Operator surface block above",
		"compares the test binaries of two commits with benchstat on a loaded machine; the benchmarks themselves are the transports' own",
		"swaps a source file of the checkout between two commits, which a run of the docs must not do",
	},
	"docs/chains.md": {"an outline, elided with ..."},
	"docs/contract.md": {
		"pipx and npx fetch these tools from PyPI and npm as they run, and PyPI is unreachable in CI; .ci/run's contract step checks the bundle with pinned json-schema-to-typescript, ajv and tsc",
		`npx fetches quicktype as it runs; .ci/run's "clients generated from the contract" step runs these commands with quicktype 26.0.0 pinned in .ci/package-lock.json (.ci/contract/clients/clients.mjs)`,
		`names a host's own command and files; the block above runs against the README's host, and the one in "aep's own run" with aep's fixture and baseline`,
		`an example of a baseline's content; conformance/aep/baseline.json, which the snippet of "aep's own run" loads, is a real one`,
		"a sample of the output",
		"rewrites conformance/mutate/caught.txt from a run; .ci/run's mutation suite step runs the same suite",
	},
	"docs/deploy.md": {
		"needs several hosts behind a proxy at aep.example; client/move_test.go and e2e/ run client.Moving against real ones",
	},
	"docs/operating.md": {
		"reads a host's store at /var/lib/aep/aep.db; e2e/backup_test.go runs the same commands under writes",
		"needs the fleet's database at $AEP_STORE_DSN; e2e/backup_test.go runs the same commands under writes",
		"needs a PostgreSQL server and a dump; e2e/backup_test.go runs the same commands",
	},
	"docs/mcp.md": {
		"a client's configuration file, naming /usr/local/bin/aep and /etc/aep; the Inspector snippets below spawn the same command",
		"a client's configuration file; the Inspector snippets below make the same requests",
	},
	"docs/trajectories.md": {"needs a running host; internal/aepbin/testdata/lineage/grpo.py runs this workflow", "a sample of the output, elided with …"},
	"docs/openenv.md": {
		"needs openenv-core, which PyPI would supply and CI cannot reach; internal/aepbin/testdata/openenv's client sends what this one does",
	},
}

// A fragment of docs/env.md inside a program that registers its
// environment and walks it to the end through a host.
const mineProgramPrelude = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

`

const mineProgramPostlude = `
func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "aep-mine-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := server.Defaults()
	cfg.Server.AuthToken = "t"
	h, err := server.New(ctx, cfg, server.WithDataDir(dir), server.WithPlugin(server.PluginSpec{
		Name: "env", Type: "env", Impl: &env.Plugin{Settings: env.Settings{DataRoot: filepath.Join(dir, "env")}}}))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)
	c, err := client.InProcess(h, client.JSON, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Handshake(ctx, "a", "t", "env"); err != nil {
		log.Fatal(err)
	}
	ep, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "mine"})
	if err != nil {
		log.Fatal(err)
	}
	steps, reward := 0, 0.0
	for {
		st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage("1")})
		if err != nil {
			log.Fatal(err)
		}
		steps++
		reward += st.Reward
		if st.Terminated {
			break
		}
	}
	r, err := c.EnvRender(ctx, &msg.EnvRenderReq{EpisodeID: ep.EpisodeID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s after %d steps, reward %g\n", r.Text, steps, reward)
}
`

func (r rule) matches(s Snippet) bool {
	return (r.file == "*" || r.file == s.File) && r.lang == s.Lang && strings.Contains(s.Text, r.contains)
}

// ruleFor returns the one rule of s, or an error saying why there is not
// exactly one.
func ruleFor(s Snippet) (rule, error) {
	var found []rule
	for _, r := range rules {
		if r.matches(s) {
			found = append(found, r)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0:
		return rule{}, fmt.Errorf("%s: no rule in internal/docsnippets/rules_test.go says how to run it; add one, or mark it <!-- not-run: reason --> and list it in notRun", s)
	}
	// A specific rule beats the generic one of its file or language.
	var specific []rule
	for _, r := range found {
		if r.contains != "" && r.file != "*" {
			specific = append(specific, r)
		}
	}
	if len(specific) == 1 {
		return specific[0], nil
	}
	return rule{}, fmt.Errorf("%s: %d rules match it", s, len(found))
}

func root(t testing.TB) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestEverySnippetIsRunOrMarked runs in every `go test ./...`: a snippet
// added to the docs needs a rule, or a not-run marker listed here.
func TestEverySnippetIsRunOrMarked(t *testing.T) {
	all, err := All(root(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 40 {
		t.Fatalf("found only %d snippets", len(all))
	}
	used := map[int]int{}
	marked := map[string]map[string]bool{}
	for _, s := range all {
		if s.NotRun != "" {
			if marked[s.File] == nil {
				marked[s.File] = map[string]bool{}
			}
			marked[s.File][s.NotRun] = true
			t.Logf("not run: %s: %s", s, s.NotRun)
			continue
		}
		r, err := ruleFor(s)
		if err != nil {
			t.Error(err)
			continue
		}
		for i := range rules {
			if rules[i].file == r.file && rules[i].lang == r.lang && rules[i].contains == r.contains {
				used[i]++
			}
		}
	}
	for i, r := range rules {
		if used[i] == 0 {
			t.Errorf("rule %s %s %q matches no snippet", r.file, r.lang, r.contains)
		}
		if r.contains != "" && used[i] > 1 {
			t.Errorf("rule %s %s %q matches %d snippets", r.file, r.lang, r.contains, used[i])
		}
	}
	for file, reasons := range notRun {
		for _, reason := range reasons {
			if !marked[file][reason] {
				t.Errorf("%s has no snippet marked not-run %q", file, reason)
			}
			delete(marked[file], reason)
		}
	}
	for file, reasons := range marked {
		for reason := range reasons {
			t.Errorf("%s: a snippet is marked not-run %q; list it in notRun", file, reason)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, src string
		want      []Snippet
		err       string
	}{
		{"fence", "text\n```sh\necho hi\n```\n", []Snippet{{File: "f.md", Line: 2, Lang: "sh", Text: "echo hi\n"}}, ""},
		{"indented", "- item\n\n  ```nginx\n  map $a $b {\n    x y;\n  }\n  ```\n",
			[]Snippet{{File: "f.md", Line: 3, Lang: "nginx", Text: "map $a $b {\n  x y;\n}\n"}}, ""},
		{"marked", "<!-- not-run: a diagram -->\n```\nA ──► B\n```\n",
			[]Snippet{{File: "f.md", Line: 2, Text: "A ──► B\n", NotRun: "a diagram"}}, ""},
		{"marker then blank line", "<!-- not-run: why -->\n\n```go\nx\n```\n",
			[]Snippet{{File: "f.md", Line: 3, Lang: "go", Text: "x\n", NotRun: "why"}}, ""},
		{"a marker in a block is text", "```md\n<!-- not-run: no -->\n```\n```sh\nls\n```\n",
			[]Snippet{{File: "f.md", Line: 1, Lang: "md", Text: "<!-- not-run: no -->\n"}, {File: "f.md", Line: 4, Lang: "sh", Text: "ls\n"}}, ""},
		{"longer closing fence", "````md\n```sh\nx\n```\n````\n", []Snippet{{File: "f.md", Line: 1, Lang: "md", Text: "```sh\nx\n```\n"}}, ""},
		{"no reason", "<!-- not-run: -->\n```sh\nx\n```\n", nil, "needs a reason"},
		{"marker before text", "<!-- not-run: why -->\nsome text\n```sh\nx\n```\n", nil, "right before a code block"},
		{"marker at the end", "text\n<!-- not-run: why -->\n", nil, "right before a code block"},
		{"open fence", "```sh\nx\n", nil, "never closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("f.md", []byte(tc.src))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
