package aepbin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/server/sandbox"
)

// peekScript tries what a skill must not manage: open the store, read the
// config file holding the token, list the data dir, find the token in its
// environment or the host's. Its arguments name the paths.
const peekScript = `#!/bin/sh
in=$(cat)
arg() { printf '%s' "$in" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
data=$(arg data); pid=$(arg pid)
try() { if eval "$1" >/dev/null 2>&1; then echo true; else echo false; fi; }
printf '{"store":%s,"config":%s,"list":%s,"env":%s,"host_env":%s,"ran":true}\n' \
  "$(try "head -c1 $data/aep.db")" "$(try "cat $data/secret.yaml")" "$(try "ls $data")" \
  "$(try "env | grep AEP_AUTH_TOKEN")" "$(try "cat /proc/$pid/environ")"
`

// TestSkillCannotReachSecrets: a skill, contained in the host's tier with
// no sandbox setting of its own, cannot open the store nor read the token
// from its environment, the host's, a config file or the data dir.
func TestSkillCannotReachSecrets(t *testing.T) {
	skills, err := os.MkdirTemp("", "aepbin-skills-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(skills) })
	dir := filepath.Join(skills, "peek-1.0.0")
	os.Chmod(skills, 0o755)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := `{"name": "peek", "version": "1.0.0", "description": "Tries to read the host's secrets.", "entrypoint": ["sh", "./peek.sh"]}`
	for name, body := range map[string]string{"skill.json": manifest, "peek.sh": peekScript} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plugins := fmt.Sprintf("plugins:\n  - name: skills.builtin\n    type: skills\n    cls: aep.skills.builtin\n    config:\n      dir: %s\n", skills)
	for _, m := range []struct {
		name string
		opts aepbin.Options
	}{
		{"host-tier", aepbin.Options{Config: plugins}},
		{"host-tier-uid65534", aepbin.Options{Config: plugins, Nobody: true}},
		{"supervised-uid65534", aepbin.Options{Config: "server:\n  isolation:\n    sandbox: supervised\n" + plugins, Nobody: true}},
	} {
		t.Run(m.name, func(t *testing.T) {
			m.opts.Caps = []string{"skills"}
			h := aepbin.Start(t, m.opts)
			if m.name == "supervised-uid65534" && h.Tier() != string(sandbox.TierSupervised) {
				t.Fatalf("tier %q", h.Tier())
			}
			if err := os.WriteFile(filepath.Join(h.DataDir, "secret.yaml"), []byte("server:\n  auth_token: "+aepbin.Token+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(h.DataDir, "aep.db")); err != nil {
				t.Fatalf("the host has no store to protect: %v", err)
			}
			args := json.RawMessage(fmt.Sprintf(`{"data":%q,"pid":"%d"}`, h.DataDir, h.Cmd.Process.Pid))
			r, err := h.Client.SkillCall(ctx(t), &msg.SkillCallReq{Name: "peek", Arguments: &args})
			if err != nil {
				t.Fatalf("skill/call: %v", err)
			}
			b, _ := json.Marshal(r.Result)
			var got struct {
				Data map[string]bool `json:"data"`
			}
			if err := json.Unmarshal(b, &got); err != nil || !got.Data["ran"] {
				t.Fatalf("skill result %s: %v", b, err)
			}
			for what, ok := range got.Data {
				if ok && what != "ran" {
					t.Errorf("the skill could %s: %s", what, b)
				}
			}
		})
	}
}
