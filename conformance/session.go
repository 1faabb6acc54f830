package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// session is one connection with its bookkeeping: the requests in flight
// (for the events, reply and content checks), the notifications sent, the
// replies and host ids seen, and what its handshake said.
type session struct {
	k     *kit
	conn  Conn
	label string // names the session in problem lines: "A", "B", "child"

	// From the handshake.
	id          string
	caps        []capEntry
	maxParallel int

	example  *Example
	inflight map[string]*pending
	notes    map[string]string // id → type of the notifications sent: never answered
	replies  map[string]int    // id → replies seen
	hostIDs  map[string]bool
	uptime   float64 // the last pong's uptime_seconds, -1 before any
	// stalled counts the replies that never came: past two, the host has
	// stopped answering this session and later calls fail at once rather
	// than each after a timeout.
	stalled int
	// key names the session among the run's for the comparison across
	// transports (compare.go), sent counts its requests, noID the replies
	// it got to lines whose id could not be read.
	key               string
	sent, noID, polls int
	mode              compareMode // how the request being sent is compared (callAs)
}

// pending is a request in flight: what was asked and the events seen.
type pending struct {
	typ    string
	body   map[string]any
	events []map[string]any
	// uptime is the highest pong uptime_seconds the session had seen when
	// this request was sent: its own pong, if it is a ping, cannot be lower
	// (replies of pipelined requests may arrive in any order).
	uptime float64
	// ord is the request's place among those its session sent; poll, of
	// a poll's request, its place among the session's polls.
	ord, poll int
	// mode: how the comparison across transports holds its answer.
	mode compareMode
}

func (k *kit) newSession(c Conn, label string) *session {
	return &session{k: k, conn: c, label: label, inflight: map[string]*pending{}, notes: map[string]string{},
		replies: map[string]int{}, hostIDs: map[string]bool{}, uptime: -1}
}

func (k *kit) open(ctx context.Context) (*session, error) {
	c, err := k.target.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("conformance: new session: %w", err)
	}
	return k.newSession(c, ""), nil
}

// working opens a session and handshakes with caps and the token; the
// error says why it could not.
func (k *kit) working(ctx context.Context, label string, caps []string) (*session, error) {
	s, err := k.open(ctx)
	if err != nil {
		return nil, err
	}
	s.label = label
	m, err := s.handshake(ctx, caps, k.opts.Token)
	if err != nil || m.OK == nil || !*m.OK {
		s.conn.Close()
		if err == nil {
			err = fmt.Errorf("answered %s", clip(m.raw))
		}
		return nil, fmt.Errorf("the handshake with the token failed (%v); see %s", err, CheckHandshake)
	}
	return s, nil
}

// sessionFor is working for a scenario: a failure is a problem of check.
func (k *kit) sessionFor(ctx context.Context, check, label string, caps []string) *session {
	s, err := k.working(ctx, label, caps)
	if err != nil {
		k.fail(check, "session %s: %v", label, err)
		return nil
	}
	return s
}

// send writes a line; a request with a string id is in flight until its
// reply, a notification's id is remembered as never to be answered.
func (s *session) send(ctx context.Context, line []byte) error {
	if s.key == "" {
		s.key = s.k.sessionKey(s.label)
	}
	if typ, id := lineID(line); id != "" {
		ts, known := s.k.checker.types[typ]
		switch {
		case known && ts.kind == kindNotification && s.k.checker.CheckAgentLine(line) == nil:
			// A valid notification is never answered; an invalid one is
			// refused with an error like any malformed line.
			s.notes[id] = typ
		default:
			var body map[string]any
			_ = json.Unmarshal(line, &body)
			p := &pending{typ: typ, body: body, uptime: s.uptime, mode: s.mode}
			if s.mode == comparePoll {
				// A poll's requests are numbered apart, so those after
				// it keep their place however many it took.
				s.polls++
				p.ord, p.poll = s.sent, s.polls
			} else {
				s.sent++
				p.ord = s.sent
			}
			s.inflight[id] = p
		}
	}
	if s.example == nil {
		s.k.record(record{From: "agent", Line: string(line)})
	}
	return s.conn.Send(ctx, line)
}

// lineID reads the type and string id of the first JSON value of a line,
// as a host does that answers a line with trailing data by its id. Of a
// key given twice the first counts, as the host names the first id when
// it refuses the duplicate.
func lineID(line []byte) (typ, id string) {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", ""
	}
	var seenType, seenID bool
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return typ, id
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return typ, id
		}
		switch k {
		case "type":
			if !seenType {
				typ, _ = v.(string)
				seenType = true
			}
		case "id":
			if !seenID {
				id, _ = v.(string)
				seenID = true
			}
		}
	}
	return typ, id
}

// request builds and sends a message of typ with the envelope filled in.
func (s *session) request(ctx context.Context, typ string, body map[string]any) (string, error) {
	id := s.k.nextID("c")
	m := map[string]any{}
	for k, v := range body {
		m[k] = v
	}
	m["type"], m["id"], m["proto"], m["ts"] = typ, id, "1.0", float64(time.Now().Unix())
	line, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return id, s.send(ctx, line)
}

// call sends a request and waits for its reply. A reply that never came
// is a msg whose err says why.
func (s *session) call(ctx context.Context, typ string, body map[string]any) *msg {
	if s.stalled >= 2 {
		return &msg{err: fmt.Errorf("not sent: session %s stopped answering (%d replies never came)", s.label, s.stalled), Type: "(not sent)"}
	}
	id, err := s.request(ctx, typ, body)
	if err != nil {
		return &msg{err: err, Type: "(not sent)"}
	}
	m, err := s.await(ctx, id)
	if err != nil {
		return &msg{err: err, Type: "(no reply)"}
	}
	return m
}

// callAs is call for a request whose answer legitimately differs from
// run to run in a way mode sets aside (compare.go): the comparison across
// transports holds it only to what mode keeps.
func (s *session) callAs(ctx context.Context, mode compareMode, typ string, body map[string]any) *msg {
	s.mode = mode
	defer func() { s.mode = compareExact }()
	return s.call(ctx, typ, body)
}

// handshake opens the session with caps; it returns the handshake/resp.
func (s *session) handshake(ctx context.Context, caps []string, token string) (*msg, error) {
	id, err := s.request(ctx, "handshake/req", map[string]any{"agent_id": s.k.opts.AgentID, "agent_caps": caps, "auth_token": token})
	if err != nil {
		return nil, err
	}
	return s.await(ctx, id)
}

// await reads host lines until the reply to id, checking each on the way.
func (s *session) await(ctx context.Context, id string) (*msg, error) {
	return s.awaitFor(ctx, id, s.k.opts.Timeout)
}

func (s *session) awaitFor(ctx context.Context, id string, d time.Duration) (*msg, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		m, err := s.next(ctx)
		if err != nil {
			s.stalled++
			if p, ok := s.inflight[id]; ok {
				s.k.answered(s, p, nil)
			}
			return nil, fmt.Errorf("waiting for the reply to %s: %w", id, err)
		}
		if m != nil && !strings.HasSuffix(m.Type, "/event") && m.reqID() == id {
			return m, nil
		}
	}
}

// quiet reads host lines for d and returns those that came: nothing is
// expected, and whatever comes is checked as all traffic is.
func (s *session) quiet(ctx context.Context, d time.Duration) []*msg {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var out []*msg
	for {
		m, err := s.next(ctx)
		if err != nil {
			return out
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

// next reads one host line and checks it against every check that applies
// to all traffic: host.strict, host.closed, direction, envelope.host_ids,
// error.retryable, error.capability_name, events, reply.once, ping and the
// content of tool and skill results. It returns nil (no error) for a line
// that is not an object.
func (s *session) next(ctx context.Context) (*msg, error) {
	line, err := s.conn.Recv(ctx)
	if err != nil {
		return nil, err
	}
	k := s.k
	k.record(record{From: "host", Line: string(line)})
	k.count(CheckHostStrict)
	if err := k.checker.CheckHostLine(line); err != nil {
		var v *Violation
		if errors.As(err, &v) && strings.HasPrefix(v.Reason, "a host never sends") {
			k.fail(CheckDirection, "%s", err)
		} else {
			k.fail(CheckHostStrict, "%s", err)
		}
	} else if v, err := jsonschema.UnmarshalJSON(bytes.NewReader(line)); err == nil {
		// By the line's own def when the union has one, so the problems
		// named are this type's, not every branch's.
		strict, closed := k.host, k.closed
		if typ, _ := v.(map[string]any)["type"].(string); k.hostDefs[typ] != nil {
			strict, closed = k.hostDefs[typ], k.closedDefs[typ]
		}
		if err := strict.Validate(v); err != nil {
			k.fail(CheckHostStrict, "%s: not a HostMessage of the contract: %s", clip(line), describe(err))
		} else {
			k.count(CheckHostClosed)
			if err := closed.Validate(v); err != nil {
				k.fail(CheckHostClosed, "%s: %s", clip(line), strings.ReplaceAll(describe(err), "false schema", "a field its schema does not declare"))
			}
		}
	}
	m := &msg{raw: line}
	if err := json.Unmarshal(line, &m.body); err != nil || m.body == nil {
		return nil, nil // host.strict has it
	}
	// A field of an unexpected type is left unset (json.Unmarshal goes on
	// past it); host.strict has said so, and the reply still counts.
	_ = json.Unmarshal(line, m)
	if bytes.HasPrefix(bytes.TrimSpace(m.ErrorRaw), []byte("{")) {
		_ = json.Unmarshal(m.ErrorRaw, &m.Error)
	}
	k.count(CheckDirection)
	if hid, _ := m.body["id"].(string); hid != "" {
		k.count(CheckHostIDs)
		if s.hostIDs[hid] {
			k.fail(CheckHostIDs, "%s: the id %q was already sent in this session", clip(line), hid)
		}
		s.hostIDs[hid] = true
	}
	if m.Type == "error" {
		k.checkRetryable(m.Code, reason(m.Detail), m.Retryable, line)
	}
	if m.Type == "handshake/resp" && m.Error != nil {
		k.checkRetryable(m.Error.Code, reason(m.Error.Detail), m.Error.Retryable, line)
	}
	id := m.reqID()
	if strings.HasSuffix(m.Type, "/event") {
		k.count(CheckEvents)
		p, inflight := s.inflight[id]
		switch {
		case !inflight:
			k.fail(CheckEvents, "%s: an event for %q, which is not in flight", clip(line), id)
		default:
			if ns := k.namespace(p.typ); ns != "" && m.Type != ns+"/event" {
				k.fail(CheckEvents, "%s: an event of a %s request is typed %s", clip(line), p.typ, m.Type)
			}
			if m.Seq == nil || *m.Seq != len(p.events) {
				k.fail(CheckEvents, "%s: seq should be %d", clip(line), len(p.events))
			}
			p.events = append(p.events, m.body)
		}
		return m, nil
	}
	if id == "" {
		// An error answering a line without a readable id.
		s.noID++
		s.k.answered(s, &pending{typ: "(a line without an id)", ord: -s.noID}, m)
		return m, nil
	}
	k.count(CheckReplyOnce)
	s.replies[id]++
	p, inflight := s.inflight[id]
	switch {
	case s.notes[id] != "":
		check := CheckReplyOnce
		if s.notes[id] == "cancel" {
			check = CheckCancel
		}
		k.fail(check, "%s: a reply to the %s notification %q: notifications are never answered", clip(line), s.notes[id], id)
	case s.replies[id] > 1:
		k.fail(CheckReplyOnce, "%s: a second reply to %q", clip(line), id)
	case !inflight:
		k.fail(CheckReplyOnce, "%s: a reply to %q, which was never sent", clip(line), id)
	default:
		if want := k.replyType(p.typ); want != "" && m.Type != want && m.Type != "error" {
			k.fail(CheckReplyOnce, "%s: %s is answered by %s or error", clip(line), p.typ, want)
		} else if _, known := k.checker.types[p.typ]; !known && p.typ != "" && m.Type != "error" {
			// A type the contract does not have has no reply but an error.
			k.fail(CheckReplyOnce, "%s: %s, a type the contract does not have, is answered by %s, not error", clip(line), p.typ, m.Type)
		}
		m.events = p.events
		s.checkReply(p, m)
		s.k.answered(s, p, m)
	}
	delete(s.inflight, id)
	return m, nil
}

// checkReply holds a reply to what its request asked.
func (s *session) checkReply(p *pending, m *msg) {
	k := s.k
	switch m.Type {
	case "handshake/resp":
		if m.OK != nil && *m.OK {
			s.id, s.caps = m.SessionID, m.Caps
			if m.MaxPar != nil {
				s.maxParallel = *m.MaxPar
			}
		}
	case "pong":
		up, ok := num(m.body, "uptime_seconds")
		k.expect(CheckPing, ok && up >= 0, "%s: uptime_seconds is negative", clip(m.raw))
		if ok && p.uptime >= 0 {
			k.expect(CheckPing, up >= p.uptime, "%s: uptime_seconds is below the %v of a pong received before this ping was sent", clip(m.raw), p.uptime)
		}
		if ok && up > s.uptime {
			s.uptime = up
		}
	case "error":
		want := k.capabilityOf(p.typ)
		if m.CapName != nil && want != "" && k.checker.types[p.typ].capability != "" {
			k.expect(CheckCapabilityName, *m.CapName == want, "%s: capability_name %q answering %s, whose capability is %s", clip(m.raw), *m.CapName, p.typ, want)
		}
		if m.Code == "capability_missing" {
			k.expect(CheckCapabilityNameSet, m.CapName != nil && *m.CapName != "", "%s: capability_missing without capability_name", clip(m.raw))
		}
	case "tool/call/resp":
		res := obj(m.body, "result")
		asked, _ := p.body["tool_name"].(string)
		k.expect(CheckToolsResult, str(res, "tool_name") == asked, "%s: the result names the tool %q, the call named %q", clip(m.raw), str(res, "tool_name"), asked)
		success, _ := boolean(res, "success")
		if code := str(res, "error_code"); code != "" {
			k.expect(CheckToolsResult, !success, "%s: success true with error_code %s", clip(m.raw), code)
		}
		if !success {
			k.expect(CheckToolsResultError, str(res, "error") != "", "%s: success false without an error text", clip(m.raw))
		}
		streaming, _ := p.body["streaming"].(bool)
		s.checkCollected(p, m, arr(res, "events"), streaming)
	case "skill/call/resp":
		streaming := true // skills stream unless asked not to
		if b, ok := p.body["streaming"].(bool); ok {
			streaming = b
		}
		if streaming {
			s.checkCollected(p, m, arr(m.body, "result.events"), true)
		}
	}
}

// checkCollected holds a call's result events to the events it streamed
// (spec §6 rule 1): a streaming call's wire events are its result's
// events, in order; a call that does not stream puts none on the wire.
// Only calls that saw events either way are counted.
func (s *session) checkCollected(p *pending, m *msg, collected []any, streaming bool) {
	k := s.k
	if len(p.events) == 0 && len(collected) == 0 {
		return
	}
	if !streaming {
		k.expect(CheckEventsQuiet, len(p.events) == 0, "%s: %d events on the wire for a call with streaming false", clip(m.raw), len(p.events))
		return
	}
	wire := make([]any, len(p.events))
	for i, e := range p.events {
		wire[i] = map[string]any{"kind": e["kind"], "data": e["data"]}
	}
	k.expect(CheckEventsCollected, len(wire) == len(collected), "%s: %d events streamed, %d in the result's events", clip(m.raw), len(wire), len(collected))
	if len(wire) == len(collected) {
		for i := range wire {
			c := obj(collected[i], "")
			want := map[string]any{"kind": c["kind"], "data": c["data"]}
			if !equal(wire[i], want) {
				k.fail(CheckEventsCollected, "%s: event %d streamed as %s, collected as %s", clip(m.raw), i, show(wire[i]), show(want))
				break
			}
		}
	}
}

func (k *kit) namespace(typ string) string {
	if ts, ok := k.checker.types[typ]; ok {
		return ts.namespace
	}
	return ""
}

func (k *kit) replyType(typ string) string {
	if ts, ok := k.checker.types[typ]; ok {
		return ts.reply
	}
	return ""
}

func (k *kit) checkRetryable(code, reason string, retryable *bool, line []byte) {
	k.count(CheckRetryable)
	row, known := k.codes[code]
	want, byReason := row.Reasons[reason]
	if !byReason {
		want = row.Retryable
	}
	switch {
	case !known:
		k.fail(CheckRetryable, "%s: code %q is not in the contract's ErrorCode", clip(line), code)
	case retryable == nil:
		k.fail(CheckRetryable, "%s: no retryable", clip(line))
	case *retryable != want && byReason:
		k.fail(CheckRetryable, "%s: retryable %v, the contract says %v for %s with reason %q", clip(line), *retryable, want, code, reason)
	case *retryable != want:
		k.fail(CheckRetryable, "%s: retryable %v, the contract says %v for %s", clip(line), *retryable, want, code)
	}
}

// close drains the session: a last ping's pong proves that nothing more
// (a second reply, a late event) was waiting before it.
func (s *session) close(ctx context.Context) {
	if s == nil {
		return
	}
	defer s.conn.Close()
	if s.stalled >= 2 {
		return
	}
	id, err := s.request(ctx, "ping", nil)
	if err != nil {
		return
	}
	if _, err := s.await(ctx, id); err != nil {
		s.k.fail(CheckReplyOnce, "the closing ping of session %s: %v", s.label, err)
	}
}

// awaitAny waits for the reply to id, or to "" (a line whose id the host
// could not read, or one with a duplicate id key).
func (s *session) awaitAny(ctx context.Context, id string) (*msg, error) {
	ctx, cancel := context.WithTimeout(ctx, s.k.opts.Timeout)
	defer cancel()
	for {
		m, err := s.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for a reply: %w", err)
		}
		if m != nil && !strings.HasSuffix(m.Type, "/event") && (m.reqID() == id || m.reqID() == "") {
			return m, nil
		}
	}
}

// --- what scenarios read of a reply.

// is says whether m is a reply of type typ.
func (m *msg) is(typ string) bool { return m != nil && m.err == nil && m.Type == typ }

// isError says whether m is an error message (with any code, or one of
// codes).
func (m *msg) isError(codes ...string) bool {
	if m == nil || m.err != nil || m.Type != "error" {
		return false
	}
	if len(codes) == 0 {
		return true
	}
	return containsString(codes, m.Code)
}

// String describes m for a problem line.
func (m *msg) String() string {
	switch {
	case m == nil:
		return "nothing"
	case m.err != nil:
		return m.err.Error()
	default:
		return clip(m.raw)
	}
}

// want counts a case of check: m must be the reply typ; what says which
// step this is.
func (k *kit) want(check string, m *msg, typ, what string) bool {
	return k.expect(check, m.is(typ), "%s: answered %s, want %s", what, m, typ)
}

// wantError counts a case of check: m must be an error (with one of
// codes, when given).
func (k *kit) wantError(check string, m *msg, what string, codes ...string) bool {
	want := "an error"
	if len(codes) > 0 {
		want = "error " + strings.Join(codes, " or ")
	}
	return k.expect(check, m.isError(codes...), "%s: answered %s, want %s", what, m, want)
}

// wantRefusal counts a case of check: m must not be the success reply
// typ — an error, or a reply that says it refused (ok false, status error,
// success false).
func (k *kit) wantRefusal(check string, m *msg, typ, what string) bool {
	refused := m.isError()
	if m.is(typ) {
		for _, p := range []string{"ok", "success", "deleted", "closed"} {
			if b, ok := boolean(m.body, p); ok && !b {
				refused = true
			}
		}
		if str(m.body, "status") == "error" {
			refused = true
		}
		if b, ok := boolean(m.body, "result.success"); ok && !b {
			refused = true
		}
	}
	return k.expect(check, refused, "%s: answered %s, want a refusal", what, m)
}
