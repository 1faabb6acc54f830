package inspector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aephost/aep/gen/contract"
	"github.com/aephost/aep/server/inspect"
)

// Driving a session by hand (docs/inspector.md, Drive a session): the
// page asks the host to open an agent session for a tenant the way the
// admin API's POST /admin/sessions does; the inspector attaches to it in
// the host, handshakes with the session's own token and from then on
// sends what the page built from the request schemas. The token stays
// here: the page never types, holds or receives a tenant's secret or the
// session's token, and it names the session only by its public handle.
// Replies and events reach the page through the session's timeline, as
// any session's do; the answer to a send is also returned to the form.

// LineConn is an agent's in-process end of a session: JSON lines each way
// (server.LinePipe).
type LineConn interface {
	WriteLine(ctx context.Context, line []byte) error
	ReadLine(ctx context.Context) ([]byte, error)
	Close() error
}

// Opened is a session the operator opened for the inspector to drive:
// its public handle, its tenant, the one token its handshake accepts and
// the connection attached to it; Caps are the capabilities its handshake
// asks for.
type Opened struct {
	Handle, Tenant, Token string
	Caps                  []string
	Conn                  LineConn
}

// Bounds of driving: the sessions the inspector drives at once, how long
// one is kept without a request from its page, the bytes of one message a
// page sends and how long a send waits for its answer.
const (
	maxDriven     = 16
	drivenIdle    = 30 * time.Minute
	maxSendBytes  = 1 << 20
	answerTimeout = 60 * time.Second
	agentID       = "inspector"
)

// driven is a session the inspector drives.
type driven struct {
	handle, tenant string
	conn           LineConn
	mu             sync.Mutex
	waiting        map[string]chan []byte // request id → its answer
	last           time.Time
	done           chan struct{}
	closeOnce      sync.Once
}

func (d *driven) close() {
	d.closeOnce.Do(func() {
		close(d.done)
		_ = d.conn.Close()
	})
}

// read hands each answer to the send that waits for it. Events and
// anything else are the timeline's to show.
func (d *driven) read() {
	defer d.close()
	for {
		line, err := d.conn.ReadLine(context.Background())
		if err != nil {
			return
		}
		var env struct {
			Type  string `json:"type"`
			ReqID string `json:"req_id"`
		}
		if json.Unmarshal(line, &env) != nil || env.ReqID == "" || strings.HasSuffix(env.Type, "/event") {
			continue
		}
		d.mu.Lock()
		ch := d.waiting[env.ReqID]
		delete(d.waiting, env.ReqID)
		d.mu.Unlock()
		if ch != nil {
			ch <- line
		}
	}
}

// drivers holds the sessions the inspector drives.
type drivers struct {
	mu   sync.Mutex
	list map[string]*driven
}

func (ds *drivers) get(handle string) *driven {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.list[handle]
	if d != nil {
		select {
		case <-d.done:
			delete(ds.list, handle)
			return nil
		default:
		}
		d.last = time.Now()
	}
	return d
}

// reap closes the sessions no page used for drivenIdle and forgets the
// ended ones; it returns how many remain.
func (ds *drivers) reap() int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for k, d := range ds.list {
		select {
		case <-d.done:
			delete(ds.list, k)
			continue
		default:
		}
		if time.Since(d.last) > drivenIdle {
			d.close()
			delete(ds.list, k)
		}
	}
	return len(ds.list)
}

// idle ends d once no page used it for drivenIdle.
func (ds *drivers) idle(d *driven) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		ds.mu.Lock()
		stale := time.Since(d.last) > drivenIdle
		if stale && ds.list[d.handle] == d {
			delete(ds.list, d.handle)
		}
		ds.mu.Unlock()
		if stale {
			d.close()
			return
		}
	}
}

// apiError answers a page's call with a status and a sentence.
func apiError(w http.ResponseWriter, status int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": reason, "message": message})
	_, _ = w.Write(b)
}

// pagePost admits a call that changes something: posted by the page
// itself (an Origin the listener allows, which ServeHTTP checked, and
// JSON), so that another site's form cannot drive a session with the
// operator's cookie.
func pagePost(w http.ResponseWriter, r *http.Request, into any) bool {
	if r.Header.Get("Origin") == "" {
		apiError(w, http.StatusForbidden, "forbidden", "a call that acts must come from the inspector's own page")
		return false
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		apiError(w, http.StatusUnsupportedMediaType, "bad_request", "want Content-Type: application/json")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxSendBytes)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(into); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "the body is not the JSON this call takes: "+clip(err.Error()))
		return false
	}
	return true
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func writeJSON(w http.ResponseWriter, v any, red *redactor) {
	b, err := json.Marshal(v)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal", "the answer could not be encoded")
		return
	}
	if red != nil {
		red.refresh()
		b = red.line(b, nil)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// contractBundle serves the protocol's contract (gen/contract): the page
// builds its forms from the request schemas in it.
func (h *Handler) contractBundle(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(contract.Bundle)
}

// driveTenants lists the tenants a page may open a session for, and the
// sessions it drives.
func (h *Handler) driveTenants(w http.ResponseWriter, _ *http.Request) {
	var tenants []string
	if h.o.Tenants != nil {
		tenants = h.o.Tenants()
	}
	h.drive.reap()
	h.drive.mu.Lock()
	handles := make([]string, 0, len(h.drive.list))
	for k := range h.drive.list {
		handles = append(handles, k)
	}
	h.drive.mu.Unlock()
	writeJSON(w, map[string]any{"tenants": tenants, "driven": handles, "enabled": h.o.Open != nil}, newRedactor(h.o.Host))
}

// driveOpen opens a session for a tenant and handshakes it.
func (h *Handler) driveOpen(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req struct {
		Tenant       string    `json:"tenant"`
		Capabilities *[]string `json:"capabilities"`
	}
	if !pagePost(w, r, &req) {
		return
	}
	if h.o.Open == nil {
		apiError(w, http.StatusForbidden, "unavailable", "this inspector opens no sessions")
		return
	}
	if req.Tenant == "" || len(req.Tenant) > 128 {
		apiError(w, http.StatusBadRequest, "bad_request", "tenant: want the name of one of the host's tenants")
		return
	}
	if h.drive.reap() >= maxDriven {
		apiError(w, http.StatusTooManyRequests, "busy", fmt.Sprintf("the inspector drives %d sessions already: close one", maxDriven))
		return
	}
	var caps []string
	if req.Capabilities != nil {
		caps = append([]string{}, *req.Capabilities...)
	}
	o, err := h.o.Open(req.Tenant, caps)
	if err != nil {
		h.o.Host.Audit(inspect.View{Action: "drive", Tenant: clip(req.Tenant), Target: "open", Code: "refused", Started: start})
		apiError(w, http.StatusConflict, "refused", clip(err.Error()))
		return
	}
	d := &driven{handle: o.Handle, tenant: o.Tenant, conn: o.Conn, waiting: map[string]chan []byte{}, last: time.Now(),
		done: make(chan struct{})}
	go d.read()
	go h.drive.idle(d)
	// The handshake: the session's own token, which the page never sees.
	hs := map[string]any{"type": "handshake/req", "id": newID(), "proto": "1.0", "ts": nowTS(), "agent_id": agentID,
		"auth_token": o.Token, "agent_caps": o.Caps}
	if o.Caps == nil {
		hs["agent_caps"] = []string{}
	}
	ans, err := d.send(r.Context(), hs)
	var hr struct {
		Ok           bool              `json:"ok"`
		AcceptedCaps []json.RawMessage `json:"accepted_caps"`
		Reason       string            `json:"reason"`
	}
	if err == nil {
		err = json.Unmarshal(ans, &hr)
	}
	if err != nil || !hr.Ok {
		d.close()
		why := hr.Reason
		if err != nil {
			why = err.Error()
		}
		h.o.Host.Audit(inspect.View{Action: "drive", Session: o.Handle, Tenant: o.Tenant, Target: "open", Code: "refused", Started: start})
		apiError(w, http.StatusConflict, "refused", "the session's handshake failed: "+clip(why))
		return
	}
	h.drive.mu.Lock()
	if h.drive.list == nil {
		h.drive.list = map[string]*driven{}
	}
	h.drive.list[o.Handle] = d
	h.drive.mu.Unlock()
	h.o.Host.Audit(inspect.View{Action: "drive", Session: o.Handle, Tenant: o.Tenant, Target: "open", Started: start})
	writeJSON(w, map[string]any{"handle": o.Handle, "tenant": o.Tenant, "capabilities": hr.AcceptedCaps}, newRedactor(h.o.Host))
}

// send writes one message and waits for its answer.
func (d *driven) send(ctx context.Context, m map[string]any) ([]byte, error) {
	id, _ := m["id"].(string)
	line, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	ch := make(chan []byte, 1)
	d.mu.Lock()
	if len(d.waiting) >= 1024 {
		d.mu.Unlock()
		return nil, errors.New("1024 requests of this session wait for their answers")
	}
	d.waiting[id] = ch
	d.mu.Unlock()
	forget := func() {
		d.mu.Lock()
		delete(d.waiting, id)
		d.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	if err := d.conn.WriteLine(ctx, line); err != nil {
		forget()
		return nil, fmt.Errorf("the session took no message: %w", err)
	}
	select {
	case a := <-ch:
		return a, nil
	case <-d.done:
		forget()
		return nil, errors.New("the session ended")
	case <-ctx.Done():
		forget()
		return nil, errors.New("no answer yet: it shows in the timeline when it comes")
	}
}

// driveSend sends one message the page built to a session it drives and
// returns the answer, cut like everything the page is shown.
func (h *Handler) driveSend(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req struct {
		Handle  string         `json:"handle"`
		Message map[string]any `json:"message"`
	}
	if !pagePost(w, r, &req) {
		return
	}
	d := h.drive.get(req.Handle)
	if d == nil {
		apiError(w, http.StatusNotFound, "not_found", "the inspector drives no session with this handle")
		return
	}
	m := req.Message
	typ, _ := m["type"].(string)
	if typ == "" || m == nil {
		apiError(w, http.StatusBadRequest, "bad_request", "message.type: want a message type")
		return
	}
	if typ == "handshake/req" {
		apiError(w, http.StatusBadRequest, "bad_request", "the inspector handshook this session already")
		return
	}
	// The envelope is the inspector's to fill where the page left it.
	if id, ok := m["id"].(string); !ok || id == "" {
		m["id"] = newID()
	}
	if _, ok := m["proto"]; !ok {
		m["proto"] = "1.0"
	}
	if _, ok := m["ts"]; !ok {
		m["ts"] = nowTS()
	}
	h.o.Host.Audit(inspect.View{Action: "drive", Session: d.handle, Tenant: d.tenant, Target: typ, Started: start})
	red := newRedactor(h.o.Host)
	if !strings.HasSuffix(typ, "/req") && typ != "ping" {
		// A notification (cancel, shutdown, …) has no answer.
		line, _ := json.Marshal(m)
		if err := d.conn.WriteLine(r.Context(), line); err != nil {
			apiError(w, http.StatusConflict, "ended", "the session took no message: "+clip(err.Error()))
			return
		}
		writeJSON(w, map[string]any{"id": m["id"], "answer": nil}, red)
		return
	}
	ans, err := d.send(r.Context(), m)
	if err != nil {
		writeJSON(w, map[string]any{"id": m["id"], "pending": err.Error()}, red)
		return
	}
	writeJSON(w, map[string]any{"id": m["id"], "answer": json.RawMessage(ans)}, red)
}

// driveClose ends a session the inspector drives.
func (h *Handler) driveClose(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Handle string `json:"handle"`
	}
	if !pagePost(w, r, &req) {
		return
	}
	h.drive.mu.Lock()
	d := h.drive.list[req.Handle]
	delete(h.drive.list, req.Handle)
	h.drive.mu.Unlock()
	if d == nil {
		apiError(w, http.StatusNotFound, "not_found", "the inspector drives no session with this handle")
		return
	}
	h.o.Host.Audit(inspect.View{Action: "drive", Session: d.handle, Tenant: d.tenant, Target: "close", Started: time.Now()})
	d.close()
	writeJSON(w, map[string]any{"closed": d.handle}, nil)
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "insp-" + hex.EncodeToString(b[:])
}

func nowTS() float64 { return float64(time.Now().UnixMilli()) / 1000 }
