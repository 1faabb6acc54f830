//go:build aepbrowser

package inspector_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aepbin"
	"github.com/aephost/aep/internal/aeptest"
)

// TestBrowserLineageForkGroup: a recorded session of guess takes a
// snapshot and forks 8 ways after one wrong guess; half the forks guess the secret (return 1), half
// do not (return 0). The session's lineage shows the root with one group
// of 8 branches, each with its fork point and return, and the snapshot; the group exported
// from the page is, byte for byte, what `aep export trajectories --group`
// writes from the same store.
func TestBrowserLineageForkGroup(t *testing.T) {
	r := newRig(t)
	bin := aepbin.Build(t)
	ctx := aeptest.Context(t)
	// The secret of seed 7, found by another session.
	scout, _ := r.agent(t, "scout", hostToken)
	ep, err := scout.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(7)})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi, secret := 0, 100, -1
	for range 20 {
		g := (lo + hi) / 2
		st, err := scout.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: ep.EpisodeID, Action: json.RawMessage(fmt.Sprint(g))})
		if err != nil {
			t.Fatal(err)
		}
		var obs struct{ Hint int }
		_ = json.Unmarshal(st.Observation, &obs)
		if st.Terminated {
			secret = g
			break
		}
		if obs.Hint < 0 {
			hi = g
		} else {
			lo = g + 1
		}
	}
	if secret < 0 {
		t.Fatal("the scout found no secret")
	}
	wrong := (secret + 1) % 100

	root, _ := r.agent(t, "grpo", tenantSecret)
	rootHandle := aeptest.Handle(t, root)
	rep, err := root.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: aeptest.Ptr(7)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: rep.EpisodeID, Action: json.RawMessage(fmt.Sprint(wrong))}); err != nil {
		t.Fatal(err)
	}
	snap, err := root.SessionSnapshot(ctx, &msg.SessionSnapshotReq{Target: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	fr, err := root.SessionFork(ctx, &msg.SessionForkReq{Count: 8})
	if err != nil || len(fr.Forks) != 8 || fr.Group == nil {
		t.Fatalf("fork %+v %v", fr, err)
	}
	group := *fr.Group
	want := map[string]float64{}
	for i, f := range fr.Forks {
		pipe, err := r.h.ConnectLinesTo(f.SessionID, 64)
		if err != nil {
			t.Fatal(err)
		}
		fc := client.New(client.Lines(pipe, nil))
		t.Cleanup(func() { fc.Close() })
		if hs, err := fc.Client.Handshake(ctx, &msg.HandshakeReq{AgentID: "grpo", AgentCaps: rigCaps, AuthToken: tenantSecret}); err != nil || !hs.Ok {
			t.Fatalf("fork handshake %+v %v", hs, err)
		}
		g := wrong
		if i%2 == 0 {
			g = secret
		}
		st, err := fc.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: rep.EpisodeID, Action: json.RawMessage(fmt.Sprint(g))})
		if err != nil {
			t.Fatal(err)
		}
		want[f.Handle] = st.Reward
	}

	b := newBrowser(t)
	b.do(t, "open the root's lineage", chromedp.Navigate(r.srv.URL+"/inspector/?token="+operatorToken),
		chromedp.Navigate(r.srv.URL+"/inspector/#/session/"+rootHandle))
	b.waitFor(t, "the session", `tl.all.length > 0`)
	b.do(t, "lineage", chromedp.Click(chromedp.CSS(`#tab-lineage`)))
	sel := fmt.Sprintf(`li.node[data-handle=%q] li.group[data-group=%q] > ul > li.node`, rootHandle, group)
	b.waitFor(t, "8 branches", fmt.Sprintf(`document.querySelectorAll(%q).length === 8`, sel))
	got := eval[map[string]string](t, b, fmt.Sprintf(`Object.fromEntries([...document.querySelectorAll(%q)].map(n => [n.dataset.handle, n.dataset.return + ' | ' + n.innerText]))`, sel))
	ones := 0
	for h, w := range want {
		g, ok := got[h]
		if !ok || !strings.HasPrefix(g, fmt.Sprint(w)+" | ") || !strings.Contains(g, "forked at record") || !strings.Contains(g, fmt.Sprintf("return %v", w)) {
			t.Fatalf("branch %s shows %q, want return %v", h, g, w)
		}
		if w == 1 {
			ones++
		}
	}
	if ones != 4 {
		t.Fatalf("%d branches returned 1, want 4", ones)
	}
	// The snapshot the root took, which it (and any session) may restore.
	b.waitFor(t, "the root's snapshot", fmt.Sprintf(`document.querySelector('li.snapshot[data-snapshot=%q]')`, snap.SnapshotID))
	b.do(t, "export the group", chromedp.Click(chromedp.CSS(fmt.Sprintf(`li.group[data-group=%q] > button.export-group`, group))))
	b.waitFor(t, "the export", `document.getElementById('export-out').dataset.done === 'ok'`)
	b.screenshot(t, "inspector-lineage.png")
	page := eval[string](t, b, `document.getElementById('export-out').textContent`)
	cli, err := exec.Command(bin, "export", "trajectories", "--group", group, "--data-dir", r.dataDir).Output()
	if err != nil {
		t.Fatalf("aep export: %v", err)
	}
	if len(cli) == 0 || strings.Count(string(cli), "\n") < 8 {
		t.Fatalf("the CLI exported %d bytes: the comparison would prove nothing", len(cli))
	}
	if page != string(cli) {
		t.Fatalf("the page's export differs from the CLI's:\npage %d bytes:\n%.2000s\ncli %d bytes:\n%.2000s", len(page), page, len(cli), cli)
	}
}
