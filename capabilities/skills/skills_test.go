package skills_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/aephost/aep/internal/aeptest"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/skills"
	"github.com/aephost/aep/capabilities/toolkits"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

// needSandbox: skills always run sandboxed; bwrap must be there under CI.
func needSandbox(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (namespaces, cgroups)")
	}
	if sandbox.BwrapPath() == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("bubblewrap (bwrap) is not installed; .ci/run installs it")
		}
		t.Log("bwrap not installed: running in the namespaces mode")
	}
}

func newHost(t testing.TB, p *skills.Plugin) *server.Host {
	t.Helper()
	if p.Dir == "" {
		p.Dir = "testdata/skills"
	}
	p.WorkRoot = t.TempDir()
	return aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{aeptest.Plugin("skills", p)})
}

func connect(t testing.TB, h *server.Host) *client.Client {
	t.Helper()
	return aeptest.Connect(t, h, "skills")
}

func raw(s string) *json.RawMessage { r := json.RawMessage(s); return &r }

func TestDiscoverAndVersions(t *testing.T) {
	c := connect(t, newHost(t, &skills.Plugin{}))
	ctx := aeptest.Context(t)
	names := func(ds []msg.SkillDefinition) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name+"@"+d.Version)
		}
		return strings.Join(out, " ")
	}
	cases := []struct {
		name string
		req  msg.SkillDiscoverReq
		want string
	}{
		{"newest by semver, not by text", msg.SkillDiscoverReq{FilterTags: []string{"demo"}}, "echo@1.10.0"},
		{"every version of a name", msg.SkillDiscoverReq{Name: aeptest.Ptr("echo")}, "echo@1.10.0 echo@1.9.0 echo@1.2.0"},
		{"one version", msg.SkillDiscoverReq{Name: aeptest.Ptr("echo"), Version: aeptest.Ptr("1.9.0")}, "echo@1.9.0"},
		{"tags match any", msg.SkillDiscoverReq{FilterTags: []string{"db", "broken"}}, "badout@1.0.0 needs-sql@1.0.0 notjson@1.0.0"},
		{"unknown tag", msg.SkillDiscoverReq{FilterTags: []string{"nope"}}, ""},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			r, err := c.SkillDiscover(ctx, &cs.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(r.Skills); got != cs.want {
				t.Fatalf("got %q, want %q", got, cs.want)
			}
			for _, d := range r.Skills {
				if d.Instructions != nil {
					t.Fatal("discover returned instructions")
				}
			}
		})
	}
	g, err := c.SkillGet(ctx, &msg.SkillGetReq{Name: "echo"})
	if err != nil || g.Skill.Version != "1.10.0" || g.Skill.Instructions == nil || *g.Skill.Instructions == "" {
		t.Fatalf("get: %+v %v", g, err)
	}
	_, err = c.SkillGet(ctx, &msg.SkillGetReq{Name: "echo", Version: aeptest.Ptr("2.0.0")})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "have 1.10.0, 1.9.0, 1.2.0")
}

func TestBadManifestStopsTheHost(t *testing.T) {
	cases := []struct{ name, manifest, want string }{
		{"bad version", `{"name":"x","version":"1.0","entrypoint":["true"]}`, "semantic version"},
		{"no entrypoint", `{"name":"x","version":"1.0.0"}`, "entrypoint"},
		{"unknown field", `{"name":"x","version":"1.0.0","entrypoint":["true"],"shell":true}`, "unknown field"},
		{"bad schema", `{"name":"x","version":"1.0.0","entrypoint":["true"],"input_schema":{"type":12}}`, "input_schema"},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "x"), 0o755)
			os.WriteFile(filepath.Join(dir, "x", skills.ManifestFile), []byte(cs.manifest), 0o644)
			p := &skills.Plugin{Settings: skills.Settings{Dir: dir, WorkRoot: t.TempDir()}}
			_, err := server.New(context.Background(), aeptest.Config(nil), server.WithPlugin(server.PluginSpec{Name: "skills", Type: "skills", Impl: p}))
			if err == nil || !strings.Contains(err.Error(), cs.want) || !strings.Contains(err.Error(), "folder x") {
				t.Fatalf("got %v, want an error about %q naming the folder", err, cs.want)
			}
		})
	}
}

// TestCallEventsInOrder: the newest version runs, its stderr's JSON lines
// arrive as skill/event in order before the reply and in the result.
func TestCallEventsInOrder(t *testing.T) {
	needSandbox(t)
	c := connect(t, newHost(t, &skills.Plugin{}))
	for _, version := range []string{"", "1.2.0"} {
		t.Run("version="+version, func(t *testing.T) {
			var seen []string
			replied := false
			ctx := client.WithEvents(aeptest.Context(t), func(e client.Event) {
				if replied {
					t.Error("event after the reply")
				}
				if e.Type != "skill/event" || e.Seq != len(seen) {
					t.Errorf("event %+v", e)
				}
				seen = append(seen, string(e.Kind))
			})
			req := &msg.SkillCallReq{Name: "echo", Arguments: raw(`{"text":"hi"}`), Streaming: ptrBool(true)}
			if version != "" {
				req.Version = &version
			}
			r, err := c.SkillCall(ctx, req)
			replied = true
			if err != nil {
				t.Fatal(err)
			}
			res := r.Result
			want := "1.10.0"
			if version != "" {
				want = version
			}
			if !res.Success || res.Version != want || string(*res.Data) != fmt.Sprintf(`{"echo":{"text":"hi"},"version":"%s"}`, want) {
				t.Fatalf("result %+v error %v", res, deref(res.Error))
			}
			order := "status progress log artifact log"
			if got := strings.Join(seen, " "); got != order {
				t.Fatalf("streamed events %q, want %q", got, order)
			}
			var kinds []string
			for _, e := range res.Events {
				kinds = append(kinds, string(e.Kind))
			}
			if strings.Join(kinds, " ") != order || res.Events[1].Data["pct"] != float64(50) || res.Events[2].Data["message"] != "a plain stderr line" ||
				res.Events[3].Data["name"] != "out.txt" {
				t.Fatalf("result events %+v", res.Events)
			}
		})
	}
}

func TestCallFailures(t *testing.T) {
	needSandbox(t)
	c := connect(t, newHost(t, &skills.Plugin{}))
	ctx := aeptest.Context(t)
	// Input violations are schema_violation errors naming the field; nothing runs.
	for _, args := range []string{`{}`, `{"text": 5}`, `{"text":"x","extra":1}`, `[1]`} {
		_, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: "echo", Arguments: raw(args)})
		aeptest.WantError(t, err, wire.CodeSchemaViolation, "input_schema")
	}
	_, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: "nope"})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "unknown skill")
	// Output that is not valid is a failed result.
	for name, sub := range map[string]string{"badout": "output_schema at /", "notjson": "not JSON"} {
		r, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result.Success || r.Result.Error == nil || !strings.Contains(*r.Result.Error, sub) || r.Result.Data != nil {
			t.Fatalf("%s: %+v", name, r.Result)
		}
	}
}

func TestMissingToolkit(t *testing.T) {
	p := &skills.Plugin{}
	c := connect(t, newHost(t, p))
	_, err := c.SkillCall(aeptest.Context(t), &msg.SkillCallReq{Name: "needs-sql"})
	we := aeptest.WantError(t, err, wire.CodeCapabilityMissing, "needs toolkit(s) not configured in this session: sql")
	if we.Capability != "toolkits" {
		t.Fatalf("capability %q", we.Capability)
	}
	entries, _ := os.ReadDir(p.WorkRoot)
	if _, err := os.Stat(filepath.Join(p.WorkRoot, "ran-needs-sql")); err == nil || len(entries) != 0 {
		t.Fatal("the skill ran")
	}
}

// TestSandboxOutcomes: the limits and confinement of docs/DECISIONS.md, Sandbox outcomes
// through skill/call.
func TestSandboxOutcomes(t *testing.T) {
	needSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	modes := []sandbox.Mode{sandbox.ModeNamespaces}
	if sandbox.BwrapPath() != "" {
		modes = append(modes, sandbox.ModeBwrap)
	}
	outside := t.TempDir()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			c := connect(t, newHost(t, &skills.Plugin{Settings: skills.Settings{SandboxMode: mode}}))
			ctx := aeptest.Context(t)
			for name, code := range map[string]wire.Code{"hog": wire.CodeOutOfMemory, "spin": wire.CodeTimeout, "segv": wire.CodeSandboxCrash} {
				_, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: name})
				aeptest.WantError(t, err, code, name)
			}
			r, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: "escape", Arguments: raw(fmt.Sprintf(`{"target":%q}`, filepath.Join(outside, "x")))})
			if err != nil || !r.Result.Success {
				t.Fatalf("escape: %+v %v", r, err)
			}
			if got := string(*r.Result.Data); got != `{"work":true,"skill_dir":false,"etc":false,"tmp_outside":false}` {
				t.Fatalf("writes: %s", got)
			}
			if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
				t.Fatal("a write outside the work directory reached the host")
			}
			for name, want := range map[string]string{"net-closed": `{"connected":false}`, "net-open": `{"connected":true}`} {
				r, err := c.SkillCall(ctx, &msg.SkillCallReq{Name: name, Arguments: raw(fmt.Sprintf(`{"port":%d}`, port))})
				if err != nil || !r.Result.Success || string(*r.Result.Data) != want {
					t.Fatalf("%s: %+v %v", name, r, err)
				}
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

func ptrBool(b bool) *bool { return &b }

// TestToolkitNotConfigured: with the toolkits capability on but the sql
// toolkit not configured in the session, a skill that needs it is refused
// before anything runs; once the session configures it, the skill runs.
func TestToolkitNotConfigured(t *testing.T) {
	p := &skills.Plugin{Settings: skills.Settings{Dir: "testdata/skills", WorkRoot: t.TempDir()}}
	h := aeptest.NewHost(t, aeptest.Config(nil), []server.PluginSpec{
		aeptest.Plugin("skills", p),
		{Name: "tk", Type: "toolkits", Impl: &toolkits.Plugin{}},
	}, server.WithDataDir(t.TempDir()))
	c := aeptest.Connect(t, h, "skills", "toolkits")
	// Refused before anything runs: no work directory is created.
	_, err := c.SkillCall(aeptest.Context(t), &msg.SkillCallReq{Name: "needs-sql"})
	aeptest.WantError(t, err, wire.CodeCapabilityMissing, "not configured in this session: sql")
	if entries, _ := os.ReadDir(p.WorkRoot); len(entries) != 0 {
		t.Fatalf("the skill started before its toolkit was configured: %v", entries)
	}

	r, err := c.ToolkitConfigure(aeptest.Context(t), &msg.ToolkitConfigureReq{ToolkitName: "sql",
		Config: map[string]any{"driver": "sqlite", "database": "skills.db", "mode": "read_write"}})
	if err != nil || r.Status != "ok" {
		t.Fatalf("configure: %v %+v", err, r)
	}
	res, err := c.SkillCall(aeptest.Context(t), &msg.SkillCallReq{Name: "needs-sql"})
	if err != nil {
		t.Fatal(err)
	}
	// Success means the entrypoint ran and printed its JSON output.
	if !res.Result.Success {
		t.Fatalf("skill result %+v", res.Result)
	}
}
