package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name            string
		stamped, commit string
		bi              *debug.BuildInfo
		wantV, wantC    string
	}{
		{"stamped wins", "v1.2.3", "cafe", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-x"}, Settings: vcs(rev, "false")}, "v1.2.3", "cafe"},
		{"stamped version, commit from vcs", "v1.2.3", "", &debug.BuildInfo{Settings: vcs(rev, "true")}, "v1.2.3", rev + "-dirty"},
		{"module version from vcs", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101000000-0123456789ab+dirty"}, Settings: vcs(rev, "true")}, "v0.0.0-20260101000000-0123456789ab+dirty", rev + "-dirty"},
		{"devel with revision", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, "devel-0123456789ab", rev},
		{"devel dirty", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")}, "devel-0123456789ab+dirty", rev + "-dirty"},
		{"nothing known", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel", "unknown"},
		{"no build info", "", "", nil, "devel", "unknown"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := resolve(c.stamped, c.commit, c.bi)
			if got.Version != c.wantV || got.Commit != c.wantC || got.Go == "" {
				t.Errorf("resolve = %+v, want version %q commit %q", got, c.wantV, c.wantC)
			}
			if got.Version == "(devel)" {
				t.Error("version (devel) says nothing")
			}
		})
	}
}
