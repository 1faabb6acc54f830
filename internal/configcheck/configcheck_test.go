package configcheck_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aephost/aep/internal/configcheck"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // "line key message-fragment", empty: valid
	}{
		{
			name: "typo in an mcp server",
			yaml: `server:
  listen: 127.0.0.1:8765
plugins:
  - name: mcp
    type: mcp
    cls: aep.mcp.bridge
    config:
      servers:
        - id: fs
          comand: npx
`,
			want: []string{`10 plugins[0].config.servers[0].comand unknown key "comand"`},
		},
		{
			name: "wrong type and bad enum",
			yaml: `plugins:
  - name: t
    type: tools
    cls: aep.tools.builtin
  - name: m
    type: memory
    cls: aep.memory.builtin
    config:
      max_content_bytes: lots
      working_full_policy: drop
`,
			want: []string{"9 plugins[1].config.max_content_bytes", "10 plugins[1].config.working_full_policy"},
		},
		{
			name: "two unknown keys at the top of a plugin's settings",
			yaml: `plugins:
  - name: p
    type: proc
    cls: aep.proc.builtin
    config:
      max_proc: 3
      sandbox: true
      netwrk: false
`,
			want: []string{`6 plugins[0].config.max_proc unknown key "max_proc"`, `8 plugins[0].config.netwrk unknown key "netwrk"`},
		},
		{
			name: "bad duration",
			yaml: `plugins:
  - {name: e, type: env, cls: aep.env.builtin, config: {step_timeout: soon}}
`,
			want: []string{"2 plugins[0].config.step_timeout"},
		},
		{
			name: "valid, with a module that has no schema",
			yaml: `plugins:
  - name: mcp
    type: mcp
    cls: aep.mcp.bridge
    config:
      servers: [{id: fs, command: npx, args: ["-y", "x"]}]
      allow_urls: [{prefix: "http://127.0.0.1:9000"}]
  - name: x
    type: x
    cls: third.party
    config: {anything: 1}
`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := configcheck.Check("aep.yaml", []byte(tc.yaml))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			var ps configcheck.Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Check = %v, want problems", err)
			}
			if !errors.Is(err, configcheck.ErrProblems) {
				t.Errorf("errors.Is(err, ErrProblems) = false")
			}
			if len(ps) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(ps), len(tc.want), err)
			}
			for i, w := range tc.want {
				got := ps[i]
				line := strings.Fields(w)[0]
				rest := strings.TrimPrefix(w, line+" ")
				if !strings.HasPrefix(got.Error(), "aep.yaml:"+line+": ") || !strings.Contains(got.Key+" "+got.Message, rest) {
					t.Errorf("problem %d = %q, want line %s and %q", i, got.Error(), line, rest)
				}
			}
		})
	}
}
