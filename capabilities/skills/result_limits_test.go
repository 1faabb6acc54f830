package skills_test

import (
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/skills"
	"github.com/aephost/aep/gen/msg"
)

// writeSkill makes a skill folder with a manifest under dir.
func writeSkill(t *testing.T, dir, name, entrypoint, limits string) {
	t.Helper()
	folder := filepath.Join(dir, name+"-1.0.0")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`{"name":%q,"version":"1.0.0","description":"audit","entrypoint":["sh","-c",%q],"limits":%s}`, name, entrypoint, limits)
	if err := os.WriteFile(filepath.Join(folder, skills.ManifestFile), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResultLimitsAndDuration: the parts of a skill result the sandbox promises
// that the other tests leave out — a non-zero exit, stdout past output_bytes,
// stderr past output_bytes (events stay within the cap, even for one line
// that never ends), and the duration.
func TestResultLimitsAndDuration(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	writeSkill(t, dir, "exit3", "cat >/dev/null; exit 3", `{}`)
	writeSkill(t, dir, "chatty", "cat >/dev/null; head -c 5000 /dev/zero | tr '\\0' a", `{"output_bytes":1024}`)
	writeSkill(t, dir, "shouty", "cat >/dev/null; head -c 8388608 /dev/zero | tr '\\0' a >&2; echo '{\"ok\":true}'", `{"output_bytes":4096}`)
	writeSkill(t, dir, "slow", "cat >/dev/null; sleep 0.2; echo '{}'", `{}`)
	c := connect(t, newHost(t, &skills.Plugin{Settings: skills.Settings{Dir: dir}}))
	call := func(name string) msg.SkillResult {
		t.Helper()
		r, err := c.SkillCall(aeptest.Context(t), &msg.SkillCallReq{Name: name, Streaming: ptrBool(false)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r.Result
	}

	r := call("exit3")
	if r.Success || r.ExitCode == nil || *r.ExitCode != 3 || r.Error == nil || !strings.Contains(*r.Error, "code 3") || r.Data != nil {
		t.Fatalf("exit3: %+v error %s", r, deref(r.Error))
	}

	r = call("chatty")
	if r.Success || r.Truncated == nil || !*r.Truncated || r.Error == nil || !strings.Contains(*r.Error, "exceeded 1024 bytes") || r.Data != nil {
		t.Fatalf("chatty: %+v error %s", r, deref(r.Error))
	}

	r = call("shouty")
	if !r.Success || string(*r.Data) != `{"ok":true}` {
		t.Fatalf("shouty: %+v error %s", r, deref(r.Error))
	}
	kept := 0
	for _, e := range r.Events {
		if m, ok := e.Data["message"].(string); ok {
			kept += len(m)
		}
	}
	if kept == 0 || kept > 4096 {
		t.Fatalf("shouty: %d bytes of stderr kept in events, want some and at most output_bytes 4096", kept)
	}

	r = call("slow")
	if !r.Success || r.DurationMs < 200 {
		t.Fatalf("slow: duration %d ms for a skill that sleeps 200 ms: %+v", r.DurationMs, r)
	}
}
