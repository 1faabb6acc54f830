package inspector

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/server/inspect"
)

// The page's live feeds are server-sent event streams: one-way, and
// carried by the login cookie like any request of the page.

// sse writes server-sent events to one page.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// event writes one event; data is JSON, which holds no newline.
func (s *sse) event(name string, data []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeWait))
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		return err
	}
	return nil
}

func (s *sse) flush() error { return s.rc.Flush() }

// writeWait bounds one write to a page: a page that stops reading is
// dropped, not waited for.
const writeWait = 10 * time.Second

// hostTick is how often the host view is sent again.
const hostTick = time.Second

// hostRow is a session of the host view with its counts.
type hostRow struct {
	Session
	AgeSeconds float64 `json:"age_s"`
	RPS        float64 `json:"rps"`
	Answers    uint64  `json:"answers"`
	Errors     uint64  `json:"errors"`
	ToolFailed uint64  `json:"tool_failed"`
	LastError  string  `json:"last_error,omitempty"`
}

type hostView struct {
	At       time.Time `json:"at"`
	Draining bool      `json:"draining"`
	Sessions []hostRow `json:"sessions"`
	RPS      float64   `json:"rps"`
	Errors   uint64    `json:"errors"`
	Since    time.Time `json:"counting_since"`
}

// hostStream sends the host view every second while the page is open.
func (h *Handler) hostStream(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h.o.Host.Audit(inspect.View{Action: "host", Target: "live", Started: start})
	h.hub.open()
	defer h.hub.close()
	s := startSSE(w)
	red := newRedactor(h.o.Host)
	prev := map[string]uint64{}
	prevAt := start
	t := time.NewTicker(hostTick)
	defer t.Stop()
	for {
		now := time.Now()
		counts := h.hub.counts()
		v := hostView{At: now, Since: start, Sessions: []hostRow{}}
		if h.o.Draining != nil {
			v.Draining = h.o.Draining()
		}
		var list []Session
		if h.o.Sessions != nil {
			list = h.hub.sessions(h.o.Sessions)
		}
		dt := now.Sub(prevAt).Seconds()
		next := make(map[string]uint64, len(list))
		for _, ss := range list {
			c := counts[ss.Handle]
			row := hostRow{Session: ss, AgeSeconds: now.Sub(ss.Created).Seconds(), Answers: c.Answers, Errors: c.Errors,
				ToolFailed: c.ToolFailed, LastError: c.LastError}
			if p, ok := prev[ss.Handle]; ok && dt > 0 && c.Answers >= p {
				row.RPS = float64(c.Answers-p) / dt
			}
			next[ss.Handle] = c.Answers
			v.RPS += row.RPS
			v.Errors += c.Errors
			v.Sessions = append(v.Sessions, row)
		}
		sort.Slice(v.Sessions, func(i, j int) bool {
			a, b := v.Sessions[i], v.Sessions[j]
			if a.Tenant != b.Tenant {
				return a.Tenant < b.Tenant
			}
			if a.AgentID != b.AgentID {
				return a.AgentID < b.AgentID
			}
			return a.Created.Before(b.Created)
		})
		prev, prevAt = next, now
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		red.refresh()
		// Agent ids and the like are the agents' words: cut like messages.
		if s.event("host", red.line(b, nil)) != nil || s.flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// handlePattern is a session's public handle (server/handle.go).
var handlePattern = regexp.MustCompile(`^h-[0-9a-f]{32}$`)

// Bounds of one session view: the recorded records it shows, the messages
// and bytes queued for a page that reads slower than the session talks
// (beyond them messages are dropped and the page told how many), the
// messages sent to the page in one event.
const (
	maxRecorded = 10000
	batchSize   = 500
	maxPending  = 10000
)

// The queue's bounds: variables so that a test can make them small.
var (
	maxQueued           = 16384
	maxQueueBytes int64 = 32 << 20
)

// entry is one message as the page shows it.
type entry struct {
	Src        string          `json:"src"` // recorded or live
	Dir        string          `json:"dir"`
	Kind       string          `json:"kind"`
	Type       string          `json:"type"`
	ID         string          `json:"id,omitempty"`
	ReqID      string          `json:"req_id,omitempty"`
	At         float64         `json:"at"` // Unix milliseconds
	DurationMS *float64        `json:"duration_ms,omitempty"`
	Code       string          `json:"code,omitempty"`
	Message    json.RawMessage `json:"message"`
}

type sessionMeta struct {
	Handle    string    `json:"handle"`
	Tenant    string    `json:"tenant"`
	AgentID   string    `json:"agent_id"`
	Live      bool      `json:"live"`
	Recording bool      `json:"recording"`
	Recorded  int       `json:"recorded"`
	More      bool      `json:"recorded_more"`
	Since     time.Time `json:"since"`
}

// sessionStream sends one session's timeline: what the store recorded of
// it, then every message from the moment the tap was installed, until the
// session ends or the page leaves.
func (h *Handler) sessionStream(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	handle := r.URL.Query().Get("handle")
	if !handlePattern.MatchString(handle) {
		http.Error(w, "handle: want a session handle, h- and 32 hex digits", http.StatusBadRequest)
		return
	}
	q := make(chan inspect.Message, maxQueued)
	var queued, dropped atomic.Int64
	tapped, err := h.o.Host.Tap(handle, func(m inspect.Message) {
		n := int64(len(m.Line))
		if queued.Add(n) > maxQueueBytes {
			queued.Add(-n)
			dropped.Add(1)
			return
		}
		select {
		case q <- m:
		default:
			queued.Add(-n)
			dropped.Add(1)
		}
	})
	live := err == nil
	if errors.Is(err, inspect.ErrTooManyTaps) {
		h.o.Host.Audit(inspect.View{Action: "session", Session: handle, Code: "busy", Started: start})
		http.Error(w, "this session has as many inspector pages as it may", http.StatusTooManyRequests)
		return
	}
	if live {
		defer tapped.Stop()
	}
	recs, more, rerr := h.o.Host.Recorded(r.Context(), handle, maxRecorded)
	if rerr != nil {
		h.o.Logger.Warn("inspector: recorded trajectory unavailable", "session", handle, "err", rerr)
	}
	if !live && len(recs) == 0 {
		h.o.Host.Audit(inspect.View{Action: "session", Session: handle, Code: "not_found", Started: start})
		http.Error(w, "no live session has this handle and the store recorded none", http.StatusNotFound)
		return
	}
	target := "recorded"
	if live {
		target = "live"
		if len(recs) > 0 {
			target = "live+recorded"
		}
	}
	h.o.Host.Audit(inspect.View{Action: "session", Session: handle, Tenant: tapped.Tenant, Target: target, Started: start})

	red := newRedactor(h.o.Host)
	red.refresh()
	s := startSSE(w)
	since := tapped.Since
	if !live {
		since = time.Now()
	}
	var old []entry
	for _, raw := range recs {
		var rec struct {
			Dir        string          `json:"dir"`
			Kind       string          `json:"kind"`
			Type       string          `json:"type"`
			TS         float64         `json:"ts"`
			DurationMS *float64        `json:"duration_ms"`
			Message    json.RawMessage `json:"message"`
		}
		if json.Unmarshal(raw, &rec) != nil {
			continue
		}
		at := rec.TS * 1000
		if live && at >= float64(since.UnixMicro())/1000 {
			continue // the tap has it
		}
		e := entry{Src: "recorded", Dir: rec.Dir, Kind: rec.Kind, Type: rec.Type, At: at, DurationMS: rec.DurationMS,
			Message: red.line(rec.Message, nil)}
		e.ID, e.ReqID, e.Code = envelopeIDs(e.Message)
		old = append(old, e)
	}
	meta := sessionMeta{Handle: handle, Tenant: tapped.Tenant, AgentID: tapped.AgentID, Live: live,
		Recording: tapped.Recorded, Recorded: len(old), More: more, Since: since}
	mb, _ := json.Marshal(meta)
	if s.event("meta", red.line(mb, nil)) != nil {
		return
	}
	for len(old) > 0 {
		n := min(len(old), batchSize)
		if !s.sendEntries(old[:n]) {
			return
		}
		old = old[n:]
	}
	if s.flush() != nil || !live {
		if !live {
			_ = s.event("end", []byte(`{"live":false}`))
			_ = s.flush()
		}
		return
	}
	// Requests in flight, for the latency of their replies.
	pending := map[string]time.Time{}
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	done, over := tapped.Done, false
	for {
		var first inspect.Message
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || s.flush() != nil {
				return
			}
			continue
		case first = <-q:
		case <-done:
			// The session ended. Its last message to the tap says so, but a
			// full queue may have dropped it: what is queued is sent, then
			// the end.
			done, over = nil, true
			select {
			case first = <-q:
			default:
				first = inspect.Message{Kind: "end"}
			}
		}
		red.refresh()
		batch := []entry{}
		ended := false
		m := first
		for {
			queued.Add(-int64(len(m.Line)))
			if m.Kind == "end" {
				ended = true
				break
			}
			batch = append(batch, liveEntry(red, m, pending))
			if len(batch) >= batchSize {
				break
			}
			var ok bool
			select {
			case m, ok = <-q:
			default:
			}
			if !ok {
				break
			}
		}
		if over && len(q) == 0 {
			ended = true
		}
		if !s.sendEntries(batch) {
			return
		}
		if n := dropped.Swap(0); n > 0 {
			if s.event("dropped", fmt.Appendf(nil, `{"count":%d}`, n)) != nil {
				return
			}
		}
		if ended {
			_ = s.event("end", []byte(`{"live":true}`))
			_ = s.flush()
			return
		}
		if s.flush() != nil {
			return
		}
	}
}

// liveEntry makes the page's entry of a tapped message.
func liveEntry(red *redactor, m inspect.Message, pending map[string]time.Time) entry {
	e := entry{Src: "live", Dir: m.Dir, Kind: m.Kind, Type: m.Type, ID: m.ID, ReqID: m.ReqID,
		At: float64(m.At.UnixMicro()) / 1000, Message: red.line(m.Line, m.Known)}
	// The ids are the agent's words too.
	e.ID, e.ReqID = red.str(e.ID, red.replacer(m.Known)), red.str(e.ReqID, red.replacer(m.Known))
	switch {
	case m.Kind == "request" && m.ID != "":
		if len(pending) < maxPending {
			pending[m.ID] = m.At
		}
	case m.Dir == "host" && m.ReqID != "" && m.Kind != "event":
		if t0, ok := pending[m.ReqID]; ok {
			d := float64(m.At.Sub(t0).Microseconds()) / 1000
			e.DurationMS = &d
			delete(pending, m.ReqID)
		}
	}
	if m.Kind == "error" {
		_, _, e.Code = envelopeIDs(e.Message)
	}
	return e
}

// envelopeIDs reads a redacted message's id, req_id and, for an error,
// its code.
func envelopeIDs(msg json.RawMessage) (id, reqID, code string) {
	var env struct {
		ID    string `json:"id"`
		ReqID string `json:"req_id"`
		Type  string `json:"type"`
		Code  string `json:"code"`
		Body  *struct {
			Code string `json:"code"`
		} `json:"body"`
	}
	if json.Unmarshal(msg, &env) != nil {
		return "", "", ""
	}
	code = env.Code
	if code == "" && env.Body != nil {
		code = env.Body.Code
	}
	return env.ID, env.ReqID, code
}

func (s *sse) sendEntries(es []entry) bool {
	if len(es) == 0 {
		return true
	}
	b, err := json.Marshal(es)
	if err != nil {
		return false
	}
	return s.event("msgs", b) == nil
}
