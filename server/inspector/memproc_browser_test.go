//go:build aepbrowser

package inspector_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

// TestBrowserMemoryAndProcesses: with the page open on a session, the
// memory view lists what the session stores by tier, a search finds an
// entry and a matching entry stored later joins the hits as it is stored;
// the processes view shows a command's output line by line while it runs
// (its first line before it printed its second). A declared password and
// the session's transport id, planted in memory and in the output, show
// as [redacted] in both views and nowhere else in what the page received.
func TestBrowserMemoryAndProcesses(t *testing.T) {
	r := newRig(t)
	b := newBrowser(t)
	c, _ := r.agent(t, "rememberer", tenantSecret)
	handle := aeptest.Handle(t, c)
	ctx := aeptest.Context(t)
	// The password is a declared secret once a toolkit is configured with it.
	if res, err := c.ToolkitConfigure(ctx, &msg.ToolkitConfigureReq{ToolkitName: "sql", Config: msg.ToolkitConfigureReqConfig{
		"driver": "sqlite", "database": "app.db", "mode": "read_write", "password": password}}); err != nil || res.Status != msg.ToolkitConfigureRespStatusOk {
		t.Fatalf("configure %+v %v", res, err)
	}
	b.do(t, "open the session", chromedp.Navigate(r.srv.URL+"/inspector/?token="+operatorToken),
		chromedp.Navigate(r.srv.URL+"/inspector/#/session/"+handle))
	b.waitFor(t, "the session", `tl.all.length > 0`)
	b.do(t, "memory", chromedp.Click(chromedp.CSS(`#tab-memory`)))

	mem, err := c.MemoryInit(ctx, &msg.MemoryInitReq{})
	if err != nil {
		t.Fatal(err)
	}
	store := func(tier, key, content string) {
		t.Helper()
		raw, _ := json.Marshal(content)
		if _, err := c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: mem.MemoryID, Entries: []msg.MemoryEntry{{Key: key, Tier: msg.MemoryEntryTier(tier), Content: raw}}}); err != nil {
			t.Fatal(err)
		}
	}
	store("working", "fruit", "a yellow banana")
	store("semantic", "colour", "the sky is blue")
	store("episodic", "db", "the db password is "+password+" on "+c.SessionID())
	b.waitFor(t, "three entries in three tiers", `document.querySelectorAll('#memory-list tr.entry').length === 3 && document.querySelectorAll('#memory-list table.entries').length === 3`)
	b.do(t, "search", chromedp.SendKeys(chromedp.CSS(`#memory-search`), "banana"))
	b.waitFor(t, "one hit", `document.querySelectorAll('#memory-list tr.entry.hit').length === 1 && document.querySelectorAll('#memory-list tr.entry').length === 1`)
	// Stored after the search: the new match shows as it is stored.
	store("semantic", "recipe", "banana bread needs ripe bananas")
	b.waitFor(t, "the new hit", `[...document.querySelectorAll('#memory-list tr.entry.hit')].map(r => r.dataset.key).sort().join() === 'fruit,recipe'`)
	if txt := eval[string](t, b, `document.getElementById('memory-count').textContent`); txt != "2 of 4 entries match" {
		t.Fatalf("count %q", txt)
	}
	b.screenshot(t, "inspector-memory.png")
	b.do(t, "clear the search", chromedp.Evaluate[chromedp.Void](`document.getElementById('memory-search').value = ''; drawMemory(); true`))
	memText := eval[string](t, b, `document.getElementById('memory').innerText`)
	if !strings.Contains(memText, "[redacted]") || strings.Contains(memText, password) {
		t.Fatalf("the planted password in the memory view: %s", memText)
	}

	b.do(t, "processes", chromedp.Click(chromedp.CSS(`#tab-processes`)))
	sp, err := c.ProcSpawn(ctx, &msg.ProcSpawnReq{Argv: []string{"sh", "-c", "echo first-line " + password + "; sleep 2; echo second-line"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := sp.Process.ProcID
	read := make(chan error, 1)
	go func() {
		_, err := c.ProcRead(client.WithEvents(ctx, func(client.Event) {}), &msg.ProcReadReq{ProcID: pid, Follow: true, FollowTimeout: aeptest.Ptr(20.0)})
		read <- err
	}()
	out := fmt.Sprintf(`document.querySelector('.proc[data-proc=%q] pre.proc-out').textContent`, pid)
	// The first line while the command still runs: the second is 2 s away.
	b.waitFor(t, "the first line, live", fmt.Sprintf(`(() => { const p = document.querySelector('.proc[data-proc=%q] pre.proc-out'); return p && /first-line/.test(p.textContent) && !/second-line/.test(p.textContent); })()`, pid))
	b.waitFor(t, "the second line", fmt.Sprintf(`/second-line/.test(%s)`, out))
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	procText := eval[string](t, b, `document.getElementById('processes').innerText`)
	if !strings.Contains(procText, "[redacted]") || strings.Contains(procText, password) || !strings.Contains(procText, "sh -c") {
		t.Fatalf("the process view: %s", procText)
	}
	b.screenshot(t, "inspector-processes.png")

	text := b.everything(t)
	for _, s := range append(r.h.Operator().Inspect().Secrets().Values, tenantSecret, password, operatorToken, hostToken, c.SessionID()) {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("the page received %q: …%s…", s, text[max(0, i-200):min(len(text), i+100)])
		}
	}
}
