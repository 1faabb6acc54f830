//go:build docsnippets

package docsnippets

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/gen/envproto"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// The README's host listens here; the snippets say so.
const hostAddr = "127.0.0.1:8765"

// runner is what the snippets share: the repository, a scratch HOME with
// a bin directory on PATH holding `aep` (as `go install ./cmd/aep` would),
// and the README's host once its snippet has started it.
type runner struct {
	root, home, bin, scratch string
	env                      []string // the environment every snippet starts from
	token                    string   // the README host's, once it runs
	host                     *exec.Cmd
	hostOut                  *syncBuffer
}

// TestSnippets runs every snippet of the README, the SDK READMEs and
// docs/*.md exactly as written (rules_test.go says how each runs), in the
// order a reader meets them; not-run snippets are listed with their
// reasons. The benchmark commands (kindBench), which need nothing the
// others start, run in a second sequence beside the first, so CI waits for
// the longer of the two. Needs what .ci/run installs: bash, curl, jq, Node
// and the npm packages of .ci and sdk/typescript, python3 with pydantic 2
// and Debian's python3-pip, -setuptools and -wheel, nginx, and
// 127.0.0.1:8765 free.
func TestSnippets(t *testing.T) {
	r := newRunner(t)
	all, err := All(r.root)
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		s  Snippet
		rl rule
	}
	var reader, bench []job
	for _, s := range all {
		if s.NotRun != "" {
			t.Logf("not run: %s: %s", s, s.NotRun)
			continue
		}
		rl, err := ruleFor(s)
		if err != nil {
			t.Fatal(err)
		}
		// A benchmark block that reinstalls an npm project's packages
		// runs with the reader's blocks, which use the same node_modules:
		// beside them it would pull their compiler from under them.
		if rl.kind == kindBench && !strings.Contains(s.Text, "npm ci") {
			bench = append(bench, job{s, rl})
		} else {
			reader = append(reader, job{s, rl})
		}
	}
	sequence := func(t *testing.T, jobs []job) {
		t.Parallel()
		for _, j := range jobs {
			// A slash would split the name into levels for -run.
			name := fmt.Sprintf("%s:%d", strings.ReplaceAll(j.s.File, "/", "_"), j.s.Line)
			ok := t.Run(name, func(t *testing.T) {
				start := time.Now()
				r.run(t, j.s, j.rl)
				t.Logf("%s ran in %v", j.s, time.Since(start).Round(time.Millisecond))
			})
			if !ok && j.rl.kind == kindServer {
				t.Fatal("the README's host did not start; the snippets after it need it")
			}
		}
	}
	t.Run("reader", func(t *testing.T) { sequence(t, reader) })
	t.Run("benchmarks", func(t *testing.T) { sequence(t, bench) })
}

func newRunner(t *testing.T) *runner {
	t.Helper()
	r := &runner{root: root(t), scratch: t.TempDir()}
	r.home = filepath.Join(r.scratch, "home")
	r.bin = filepath.Join(r.home, "bin")
	if err := os.MkdirAll(r.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", hostAddr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s is taken: the README's host listens there", hostAddr)
	}
	// Go keeps its caches where they were, so a scratch HOME costs no
	// rebuild and no download.
	goEnv := map[string]string{}
	for _, k := range []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOFLAGS", "GOPROXY", "GOSUMDB"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		goEnv[k] = strings.TrimSpace(string(out))
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "PATH", "AEP_AUTH_TOKEN", "GOBIN", "PWD", "OLDPWD":
			continue
		}
		if _, ok := goEnv[k]; ok {
			continue
		}
		r.env = append(r.env, kv)
	}
	for k, v := range goEnv {
		r.env = append(r.env, k+"="+v)
	}
	// Node 20 is enough for every snippet: npm's warnings about newer
	// engines are not the reader's concern here.
	r.env = append(r.env, "HOME="+r.home, "GOBIN="+r.bin, "PATH="+r.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// npm's cache stays where it was too: the offline install reads it.
	if out, err := exec.Command("npm", "config", "get", "cache").Output(); err == nil {
		r.env = append(r.env, "npm_config_cache="+strings.TrimSpace(string(out)))
	}
	build := exec.Command("go", "build", "-o", filepath.Join(r.bin, "aep"), "./cmd/aep")
	build.Dir, build.Env = r.root, r.env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/aep: %v\n%s", err, out)
	}
	before := untracked(t, r.root)
	t.Cleanup(func() {
		r.stopHost()
		r.removeLeftovers(t, before)
	})
	return r
}

func (r *runner) run(t *testing.T, s Snippet, rl rule) {
	if rl.needsHost && r.host == nil {
		t.Fatal("needs the README's host, which is not running")
	}
	env := slices.Clone(r.env)
	if rl.needsHost {
		env = append(env, "AEP_AUTH_TOKEN="+r.token)
	}
	switch rl.kind {
	case kindServer:
		r.startHost(t, s)
	case kindShell:
		dir := r.root
		if rl.npmProject != "" || len(rl.files) > 0 {
			dir = r.npmDir(t, rl.npmProject)
		}
		out := r.shell(t, s.Text, dir, env, 5*time.Minute, rl.want)
		r.check(t, out, rl.want)
		for name, want := range rl.files {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Contains(b, []byte(want)) {
				t.Fatalf("%s: want it to hold %q (%v)", name, want, err)
			}
		}
	case kindBench:
		// A reader's shell: PostgreSQL only for the blocks that say to
		// set AEP_TEST_PG_PASSWORD (the others measure SQLite), and no CI,
		// under which a benchmark without its PostgreSQL would fail.
		if !strings.Contains(s.Text, "AEP_TEST_PG_PASSWORD") {
			env = slices.DeleteFunc(env, func(kv string) bool {
				k, _, _ := strings.Cut(kv, "=")
				return k == "CI" || k == "AEP_TEST_PG_PASSWORD" || k == "AEP_TEST_POSTGRES_DSN"
			})
		}
		out := r.shell(t, benchtime1x(s.Text), r.root, env, 5*time.Minute, nil)
		r.check(t, out, rl.want)
	case kindPip:
		site := filepath.Join(t.TempDir(), "site")
		offline := "/usr/bin/python3 -m pip install --no-build-isolation --no-index --no-deps --target " + site + " "
		out := r.shell(t, strings.ReplaceAll(s.Text, "pip install ", offline), r.root, env, 5*time.Minute, nil)
		r.check(t, out, rl.want)
	case kindNpm:
		out := r.shell(t, s.Text, r.root, append(env, "npm_config_offline=true"), 5*time.Minute, nil)
		r.check(t, out, rl.want)
	case kindGo:
		r.goProgram(t, s, rl, env)
	case kindPython:
		r.python(t, s, rl, env)
	case kindTS:
		r.typescript(t, s, rl, env)
	case kindConfig:
		dir := t.TempDir()
		p := filepath.Join(dir, "aep.yaml")
		if err := os.WriteFile(p, []byte(s.Text), 0o600); err != nil {
			t.Fatal(err)
		}
		// A configuration may read the token from the environment.
		out := r.command(t, dir, append(env, "AEP_AUTH_TOKEN=config-check-token"), time.Minute, nil, "aep", "config", "validate", p)
		r.check(t, out, rl.want)
	case kindMessage:
		r.message(t, s, rl, env)
	case kindEnvproto:
		r.envproto(t, s)
	default:
		t.Fatalf("unknown kind %q", rl.kind)
	}
}

// startHost runs the README's quick start in the repository's root and
// waits until the host serves, taking its token from the line it printed.
func (r *runner) startHost(t *testing.T, s Snippet) {
	// ./aep-data, when the host makes it, goes with the run's other
	// leftovers (removeLeftovers), after the host has stopped.
	cmd := exec.Command("bash", "-c", s.Text)
	cmd.Dir, cmd.Env = r.root, r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.hostOut = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = r.hostOut, r.hostOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.host = cmd
	token := regexp.MustCompile(`(?m)^\s*AEP_AUTH_TOKEN=(\S+)\s*$`)
	deadline := time.Now().Add(10 * time.Minute) // the first build may be slow
	for time.Now().Before(deadline) {
		if m := token.FindStringSubmatch(r.hostOut.String()); m != nil {
			r.token = m[1]
		}
		if r.token != "" {
			if resp, err := http.Get("http://" + hostAddr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Logf("the README's host is up; it printed AEP_AUTH_TOKEN=%s…", r.token[:4])
					return
				}
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := r.hostOut.String()
	r.stopHost()
	r.host = nil
	t.Fatalf("the host did not serve on %s with a printed token:\n%s", hostAddr, out)
}

func (r *runner) stopHost() {
	if r.host == nil || r.host.Process == nil {
		return
	}
	_ = syscall.Kill(-r.host.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.host.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-r.host.Process.Pid, syscall.SIGKILL)
		<-done
	}
	r.host.Process = nil
}

// shell runs text with bash in its own process group, which is killed when
// it ends, so a command it left in the background goes too. With want, it
// gives what the block started up to 10 s more to write all of want.
func (r *runner) shell(t *testing.T, text, dir string, env []string, timeout time.Duration, want []string) string {
	return r.command(t, dir, env, timeout, want, "bash", "-e", "-o", "pipefail", "-c", text)
}

func (r *runner) command(t *testing.T, dir string, env []string, timeout time.Duration, want []string, name string, args ...string) string {
	t.Helper()
	path, err := lookPath(env, name)
	if err != nil {
		t.Fatal(err)
	}
	// Output goes to a file, not a pipe: a command the block left in the
	// background (the README's `curl -sN … &`) keeps its copy, and Wait
	// must not wait for it.
	f, err := os.CreateTemp(t.TempDir(), "out-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = fmt.Errorf("killed after %v", timeout)
	}
	read := func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
	for deadline := time.Now().Add(10 * time.Second); err == nil && len(want) > 0 && time.Now().Before(deadline) && !containsAll(read(), want); {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, read())
	}
	return read()
}

// lookPath finds name in the PATH of env, as the snippet's shell would.
func lookPath(env []string, name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(v) {
				p := filepath.Join(d, name)
				if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
					return p, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%s is not on the snippets' PATH", name)
}

func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

func (r *runner) check(t *testing.T, out string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("the output lacks %q:\n%s", w, out)
		}
	}
}

// npmDir is a scratch directory that is an npm project with the packages
// of project (relative to the root) installed, so npx runs the pinned
// versions without downloading.
func (r *runner) npmDir(t *testing.T, project string) string {
	dir := t.TempDir()
	if project == "" {
		return dir
	}
	src := filepath.Join(r.root, project)
	b, err := os.ReadFile(filepath.Join(src, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "node_modules")); err != nil {
		t.Fatalf("%s is not installed (npm ci there; .ci/run does): %v", project, err)
	}
	if err := os.Symlink(filepath.Join(src, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	// docs/mcp.md's Inspector runs `aep mcp --stdio --config aep.yaml`
	// with the configuration of that page.
	if project == ".ci/mcp" {
		cfg := snippetOf(t, r.root, "docs/mcp.md", "yaml", "mcp_face:")
		if err := os.WriteFile(filepath.Join(dir, "aep.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// snippetOf returns the text of the one snippet of file in lang holding
// contains.
func snippetOf(t *testing.T, root, file, lang, contains string) string {
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	all, err := Parse(file, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Lang == lang && strings.Contains(s.Text, contains) {
			return s.Text
		}
	}
	t.Fatalf("%s has no %s snippet holding %q", file, lang, contains)
	return ""
}

var (
	benchtimeFlag = regexp.MustCompile(`(-(?:test\.)?benchtime)([ =])\S+`)
	countFlag     = regexp.MustCompile(`(-(?:test\.)?count)([ =])\d+`)
)

// benchtime1x runs a block of benchmark commands as written, once per
// benchmark: every -benchtime set to 1x, every -count to 1.
func benchtime1x(text string) string {
	return countFlag.ReplaceAllString(benchtimeFlag.ReplaceAllString(text, "${1}${2}1x"), "${1}${2}1")
}

func (r *runner) goProgram(t *testing.T, s Snippet, rl rule, env []string) {
	// A directory of this module, whose name go's ./... patterns skip.
	dir, err := os.MkdirTemp(r.root, ".docsnippet-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	src := rl.prelude + s.Text + rl.postlude
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := r.command(t, r.root, env, 5*time.Minute, nil, "go", "run", "./"+filepath.Base(dir))
	r.check(t, out, rl.want)
}

func (r *runner) python(t *testing.T, s Snippet, rl rule, env []string) {
	dir := t.TempDir()
	p := filepath.Join(dir, "snippet.py")
	if err := os.WriteFile(p, []byte(s.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	// The README's offline form: the SDK from the checkout on PYTHONPATH,
	// ahead of what the environment had (Debian's websockets, in CI).
	pp := filepath.Join(r.root, "sdk", "python")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok && v != "" {
			pp += string(os.PathListSeparator) + v
		}
	}
	env = append(env, "PYTHONPATH="+pp)
	out := r.command(t, dir, env, 3*time.Minute, nil, "python3", p)
	r.check(t, out, rl.want)
}

// typescript compiles the snippet as a module of a project that installed
// aep-client from the checkout (node_modules/aep-client is sdk/typescript,
// built by its README's install snippet) and runs it.
func (r *runner) typescript(t *testing.T, s Snippet, rl rule, env []string) {
	sdk := filepath.Join(r.root, "sdk", "typescript")
	if _, err := os.Stat(filepath.Join(sdk, "dist", "index.js")); err != nil {
		t.Fatalf("aep-client is not built (its README's install snippet builds it): %v", err)
	}
	dir := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"type": "module", "private": true}`+"\n"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "node_modules", "@types"), 0o755))
	must(os.Symlink(sdk, filepath.Join(dir, "node_modules", "aep-client")))
	must(os.Symlink(filepath.Join(sdk, "node_modules", "@types", "node"), filepath.Join(dir, "node_modules", "@types", "node")))
	must(os.WriteFile(filepath.Join(dir, "snippet.ts"), []byte(s.Text), 0o644))
	tsc := filepath.Join(sdk, "node_modules", ".bin", "tsc")
	r.command(t, dir, env, 3*time.Minute, nil, tsc, "--strict", "--target", "es2022", "--module", "nodenext",
		"--moduleResolution", "nodenext", "--types", "node", "--skipLibCheck", "snippet.ts")
	out := r.command(t, dir, env, 3*time.Minute, nil, "node", "snippet.js")
	r.check(t, out, rl.want)
}

// message decodes the snippet as the host would and sends it, after a
// handshake with every capability, to `aep serve --stdio`, which must
// answer it with its reply type.
func (r *runner) message(t *testing.T, s Snippet, rl rule, env []string) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(s.Text)); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	reg := msg.Registry()
	var sc wire.Scanned
	e, _, err := reg.Decode(compact.Bytes(), &sc)
	if err != nil {
		t.Fatalf("the host's decoder refuses it: %v", err)
	}
	reply := strings.TrimSuffix(e.Type, "/req") + "/resp"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.bin, "aep"), "serve", "--stdio", "--data-dir", dir)
	cmd.Dir, cmd.Env = dir, append(env, "AEP_AUTH_TOKEN=message-check")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	caps, _ := json.Marshal(reg.Capabilities())
	fmt.Fprintf(stdin, `{"type":"handshake/req","id":"doc-hs","proto":"1.0","ts":1,"agent_id":"docs","agent_caps":%s,"auth_token":"message-check"}`+"\n", caps)
	stdin.Write(append(compact.Bytes(), '\n'))
	scan := bufio.NewScanner(stdout)
	scan.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for scan.Scan() {
		var m struct {
			Type  string `json:"type"`
			ReqID string `json:"req_id"`
		}
		_ = json.Unmarshal(scan.Bytes(), &m)
		if m.ReqID != sc.ID || strings.HasSuffix(m.Type, "/event") {
			continue
		}
		if m.Type != reply {
			t.Fatalf("answered %s, want %s: %s\n%s", m.Type, reply, scan.Bytes(), logs.String())
		}
		r.check(t, scan.Text(), rl.want)
		return
	}
	t.Fatalf("no reply to %s: %v\n%s", sc.ID, scan.Err(), logs.String())
}

// envproto decodes each line of a transcript (→ to the environment, ←
// from it) with the envproto registry (gen/envproto, from
// schemas/envproto).
func (r *runner) envproto(t *testing.T, s Snippet) {
	reg := envproto.Registry()
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(s.Text), "\n") {
		_, rest, ok := strings.Cut(line, " ")
		if !ok || !(strings.HasPrefix(line, "→") || strings.HasPrefix(line, "←")) {
			t.Fatalf("not a transcript line: %q", line)
		}
		// As the env plugin reads them (capabilities/env/external.go):
		// no envelope beyond type, id and req_id.
		var sc wire.Scanned
		if err := wire.Scan([]byte(rest), &sc); err != nil {
			t.Fatalf("%s: %v", rest, err)
		}
		e := reg.Lookup(sc.Type)
		if e == nil {
			t.Fatalf("%s: unknown type", rest)
		}
		for _, f := range e.Required {
			if !sc.Has(f) || sc.IsNull(f) {
				t.Fatalf("%s: without %q", rest, f)
			}
		}
		m, err := wire.DecodeBody(e, []byte(rest))
		if err == nil {
			err = m.Validate()
		}
		if err != nil {
			t.Fatalf("%s: %v", rest, err)
		}
		n++
	}
	if n < 4 {
		t.Fatalf("only %d lines", n)
	}
}

// nginx checks the fragment in an http block that defines the upstream it
// falls back to and uses the variable it maps.
// removeLeftovers removes what the snippets left in the checkout that
// git does not track and was not there before (base.test, base.txt, a pip
// build's build/), so a local run leaves the tree as it was; it keeps the
// caches whose refill costs minutes (the TypeScript SDK's node_modules and
// dist, .ci's packages).
func (r *runner) removeLeftovers(t *testing.T, before []string) {
	for _, p := range untracked(t, r.root) {
		if slices.Contains(before, p) || keep(p) {
			continue
		}
		os.RemoveAll(filepath.Join(r.root, p))
	}
}

func keep(p string) bool {
	for _, k := range []string{"sdk/typescript/node_modules/", "sdk/typescript/dist/", ".ci/"} {
		if strings.HasPrefix(p, k) {
			return true
		}
	}
	return false
}

// untracked lists the paths git does not track under root, ignored ones
// included, collapsed to directories.
func untracked(t *testing.T, root string) []string {
	cmd := exec.Command("git", "ls-files", "--others", "--directory")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)
