//go:build aepfleet

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/client"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/pgtest"
)

// shippedCrashWindow is server.snapshots.crash_window as the Kubernetes
// ConfigMap ships it: the fleet under test runs what is shipped.
func shippedCrashWindow(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "kubernetes", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+crash_window:\s*(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/kubernetes/configmap.yaml sets no crash_window")
	}
	w, err := time.ParseDuration(string(m[1]))
	if err != nil || w <= 0 {
		t.Fatalf("the ConfigMap's crash_window %q: %v", m[1], err)
	}
	return w
}

// TestFleetCrashWindow: 15 agents write working memory and step an env
// through each shipped proxy to three hosts on PostgreSQL, with the
// ConfigMap's crash window; the host holding most of them is killed with
// SIGKILL under load. Every agent of that host, all older than the
// window, resumes in a new session within 60 s, from a point that loses
// at most the window of acknowledged work, and is told exactly what it
// lost when it lost any (client.Move's Point, LastPoint and Gap); none
// carries on silently from an earlier point. A session opened on that
// host just before the kill, younger than its first save, either
// resumes from point 0 or ends with the no-snapshot error, within 60 s.
// The others never move.
// The times are logged (docs/deploy.md, What a host that dies loses).
func TestFleetCrashWindow(t *testing.T) {
	win := shippedCrashWindow(t)
	for _, k := range proxies {
		t.Run(k.name, func(t *testing.T) {
			findBinary(t, k.bin)
			hosts := startFleetOn(t, pgtest.DSN(t, "aep_e2e_crashwin_"+k.name),
				fmt.Sprintf("  snapshots:\n    crash_window: %s\n", win), "")
			base := startProxy(t, k, hosts)
			crashWindowKill(t, base, hosts, win)
		})
	}
}

// windowAck is one acknowledged state-changing request of an agent.
type windowAck struct {
	point uint64
	at    time.Time
}

// windowAgent writes working memory and steps an env, one request at a
// time, recording the point and time of each acknowledged one.
type windowAgent struct {
	c     *client.Client
	first string
	mid   string
	ep    string

	mu       sync.Mutex
	acks     []windowAck
	ended    error     // what ended it, when something did
	resumed  time.Time // its first answer in a moved session
	failures []string  // errors that are neither answers, interruptions nor its end
}

func (a *windowAgent) run(ctx context.Context, stop <-chan struct{}) {
	for round := 0; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		for _, f := range []func() error{
			func() error {
				content, _ := json.Marshal(fmt.Sprintf("round %d", round))
				_, err := a.c.MemoryStore(ctx, &msg.MemoryStoreReq{MemoryID: a.mid, Entries: []msg.MemoryEntry{{Key: "k", Content: content, Tier: "working"}}})
				return err
			},
			func() error {
				_, err := a.c.EnvStep(ctx, &msg.EnvStepReq{EpisodeID: a.ep, Action: json.RawMessage("7")})
				return err
			},
		} {
			err := f()
			now := time.Now()
			a.mu.Lock()
			switch {
			case err == nil:
				a.acks = append(a.acks, windowAck{a.c.Point(), now})
				if len(a.c.Moves()) > 0 && a.resumed.IsZero() {
					a.resumed = now
				}
			case errors.Is(err, client.ErrInterrupted):
				// In flight when the host died: it may or may not have run.
			case errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrMoveFailed):
				a.ended = err
				a.mu.Unlock()
				return
			default:
				if len(a.failures) < 5 {
					a.failures = append(a.failures, err.Error())
				}
			}
			a.mu.Unlock()
		}
	}
}

func crashWindowKill(t *testing.T, base string, hosts []*host, win time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	dialers := []client.Dialer{client.WebSocketDialer(wsURL, nil), client.ExchangeDialer(base, nil, nil), client.HTTPDialer(base, nil, nil)}
	agents := make([]*windowAgent, 15)
	for i := range agents {
		c, err := client.Moving(ctx, dialers[i%len(dialers)], &client.MoveOptions{SnapshotWait: 5 * time.Second, AcceptGap: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, fmt.Sprintf("agent-%d", i), token, "memory", "env"); err != nil {
			t.Fatal(err)
		}
		mi, err := c.MemoryInit(ctx, &msg.MemoryInitReq{})
		if err != nil {
			t.Fatal(err)
		}
		seed := i
		ep, err := c.EnvReset(ctx, &msg.EnvResetReq{EnvName: "guess", Seed: &seed, Options: new(json.RawMessage(`{"high":1000000,"max_steps":1000000000}`))})
		if err != nil {
			t.Fatal(err)
		}
		agents[i] = &windowAgent{c: c, first: c.SessionID(), mid: mi.MemoryID, ep: ep.EpisodeID}
	}
	count := map[string]int{}
	for _, a := range agents {
		count[hostOf(t, a.first)]++
	}
	victimID := ""
	for id, n := range count {
		if victimID == "" || n > count[victimID] {
			victimID = id
		}
	}
	victim := hosts[int(victimID[len(victimID)-1]-'1')]

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.run(ctx, stop) }()
	}
	// Under load for a few windows, then a young session on the victim,
	// younger than its first save (half a window after its handshake),
	// then the kill.
	time.Sleep(3*win + 500*time.Millisecond)
	var young *client.Client
	for try := 0; young == nil; try++ {
		if try == 20 {
			t.Fatalf("twenty new sessions, none on %s", victimID)
		}
		c, err := client.Moving(ctx, dialers[1], &client.MoveOptions{SnapshotWait: 5 * time.Second, AcceptGap: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Handshake(ctx, "young", token, "memory"); err != nil {
			t.Fatal(err)
		}
		if hostOf(t, c.SessionID()) == victimID {
			young = c
		}
	}
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()

	// The young session: resumed from point 0 if its first save made it,
	// else ended with the no-snapshot error; never a hang.
	const liveness = 60 * time.Second
	yctx, ycancel := context.WithTimeout(ctx, liveness)
	_, err := young.Request(yctx, &msg.Ping{})
	if errors.Is(err, client.ErrInterrupted) {
		// Written before the proxy knew its host was dead (HAProxy sent it
		// on its reused connection to the killed host and closed the
		// client's without an answer): its fate is unknown to the client,
		// which says so and moves. What the move made of the session is
		// the next request's to show.
		t.Logf("the young session's first request after the kill: %v", err)
		_, err = young.Request(yctx, &msg.Ping{})
	}
	ycancel()
	switch ms := young.Moves(); {
	case err == nil && len(ms) == 1 && ms[0].Err == nil && ms[0].Point == 0 && ms[0].Gap == nil:
		t.Logf("the young session resumed from point 0: it was saved before the kill (%s after its handshake)", time.Since(killed))
	case errors.Is(err, client.ErrNoSnapshot):
		t.Logf("the young session ended with the no-snapshot error %s after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	default:
		t.Errorf("the young session after the kill: %v, moves %+v", err, ms)
	}

	// Each agent of the victim resumes or ends, within 60 s.
	for _, a := range agents {
		if hostOf(t, a.first) != victimID {
			continue
		}
		for {
			a.mu.Lock()
			done := !a.resumed.IsZero() || a.ended != nil
			a.mu.Unlock()
			if done {
				break
			}
			if time.Since(killed) > liveness {
				close(stop)
				wg.Wait()
				t.Fatalf("an agent of %s neither resumed nor ended within %s of the kill: moves %+v", victimID, liveness, a.c.Moves())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A few more rounds each, then stop.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	var resumedIn, lostSpans []time.Duration
	lostTotal, ended := 0, 0
	for i, a := range agents {
		a.mu.Lock()
		acks, endErr, resumed, failures := a.acks, a.ended, a.resumed, a.failures
		a.mu.Unlock()
		if len(failures) > 0 {
			t.Errorf("agent %d: requests neither answered, interrupted nor ending it: %v", i, failures)
		}
		ms := a.c.Moves()
		if hostOf(t, a.first) != victimID {
			if len(ms) != 0 || endErr != nil {
				t.Errorf("agent %d on a live host moved or ended: %+v %v", i, ms, endErr)
			}
			continue
		}
		if endErr != nil {
			// Every agent here is older than the window: saved, so it
			// must resume; an end, however clear, is a loss past it.
			ended++
			t.Errorf("agent %d of %s, older than the window, ended instead of resuming: %v", i, victimID, endErr)
			continue
		}
		if len(ms) != 1 || ms[0].Err != nil || hostOf(t, ms[0].To) == victimID {
			t.Errorf("agent %d of the killed host: moves %+v", i, ms)
			continue
		}
		m := ms[0]
		// What the agent saw acknowledged before the kill.
		var before []windowAck
		for _, ack := range acks {
			if ack.at.Before(killed) {
				before = append(before, ack)
			}
		}
		if len(before) == 0 {
			t.Errorf("agent %d: nothing acknowledged before the kill", i)
			continue
		}
		last := before[len(before)-1].point
		if m.LastPoint < last {
			t.Errorf("agent %d: the move passed last point %d, the agent saw %d", i, m.LastPoint, last)
		}
		switch {
		case m.Point > m.LastPoint:
			t.Errorf("agent %d: resumed from point %d past its last seen %d", i, m.Point, m.LastPoint)
		case m.Point < m.LastPoint:
			// A gap: it must be told, exactly.
			if m.Gap == nil || uint64(m.Gap.LastPoint) != m.LastPoint || uint64(m.Gap.Point) != m.Point || uint64(m.Gap.Lost) != m.LastPoint-m.Point {
				t.Errorf("agent %d: resumed from point %d below its last seen %d without being told: gap %+v", i, m.Point, m.LastPoint, m.Gap)
			}
		default:
			if m.Gap != nil {
				t.Errorf("agent %d: no gap, and told one: %+v", i, m.Gap)
			}
		}
		// Everything lost was acknowledged within the window before the
		// kill (plus the request running when the window passed, and a
		// second for a loaded machine).
		lost := 0
		var oldest time.Time
		for _, ack := range before {
			if ack.point > m.Point {
				lost++
				if oldest.IsZero() {
					oldest = ack.at
				}
			}
		}
		lostTotal += lost
		span := time.Duration(0)
		if lost > 0 {
			span = killed.Sub(oldest)
		}
		lostSpans = append(lostSpans, span)
		if span > win+time.Second {
			t.Errorf("agent %d: lost %d acknowledged requests, the oldest %s before the kill: past the window of %s", i, lost, span.Round(time.Millisecond), win)
		}
		resumedIn = append(resumedIn, resumed.Sub(killed))
		t.Logf("agent %d (%s): %d acknowledged before the kill; resumed from point %d of %d (lost %d, the oldest %s before the kill) %s after it",
			i, []string{"websocket", "single-exchange", "http-sse"}[i%3], len(before), m.Point, m.LastPoint, lost, span.Round(time.Millisecond), resumed.Sub(killed).Round(time.Millisecond))
	}
	slices.Sort(resumedIn)
	slices.Sort(lostSpans)
	if len(resumedIn) > 0 {
		t.Logf("%s killed with %d agents (%d ended): resumed after min %v, median %v, max %v; lost %d acknowledged requests in all, the oldest of each agent's min %v, median %v, max %v before the kill (window %s)",
			victimID, count[victimID], ended, resumedIn[0].Round(time.Millisecond), resumedIn[len(resumedIn)/2].Round(time.Millisecond), resumedIn[len(resumedIn)-1].Round(time.Millisecond),
			lostTotal, lostSpans[0].Round(time.Millisecond), lostSpans[len(lostSpans)/2].Round(time.Millisecond), lostSpans[len(lostSpans)-1].Round(time.Millisecond), win)
	} else if ended == 0 {
		t.Fatalf("no agent of %s resumed or ended", victimID)
	}
}
