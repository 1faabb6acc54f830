package skills_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aephost/aep/capabilities/skills"
	"github.com/aephost/aep/capabilities/subagents"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/ent/skillregistration"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// newHostWithStore is newHost on a real SQLite store.
func newHostWithStore(t *testing.T, p *skills.Plugin) (*server.Host, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if p.Dir == "" {
		p.Dir = "testdata/skills"
	}
	p.WorkRoot = t.TempDir()
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("skills", p)}, server.WithStore(st))
	t.Cleanup(func() { st.Close() })
	return h, st
}

// greet is a skill sent whole over the wire: a manifest and a script.
func greet(version string) *msg.SkillRegisterReq {
	return &msg.SkillRegisterReq{
		Manifest: msg.SkillRegisterReqManifest{
			"name": "greet", "version": version, "description": "Greets by name.",
			"input_schema":  map[string]any{"type": "object", "required": []any{"who"}, "properties": map[string]any{"who": map[string]any{"type": "string"}}},
			"output_schema": map[string]any{"type": "object", "required": []any{"greeting"}},
			"entrypoint":    []any{"sh", "./bin/run.sh"},
		},
		Files: []msg.SkillFile{{Path: "bin/run.sh", Executable: true,
			Content: "read -r line\nwho=$(printf '%s' \"$line\" | sed 's/.*\"who\": *\"\\([^\"]*\\)\".*/\\1/')\nprintf '{\"greeting\": \"hello %s\", \"version\": \"%s\"}' \"$who\" \"$SKILL_VERSION\"\n"}},
	}
}

// TestRegisterOffByDefault: without the operator's allow_register,
// skill/register is refused and nothing is registered.
func TestRegisterOffByDefault(t *testing.T) {
	c := connect(t, newHost(t, &skills.Plugin{}))
	_, err := c.SkillRegister(aeptest.Context(t), greet("1.0.0"))
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "register_disabled")
	_, err = c.SkillGet(aeptest.Context(t), &msg.SkillGetReq{Name: "greet"})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown skill")
}

// TestRegisterThenCall: a session registers a skill and calls it; another
// session neither sees nor calls it; versions sit side by side; the store
// keeps the registration while the session lives.
func TestRegisterThenCall(t *testing.T) {
	needSandbox(t)
	h, st := newHostWithStore(t, &skills.Plugin{Settings: skills.Settings{AllowRegister: true}})
	ctx := aeptest.Context(t)
	a, b := connect(t, h), connect(t, h)
	r, err := a.SkillRegister(ctx, greet("1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Skill.Name != "greet" || r.Skill.Version != "1.0.0" || r.Skill.Limits == nil || r.Skill.Limits.TimeoutSeconds != skills.DefaultLimits.TimeoutSeconds {
		t.Fatalf("registered %+v", r.Skill)
	}
	call := func(c interface {
		SkillCall(context.Context, *msg.SkillCallReq) (*msg.SkillCallResp, error)
	}, version string) (*msg.SkillCallResp, error) {
		req := &msg.SkillCallReq{Name: "greet", Arguments: raw(`{"who": "ada"}`)}
		if version != "" {
			req.Version = &version
		}
		return c.SkillCall(ctx, req)
	}
	res, err := call(a, "")
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if res.Result.Data != nil {
		_ = json.Unmarshal(*res.Result.Data, &out)
	}
	if !res.Result.Success || out["greeting"] != "hello ada" {
		t.Fatalf("call of a registered skill: %+v %v (%s)", res.Result, out, deref(res.Result.Error))
	}
	// The other session: unknown, the same answer as a skill that never was.
	_, err = call(b, "")
	aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown skill")
	if d, err := b.SkillDiscover(ctx, &msg.SkillDiscoverReq{Name: aeptest.Ptr("greet")}); err != nil || len(d.Skills) != 0 {
		t.Fatalf("discover from another session: %+v %v", d, err)
	}
	// Validated like start-up skills; a known version is refused.
	for _, tc := range []struct {
		name string
		req  *msg.SkillRegisterReq
		want string
	}{
		{"same version", greet("1.0.0"), "already known"},
		{"not semver", greet("1.0"), "semantic version"},
		{"escaping path", func() *msg.SkillRegisterReq { r := greet("1.1.0"); r.Files[0].Path = "../x.sh"; return r }(), ".."},
		{"no entrypoint", func() *msg.SkillRegisterReq { r := greet("1.1.0"); delete(r.Manifest, "entrypoint"); return r }(), "entrypoint"},
		{"unknown manifest field", func() *msg.SkillRegisterReq { r := greet("1.1.0"); r.Manifest["nope"] = 1; return r }(), "nope"},
		{"operator's skill and version", func() *msg.SkillRegisterReq { r := greet("1.2.0"); r.Manifest["name"] = "echo"; return r }(), "already known"},
	} {
		_, err := a.SkillRegister(ctx, tc.req)
		aeptest.WantError(t, err, wire.CodeSchemaViolation, tc.want)
	}
	// A newer version is called by default; the older stays callable.
	if _, err := a.SkillRegister(ctx, greet("1.1.0")); err != nil {
		t.Fatal(err)
	}
	for version, want := range map[string]string{"": "1.1.0", "1.0.0": "1.0.0"} {
		res, err := call(a, version)
		if err != nil || !res.Result.Success || res.Result.Version != want {
			t.Fatalf("call version %q: %+v %v", version, res, err)
		}
	}
	n, err := st.Client.SkillRegistration.Query().Where(skillregistration.Name("greet")).Count(ctx)
	if err != nil || n != 2 {
		t.Fatalf("stored registrations %d %v", n, err)
	}
	a.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := st.Client.SkillRegistration.Query().Count(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registrations of an ended session still stored: %d %v", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSkillsDirHotReload: a skill folder added to the operator's directory
// is served without a restart; a broken folder keeps the skills loaded
// before.
func TestSkillsDirHotReload(t *testing.T) {
	dir := t.TempDir()
	copyDir := func(from, to string) {
		t.Helper()
		if err := os.CopyFS(to, os.DirFS(from)); err != nil {
			t.Fatal(err)
		}
	}
	copyDir("testdata/skills/echo-1.2.0", filepath.Join(dir, "echo-1.2.0"))
	c := connect(t, newHost(t, &skills.Plugin{Settings: skills.Settings{Dir: dir, ReloadSeconds: 0.05}}))
	ctx := aeptest.Context(t)
	versions := func() string {
		d, err := c.SkillDiscover(ctx, &msg.SkillDiscoverReq{Name: aeptest.Ptr("echo")})
		if err != nil {
			t.Fatal(err)
		}
		var v []string
		for _, s := range d.Skills {
			v = append(v, s.Version)
		}
		return strings.Join(v, ",")
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for versions() != want {
			if time.Now().After(deadline) {
				t.Fatalf("versions %q, want %q", versions(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("1.2.0")
	copyDir("testdata/skills/echo-1.9.0", filepath.Join(dir, "echo-1.9.0"))
	waitFor("1.9.0,1.2.0")
	if err := os.MkdirAll(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken", skills.ManifestFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // several reload periods
	if got := versions(); got != "1.9.0,1.2.0" {
		t.Fatalf("after a broken folder: %q", got)
	}
	if err := os.RemoveAll(filepath.Join(dir, "broken")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "echo-1.2.0")); err != nil {
		t.Fatal(err)
	}
	waitFor("1.9.0")
}

// TestRegisteredSkillSubagentScope: a skill registered with scope
// subagents is callable by subagents whose memory scope is not isolated;
// one registered with scope session is not, and neither is anything for an
// isolated subagent.
func TestRegisteredSkillSubagentScope(t *testing.T) {
	needSandbox(t)
	p := &skills.Plugin{Settings: skills.Settings{AllowRegister: true, Dir: "testdata/skills", WorkRoot: t.TempDir()}}
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("skills", p), aeptest.Plugin("subagents", &subagents.Plugin{})})
	ctx := aeptest.Context(t)
	parent := aeptest.Connect(t, h, "skills", "subagents")
	shared := greet("1.0.0")
	shared.Scope = msg.SkillRegisterReqScopeSubagents
	if _, err := parent.SkillRegister(ctx, shared); err != nil {
		t.Fatal(err)
	}
	private := greet("1.0.0")
	private.Manifest["name"] = "private-greet"
	if _, err := parent.SkillRegister(ctx, private); err != nil {
		t.Fatal(err)
	}
	child := func(scope msg.SubagentSpawnReqMemoryScope) *client.Client {
		r, err := parent.SubagentSpawn(ctx, &msg.SubagentSpawnReq{Name: "c-" + string(scope), MemoryScope: scope})
		if err != nil {
			t.Fatal(err)
		}
		lp, err := h.ConnectLinesTo(r.SessionID, 64)
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(client.Lines(lp, nil))
		t.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, "child", r.AuthToken, "skills"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		scope       msg.SubagentSpawnReqMemoryScope
		greet, priv bool
	}{{msg.SubagentSpawnReqMemoryScopeShared, true, false}, {msg.SubagentSpawnReqMemoryScopeRestricted, true, false}, {msg.SubagentSpawnReqMemoryScopeIsolated, false, false}} {
		c := child(tc.scope)
		for name, want := range map[string]bool{"greet": tc.greet, "private-greet": tc.priv} {
			res, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: name, Arguments: raw(`{"who": "kid"}`)})
			if want && (err != nil || !res.Result.Success) {
				t.Fatalf("%s child calling %s: %+v %v", tc.scope, name, res, err)
			}
			if !want {
				aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown skill")
			}
		}
	}
}

// TestRegisterLimitsCap: a registered skill's manifest may ask for no more
// than the operator's register_limits — the network above all, off unless
// the operator grants it — and one that leaves a limit out gets the cap.
func TestRegisterLimitsCap(t *testing.T) {
	h, _ := newHostWithStore(t, &skills.Plugin{Settings: skills.Settings{AllowRegister: true,
		RegisterLimits: skills.RegisterLimits{MemoryMB: 64, TimeoutSeconds: 10}}})
	c := connect(t, h)
	ctx := aeptest.Context(t)
	withLimits := func(version string, limits map[string]any) *msg.SkillRegisterReq {
		r := greet(version)
		r.Manifest["limits"] = limits
		return r
	}
	for _, tc := range []struct {
		name   string
		limits map[string]any
		want   string
	}{
		{"network", map[string]any{"network": true}, "limits.network"},
		{"memory over the cap", map[string]any{"memory_mb": 65}, "limits.memory_mb 65 (at most 64)"},
		{"time over the cap", map[string]any{"timeout_seconds": 11}, "limits.timeout_seconds 11 (at most 10)"},
		{"processes over the default cap", map[string]any{"max_procs": 1000}, "limits.max_procs 1000 (at most 64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.SkillRegister(ctx, withLimits("1.0.0", tc.limits))
			aeptest.WantReason(t, err, wire.CodeRuntimeError, "register_limits")
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v lacks %q", err, tc.want)
			}
		})
	}
	if _, err := c.SkillGet(ctx, &msg.SkillGetReq{Name: "greet"}); err == nil {
		t.Fatal("a refused registration left a skill")
	}
	r, err := c.SkillRegister(ctx, withLimits("1.0.0", map[string]any{"memory_mb": 32}))
	if err != nil {
		t.Fatal(err)
	}
	if l := r.Skill.Limits; l == nil || l.MemoryMb != 32 || l.TimeoutSeconds != 10 || l.Network {
		t.Fatalf("limits of a registered skill: %+v", r.Skill.Limits)
	}
}
