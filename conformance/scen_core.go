package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The scenarios of the core protocol: handshake, traffic rules, gating,
// cancellation, envelope rules after the handshake, isolation, examples.

func (k *kit) coreScenarios() []scenario {
	return []scenario{
		{[]string{CheckHandshakeFailures}, k.handshakeFailures},
		{[]string{CheckReplyOnce}, k.replyOnce},
		{[]string{CheckEnvelopeProto, CheckEnvelopeProtoCode, CheckEnvelopeID, CheckTransportSize, CheckPing}, k.envelope},
		{[]string{CheckEvents, CheckEventsCollected, CheckEventsQuiet}, k.events},
		{[]string{CheckCapability}, k.capabilityGating},
		{[]string{CheckNegotiated}, k.negotiated},
		{[]string{CheckCancel}, k.cancel},
		{[]string{CheckIsolationIDs, CheckIsolationState}, k.isolation},
		{[]string{CheckInvalidExamples}, k.invalidExamples},
		{[]string{CheckValidExamples}, k.validExamples},
		{[]string{CheckDirection}, k.direction},
	}
}

func (k *kit) handshake(ctx context.Context) error {
	s, err := k.open(ctx)
	if err != nil {
		return err
	}
	s.label = "handshake"
	defer s.close(ctx)
	caps := append(append([]string(nil), k.opts.Caps...), "no_such_capability")
	k.count(CheckHandshake)
	m, err := s.handshake(ctx, caps, k.opts.Token)
	if err != nil {
		k.fail(CheckHandshake, "%v", err)
		return nil
	}
	switch {
	case m.Type != "handshake/resp":
		k.fail(CheckHandshake, "%s: answered by %s", clip(m.raw), m.Type)
		return nil
	case m.OK == nil || !*m.OK:
		k.fail(CheckHandshake, "%s: ok is not true with the right token", clip(m.raw))
		return nil
	}
	k.handshakeOK = true
	if m.SessionID == "" {
		k.fail(CheckHandshake, "%s: no session_id", clip(m.raw))
	}
	if m.MaxPar == nil || *m.MaxPar < 1 {
		k.fail(CheckHandshake, "%s: max_parallel is not a positive integer", clip(m.raw))
	}
	if len(m.Caps) != len(caps) {
		k.fail(CheckHandshake, "%s: %d accepted_caps for %d requested", clip(m.raw), len(m.Caps), len(caps))
	} else {
		for i, c := range m.Caps {
			if c.Name != caps[i] {
				k.fail(CheckHandshake, "accepted_caps[%d] is %q, requested %q", i, c.Name, caps[i])
			}
			if c.Enabled && i < len(caps)-1 {
				k.offered[c.Name] = true
			}
		}
		if last := m.Caps[len(m.Caps)-1]; last.Enabled {
			k.fail(CheckHandshake, "accepted_caps: no_such_capability is enabled")
		}
	}
	// The always-on namespaces are offered whatever the entry says (the
	// capability checks judge the entry).
	for _, c := range k.alwaysOn() {
		k.offered[c] = true
	}
	// The session works: a ping is answered by pong.
	if p := s.call(ctx, "ping", nil); !p.is("pong") {
		k.fail(CheckHandshake, "a ping after the handshake: %s", p)
	}
	return nil
}

func (k *kit) handshakeFailures(ctx context.Context) error {
	cases := []struct {
		name string
		body map[string]any
		line func(id string) []byte // when set, the handshake line itself
		code string
	}{
		{name: "a wrong token", body: map[string]any{"agent_id": k.opts.AgentID, "agent_caps": []string{}, "auth_token": k.opts.Token + "-wrong"}, code: "unauthorized"},
		{name: "proto 2.0", line: func(id string) []byte {
			return fmt.Appendf(nil, `{"type":"handshake/req","id":%q,"proto":"2.0","ts":1,"agent_id":%q,"agent_caps":[],"auth_token":%q}`, id, k.opts.AgentID, k.opts.Token)
		}, code: "version_mismatch"},
		{name: "no agent_id", body: map[string]any{"agent_caps": []string{}, "auth_token": k.opts.Token}, code: "schema_violation"},
	}
	for _, tc := range cases {
		if err := func() error {
			s, err := k.open(ctx)
			if err != nil {
				return err
			}
			defer s.close(ctx)
			// Before any handshake, a request is unauthorized.
			k.count(CheckHandshakeFailures)
			if m := s.call(ctx, "ping", nil); !m.isError("unauthorized") {
				k.fail(CheckHandshakeFailures, "a ping before the handshake is answered by %s, not error unauthorized", m)
			}
			k.count(CheckHandshakeFailures)
			var id string
			if tc.line != nil {
				id = k.nextID("c")
				err = s.send(ctx, tc.line(id))
			} else {
				id, err = s.request(ctx, "handshake/req", tc.body)
			}
			if err != nil {
				return err
			}
			m, err := s.await(ctx, id)
			if err != nil {
				k.fail(CheckHandshakeFailures, "%s: %v", tc.name, err)
				return nil
			}
			if m.Type != "handshake/resp" || m.OK == nil || *m.OK || m.Error == nil || m.Error.Code != tc.code {
				k.fail(CheckHandshakeFailures, "%s: %s, want handshake/resp with ok false and error %s", tc.name, clip(m.raw), tc.code)
			}
			// No session: a refused handshake names none (schemas/core.json
			// HandshakeResp.session_id, absent on failure).
			k.count(CheckHandshakeFailures)
			if m.Type == "handshake/resp" && m.SessionID != "" {
				k.fail(CheckHandshakeFailures, "%s: refused, yet names the session_id %q", tc.name, m.SessionID)
			}
			// No session was created: requests are still unauthorized.
			k.count(CheckHandshakeFailures)
			if m := s.call(ctx, "session/info/req", nil); !m.isError("unauthorized") {
				k.fail(CheckHandshakeFailures, "%s, then session/info: %s, want error unauthorized", tc.name, m)
			}
			return nil
		}(); err != nil {
			return err
		}
	}
	return nil
}

// offeredCaps returns the capabilities the host offers, sorted.
func (k *kit) offeredCaps() []string {
	var out []string
	for c, on := range k.offered {
		if on {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

func (k *kit) replyOnce(ctx context.Context) error {
	s := k.sessionFor(ctx, CheckReplyOnce, "pipelined", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	// Pipelined: several requests in flight at once, a failing one among
	// them; each must be answered once.
	var ids []string
	for _, r := range []struct {
		typ  string
		body map[string]any
	}{
		{"ping", nil}, {"session/info/req", nil}, {"ping", nil}, {"tool/list/req", nil},
		{"tool/call/req", map[string]any{"tool_name": 7}}, {"nope/nope/req", nil}, {"ping", nil},
	} {
		id, err := s.request(ctx, r.typ, r.body)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if s.replies[id] > 0 {
			continue
		}
		if _, err := s.await(ctx, id); err != nil {
			k.fail(CheckReplyOnce, "%v", err)
		}
	}
	return nil
}

// envelope: the envelope rules hold after the handshake too — proto, ids
// — and an oversized line is refused without ending the connection.
func (k *kit) envelope(ctx context.Context) error {
	s := k.sessionFor(ctx, CheckEnvelopeProto, "envelope", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	// Two pings: pong's uptime is held by the traffic checks.
	s.call(ctx, "ping", nil)
	time.Sleep(20 * time.Millisecond)
	s.call(ctx, "ping", nil)

	id := k.nextID("c")
	if err := s.send(ctx, fmt.Appendf(nil, `{"type":"ping","id":%q,"proto":"2.0","ts":1}`, id)); err != nil {
		return err
	}
	m, err := s.await(ctx, id)
	if err != nil {
		k.fail(CheckEnvelopeProto, "ping with proto 2.0 after the handshake: %v", err)
	} else if k.expect(CheckEnvelopeProto, m.isError(), "ping with proto 2.0 after the handshake: answered %s, want an error", m) {
		k.expect(CheckEnvelopeProtoCode, m.Code == "version_mismatch", "ping with proto 2.0 after the handshake: %s, want version_mismatch", m)
	}
	k.expect(CheckEnvelopeProto, s.call(ctx, "ping", nil).is("pong"), "the session does not go on after a request with proto 2.0")

	for _, line := range []string{`{"type":"ping","proto":"1.0","ts":1}`, `{"type":"ping","id":"","proto":"1.0","ts":1}`} {
		if err := s.send(ctx, []byte(line)); err != nil {
			return err
		}
		m, err := s.awaitAny(ctx, "")
		switch {
		case err != nil:
			k.fail(CheckEnvelopeID, "%s: %v", line, err)
		default:
			k.expect(CheckEnvelopeID, m.isError() && m.reqID() == "", "%s: answered %s, want an error with req_id \"\"", line, m)
		}
	}
	k.expect(CheckEnvelopeID, s.call(ctx, "ping", nil).is("pong"), "the session does not go on after a request without an id")

	if k.target.HTTP != "" && k.target.Name != "websocket" {
		k.skip("over HTTP, http.size checks the limit (413)", CheckTransportSize)
		k.transportBranch("http size")
		return nil
	}
	limit := k.maxMessage()
	id = k.nextID("big")
	pad := strings.Repeat("x", int(limit))
	big := fmt.Appendf(nil, `{"type":"ping","id":%q,"proto":"1.0","ts":1,"pad":%q}`, id, pad)
	if err := s.conn.Send(ctx, big); err != nil {
		k.fail(CheckTransportSize, "a line of %d bytes (the limit is %d): the transport refused to send it: %v", len(big), limit, err)
		return nil
	}
	k.record(record{From: "agent", Line: string(big[:200]) + "…"})
	m, err = s.awaitAny(ctx, id)
	if err != nil {
		k.fail(CheckTransportSize, "a line of %d bytes (the limit is %d): %v", len(big), limit, err)
		return nil
	}
	k.expect(CheckTransportSize, m.isError(), "a line of %d bytes (the limit is %d): answered %s, want an error", len(big), limit, m)
	k.expect(CheckTransportSize, s.call(ctx, "ping", nil).is("pong"), "the connection does not go on after a line over the limit")
	return nil
}

// maxMessage is the host's message limit: the fixture's, else the default
// of docs/DECISIONS.md, Dispatch.
func (k *kit) maxMessage() int64 {
	if l := k.opts.Fixture.Limits; l != nil && l.MaxMessageBytes > 0 {
		return l.MaxMessageBytes
	}
	return 1 << 20
}

func (k *kit) events(ctx context.Context) error {
	var call *ToolCall
	if t := k.opts.Fixture.Tools; t != nil {
		call = t.Streaming
	}
	if len(k.opts.EventsRequest) == 0 && call == nil {
		k.skip("no fixture tools.streaming (nor --events): the events other checks saw are judged", CheckEvents)
		k.skip("needs fixture tools.streaming", CheckEventsCollected, CheckEventsQuiet)
		if k.opts.Fixture.Skills == nil || k.opts.Fixture.Skills.Call == nil {
			return nil
		}
	}
	s := k.sessionFor(ctx, CheckEvents, "events", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	if len(k.opts.EventsRequest) > 0 {
		var body map[string]any
		if err := json.Unmarshal(k.opts.EventsRequest, &body); err != nil {
			return fmt.Errorf("conformance: the events request: %w", err)
		}
		typ, _ := body["type"].(string)
		delete(body, "type")
		m := s.call(ctx, typ, body)
		k.expect(CheckEvents, m.err == nil && len(m.events) > 0, "the events request %s sent no event before its reply %s", typ, m)
	}
	if call == nil {
		return nil
	}
	if !k.offers("tools", CheckEventsCollected, CheckEventsQuiet) {
		return nil
	}
	m := s.call(ctx, "tool/call/req", map[string]any{"tool_name": call.ToolName, "arguments": orEmpty(call.Arguments), "streaming": true})
	if k.want(CheckEventsCollected, m, "tool/call/resp", "the fixture's streaming tool call") {
		k.expect(CheckEventsCollected, len(m.events) > 0, "the fixture's streaming tool call %s put no event on the wire: %s", call.ToolName, m)
	}
	m = s.call(ctx, "tool/call/req", map[string]any{"tool_name": call.ToolName, "arguments": orEmpty(call.Arguments), "streaming": false})
	if k.want(CheckEventsQuiet, m, "tool/call/resp", "the fixture's streaming tool call with streaming false") {
		k.expect(CheckEventsQuiet, len(arr(m.body, "result.events")) > 0, "the fixture's streaming tool call %s with streaming false collected no events: %s", call.ToolName, m)
	}
	return nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// probe is a request of a capability's namespace that needs nothing of the
// host: sent where the kit only asks whether the namespace is served.
type probe struct {
	typ  string
	body map[string]any
}

// probes returns one probe per capability (and per always-on namespace):
// a request that needs no body (a list, info, stats or discover first),
// else one whose required fields the kit can fill from its schema and
// that then validates, so the host's schema check cannot answer first.
func (k *kit) probes() map[string]probe {
	type cand struct {
		rank int
		p    probe
	}
	best := map[string]cand{}
	for typ, ts := range k.checker.types {
		if ts.kind != kindRequest || typ != ts.typ {
			continue
		}
		c := k.capabilityOf(typ)
		if c == "" {
			continue
		}
		body, ok := k.synthesize(ts)
		if !ok {
			continue
		}
		rank := 2
		if len(body) == 0 {
			rank = 1
			verb := strings.TrimSuffix(strings.TrimPrefix(typ, ts.namespace+"/"), "/req")
			switch verb {
			case "list", "info", "stats", "discover", "server/list":
				rank = 0
			}
		}
		if b, ok := best[c]; !ok || rank < b.rank || rank == b.rank && typ < b.p.typ {
			best[c] = cand{rank, probe{typ, body}}
		}
	}
	out := map[string]probe{}
	for c, b := range best {
		out[c] = b.p
	}
	return out
}

// synthesize fills the required fields of a request from its schema (the
// first branch of a oneOf or anyOf of required lists), with plain values
// of their types; ok is false when a field needs more than that, or the
// result does not validate.
func (k *kit) synthesize(ts *typeSchema) (map[string]any, bool) {
	def := ts.def
	if _, ok := def["if"]; ok {
		return nil, false
	}
	var required []any
	if r, ok := def["required"].([]any); ok {
		required = append(required, r...)
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		if branches, ok := def[key].([]any); ok && len(branches) > 0 {
			b, _ := branches[0].(map[string]any)
			if r, ok := b["required"].([]any); ok {
				required = append(required, r...)
			}
		}
	}
	props, _ := def["properties"].(map[string]any)
	body := map[string]any{}
	for _, r := range required {
		name, _ := r.(string)
		p, _ := props[name].(map[string]any)
		if p == nil {
			return nil, false
		}
		if enum, ok := p["enum"].([]any); ok && len(enum) > 0 {
			body[name] = enum[0]
			continue
		}
		switch t, _ := p["type"].(string); t {
		case "string":
			body[name] = "aep-conformance-probe"
		case "integer", "number":
			v := 1.0
			if m, ok := p["minimum"].(float64); ok && m > v {
				v = m
			}
			body[name] = v
		case "boolean":
			body[name] = false
		case "object":
			body[name] = map[string]any{}
		case "array":
			if n, _ := p["minItems"].(float64); n > 0 {
				return nil, false
			}
			body[name] = []any{}
		default:
			return nil, false
		}
	}
	whole := map[string]any{"type": ts.typ, "id": "probe", "proto": "1.0", "ts": 1.0}
	for key, v := range body {
		whole[key] = v
	}
	if ts.schema.Validate(norm(whole)) != nil {
		return nil, false
	}
	return body, true
}

func (k *kit) capabilityGating(ctx context.Context) error {
	s := k.sessionFor(ctx, CheckCapability, "no capabilities", []string{})
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	probes := k.probes()
	for _, c := range k.capabilities() {
		p, ok := probes[c]
		if !ok {
			continue
		}
		m := s.call(ctx, p.typ, p.body)
		k.expect(CheckCapability, m.isError("capability_missing"), "%s without %s: %s, want error capability_missing", p.typ, c, m)
	}
	return nil
}

// negotiated: in a session asking for every capability and in one asking
// for a part of them, each namespace is served exactly as accepted_caps
// says; the always-on namespaces are served in both.
func (k *kit) negotiated(ctx context.Context) error {
	probes := k.probes()
	judge := func(s *session, label string) {
		enabled := map[string]bool{}
		reported := map[string]bool{}
		for _, e := range s.caps {
			reported[e.Name] = true
			enabled[e.Name] = e.Enabled
		}
		always := map[string]bool{}
		for _, c := range k.alwaysOn() {
			always[c] = true
			if reported[c] {
				k.expect(CheckNegotiated, enabled[c], "%s: accepted_caps reports the always-on %s disabled", label, c)
			}
		}
		caps := append(k.capabilities(), k.alwaysOn()...)
		for _, c := range caps {
			p, ok := probes[c]
			if !ok {
				continue
			}
			m := s.callAs(ctx, compareLoose, p.typ, p.body)
			served := m.err == nil && !m.isError("capability_missing")
			switch {
			case m.err != nil:
				k.fail(CheckNegotiated, "%s: %s: %v", label, p.typ, m.err)
			case always[c]:
				k.expect(CheckNegotiated, served, "%s: %s of the always-on %s namespace: %s", label, p.typ, c, m)
			case !reported[c]:
				k.expect(CheckNegotiated, !served, "%s: %s is served though %s was not asked for: %s", label, p.typ, c, m)
			case enabled[c]:
				k.expect(CheckNegotiated, served, "%s: %s is reported enabled, but %s is answered %s", label, c, p.typ, m)
			default:
				k.expect(CheckNegotiated, !served, "%s: %s is reported enabled: false, but %s is served: %s", label, c, p.typ, m)
			}
		}
	}
	all := k.sessionFor(ctx, CheckNegotiated, "every capability", k.opts.Caps)
	if all == nil {
		return nil
	}
	judge(all, "asking for every capability")
	all.close(ctx)
	var part []string
	for i, c := range k.offeredCaps() {
		if i%2 == 0 && !containsString(k.alwaysOn(), c) {
			part = append(part, c)
		}
	}
	some := k.sessionFor(ctx, CheckNegotiated, "part", part)
	if some == nil {
		return nil
	}
	judge(some, fmt.Sprintf("asking for %v", part))
	some.close(ctx)
	return nil
}

// cancel: a request stopped by cancel is answered once, with cancelled.
func (k *kit) cancel(ctx context.Context) error {
	var slow *ToolCall
	if t := k.opts.Fixture.Tools; t != nil {
		slow = t.Slow
	}
	if slow == nil {
		k.skip("needs fixture tools.slow", CheckCancel)
		return nil
	}
	if !k.offers("tools", CheckCancel) {
		return nil
	}
	s := k.sessionFor(ctx, CheckCancel, "cancel", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	id, err := s.request(ctx, "tool/call/req", map[string]any{"tool_name": slow.ToolName, "arguments": orEmpty(slow.Arguments)})
	if err != nil {
		return err
	}
	// Give the host a moment to start it, reading what comes meanwhile.
	early := s.quiet(ctx, 300*time.Millisecond)
	for _, m := range early {
		if m.reqID() == id && !strings.HasSuffix(m.Type, "/event") {
			k.fail(CheckCancel, "the fixture's slow call %s was answered within 300 ms: %s", slow.ToolName, m)
			return nil
		}
	}
	if _, err := s.request(ctx, "cancel", map[string]any{"req_id": id}); err != nil {
		return err
	}
	start := time.Now()
	m, err := s.await(ctx, id)
	if err != nil {
		k.fail(CheckCancel, "the cancelled call: %v", err)
		return nil
	}
	k.expect(CheckCancel, m.isError("cancelled"), "the cancelled call is answered %s, want error cancelled", m)
	k.expect(CheckCancel, time.Since(start) < k.opts.Timeout, "the cancelled call was answered after %v", time.Since(start))
	// A cancel of an id not in flight changes nothing and is not answered;
	// neither is the cancel above (reply.once and cancel watch).
	if _, err := s.request(ctx, "cancel", map[string]any{"req_id": k.name("not-in-flight")}); err != nil {
		return err
	}
	k.expect(CheckCancel, s.call(ctx, "ping", nil).is("pong"), "the session does not go on after a cancel of an id not in flight")
	return nil
}

func (k *kit) invalidExamples(ctx context.Context) error {
	return k.examples(ctx, false)
}

func (k *kit) validExamples(ctx context.Context) error {
	return k.examples(ctx, true)
}

func (k *kit) examples(ctx context.Context, valid bool) error {
	check := CheckInvalidExamples
	if valid {
		check = CheckValidExamples
	}
	s := k.sessionFor(ctx, check, "examples", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	for _, ex := range k.opts.Examples {
		if ex.Valid != valid {
			continue
		}
		if valid {
			// A notification gets no reply (and shutdown ends the session);
			// the handshake has its own checks.
			if ts, ok := k.checker.types[ex.Type]; !ok || ts.kind != kindRequest || ex.Type == "handshake/req" {
				continue
			}
		}
		k.count(check)
		k.record(record{From: "agent", Line: string(ex.Line), Example: map[bool]string{true: "valid", false: "invalid"}[ex.Valid], Beyond: ex.Beyond})
		s.example = &ex
		err := s.send(ctx, ex.Line)
		s.example = nil
		if err != nil {
			return err
		}
		// One line at a time, so the next answer is this line's; an error
		// answering a line whose id could not be read has req_id "".
		_, want := lineID(ex.Line)
		m, err := s.awaitAny(ctx, want)
		if err != nil {
			k.fail(check, "%s: %v", ex.Name, err)
			continue
		}
		// Examples of a directory reuse ids (each file is whole on its own);
		// sent one at a time, an answered id is free again.
		delete(s.replies, want)
		delete(s.notes, want)
		bad := refusedAsMalformed(m, ex.Line)
		switch {
		case valid && bad:
			k.fail(check, "%s: answered %s", ex.Name, clip(m.raw))
		case !valid && !bad:
			k.fail(check, "%s: answered %s, want error parse_error or schema_violation", ex.Name, clip(m.raw))
		}
	}
	return nil
}

// refusedAsMalformed says whether m refuses line as a message that breaks
// the contract: error parse_error or schema_violation; a handshake/req is
// answered by handshake/resp with that error (docs/DECISIONS.md, Wire); a
// line whose proto is not the host's may be answered version_mismatch
// (spec §9).
func refusedAsMalformed(m *msg, line []byte) bool {
	code := m.Code
	switch {
	case m.Type == "handshake/resp" && m.Error != nil:
		code = m.Error.Code
	case m.Type != "error":
		return false
	}
	switch code {
	case "parse_error", "schema_violation":
		return true
	case "version_mismatch":
		var env struct {
			Proto *string `json:"proto"`
		}
		return json.Unmarshal(line, &env) == nil && env.Proto != nil && *env.Proto != "1.0"
	}
	return false
}

func (k *kit) direction(ctx context.Context) error {
	s := k.sessionFor(ctx, CheckDirection, "direction", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	var hostTypes []string
	for typ, ts := range k.checker.types {
		if ts.kind == kindReply || ts.kind == kindEvent {
			hostTypes = append(hostTypes, typ)
		}
	}
	hostTypes = append(hostTypes, sortedKeys(k.checker.events)...)
	sort.Strings(hostTypes)
	for _, typ := range hostTypes {
		k.count(CheckDirection)
		m := s.call(ctx, typ, map[string]any{"req_id": "x"})
		if !m.isError("parse_error") {
			k.fail(CheckDirection, "%s sent by the agent: %s, want error parse_error", typ, m)
		}
	}
	return nil
}
