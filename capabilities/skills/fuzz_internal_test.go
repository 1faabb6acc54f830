package skills

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/semver"

	"github.com/aephost/aep/conformance"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// hostChecker compiles schemas/ once per fuzz test.
func hostChecker(f *testing.F) *conformance.Checker {
	f.Helper()
	c, err := conformance.Module()
	if err != nil {
		f.Fatal(err)
	}
	return c
}

// FuzzLoadManifest feeds any bytes to the skill.json parser. A manifest it
// accepts has a name, a semantic version and an entrypoint; its limits
// reach the sandbox as positive values (zero or negative would mean no
// limit there); its schemas compile and validate values without a panic;
// and skill/get replies describing it conform to schemas/. The seeds are
// the manifests of testdata/skills and near misses of them.
func FuzzLoadManifest(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "skills", "*", ManifestFile))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed manifests: %v", err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{"name":"x","version":"1.0.0","entrypoint":["true"]}`,
		`{"name":"x","version":"1.0","entrypoint":["true"]}`,
		`{"name":"x","version":"v1.0.0","entrypoint":["true"]}`,
		`{"name":"x","version":"1.0.0-rc.1+b","entrypoint":["true"],"limits":{"timeout_seconds":-1,"memory_mb":0}}`,
		`{"name":"x","version":"1.0.0","entrypoint":[]}`,
		`{"name":"","version":"1.0.0","entrypoint":["true"]}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"],"extra":1}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"],"input_schema":{"$ref":"http://example.com/s.json"}}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"],"input_schema":{"type":5}}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"],"output_schema":{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}}}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"],"limits":{"memory_mb":9007199254740993}}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"],"limits":{"timeout_seconds":1e300,"cpu_seconds":1e-300}}`,
		`{"name":"x","version":"1.0.0","entrypoint":["true"]} trailing`,
		`null`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	checker := hostChecker(f)
	dir := f.TempDir()
	samples := []any{nil, map[string]any{}, map[string]any{"text": "hi", "port": 1.0}, "x", 1.5, []any{1.0, "a"}, true}
	f.Fuzz(func(t *testing.T, manifest []byte) {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), manifest, 0o600); err != nil {
			t.Fatal(err)
		}
		sk, err := load(dir)
		if err != nil {
			if sk != nil {
				t.Fatalf("load refused with %v but returned a skill", err)
			}
			return
		}
		switch {
		case sk.Name == "":
			t.Fatal("accepted an empty name")
		case !semver.IsValid("v"+sk.Version) || strings.Count(sk.Version, ".") < 2:
			t.Fatalf("accepted version %q", sk.Version)
		case len(sk.Entrypoint) == 0:
			t.Fatal("accepted an empty entrypoint")
		case sk.in == nil || sk.out == nil || sk.Tags == nil || sk.Toolkits == nil:
			t.Fatalf("accepted skill is incomplete: %+v", sk)
		}
		l := sk.limits
		timeout := time.Duration(l.TimeoutSeconds * float64(time.Second))
		cpu := time.Duration(l.CPUSeconds * float64(time.Second))
		mem := l.MemoryMB << 20
		if timeout <= 0 || cpu <= 0 || mem <= 0 || mem>>20 != l.MemoryMB || l.MaxProcs <= 0 || l.OutputBytes <= 0 {
			t.Fatalf("limits %+v reach the sandbox as timeout %v, cpu %v, memory %d bytes: a limit is lost", l, timeout, cpu, mem)
		}
		for _, v := range samples {
			violations(sk.in, v)
			violations(sk.out, v)
		}
		for _, with := range []bool{false, true} {
			line, err := wire.Encode(&wire.Envelope{Type: "skill/get/resp", ID: "h1", ReqID: "r1", TS: 1},
				&msg.SkillGetResp{Skill: sk.definition(with)})
			if err != nil {
				t.Fatalf("encoding the definition: %v", err)
			}
			if err := checker.CheckHostLine(line); err != nil {
				t.Fatalf("skill/get reply does not conform: %v\n%s", err, line)
			}
		}
	})
}

// FuzzParseEvent feeds any stderr line of a skill to the event parser: a
// line that is not blank is one event of a spec §6 kind, a line that is not
// such an event is kept as a log event with valid UTF-8 text, and the
// skill/event the host sends with it conforms to schemas/.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"kind":"progress","data":{"pct":50,"message":"half"}}`,
		`{"kind":"status","message":"inline data"}`,
		`{"kind":"artifact","data":{"name":"a","mime":"text/plain","chunk":"x","final":true}}`,
		`{"kind":"log","data":"not an object"}`,
		`{"kind":"debug","data":{}}`,
		`{"kind":5}`,
		`plain text`, "bad \xff utf-8", ``, "   ", "\t", `null`, `[1,2]`, `{"kind":"log","kind":"status"}`,
	} {
		f.Add([]byte(s))
	}
	checker := hostChecker(f)
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.TrimRight(line, "\r\n") // as readEvents hands it over
		ev, ok := parseEvent(line)
		if blank := len(bytes.TrimSpace(line)) == 0; ok == blank {
			t.Fatalf("parseEvent(%q) ok = %v", line, ok)
		}
		if !ok {
			return
		}
		switch ev.Kind {
		case msg.SkillEventKindProgress, msg.SkillEventKindStatus, msg.SkillEventKindLog, msg.SkillEventKindArtifact:
		default:
			t.Fatalf("parseEvent(%q): kind %q", line, ev.Kind)
		}
		if ev.Data == nil {
			t.Fatalf("parseEvent(%q): nil data", line)
		}
		if m, isText := ev.Data["message"].(string); isText && ev.Data["level"] == "stderr" && !utf8.ValidString(m) {
			t.Fatalf("parseEvent(%q): log text %q is not valid UTF-8", line, m)
		}
		if _, err := json.Marshal(ev); err != nil {
			t.Fatalf("parseEvent(%q): event does not encode: %v", line, err)
		}
		out, err := wire.Encode(&wire.Envelope{Type: "skill/event", ID: "h1", ReqID: "r1", TS: 1},
			&msg.Event{Kind: msg.EventKind(ev.Kind), Data: msg.EventData(ev.Data), Seq: 0})
		if err != nil {
			t.Fatalf("encoding the event: %v", err)
		}
		if err := checker.CheckHostLine(out); err != nil {
			t.Fatalf("skill/event does not conform: %v\n%s", err, out)
		}
	})
}
