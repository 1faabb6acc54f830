package env_test

import (
	"encoding/json"
	"testing"

	"github.com/aephost/aep/capabilities/env"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Snapshots go through the kernel's session/snapshot and session/restore:
// a guess episode continues the same trajectory, random state included; a
// task episode (no save/load) comes back closed.
func TestSnapshotRestoresEpisodes(t *testing.T) {
	tasks := t.TempDir()
	writeTask(t, tasks, "answer", "echo 1", 5)
	h := newHost(t, &env.Plugin{Settings: env.Settings{TasksDir: tasks, WorkRoot: t.TempDir()}}, server.WithDataDir(t.TempDir()))
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			c := aeptest.ConnectWith(t, h, cd.codec, nil, "env")
			ctx := aeptest.Context(t)
			g := reset(t, c, env.GuessName, 9, `{"high":1000,"max_steps":100}`).EpisodeID
			task := reset(t, c, "task/answer", 0, "").EpisodeID
			step := func(a string) string {
				st, err := c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: g, Action: json.RawMessage(a)})
				if err != nil {
					t.Fatal(err)
				}
				return string(st.Observation)
			}
			step("500")
			snap, err := c.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "file"})
			if err != nil {
				t.Fatal(err)
			}
			// Continue past the snapshot, including a reset without a seed,
			// which draws from the saved random state.
			want := step("250") + step("750")
			if _, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &g}); err != nil {
				t.Fatal(err)
			}
			want += step("100")
			if _, err := c.EnvClose(ctx, &msg.EnvCloseReq{EpisodeID: g}); err != nil {
				t.Fatal(err)
			}

			rr, err := c.SessionRestore(ctx, &msg.SessionRestoreReq{SnapshotID: new(snap.SnapshotID)})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, n := range rr.Restored {
				found = found || n == "env"
			}
			if !found {
				t.Fatalf("env not among restored plugins: %v", rr.Restored)
			}
			ob, err := c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: g})
			if err != nil || ob.Step != 1 {
				t.Fatalf("restored episode: %+v %v", ob, err)
			}
			got := step("250") + step("750")
			if _, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: env.GuessName, EpisodeID: &g}); err != nil {
				t.Fatal(err)
			}
			got += step("100")
			if got != want {
				t.Fatalf("restored trajectory differs:\n got %s\nwant %s", got, want)
			}
			_, err = c.EnvObserve(ctx, &msg.EnvObserveReq{EpisodeID: task})
			aeptest.WantError(t, err, wire.CodeRuntimeError, "cannot save its state")
		})
	}
}

func TestRestoreRejectsCorruptState(t *testing.T) {
	p := &env.Plugin{Settings: env.Settings{DataRoot: t.TempDir()}}
	must(t, p.Provision(aeptest.Context(t), serverEnv()))
	for _, bad := range []string{"", "{", `{"version":7,"episodes":[]}`} {
		if err := p.Restore(aeptest.Context(t), "s-1", []byte(bad)); err == nil {
			t.Fatalf("restore of %q succeeded", bad)
		}
	}
}
