package aepbin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aephost/aep/internal/aepbin"
)

// The OpenEnv face (docs/openenv.md) of the real binary: a client written
// in Python from the OpenEnv reference (testdata/openenv, no header sent)
// steps the built-in guess environment and an external Python cart-pole
// (sdk/python's aep.envserver), gets OpenEnv's error frame without the
// token, and calls the stateless HTTP routes; then, from Go, an episode
// recorded through the face is exported with `aep export trajectories`.

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// pythonWithWebsockets returns the environment a python3 that can import
// websockets needs: the machine's, or Debian's python3-websockets put alone
// on PYTHONPATH (as .ci/run does, never dist-packages whole, where
// Debian's pydantic 1 would shadow pydantic 2). It skips the test when
// neither is there and CI is unset; under CI it fails.
func pythonWithWebsockets(t *testing.T) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		missingPart(t, "python3")
	}
	env := os.Environ()
	if exec.Command(py, "-c", "import websockets, requests").Run() == nil {
		return env
	}
	const debian = "/usr/lib/python3/dist-packages/websockets"
	if _, err := os.Stat(debian); err != nil {
		missingPart(t, "python3 with websockets (Debian's python3-websockets)")
	}
	dir := t.TempDir()
	if err := os.Symlink(debian, filepath.Join(dir, "websockets")); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PYTHONPATH="+dir+string(os.PathListSeparator)+os.Getenv("PYTHONPATH"))
	cmd := exec.Command(py, "-c", "import websockets, requests")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		missingPart(t, "python3 with websockets and requests: "+string(out))
	}
	return env
}

func missingPart(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing (CI must install it)", what)
	}
	t.Skipf("%s is missing", what)
}

func openenvConfig(t *testing.T) string {
	root := repoRoot(t)
	sdk := filepath.Join(root, "sdk", "python")
	return `server:
  trajectories:
    record: all
plugins:
  - name: env
    type: env
    cls: aep.env.builtin
    config:
      envs: [guess]
      external:
        - name: cartpole
          command: python3
          args: ["` + filepath.Join(sdk, "aep", "envserver.py") + `", "` + filepath.Join(sdk, "tests", "cartpole.py") + `:CartPole"]
          read_only: ["` + sdk + `"]
          env_allow: [LANG]
          env: {PYTHONDONTWRITEBYTECODE: "1"}
`
}

func TestOpenEnvFaceWithPythonClient(t *testing.T) {
	env := pythonWithWebsockets(t)
	h := aepbin.Start(t, aepbin.Options{HTTP: true, Config: openenvConfig(t), Caps: []string{"env"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "steps.py", h.URL, aepbin.Token)
	cmd.Dir = filepath.Join(repoRoot(t), "internal", "aepbin", "testdata", "openenv")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("steps.py: %v\n%s\n%s", err, out, stderr.String())
	}
	var got struct {
		Guess struct {
			Steps       int     `json:"steps"`
			TotalReward float64 `json:"total_reward"`
			Session     string  `json:"session"`
		} `json:"guess"`
		CartpoleSteps int    `json:"cartpole_steps"`
		NoToken       string `json:"no_token"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("steps.py printed %s: %v", out, err)
	}
	if got.Guess.Steps < 1 || got.Guess.TotalReward != 1 || got.CartpoleSteps < 8 {
		t.Fatalf("steps.py saw %s", out)
	}
	if !strings.HasPrefix(got.NoToken, "Server error: unauthorized") || !strings.HasSuffix(got.NoToken, "(code: SESSION_ERROR)") {
		t.Fatalf("without the token: %q", got.NoToken)
	}
	if strings.Contains(h.Stderr(), aepbin.Token) {
		t.Fatal("the token is in the host's log")
	}
	t.Logf("python: %s", out)

	// The guess episode the Python client played was recorded like any
	// session's: `aep export trajectories` gives its steps, and no token.
	bin := aepbin.Build(t)
	var records []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		records, err = exec.Command(bin, "export", "trajectories", "--session", got.Guess.Session, "--data-dir", h.DataDir).Output()
		if err == nil && bytes.Count(records, []byte(`"env/step/resp"`)) >= got.Guess.Steps {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("export of %s: %v\n%s", got.Guess.Session, err, records)
		}
	}
	if bytes.Contains(records, []byte(aepbin.Token)) || !bytes.Contains(records, []byte(`"handshake/req"`)) {
		t.Fatalf("exported records:\n%s", records)
	}
}

// TestOpenEnvFaceFromGo: the real binary's face from Go, with a bearer
// header instead of aep_token: a foreign Origin is refused before the
// upgrade, and a session steps an episode.
func TestOpenEnvFaceFromGo(t *testing.T) {
	h := aepbin.Start(t, aepbin.Options{HTTP: true, Config: openenvConfig(t), Caps: []string{"env"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(h.URL, "http") + "/openenv/guess/ws"
	if _, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: map[string][]string{"Origin": {"https://evil.example"}}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("foreign origin: %v", err)
	}
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer " + aepbin.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	call := func(line string) map[string]any {
		if err := c.Write(ctx, websocket.MessageText, []byte(line)); err != nil {
			t.Fatal(err)
		}
		_, d, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := call(`{"type":"reset","data":{"seed":1}}`); m["type"] != "observation" {
		t.Fatalf("reset: %v", m)
	}
	m := call(`{"type":"step","data":{"action":93}}`)
	if d := m["data"].(map[string]any); d["reward"] != 1.0 || d["done"] != true {
		t.Fatalf("step: %v", m)
	}
	if m := call(`{"type":"state"}`); m["data"].(map[string]any)["step_count"] != 1.0 {
		t.Fatalf("state: %v", m)
	}
}
