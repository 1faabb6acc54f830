package env_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/wire"
)

func sum(b string) string { s := sha256.Sum256([]byte(b)); return hex.EncodeToString(s[:]) }

func stage(t *testing.T, dir, rel, content string) msg.DataPart {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644))
	return msg.DataPart{Path: rel, Source: rel, Sha256: sum(content), Size: len(content)}
}

func listData(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return out
}

func TestDataPlane(t *testing.T) {
	data, staging, baseline := t.TempDir(), t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(baseline, "corpus"), 0o755))
	must(t, os.WriteFile(filepath.Join(baseline, "corpus", "a.txt"), []byte("base a"), 0o644))
	must(t, os.WriteFile(filepath.Join(baseline, "b.txt"), []byte("base b"), 0o644))
	good := stage(t, staging, "in/good.txt", "good data")
	other := stage(t, staging, "in/other.txt", "other data")
	bin := stage(t, staging, "in/blob.bin", "\xff\xfe\x00binary")
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(staging, "link")))

	h := newHost(t, &env.Plugin{Settings: env.Settings{DataRoot: data, StagingRoot: staging, BaselineDir: baseline}})
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := aeptest.ConnectWith(t, h, cd.codec, nil, "env")
			ctx := aeptest.Context(t)
			mine := filepath.Join(data, aeptest.Handle(t, c))

			add, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: []msg.DataPart{good, {Path: "deep/dir/other.txt", Source: other.Source, Sha256: other.Sha256, Size: other.Size}, bin}})
			if err != nil {
				t.Fatal(err)
			}
			if len(add.Added) != 3 || add.Added[1].Path != "deep/dir/other.txt" || add.Added[0].Sha256 != good.Sha256 || add.Added[0].Mtime == 0 {
				t.Fatalf("add: %+v", add)
			}
			before := listData(t, mine)
			if before["in/good.txt"] != "good data" || before["deep/dir/other.txt"] != "other data" {
				t.Fatalf("data root after add: %v", before)
			}

			// Every refused add leaves the data root as it was, even when
			// earlier parts of the same request were fine.
			bad := func(p msg.DataPart) []msg.DataPart {
				return []msg.DataPart{{Path: "new/first.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, p}
			}
			over := strings.Repeat("x", 64)
			refused := []struct {
				name string
				part msg.DataPart
				code wire.Code
				sub  string
			}{
				{"checksum mismatch", msg.DataPart{Path: "x.txt", Source: good.Source, Sha256: sum("other"), Size: good.Size}, wire.CodeSchemaViolation, "sha256 mismatch"},
				{"size too small", msg.DataPart{Path: "x.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size - 1}, wire.CodeSchemaViolation, "size mismatch"},
				{"size too large", msg.DataPart{Path: "x.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size + 5}, wire.CodeSchemaViolation, "size mismatch"},
				{"missing source", msg.DataPart{Path: "x.txt", Source: "in/none.txt", Sha256: good.Sha256, Size: 1}, wire.CodeRuntimeError, "does not exist"},
				{"dest dotdot", msg.DataPart{Path: "../escape.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, wire.CodeSchemaViolation, `".."`},
				{"dest nested dotdot", msg.DataPart{Path: "a/../../escape.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, wire.CodeSchemaViolation, `".."`},
				{"dest absolute", msg.DataPart{Path: "/tmp/escape.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, wire.CodeSchemaViolation, "absolute"},
				{"dest NUL", msg.DataPart{Path: "a\x00b", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, wire.CodeSchemaViolation, "NUL"},
				{"source dotdot", msg.DataPart{Path: "x.txt", Source: "../" + filepath.Base(outside) + "/secret", Sha256: sum("secret"), Size: 6}, wire.CodeSchemaViolation, `".."`},
				{"source absolute", msg.DataPart{Path: "x.txt", Source: filepath.Join(outside, "secret"), Sha256: sum("secret"), Size: 6}, wire.CodeSchemaViolation, "absolute"},
				{"source symlink out", msg.DataPart{Path: "x.txt", Source: "link/secret", Sha256: sum("secret"), Size: 6}, wire.CodeSchemaViolation, "symbolic link"},
				{"dest is a directory", msg.DataPart{Path: "deep/dir", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, wire.CodeSchemaViolation, "directory"},
				{"dest under a file", msg.DataPart{Path: "in/good.txt/x", Source: good.Source, Sha256: good.Sha256, Size: good.Size}, wire.CodeSchemaViolation, "not a directory"},
				{"bad hex", msg.DataPart{Path: "x.txt", Source: good.Source, Sha256: over[:63] + "g", Size: good.Size}, wire.CodeSchemaViolation, "sha256"},
			}
			for _, tc := range refused {
				t.Run(tc.name, func(t *testing.T) {
					_, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: bad(tc.part)})
					aeptest.WantError(t, err, tc.code, tc.sub)
					if after := listData(t, mine); len(after) != len(before) || after["in/good.txt"] != before["in/good.txt"] {
						t.Fatalf("refused add changed the data root: %v", after)
					}
				})
			}
			// A symlink inside the data root that points out (here: to a
			// sibling directory whose name has this session's id as prefix)
			// is refused for add and get alike.
			sibling := mine + "0"
			must(t, os.MkdirAll(sibling, 0o755))
			must(t, os.WriteFile(filepath.Join(sibling, "theirs.txt"), []byte("theirs"), 0o644))
			must(t, os.Symlink(sibling, filepath.Join(mine, "sib")))
			_, err = c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: bad(msg.DataPart{Path: "sib/x.txt", Source: good.Source, Sha256: good.Sha256, Size: good.Size})})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "symbolic link")
			_, err = c.EnvDataGet(ctx, &msg.EnvDataGetReq{Path: aeptest.Ptr("sib/theirs.txt")})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "symbolic link")
			_, err = c.EnvDataGet(ctx, &msg.EnvDataGetReq{Path: aeptest.Ptr("../" + filepath.Base(sibling) + "/theirs.txt")})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, `".."`)
			_, err = c.EnvDataGet(ctx, &msg.EnvDataGetReq{Glob: aeptest.Ptr("/etc/*")})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, "absolute")
			must(t, os.Remove(filepath.Join(mine, "sib")))

			// get: by path, by glob, with inline text.
			g, err := c.EnvDataGet(ctx, &msg.EnvDataGetReq{Path: aeptest.Ptr("in/good.txt"), Inline: true})
			if err != nil || len(g.Files) != 1 || g.Files[0].Sha256 != good.Sha256 || g.Files[0].Size != good.Size || g.Files[0].Content == nil || *g.Files[0].Content != "good data" {
				t.Fatalf("get by path: %+v %v", g, err)
			}
			g, err = c.EnvDataGet(ctx, &msg.EnvDataGetReq{Glob: aeptest.Ptr("in/*"), Inline: true, MaxInlineBytes: aeptest.Ptr(4)})
			if err != nil || len(g.Files) != 2 {
				t.Fatalf("get by glob: %+v %v", g, err)
			}
			for _, f := range g.Files {
				if f.Content != nil {
					t.Fatalf("inlined over the cap or binary: %+v", f)
				}
			}
			g, err = c.EnvDataGet(ctx, &msg.EnvDataGetReq{Inline: true})
			if err != nil || len(g.Files) != 3 {
				t.Fatalf("get all: %+v %v", g, err)
			}
			for _, f := range g.Files {
				if f.Path == "in/blob.bin" && f.Content != nil {
					t.Fatalf("binary inlined: %+v", f)
				}
			}
			_, err = c.EnvDataGet(ctx, &msg.EnvDataGetReq{Path: aeptest.Ptr("in/none.txt")})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "does not exist")

			// An episode reset never touches the data root; a data reset
			// never touches episodes (spec §3).
			ep := reset(t, c, env.GuessName, 5, "")
			if _, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &ep.EpisodeID}); err != nil {
				t.Fatal(err)
			}
			if after := listData(t, mine); len(after) != 3 {
				t.Fatalf("episode reset changed the data root: %v", after)
			}
			if _, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage("3")}); err != nil {
				t.Fatal(err)
			}
			rs, err := c.EnvDataReset(ctx, &msg.EnvDataResetReq{})
			if err != nil || rs.Restored != 2 {
				t.Fatalf("data reset: %+v %v", rs, err)
			}
			if after := listData(t, mine); len(after) != 2 || after["corpus/a.txt"] != "base a" || after["b.txt"] != "base b" {
				t.Fatalf("data root after reset: %v", after)
			}
			if ob, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: ep.EpisodeID}); err != nil || ob.Step != 1 {
				t.Fatalf("data reset touched the episode: %+v %v", ob, err)
			}
			if listData(t, sibling)["theirs.txt"] != "theirs" {
				t.Fatal("data reset touched a sibling directory")
			}
		})
	}
}

func TestDataResetLeavesOtherSessionsAlone(t *testing.T) {
	data, staging := t.TempDir(), t.TempDir()
	part := stage(t, staging, "f.txt", "payload")
	h := newHost(t, &env.Plugin{Settings: env.Settings{DataRoot: data, StagingRoot: staging}})
	a, b := aeptest.ConnectWith(t, h, directCodec(), nil, "env"), aeptest.ConnectWith(t, h, client.JSON, nil, "env")
	ctx := aeptest.Context(t)
	for _, c := range []*client.Client{a, b} {
		if _, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: []msg.DataPart{part}}); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := a.EnvDataReset(ctx, &msg.EnvDataResetReq{})
	if err != nil || rs.Restored != 0 {
		t.Fatalf("reset without baseline: %+v %v", rs, err)
	}
	if got := listData(t, filepath.Join(data, aeptest.Handle(t, a))); len(got) != 0 {
		t.Fatalf("a's data root not emptied: %v", got)
	}
	if got := listData(t, filepath.Join(data, aeptest.Handle(t, b))); got["f.txt"] != "payload" {
		t.Fatalf("a's reset touched b's data: %v", got)
	}
	// b cannot see a's files, nor a b's.
	g, err := a.EnvDataGet(ctx, &msg.EnvDataGetReq{})
	if err != nil || len(g.Files) != 0 {
		t.Fatalf("a sees: %+v %v", g, err)
	}
}

// The spec's exact spellings env/data/add|get|reset are requests too,
// answered by …/resp (spec §4.2, docs/DECISIONS.md, Wire).
func TestDataPlaneSpecSpellings(t *testing.T) {
	data, staging := t.TempDir(), t.TempDir()
	part := stage(t, staging, "f.txt", "payload")
	h := newHost(t, &env.Plugin{Settings: env.Settings{DataRoot: data, StagingRoot: staging}})
	pipe, err := h.ConnectLines(16)
	must(t, err)
	defer pipe.Close()
	ctx := context.Background()
	send := func(line string) map[string]any {
		t.Helper()
		must(t, pipe.WriteLine(ctx, []byte(line)))
		got, err := pipe.ReadLine(aeptest.Context(t))
		must(t, err)
		var m map[string]any
		must(t, json.Unmarshal(got, &m))
		return m
	}
	send(`{"type":"handshake/req","id":"h","proto":"1.0","ts":1,"agent_id":"a","agent_caps":["env"],"auth_token":"` + aeptest.Token + `"}`)
	pj, _ := json.Marshal([]msg.DataPart{part})
	for _, tc := range []struct{ line, want string }{
		{`{"type":"env/data/add","id":"1","proto":"1.0","ts":1,"parts":` + string(pj) + `}`, "env/data/add/resp"},
		{`{"type":"env/data/get","id":"2","proto":"1.0","ts":1,"path":"f.txt"}`, "env/data/get/resp"},
		{`{"type":"env/data/reset","id":"3","proto":"1.0","ts":1}`, "env/data/reset/resp"},
	} {
		m := send(tc.line)
		if m["type"] != tc.want {
			t.Fatalf("%s answered with %v", tc.line, m)
		}
	}
}

func TestDataRootUnavailable(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(blocker, []byte("x"), 0o644))
	h := newHost(t, &env.Plugin{Settings: env.Settings{DataRoot: filepath.Join(blocker, "data")}})
	c := aeptest.ConnectWith(t, h, directCodec(), nil, "env")
	ctx := aeptest.Context(t)
	// The cause names host paths: it goes to the log, and the agent gets
	// the condition with a stable reason.
	_, err := c.EnvDataGet(ctx, &msg.EnvDataGetReq{})
	for _, we := range []*wire.Error{
		aeptest.WantError(t, err, wire.CodeRuntimeError, "data plane unavailable"),
		aeptest.WantReason(t, err, wire.CodeRuntimeError, "data_plane_unavailable"),
	} {
		if strings.Contains(we.Message, blocker) {
			t.Fatalf("the error names a host path: %s", we.Message)
		}
	}
	_, err = c.EnvDataReset(ctx, &msg.EnvDataResetReq{})
	aeptest.WantError(t, err, wire.CodeRuntimeError, "data plane unavailable")
	_, err = c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: []msg.DataPart{{Path: "f.txt", Source: "f.txt", Size: 1, Sha256: strings.Repeat("0", 64)}}})
	aeptest.WantReason(t, err, wire.CodeRuntimeError, "staging_root_unset")
	// Episodes still work.
	reset(t, c, env.GuessName, 1, "")
}

// env/data/get's glob: `**` as a whole segment matches zero or more
// segments; a symbolically linked directory (or file) is neither followed
// nor listed, whatever the pattern.
func TestDataGetGlob(t *testing.T) {
	data, staging, outside := t.TempDir(), t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "e.txt"), []byte("outside"), 0o644))
	var parts []msg.DataPart
	for _, rel := range []string{"a.txt", "in/a.txt", "in/b.md", "in/deep/c.txt", "out/d.txt"} {
		parts = append(parts, stage(t, staging, rel, "content of "+rel))
	}
	h := newHost(t, &env.Plugin{Settings: env.Settings{DataRoot: data, StagingRoot: staging}})
	c := aeptest.ConnectWith(t, h, client.JSON, nil, "env")
	ctx := aeptest.Context(t)
	if _, err := c.EnvDataAdd(ctx, &msg.EnvDataAddReq{Parts: parts}); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(data, aeptest.Handle(t, c))
	must(t, os.Symlink(outside, filepath.Join(mine, "in", "linked")))
	must(t, os.Symlink(filepath.Join(outside, "e.txt"), filepath.Join(mine, "in", "e.txt")))
	must(t, os.Symlink(filepath.Join(mine, "in"), filepath.Join(mine, "loop")))

	tests := []struct {
		glob string
		want []string
	}{
		{"**", []string{"a.txt", "in/a.txt", "in/b.md", "in/deep/c.txt", "out/d.txt"}},
		{"in/**", []string{"in/a.txt", "in/b.md", "in/deep/c.txt"}},
		{"**/*.txt", []string{"a.txt", "in/a.txt", "in/deep/c.txt", "out/d.txt"}},
		{"in/*", []string{"in/a.txt", "in/b.md"}},
		{"in/**/c.txt", []string{"in/deep/c.txt"}},
		{"**/deep/*", []string{"in/deep/c.txt"}},
		{"{in,out}/*.txt", []string{"in/a.txt", "out/d.txt"}},
		{"./in/*.md", []string{"in/b.md"}},
		{"in/linked/**", nil},
		{"**/e.txt", nil},
		{"loop/**", nil},
		{"nothing/**", nil},
	}
	for _, tc := range tests {
		t.Run(tc.glob, func(t *testing.T) {
			g, err := c.EnvDataGet(ctx, &msg.EnvDataGetReq{Glob: aeptest.Ptr(tc.glob)})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range g.Files {
				got = append(got, f.Path)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("glob %q: got %q, want %q", tc.glob, got, tc.want)
			}
		})
	}
	refused := []struct{ glob, sub string }{
		{"in/[", "malformed"},
		{"in/{a,b", "malformed"},
		{"../**", `".."`},
		{"/**", "absolute"},
		{"{a,b}{c,d}{e,f}{g,h}{i,j}", "groups"},
		{strings.Repeat("a/", 600), "longer than"},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.glob[:min(len(tc.glob), 20)], func(t *testing.T) {
			_, err := c.EnvDataGet(ctx, &msg.EnvDataGetReq{Glob: aeptest.Ptr(tc.glob)})
			aeptest.WantError(t, err, wire.CodeSchemaViolation, tc.sub)
		})
	}
}
