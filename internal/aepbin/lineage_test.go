package aepbin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
)

const lineageConfig = `plugins:
  - name: env
    type: env
    cls: aep.env.builtin
    config:
      envs: [guess]
  - name: learn
    type: learn
    cls: aep.learn.builtin
`

// A GRPO group trained on as exported (docs/trajectories.md), through
// the Python SDK against the real binary (testdata/lineage/grpo.py): a
// recorded session resets, steps, forks 8 ways, each fork plays to the
// end and is rated. The group's export — by the SDK, by the Go client
// presenting the parent's id, and by `aep export trajectories --group` —
// is the same bytes, jsonl and chat: 8 complete episodes, each starting
// with the parent's handshake and reset, every fork record with the
// group, the chat samples with env and feedback rewards. With a parent
// that does not record, the export says prefix: missing.
func TestGRPOGroupExportThroughSDK(t *testing.T) {
	env := pythonWithWebsockets(t)
	h := aepbin.Start(t, aepbin.Options{HTTP: true, Config: lineageConfig, Caps: []string{"env", "learn", "session"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "python3", "grpo.py", h.URL, aepbin.Token, out)
	cmd.Dir = filepath.Join(repoRoot(t), "internal", "aepbin", "testdata", "lineage")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	printed, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpo.py: %v\n%s\n%s", err, printed, stderr.String())
	}
	type run struct {
		SessionID string   `json:"session_id"`
		Handle    string   `json:"handle"`
		Group     string   `json:"group"`
		Forks     []string `json:"forks"`
		Prefix    string   `json:"prefix"`
		Missing   []string `json:"missing"`
		Samples   int      `json:"samples"`
	}
	var got struct{ Recorded, Unrecorded run }
	if err := json.Unmarshal(printed, &got); err != nil {
		t.Fatalf("grpo.py printed %s: %v", printed, err)
	}
	bin := aepbin.Build(t)
	for _, tc := range []struct {
		name string
		r    run
	}{{"recorded", got.Recorded}, {"unrecorded", got.Unrecorded}} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			if len(r.Forks) != 8 || r.Samples != 8 || !strings.HasPrefix(r.Group, "g-") {
				t.Fatalf("the SDK saw %+v", r)
			}
			wantPrefix := map[string]string{"recorded": "complete", "unrecorded": "missing"}[tc.name]
			if r.Prefix != wantPrefix || (wantPrefix == "missing") != (len(r.Missing) == 8) {
				t.Fatalf("prefix %q, missing %v", r.Prefix, r.Missing)
			}
			for _, format := range []string{"jsonl", "chat"} {
				sdk, err := os.ReadFile(filepath.Join(out, tc.name+".sdk."+format))
				if err != nil {
					t.Fatal(err)
				}
				// The Go client, in a new session presenting the parent's id.
				var goc bytes.Buffer
				c := h.Connect(t, "", aepbin.Token, "session")
				sum, err := c.ExportTrajectories(ctx, msg.SessionTrajectoryExportReq{SessionIds: []string{r.SessionID}, Group: &r.Group,
					Format: msg.SessionTrajectoryExportReqFormat(format), Limit: 50}, &goc)
				if err != nil || sum.Prefix != wantPrefix {
					t.Fatalf("Go client: %+v %v", sum, err)
				}
				// The operator's CLI, from the store of the running host.
				var cli, cliErr bytes.Buffer
				x := exec.CommandContext(ctx, bin, "export", "trajectories", "--group", r.Group, "--format", format, "--data-dir", h.DataDir)
				x.Stdout, x.Stderr = &cli, &cliErr
				if err := x.Run(); err != nil {
					t.Fatalf("aep export: %v\n%s", err, cliErr.String())
				}
				if strings.Contains(cliErr.String(), "prefix: missing") != (wantPrefix == "missing") {
					t.Fatalf("aep export's stderr: %s", cliErr.String())
				}
				if !bytes.Equal(sdk, goc.Bytes()) || !bytes.Equal(sdk, cli.Bytes()) {
					t.Fatalf("%s exports differ:\nSDK %d bytes, Go client %d, CLI %d\n%s\n---\n%s", format, len(sdk), goc.Len(), cli.Len(), sdk, cli.Bytes())
				}
				checkGroupExport(t, format, sdk, r.Handle, r.Group, r.Forks, wantPrefix == "missing")
			}
			if tc.name != "recorded" {
				return
			}
			// The parent's whole tree: its own episode, then the forks'.
			var goc, cli bytes.Buffer
			c := h.Connect(t, "", aepbin.Token, "session")
			if _, err := c.ExportTrajectories(ctx, msg.SessionTrajectoryExportReq{SessionIds: []string{r.SessionID}, Descendants: true,
				Format: msg.SessionTrajectoryExportReqFormatChat}, &goc); err != nil {
				t.Fatal(err)
			}
			x := exec.CommandContext(ctx, bin, "export", "trajectories", "--session", r.Handle, "--descendants", "--format", "chat", "--data-dir", h.DataDir)
			x.Stdout = &cli
			if err := x.Run(); err != nil {
				t.Fatal(err)
			}
			var first struct{ Session string }
			_ = json.Unmarshal(bytes.SplitN(cli.Bytes(), []byte("\n"), 2)[0], &first)
			if !bytes.Equal(goc.Bytes(), cli.Bytes()) || bytes.Count(cli.Bytes(), []byte("\n")) != 9 || first.Session != r.Handle {
				t.Fatalf("the tree's export: Go client %d bytes, CLI %d:\n%s", goc.Len(), cli.Len(), cli.Bytes())
			}
		})
	}
}

// checkGroupExport checks what a group's export holds: 8 episodes, whole
// (the parent's records first) unless the prefix is missing, every fork
// record naming the group, and in chat the rewards.
func checkGroupExport(t *testing.T, format string, data []byte, parent, group string, forks []string, missing bool) {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if missing != (l["prefix"] == "missing") {
			t.Fatalf("prefix %v on %s", l["prefix"], sc.Bytes())
		}
		lines = append(lines, l)
	}
	if format == "chat" {
		if len(lines) != 8 {
			t.Fatalf("%d samples", len(lines))
		}
		for i, s := range lines {
			env, fb, rw := s["env_rewards"].([]any), s["feedback_rewards"].([]any), s["rewards"].([]any)
			n := len(env)
			if s["session"] != forks[i] || s["group"] != group || s["parent"] != parent || n == 0 || len(fb) != n || len(rw) != n {
				t.Fatalf("sample %d: %v", i, s)
			}
			if env[n-1].(float64) != 1 || fb[n-1].(float64) != 1 || rw[n-1].(float64) != 2 {
				t.Fatalf("sample %d: last step env %v feedback %v reward %v", i, env[n-1], fb[n-1], rw[n-1])
			}
			want := 0.5
			if i%2 == 1 {
				want = -0.5
			}
			if ep := s["episode_rewards"].([]any); len(ep) != 1 || ep[0].(float64) != want {
				t.Fatalf("sample %d: episode rewards %v", i, ep)
			}
			if !missing && (n < 4 || s["prefix_messages"].(float64) < 8) {
				t.Fatalf("sample %d: %d steps, prefix_messages %v: the parent's reset and steps are not there", i, n, s["prefix_messages"])
			}
		}
		return
	}
	episodes := map[string][]map[string]any{}
	var order []string
	for _, l := range lines {
		ep := l["episode"].(string)
		if _, ok := episodes[ep]; !ok {
			order = append(order, ep)
		}
		episodes[ep] = append(episodes[ep], l)
	}
	if strings.Join(order, ",") != strings.Join(forks, ",") {
		t.Fatalf("episodes %v, forks %v", order, forks)
	}
	for _, h := range forks {
		ep := episodes[h]
		first := ep[0]
		if missing {
			if first["session"] != h {
				t.Fatalf("episode %s starts with %v", h, first)
			}
		} else if first["session"] != parent || first["type"] != "handshake/req" {
			t.Fatalf("episode %s does not start with the parent's handshake: %v", h, first)
		}
		resets := 0
		for _, l := range ep {
			if l["type"] == "env/reset/resp" {
				resets++
			}
			if l["session"] == h && l["group"] != group {
				t.Fatalf("a fork record without its group: %v", l)
			}
		}
		if resets != map[bool]int{false: 1, true: 0}[missing] {
			t.Fatalf("episode %s holds %d resets", h, resets)
		}
	}
}
