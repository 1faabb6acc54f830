// Package mutate breaks a real host on purpose, one rule at a time, so
// tests can prove the conformance kit notices: a [Mutant] rewrites the
// messages that cross a [conformance.Target] ([Wrap]: what the agent sends
// before the host sees it, what the host sends before the kit sees it) or
// the HTTP requests that reach the host ([Proxy]: a reverse proxy whose
// handler the mutant wraps). Neither knows the transport: a wrapped target
// is stdio, HTTP+SSE, single exchange or WebSocket as the one it wraps.
//
// [Catalogue] holds the mutants of the kit's own tests, each with the
// checks it must fail; a mutation suite adds its own beside them.
package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/aephost/aep/conformance"
)

// Msg is one message, decoded: JSON numbers stay json.Number, so a message
// passed on unchanged keeps its numbers exactly.
type Msg = map[string]any

// Mutant is one way a host can be broken.
type Mutant struct {
	// Name is the mutant's ID, e.g. "unknown-tool-success".
	Name string
	// Bug says what the broken host does wrong.
	Bug string
	// Catch are the kit's checks that must fail against the broken host.
	Catch []string
	// Run are the checks whose scenarios provoke the bug (the kit's
	// Options.Only); empty: Catch.
	Run []string
	// Over names the transport the bug needs (websocket for a line over
	// the size limit, which HTTP refuses before any session sees it);
	// empty: any.
	Over string
	// OnlyOver names the one transport the host is broken on: the mutant
	// wraps that transport's target only, in a comparison with another
	// (conformance.Compare), whose transports.agree must catch it.
	OnlyOver string
	// Host rewrites one message the host sent; it returns the messages
	// to pass on in its place (none drops it). Nil passes all on.
	Host func(s *State, m Msg) []Msg
	// Agent rewrites one message the agent sent before the host sees it,
	// the same way.
	Agent func(s *State, m Msg) []Msg
	// HTTP wraps the host's HTTP handler in [Proxy]: bugs of the HTTP
	// edge (Origin, Host, sizes).
	HTTP func(next http.Handler) http.Handler

	// For the mutation suite ([Suite]):
	//
	// Kind says what the bug breaks (KindReply …), Capability the
	// capability whose messages it touches, if one.
	Kind       string
	Capability string
	// Transports the suite runs it over; empty: stdio and websocket.
	Transports []string
	// Independent marks a mutant written as a host's plausible bug, not
	// from a check of the kit (the catalogue's each name the check they
	// break): the kill rate of these is the kit's measure.
	Independent bool
}

// Checks returns the checks the kit is to run for m: Run, else Catch.
func (m Mutant) Checks() []string {
	if len(m.Run) > 0 {
		return m.Run
	}
	return m.Catch
}

// State is what a mutant knows of one connection: the requests the agent
// sent, whether the handshake succeeded, and room of its own. Each
// connection of a wrapped target has its own; Shared is common to all
// connections of one [Wrap], for bugs that cross sessions.
type State struct {
	mu         sync.Mutex
	requests   map[string]Msg
	handshaken bool
	injected   []Msg
	// Scratch is the mutant's own, for this connection.
	Scratch map[string]any
	// Shared is the mutant's own, for every connection of the target.
	Shared *Shared
}

// Shared is state common to every connection of one wrapped target.
type Shared struct {
	mu sync.Mutex
	m  map[string]any
}

// Get returns a value stored by Set.
func (s *Shared) Get(key string) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

// Set stores a value for every connection.
func (s *Shared) Set(key string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = v
}

// Request returns the agent's request whose id is reqID: what a reply
// answers. Nil when there was none.
func (s *State) Request(reqID string) Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[reqID]
}

// Handshaken says whether the host accepted a handshake on this
// connection.
func (s *State) Handshaken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handshaken
}

// Inject queues a message the kit receives next, as if the host had sent
// it (a reply the broken host makes up).
func (s *State) Inject(m Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injected = append(s.injected, m)
}

// Wrap returns target with mu applied to every connection it opens or
// attaches.
func Wrap(target conformance.Target, mu Mutant) conformance.Target {
	shared := &Shared{m: map[string]any{}}
	wrap := func(c conformance.Conn) conformance.Conn {
		return &conn{inner: c, mu: mu, st: &State{requests: map[string]Msg{}, Scratch: map[string]any{}, Shared: shared}}
	}
	out := target
	if d := target.Dial; d != nil {
		out.Dial = func(ctx context.Context) (conformance.Conn, error) {
			c, err := d(ctx)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	if a := target.Attach; a != nil {
		out.Attach = func(ctx context.Context, id string) (conformance.Conn, error) {
			c, err := a(ctx, id)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	return out
}

type conn struct {
	inner conformance.Conn
	mu    Mutant
	st    *State

	qmu    sync.Mutex
	queued [][]byte // host lines to hand out before reading more
}

// Decode reads one line as a message; ok is false for a line that is not
// one JSON object.
func Decode(line []byte) (Msg, bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m Msg
	if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
		return nil, false
	}
	return m, true
}

// Encode writes a message as one line, without escaping <, > and &.
func Encode(m Msg) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(m)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func (c *conn) Send(ctx context.Context, line []byte) error {
	m, ok := Decode(line)
	if !ok {
		return c.inner.Send(ctx, line)
	}
	if id, _ := m["id"].(string); id != "" {
		c.st.mu.Lock()
		c.st.requests[id] = m
		c.st.mu.Unlock()
	}
	if c.mu.Agent == nil {
		return c.inner.Send(ctx, line)
	}
	for _, out := range c.mu.Agent(c.st, m) {
		if err := c.inner.Send(ctx, Encode(out)); err != nil {
			return err
		}
	}
	return nil
}

func (c *conn) Recv(ctx context.Context) ([]byte, error) {
	for {
		c.st.mu.Lock()
		if len(c.st.injected) > 0 {
			m := c.st.injected[0]
			c.st.injected = c.st.injected[1:]
			c.st.mu.Unlock()
			return Encode(m), nil
		}
		c.st.mu.Unlock()
		c.qmu.Lock()
		if len(c.queued) > 0 {
			line := c.queued[0]
			c.queued = c.queued[1:]
			c.qmu.Unlock()
			return line, nil
		}
		c.qmu.Unlock()
		line, err := c.inner.Recv(ctx)
		if err != nil {
			return nil, err
		}
		m, ok := Decode(line)
		if !ok {
			return line, nil
		}
		if m["type"] == "handshake/resp" && m["ok"] == true {
			c.st.mu.Lock()
			c.st.handshaken = true
			c.st.mu.Unlock()
		}
		if c.mu.Host == nil {
			return line, nil
		}
		outs := c.mu.Host(c.st, m)
		if len(outs) == 0 {
			continue
		}
		c.qmu.Lock()
		for _, o := range outs[1:] {
			c.queued = append(c.queued, Encode(o))
		}
		c.qmu.Unlock()
		return Encode(outs[0]), nil
	}
}

func (c *conn) Close() error { return c.inner.Close() }

// --- helpers for writing mutants.

// Type returns a message's type.
func Type(m Msg) string {
	t, _ := m["type"].(string)
	return t
}

// ReqID returns a reply's or event's req_id.
func ReqID(m Msg) string {
	t, _ := m["req_id"].(string)
	return t
}

// Obj returns the object at key, nil when there is none.
func Obj(m Msg, key string) Msg {
	o, _ := m[key].(map[string]any)
	return o
}

// IsEvent says whether m is an event.
func IsEvent(m Msg) bool { return strings.HasSuffix(Type(m), "/event") }

// Same passes m on unchanged.
func Same(m Msg) []Msg { return []Msg{m} }
