//go:build aepbrowser

package inspector_test

// The inspector in a real headless Chromium (Debian's chromium), driven
// with chromedp: `go test -tags aepbrowser ./server/inspector/` (.ci/run runs
// it as a heavy suite). With AEP_INSPECTOR_SCREENSHOTS=DIR the tests save
// the screenshots of docs/inspector.md there.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/aeptest"
)

// browser is a headless Chromium tab that keeps every response body and
// server-sent event the page received.
type browser struct {
	ctx context.Context
	mu  sync.Mutex
	// received is each body and event the page got, by request.
	received []string
	ids      []network.RequestID
	streams  map[network.RequestID]bool
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (apt-get install chromium)")
		}
		t.Skip("chromium is not installed")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1400, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{streams: map[network.RequestID]bool{}}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventEventSourceMessageReceived:
			b.received = append(b.received, ev.Data)
		case *network.EventResponseReceived:
			if ev.Response != nil && strings.HasPrefix(ev.Response.MimeType, "text/event-stream") {
				b.streams[ev.RequestID] = true
			}
		case *network.EventLoadingFinished:
			b.ids = append(b.ids, ev.RequestID)
		}
	}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatal(err)
	}
	b.ctx = ctx
	return b
}

// do runs actions with a deadline.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a page expression.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitFor waits until the page expression is truthy.
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
	}
}

// everything returns every response body and event the page received so
// far, with the page's text.
func (b *browser) everything(t *testing.T) string {
	t.Helper()
	b.mu.Lock()
	ids := append([]network.RequestID(nil), b.ids...)
	all := strings.Join(b.received, "\n")
	streams := b.streams
	b.mu.Unlock()
	var out strings.Builder
	out.WriteString(all)
	got := 0
	for _, id := range ids {
		if streams[id] {
			continue // its events are in received
		}
		body, err := chromedp.Run(b.ctx, chromedp.Action[[]byte](func(ctx context.Context, tg *chromedp.Target) ([]byte, error) {
			r, err := cdp.Call(ctx, tg, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
			return r.Body, err
		}))
		if err == nil {
			got++
			out.Write(body)
			out.WriteByte('\n')
		}
	}
	if got == 0 || len(b.received) == 0 {
		t.Fatalf("the browser kept %d bodies and %d events: the check would prove nothing", got, len(b.received))
	}
	out.WriteString(eval[string](t, b, `document.body.innerText`))
	return out.String()
}

func (b *browser) screenshot(t *testing.T, name string) {
	dir := os.Getenv("AEP_INSPECTOR_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserHostAndTimeline: a scripted agent runs a session (tool calls,
// a streaming command, memory writes, an env episode, a toolkit with a
// password) before the page opens; the host view lists it under its tenant
// and agent; its timeline shows what the store recorded, in order, each
// request with its reply and its events between; a new request appears
// live, at the end, with its reply. Every body and event the page received,
// and the page's text, hold none of the secrets planted.
func TestBrowserHostAndTimeline(t *testing.T) {
	r := newRig(t)
	b := newBrowser(t)
	c, pipe := r.agent(t, "scripted-agent", tenantSecret)
	handle := aeptest.Handle(t, c)
	secrets := r.script(t, c, pipe)
	other, _ := r.agent(t, "other-agent", hostToken)
	otherHandle := aeptest.Handle(t, other)

	b.do(t, "log in", chromedp.Navigate(r.srv.URL+"/inspector/?token="+operatorToken))
	b.waitFor(t, "the host view's rows", fmt.Sprintf(`document.querySelector('tr.session[data-handle=%q]') && document.querySelector('tr.session[data-handle=%q]')`, handle, otherHandle))
	if u := eval[string](t, b, `location.href`); strings.Contains(u, "token") {
		t.Fatalf("the token stayed in the address: %s", u)
	}
	rows := eval[[]string](t, b, `[...document.querySelectorAll('#session-rows tr')].map(r => r.innerText.replace(/\s+/g, ' ').trim())`)
	joined := strings.Join(rows, "\n")
	ia, id := strings.Index(joined, "tenant acme"), strings.Index(joined, "tenant default")
	if ia < 0 || id < 0 || !strings.Contains(joined, "scripted-agent") || !strings.Contains(joined, "other-agent") || !strings.Contains(joined, "inprocess") {
		t.Fatalf("host view rows:\n%s", joined)
	}
	// The budgets used are shown: the notes written take disk.
	mine := eval[string](t, b, fmt.Sprintf(`document.querySelector('tr.session[data-handle=%q]').innerText`, handle))
	if !strings.Contains(mine, "disk ") || !strings.Contains(mine, "work ") {
		t.Fatalf("no budgets in the row: %q", mine)
	}
	// Answers per second and errors follow live: a request counts.
	for range 5 {
		if _, err := other.Request(aeptest.Context(t), &msg.Ping{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.EnvStep(aeptest.Context(t), &msg.EnvStepReq{EpisodeID: "no-such-episode", Action: []byte("1")}); err == nil {
		t.Fatal("a step of no episode succeeded")
	}
	b.waitFor(t, "the other session's requests per second and error", fmt.Sprintf(`parseFloat(document.querySelector('tr.session[data-handle=%[1]q] .rps').textContent) > 0 && /^1 /.test(document.querySelector('tr.session[data-handle=%[1]q] .errs').textContent)`, otherHandle))
	b.screenshot(t, "inspector-host.png")

	b.do(t, "open the session", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr.session[data-handle=%q] a`, handle))))
	b.waitFor(t, "the timeline", `document.querySelectorAll('#timeline .row').length > 0 && /recorded/.test(document.getElementById('session-note').textContent)`)
	if note := eval[string](t, b, `document.getElementById('session-note').textContent`); !strings.Contains(note, "Nothing is recorded for the inspector's sake") {
		t.Fatalf("note %q", note)
	}
	// The script again, live this time: its secrets reach the page only
	// through the live feed.
	secrets = append(secrets, r.script(t, c, pipe)...)
	b.waitFor(t, "the live script", `tl.all.filter(e => e.src === 'live' && e.type === 'pong').length === 1`)
	// The streaming command in order: spawn and its reply, then the read,
	// its events, and its reply.
	b.do(t, "filter proc", chromedp.SendKeys(chromedp.CSS(`#filter-type`), "proc/"))
	b.waitFor(t, "the filter", `[...document.querySelectorAll('#timeline .row')].every(r => r.dataset.type.startsWith('proc/'))`)
	b.do(t, "scroll to the top", chromedp.Evaluate[chromedp.Void](`document.getElementById('timeline').scrollTop = 0`))
	b.waitFor(t, "the first proc rows", `document.querySelector('#timeline .row[data-type="proc/spawn/req"]')`)
	if n := eval[int](t, b, `tl.shown.length`); n > 40 {
		t.Fatalf("%d proc rows: more than one screen", n)
	}
	seq := eval[[]string](t, b, `[...document.querySelectorAll('#timeline .row')].sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top)).map(r => r.dataset.kind + ' ' + r.dataset.type + ' | ' + r.innerText)`)
	var kinds []string
	for _, s := range seq {
		kinds = append(kinds, s[:strings.Index(s, " |")])
	}
	got := strings.Join(kinds, ",")
	inOrder := regexp.MustCompile(`^request proc/spawn/req,reply proc/spawn/resp,request proc/read/req,(event proc/event,)+reply proc/read/resp,`)
	if !inOrder.MatchString(got) {
		t.Fatalf("proc timeline: %s", strings.Join(seq, "\n"))
	}
	if !strings.Contains(seq[0], "→ reply") || !strings.Contains(seq[0], "ms") {
		t.Fatalf("the request row shows no reply and latency: %q", seq[0])
	}
	// The failed tool call shows as failed, with its code.
	b.do(t, "filter tool calls", chromedp.Evaluate[chromedp.Void](`document.getElementById('filter-type').value = 'tool/call/req'`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('filter-type').dispatchEvent(new Event('input'))`))
	b.waitFor(t, "a failed tool call", `[...document.querySelectorAll('#timeline .row')].some(r => /→ tool failed: /.test(r.innerText))`)
	// The cancelled wait: the cancel, and the request answered cancelled.
	b.do(t, "filter waits", chromedp.Evaluate[chromedp.Void](`document.getElementById('filter-type').value = 'proc/wait'`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('filter-type').dispatchEvent(new Event('input'))`))
	b.waitFor(t, "a cancelled request", `[...document.querySelectorAll('#timeline .row')].some(r => /→ cancelled/.test(r.innerText))`)
	b.do(t, "clear the filter", chromedp.Evaluate[chromedp.Void](`document.getElementById('filter-type').value = ''`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('filter-type').dispatchEvent(new Event('input'))`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('timeline').scrollTop = 1e9`))
	b.waitFor(t, "follow again", `document.getElementById('follow').checked`)

	// Live: a new request appears at the end with its reply.
	if _, err := c.CallTool(aeptest.Context(t), &msg.ToolCallReq{ToolName: "list_dir", Arguments: map[string]any{"path": "."}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the live request", `(() => {
		const rows = [...document.querySelectorAll('#timeline .row')].sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top));
		const n = rows.length;
		return n >= 2 && rows[n-2].dataset.type === 'tool/call/req' && /→ reply/.test(rows[n-2].innerText) && rows[n-1].dataset.type === 'tool/call/resp';
	})()`)
	// Its whole message, in the detail pane.
	b.do(t, "select the live request", chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll('#timeline .row[data-type="tool/call/req"]')].pop().click()`))
	b.waitFor(t, "the detail", `/list_dir/.test(document.getElementById('detail').textContent)`)
	b.screenshot(t, "inspector-session.png")

	text := b.everything(t)
	if !strings.Contains(text, "[redacted]") {
		t.Fatal("nothing was redacted: the planted secrets never reached the page, so the check proves nothing")
	}
	for _, s := range append(secrets, operatorToken, other.SessionID()) {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("the page received %q: …%s…", s, text[max(0, i-200):min(len(text), i+100)])
		}
	}
}

// TestBrowserTimelineVirtualised: a timeline of 10,000 messages keeps at
// most 500 nodes in the page, and scrolling to its end shows the
// 10,000th.
func TestBrowserTimelineVirtualised(t *testing.T) {
	r := newRig(t)
	b := newBrowser(t)
	c, _ := r.agent(t, "chatty-agent", hostToken)
	handle := aeptest.Handle(t, c)
	b.do(t, "open the session", chromedp.Navigate(r.srv.URL+"/inspector/?token="+operatorToken),
		chromedp.Navigate(r.srv.URL+"/inspector/#/session/"+handle))
	b.waitFor(t, "the timeline", `tl.all.length > 0 && document.getElementById('session-note').textContent !== ''`)
	have := eval[int](t, b, `tl.all.length`)
	const want = 10000
	if have%2 != 0 {
		t.Fatalf("%d messages before the pings", have)
	}
	ctx := aeptest.Context(t)
	for range (want - have) / 2 {
		if _, err := c.Request(ctx, &msg.Ping{}); err != nil {
			t.Fatal(err)
		}
	}
	b.waitFor(t, "10,000 messages", fmt.Sprintf(`tl.all.length === %d`, want))
	if txt := eval[string](t, b, `document.getElementById('count').textContent`); txt != "10000 of 10000 messages" {
		t.Fatalf("count %q", txt)
	}
	b.do(t, "scroll to the top", chromedp.Evaluate[chromedp.Void](`document.getElementById('timeline').scrollTop = 0`))
	b.waitFor(t, "the top", `document.querySelector('#timeline .row[data-n="0"]')`)
	if n := eval[int](t, b, `document.querySelectorAll('#timeline *').length`); n > 500 {
		t.Fatalf("%d timeline nodes at the top", n)
	}
	b.do(t, "scroll to the end", chromedp.Evaluate[chromedp.Void](`document.getElementById('timeline').scrollTop = document.getElementById('timeline').scrollHeight`))
	b.waitFor(t, "the 10,000th message", `(() => {
		const r = document.querySelector('#timeline .row[data-n="9999"]');
		if (!r) return false;
		const box = document.getElementById('timeline').getBoundingClientRect(), rr = r.getBoundingClientRect();
		return rr.top >= box.top && rr.bottom <= box.bottom + 1 && r.dataset.type === 'pong';
	})()`)
	if n := eval[int](t, b, `document.querySelectorAll('#timeline *').length`); n > 500 {
		t.Fatalf("%d timeline nodes at the end", n)
	}
}
