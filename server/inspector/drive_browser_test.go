//go:build aepbrowser

package inspector_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The page's helpers the drive tests use: pick a message type, set a field
// of the form by its path, send, and wait for the answer of the last send.
const driveHelpers = `
window.t_pick = (type) => {
  const sel = document.getElementById('drive-type');
  const o = [...sel.options].find((o) => o.textContent === type);
  sel.value = o.value;
  sel.dispatchEvent(new Event('change'));
};
window.t_set = (path, v) => {
  const f = document.querySelector('#drive-form [data-path="' + path + '"]');
  f.value = v;
  f.dispatchEvent(new Event('input'));
  f.dispatchEvent(new Event('change'));
};
window.t_add = (path) => document.querySelector('#drive-form button.add[data-path="' + path + '"]').click();
window.t_send = () => { document.getElementById('drive-answer').dataset.answered = ''; document.getElementById('drive-send').click(); };
window.t_answer = () => { try { return JSON.parse(document.getElementById('drive-answer').textContent); } catch (e) { return null; } };
true`

// TestBrowserDriveByHand: the page opens a session for a tenant through
// the operator-opened session (no secret typed or received), builds
// requests of five shapes from their forms — none, a nested array of
// objects with an enum and a JSON field, an enum, a required field left
// empty (refused before sending, nothing sent), a free-form JSON field —
// and each reply shows in the form's answer and in the timeline after its
// request. A sent request can be sent again from the page's list; the
// JSON editor is validated against the same schema. An env episode of
// guess shows its steps, and its reward plot has one point per step.
// Nothing the host holds secret reaches the page.
func TestBrowserDriveByHand(t *testing.T) {
	r := newRig(t)
	b := newBrowser(t)
	b.do(t, "log in", chromedp.Navigate(r.srv.URL+"/inspector/?token="+operatorToken))
	b.waitFor(t, "the tenants", `document.querySelectorAll('#drive-tenant option').length >= 3`)
	b.do(t, "open a session for acme", chromedp.Evaluate[chromedp.Void](`document.getElementById('drive-tenant').value = 'acme'`),
		chromedp.Click(chromedp.CSS(`#drive-open-btn`)))
	b.waitFor(t, "the driven session", `/^#\/session\/h-/.test(location.hash) && !document.getElementById('drive').hidden && document.querySelectorAll('#drive-type option').length > 40`)
	b.do(t, "helpers", chromedp.Evaluate[chromedp.Void](driveHelpers))
	handle := strings.TrimPrefix(eval[string](t, b, `location.hash`), "#/session/")
	b.waitFor(t, "the live handshake in the timeline", `tl.all.some(e => e.type === 'handshake/resp')`)
	head := eval[string](t, b, `document.getElementById('session-head').textContent`)
	if !strings.Contains(head, "tenant acme") || !strings.Contains(head, "agent inspector") {
		t.Fatalf("session head %q", head)
	}
	rep, err := r.h.Operator().Session(handle)
	if err != nil || !rep.OperatorOpened || rep.Tenant != "acme" {
		t.Fatalf("the driven session %+v %v", rep, err)
	}

	// send picks type, runs set (page statements filling the form), sends
	// and waits for the answer and for the request's row in the timeline
	// with its reply after it.
	send := func(typ, set string) map[string]any {
		t.Helper()
		b.do(t, "fill "+typ, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`t_pick(%q); %s; t_send(); true`, typ, set)))
		b.waitFor(t, "the answer of "+typ, `document.getElementById('drive-answer').dataset.answered !== '' && t_answer() !== null`)
		ans := eval[map[string]any](t, b, `t_answer()`)
		id := eval[string](t, b, `document.getElementById('drive-answer').dataset.answered`)
		b.waitFor(t, typ+" and its reply in the timeline", fmt.Sprintf(`(() => {
			const q = tl.all.findIndex(e => e.kind === 'request' && e.id === %[1]q && e.type === %[2]q);
			const a = tl.all.findIndex(e => e.req_id === %[1]q && e.dir === 'host' && e.kind !== 'event');
			return q >= 0 && a > q && tl.all[q].answer !== undefined;
		})()`, id, typ))
		return ans
	}
	sentOf := func(typ string) []map[string]any {
		return eval[[]map[string]any](t, b, fmt.Sprintf(`tl.all.filter(e => e.kind === 'request' && e.type === %q).map(e => e.message)`, typ))
	}

	// 1. A request with no fields.
	ans := send("memory/init/req", "")
	memID, _ := ans["memory_id"].(string)
	if ans["type"] != "memory/init/resp" || memID == "" {
		t.Fatalf("memory/init answer %v", ans)
	}
	// 2. A nested array of objects, each with an enum and a JSON field.
	ans = send("memory/store/req", fmt.Sprintf(`t_set('memory_id', %q); t_add('entries'); t_add('entries');
		t_set('entries[0].key', 'greeting'); t_set('entries[0].tier', '"working"'); t_set('entries[0].content', '"hello searchable world"');
		t_set('entries[1].key', 'fact'); t_set('entries[1].tier', '"semantic"'); t_set('entries[1].content', '{"sky": "blue"}')`, memID))
	if ans["type"] != "memory/store/resp" {
		t.Fatalf("memory/store answer %v", ans)
	}
	stored := sentOf("memory/store/req")
	entries, _ := stored[0]["entries"].([]any)
	if len(entries) != 2 || entries[1].(map[string]any)["tier"] != "semantic" || entries[1].(map[string]any)["content"].(map[string]any)["sky"] != "blue" {
		t.Fatalf("the entries sent: %v", stored[0])
	}
	// 3. An enum: a search, newest first; the hit is in the answer.
	ans = send("memory/recall/req", fmt.Sprintf(`t_set('memory_id', %q); t_set('query', 'searchable'); t_set('order', '"newest"')`, memID))
	if b, _ := json.Marshal(ans); ans["type"] != "memory/recall/resp" || !strings.Contains(string(b), "hello searchable world") {
		t.Fatalf("memory/recall answer %v", ans)
	}
	if got := sentOf("memory/recall/req"); got[0]["order"] != "newest" {
		t.Fatalf("the recall sent: %v", got[0])
	}
	// 4. A required field left empty is refused before sending.
	before := eval[int](t, b, `tl.all.length`)
	b.do(t, "an empty tool_name", chromedp.Evaluate[chromedp.Void](`t_pick('tool/call/req'); t_set('arguments', '{"path": "."}'); t_send(); true`))
	b.waitFor(t, "the refusal", `/tool_name: required/.test(document.getElementById('drive-errors').textContent)`)
	if n := eval[int](t, b, `document.querySelectorAll('#drive-history-list li').length`); n != 3 {
		t.Fatalf("%d requests listed as sent after a refused one, want 3", n)
	}
	if n := eval[int](t, b, `tl.all.length`); n != before {
		t.Fatalf("the timeline grew from %d to %d: the refused request was sent", before, n)
	}
	ans = send("tool/call/req", `t_set('arguments', '{"path": "."}'); t_set('tool_name', 'list_dir')`)
	if res, _ := ans["result"].(map[string]any); ans["type"] != "tool/call/resp" || res["success"] != true {
		t.Fatalf("tool/call answer %v", ans)
	}
	// The JSON editor of the whole message is checked against the schema.
	b.do(t, "raw JSON", chromedp.Evaluate[chromedp.Void](`document.getElementById('drive-raw').click();
		document.getElementById('drive-json').value = '{"tool_name": 5}'; t_send(); true`))
	b.waitFor(t, "the JSON refused", `/tool_name: want string/.test(document.getElementById('drive-errors').textContent)`)
	b.do(t, "back to the form", chromedp.Evaluate[chromedp.Void](`document.getElementById('drive-raw').click(); true`))
	// The validator against the bundle's schemas, keyword by keyword: each
	// bad message names its field, each good one passes.
	checks := eval[[]string](t, b, `(() => {
		const env = {id: "x", proto: "1.0", ts: 1};
		const v = (name, m) => AEPForm.validate({$ref: "#/$defs/" + name}, Object.assign({}, env, m)).join("; ");
		return [
			v("MemoryRecallReqMessage", {type: "memory/recall/req", memory_id: "m", order: "sideways"}),
			v("EnvResetReqMessage", {type: "env/reset/req", env_name: "guess", seed: 1.5}),
			v("MemoryStoreReqMessage", {type: "memory/store/req", memory_id: "m", entries: []}),
			v("MemoryStoreReqMessage", {type: "memory/store/req", memory_id: "m", entries: [{key: "k", tier: "working"}]}),
			v("ToolCallReqMessage", {type: "tool/call/req", tool_name: "t", proto: "2.0"}),
			v("ToolCallReqMessage", {type: "tool/call/req", tool_name: "t", arguments: [1]}),
			v("MemoryStoreReqMessage", {type: "memory/store/req", memory_id: "m", entries: [{key: "k", tier: "working", content: {a: [1]}}]}),
			// The union dispatches on type (if/then) to the message's schema.
			v("AgentMessage", {type: "memory/recall/req", memory_id: "m", order: "sideways"}),
		];
	})()`)
	wantChecks := []string{"order: want one of", "seed: want integer", "entries: at least 1 items", "entries[0].content: required",
		"proto: want \"1.0\"", "arguments: want object or null", "", "order: want one of"}
	for i, w := range wantChecks {
		if (w == "") != (checks[i] == "") || !strings.Contains(checks[i], w) {
			t.Errorf("validation %d: %q, want %q", i, checks[i], w)
		}
	}

	// 5. A free-form JSON field: an episode of guess, by hand.
	ans = send("env/reset/req", `t_set('env_name', 'guess'); t_set('seed', '7')`)
	ep, _ := ans["episode_id"].(string)
	if ep == "" {
		t.Fatalf("env/reset answer %v", ans)
	}
	// A binary search by hand: the last step finds the secret (reward 1).
	var rewards []float64
	lo, hi := 0, 100
	for range 20 {
		g := (lo + hi) / 2
		ans = send("env/step/req", fmt.Sprintf(`t_set('episode_id', %q); t_set('action', '%d')`, ep, g))
		if ans["type"] != "env/step/resp" {
			t.Fatalf("env/step answer %v", ans)
		}
		rw, _ := ans["reward"].(float64)
		rewards = append(rewards, rw)
		if ans["terminated"] == true {
			break
		}
		if obs, _ := ans["observation"].(map[string]any); obs["hint"] == -1.0 {
			hi = g
		} else {
			lo = g + 1
		}
	}
	if len(rewards) < 2 || rewards[len(rewards)-1] != 1 {
		t.Fatalf("the search by hand ended with rewards %v", rewards)
	}
	send("env/render/req", fmt.Sprintf(`t_set('episode_id', %q)`, ep))

	// Sent again from the page's list: the newest is the render.
	renders := len(sentOf("env/render/req"))
	b.do(t, "send again", chromedp.Evaluate[chromedp.Void](`document.getElementById('drive-answer').dataset.answered = ''; document.querySelector('#drive-history-list li .resend').click(); true`))
	b.waitFor(t, "the request sent again", fmt.Sprintf(`tl.all.filter(e => e.kind === 'request' && e.type === 'env/render/req').length === %d`, renders+1))
	// The form of a nested array of objects, for the screenshot.
	b.do(t, "a form to show", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`t_pick('memory/store/req'); t_set('memory_id', %q); t_add('entries'); t_add('entries');
		t_set('entries[0].key', 'greeting'); t_set('entries[0].tier', '"working"'); t_set('entries[0].content', '"hello"');
		t_set('entries[1].key', 'plan'); t_set('entries[1].tier', '"episodic"'); t_set('entries[1].content', '{"next": "step"}'); true`, memID)))
	b.screenshot(t, "inspector-drive.png")

	// The episode view: its steps and one point per step.
	b.do(t, "episodes", chromedp.Click(chromedp.CSS(`#tab-episodes`)))
	b.waitFor(t, "the episode", fmt.Sprintf(`document.querySelector('.episode[data-episode=%q]')`, ep))
	steps := eval[int](t, b, fmt.Sprintf(`document.querySelectorAll('.episode[data-episode=%q] tr.step').length`, ep))
	pts := eval[[]float64](t, b, fmt.Sprintf(`[...document.querySelectorAll('.episode[data-episode=%q] svg.reward-plot circle.pt')].map(c => parseFloat(c.dataset.value))`, ep))
	if steps != len(rewards) || len(pts) != len(rewards) {
		t.Fatalf("%d steps shown and %d points plotted, want %d", steps, len(pts), len(rewards))
	}
	for i := range rewards {
		if pts[i] != rewards[i] {
			t.Fatalf("point %d is %v, the step's reward %v", i+1, pts[i], rewards[i])
		}
	}
	if txt := eval[string](t, b, fmt.Sprintf(`document.querySelector('.episode[data-episode=%q]').innerText`, ep)); !strings.Contains(txt, "render after step") {
		t.Fatalf("no text render in the episode: %s", txt)
	}
	// A second episode joins the returns chart: a series per episode, a
	// point per step.
	b.do(t, "back to the timeline", chromedp.Click(chromedp.CSS(`#tab-timeline`)))
	ans = send("env/reset/req", `t_set('env_name', 'guess'); t_set('seed', '8')`)
	ep2, _ := ans["episode_id"].(string)
	send("env/step/req", fmt.Sprintf(`t_set('episode_id', %q); t_set('action', '1')`, ep2))
	b.do(t, "episodes again", chromedp.Click(chromedp.CSS(`#tab-episodes`)))
	b.waitFor(t, "two series", `document.querySelectorAll('#returns-plot g.series').length === 2`)
	if got := eval[[]int](t, b, `[...document.querySelectorAll('#returns-plot g.series')].map(g => g.querySelectorAll('circle.pt').length)`); len(got) != 2 || got[0] != len(rewards) || got[1] != 1 {
		t.Fatalf("points per series %v, want [%d 1]", got, len(rewards))
	}
	b.do(t, "scroll to the episodes", chromedp.Evaluate[chromedp.Void](`document.querySelector('.tabs').scrollIntoView(); true`))
	b.screenshot(t, "inspector-episode.png")

	// Nothing the host holds secret reached the page: the session's own
	// token and transport id among them.
	text := b.everything(t)
	known := r.h.Operator().Inspect().Secrets().Values
	if len(known) < 4 {
		t.Fatalf("the host knows %d secrets: the check would prove little", len(known))
	}
	for _, s := range append(known, tenantSecret, otherSecret, operatorToken, hostToken) {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("the page received %q: …%s…", s, text[max(0, i-200):min(len(text), i+100)])
		}
	}

	// Ending it from the page ends the session.
	b.do(t, "end", chromedp.Click(chromedp.CSS(`#drive-end`)))
	b.waitFor(t, "the end", `document.getElementById('status').textContent === 'session ended'`)
}
