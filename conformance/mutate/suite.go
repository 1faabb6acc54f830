package mutate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/aephost/aep/conformance"
)

// Kinds of bug, for the mutation suite's tally (Mutant.Kind).
const (
	// KindReply: a capability's successful reply is wrong.
	KindReply = "reply"
	// KindRefusal: what a capability must refuse is served, or a refusal
	// says the wrong thing.
	KindRefusal = "refusal"
	// KindEnvelope: the envelope and the traffic rules (ids, proto,
	// one reply per request, direction, closed shapes).
	KindEnvelope = "envelope"
	// KindEvent: events of a request.
	KindEvent = "event"
	// KindIsolation: one session reaches another's state or ids.
	KindIsolation = "isolation"
	// KindGating: capabilities served, or reported, other than negotiated.
	KindGating = "gating"
	// KindHandshake: the handshake and what comes before it.
	KindHandshake = "handshake"
	// KindError: an error message's code, retryable or capability_name.
	KindError = "error"
	// KindEdge: the HTTP edge and the transport's limits.
	KindEdge = "edge"
	// KindTransport: an answer that depends on the transport carrying it
	// (Mutant.OnlyOver), run in a comparison of stdio and WebSocket.
	KindTransport = "transport"
)

// Transports of the suite: every mutant runs over stdio and WebSocket,
// except those stdio cannot carry (the HTTP edge, a session reached by id),
// which run over WebSocket and HTTP+SSE.
var (
	overStdioAndWS = []string{"stdio", "websocket"}
	overWSAndHTTP  = []string{"websocket", "http"}
)

// CompareStdioWS is the "transport" of a mutant with OnlyOver: the kit's
// runs over stdio and WebSocket compared (conformance.Compare).
const CompareStdioWS = "stdio+websocket"

// Suite returns the mutation suite: the catalogue's mutants, classified,
// and the independent ones, each with the kind of bug, the capability it
// touches and the transports it runs over. TestMutationSuite runs each
// over its transports in front of a real aep.
func Suite() []Mutant {
	var out []Mutant
	for _, mu := range Catalogue() {
		c, ok := catalogueKinds[mu.Name]
		if !ok {
			panic("mutate: catalogue mutant " + mu.Name + " has no kind in catalogueKinds")
		}
		mu.Kind, mu.Capability = c.kind, c.capability
		switch {
		case mu.OnlyOver != "":
			mu.Transports = []string{CompareStdioWS}
		case mu.HTTP != nil || reachedByID[mu.Name]:
			mu.Transports = overWSAndHTTP
		default:
			mu.Transports = overStdioAndWS
		}
		out = append(out, mu)
	}
	for _, mu := range Independent() {
		mu.Independent = true
		if mu.Transports == nil {
			mu.Transports = overStdioAndWS
		}
		out = append(out, mu)
	}
	return out
}

// reachedByID are the catalogue's mutants of a session the kit reaches by
// its id (a subagent's child, a session the operator opened), which stdio
// cannot carry.
var reachedByID = map[string]bool{"child-gets-everything": true, "operator-session-unmarked": true}

// catalogueKinds classifies the catalogue's mutants for the suite.
var catalogueKinds = map[string]struct{ kind, capability string }{
	"wrong-capability-name":             {KindError, ""},
	"unknown-tool-success":              {KindRefusal, "tools"},
	"tool-result-names-another":         {KindReply, "tools"},
	"streamed-events-missing":           {KindEvent, "tools"},
	"negative-uptime":                   {KindReply, "core"},
	"nested-extra-field":                {KindEnvelope, ""},
	"disabled-but-served":               {KindGating, "memory"},
	"same-session-id":                   {KindIsolation, ""},
	"proto-after-handshake":             {KindEnvelope, ""},
	"reply-proto-after-handshake":       {KindEnvelope, ""},
	"memory-wrong-content":              {KindReply, "memory"},
	"env-step-wrong-episode":            {KindReply, "env"},
	"chain-output-not-from-nodes":       {KindReply, "chains"},
	"restore-does-nothing":              {KindReply, "session"},
	"cancel-ignored":                    {KindEnvelope, "core"},
	"event-after-reply":                 {KindEvent, "tools"},
	"extra-field":                       {KindEnvelope, ""},
	"duplicate-pong":                    {KindEnvelope, "core"},
	"retryable":                         {KindError, ""},
	"no-gating":                         {KindGating, ""},
	"accept-wrong-token":                {KindHandshake, ""},
	"host-sends-request":                {KindEnvelope, ""},
	"invalid-accepted":                  {KindError, ""},
	"origin-ignored":                    {KindEdge, ""},
	"host-ignored":                      {KindEdge, ""},
	"no-size-limit":                     {KindEdge, ""},
	"handshake-no-session-id":           {KindHandshake, ""},
	"proto-refused-as-schema-violation": {KindError, ""},
	"no-id-not-refused":                 {KindEnvelope, ""},
	"repeated-host-id":                  {KindEnvelope, ""},
	"capability-missing-unnamed":        {KindError, ""},
	"events-always-streamed":            {KindEvent, "tools"},
	"child-gets-everything":             {KindGating, "subagents"},
	"memory-ids-global":                 {KindIsolation, "memory"},
	"valid-refused":                     {KindError, ""},
	"tool-list-unsorted":                {KindReply, "tools"},
	"failure-without-error":             {KindRefusal, "tools"},
	"tool-data-lost":                    {KindReply, "tools"},
	"tool-timeout-ignored":              {KindReply, "tools"},
	"toolkit-preconfigured":             {KindReply, "toolkits"},
	"configure-anything":                {KindRefusal, "toolkits"},
	"configured-not-listed":             {KindReply, "toolkits"},
	"forget-everything":                 {KindRefusal, "memory"},
	"spaces-of-another-env":             {KindReply, "env"},
	"seed-ignored":                      {KindReply, "env"},
	"batch-reordered":                   {KindReply, "env"},
	"unknown-env-reset":                 {KindRefusal, "env"},
	"data-reset-keeps-files":            {KindReply, "env"},
	"stdin-lost":                        {KindReply, "proc"},
	"kill-reports-exited":               {KindReply, "proc"},
	"unknown-proc-status":               {KindRefusal, "proc"},
	"feedback-not-recorded":             {KindReply, "learn"},
	"experience-no-batch":               {KindReply, "learn"},
	"rank-drops-candidates":             {KindReply, "learn"},
	"skill-get-another":                 {KindReply, "skills"},
	"skill-call-fails":                  {KindReply, "skills"},
	"unknown-skill-served":              {KindRefusal, "skills"},
	"define-miscounts":                  {KindReply, "chains"},
	"cycle-runs":                        {KindRefusal, "chains"},
	"failures-hidden":                   {KindReply, "chains"},
	"fixture-chain-output":              {KindReply, "chains"},
	"unregister-anything":               {KindRefusal, "mcp"},
	"resource-empty":                    {KindReply, "mcp"},
	"spawned-running":                   {KindReply, "subagents"},
	"grant-anything":                    {KindRefusal, "subagents"},
	"info-not-in-flight":                {KindReply, "session"},
	"operator-session-unmarked":         {KindReply, "session"},
	"fork-is-sender":                    {KindReply, "session"},
	"fork-group-dropped":                {KindReply, "session"},
	"trajectory-miscounts":              {KindReply, "session"},
	"silent-rollback":                   {KindRefusal, "session"},
	"no-session-header":                 {KindEdge, ""},
	"oversize-line-served":              {KindEdge, ""},
	"websocket-budget-differs":          {KindTransport, "session"},
}

// --- helpers of the independent mutants.

// reqIDs keeps the ids of the agent's requests on a connection, in order.
func reqIDs(s *State, m Msg) []Msg {
	if id, _ := m["id"].(string); id != "" {
		ids, _ := s.Scratch["ids"].([]string)
		s.Scratch["ids"] = append(ids, id)
	}
	return Same(m)
}

// onAgent applies f to every agent message of type typ.
func onAgent(typ string, f func(s *State, m Msg)) func(*State, Msg) []Msg {
	return func(s *State, m Msg) []Msg {
		if Type(m) == typ {
			f(s, m)
		}
		return Same(m)
	}
}

// dropAndAnswer drops an agent's request of type typ and answers it with
// what fake makes: a host that says it did what it did not.
func dropAndAnswer(typ string, fake func(req Msg) Msg) func(*State, Msg) []Msg {
	return func(s *State, m Msg) []Msg {
		if Type(m) != typ {
			return Same(m)
		}
		s.Inject(fake(m))
		return nil
	}
}

// errorsOf rewrites the errors answering a request for which when is true.
func errorsOf(when func(s *State, req Msg) bool, fake func(s *State, req, err Msg) Msg) func(*State, Msg) []Msg {
	return func(s *State, m Msg) []Msg {
		if Type(m) != "error" {
			return Same(m)
		}
		req := s.Request(ReqID(m))
		if req == nil || !when(s, req) {
			return Same(m)
		}
		r := fake(s, req, m)
		r["id"], r["proto"], r["ts"], r["req_id"] = fmt.Sprint(m["id"]), "1.0", m["ts"], m["req_id"]
		return []Msg{r}
	}
}

// sharedList appends v to the list at key of s.Shared, with the
// connection that added it, and returns the others' entries.
type owned struct {
	by *State
	v  any
}

func addShared(s *State, key string, v any) {
	s.Shared.mu.Lock()
	defer s.Shared.mu.Unlock()
	l, _ := s.Shared.m[key].([]owned)
	s.Shared.m[key] = append(l, owned{s, v})
}

func othersShared(s *State, key string) []any {
	s.Shared.mu.Lock()
	defer s.Shared.mu.Unlock()
	l, _ := s.Shared.m[key].([]owned)
	var out []any
	for _, o := range l {
		if o.by != s {
			out = append(out, o.v)
		}
	}
	return out
}

// copyMsg is a deep copy of a decoded message.
func copyMsg(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, c := range x {
			out[k] = copyMsg(c)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, c := range x {
			out[i] = copyMsg(c)
		}
		return out
	default:
		return v
	}
}

func num(v int) json.Number { return json.Number(fmt.Sprint(v)) }

// Independent returns the mutants written as a host's plausible bugs, one
// a mutant, without looking for the check that would catch each: the
// kit's kill rate over them is what it is worth against bugs nobody
// tailored it to.
func Independent() []Mutant {
	run := func(ids ...string) []string { return ids }
	c := conformance.CheckSessionInfo
	return []Mutant{
		// --- The envelope and the traffic rules.
		{Name: "req-id-of-previous", Bug: "replies carry the req_id of the request sent before the one they answer (an off-by-one in the host's reply table)",
			Kind: KindEnvelope, Run: run(c), Agent: reqIDs,
			Host: func(s *State, m Msg) []Msg {
				if IsEvent(m) || Type(m) == "handshake/resp" {
					return Same(m)
				}
				ids, _ := s.Scratch["ids"].([]string)
				for i, id := range ids {
					if id == ReqID(m) && i > 0 {
						m["req_id"] = ids[i-1]
						break
					}
				}
				return Same(m)
			}},
		{Name: "ts-as-text", Bug: "host messages carry ts as an RFC 3339 text instead of seconds since the epoch",
			Kind: KindEnvelope, Run: run(c),
			Host: func(_ *State, m Msg) []Msg { m["ts"] = "2026-11-27T10:00:00Z"; return Same(m) }},
		{Name: "reply-without-proto", Bug: "replies after the handshake leave proto out",
			Kind: KindEnvelope, Run: run(c),
			Host: func(s *State, m Msg) []Msg {
				if s.Handshaken() && Type(m) != "handshake/resp" {
					delete(m, "proto")
				}
				return Same(m)
			}},
		{Name: "recall-typed-retrieve", Bug: "memory/recall is answered with the type memory/retrieve/resp (a copy-pasted handler)",
			Kind: KindEnvelope, Capability: "memory", Run: run(conformance.CheckMemoryRoundTrip),
			Host: onType("memory/recall/resp", func(_ *State, m Msg) { m["type"] = "memory/retrieve/resp" })},
		{Name: "error-req-id-lost", Bug: "an error answering a request with an id carries req_id \"\" (the handler's error path forgets it)",
			Kind: KindEnvelope, Run: run(conformance.CheckMemoryErrors),
			Host: onType("error", func(_ *State, m Msg) { m["req_id"] = "" })},
		{Name: "errors-twice", Bug: "every error is sent twice (a retry wrapper that also reports)",
			Kind: KindEnvelope, Run: run(conformance.CheckEnvErrors),
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) != "error" || ReqID(m) == "" {
					return Same(m)
				}
				twin := copyMsg(m).(map[string]any)
				twin["id"] = fmt.Sprint(m["id"], "-again")
				return []Msg{m, twin}
			}},
		{Name: "unknown-type-pong", Bug: "a request of a type the host does not know is answered by pong",
			Kind: KindEnvelope, Run: run(conformance.CheckReplyOnce),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "error" && Type(s.Request(ReqID(m))) == "nope/nope/req" {
					return []Msg{{"type": "pong", "id": m["id"], "proto": "1.0", "ts": m["ts"], "req_id": m["req_id"], "uptime_seconds": num(1)}}
				}
				return Same(m)
			}},
		{Name: "silent-after-schema-violation", Bug: "after answering a schema_violation the host stops answering the session",
			Kind: KindEnvelope, Run: run(conformance.CheckLearnFeedback),
			Host: func(s *State, m Msg) []Msg {
				if s.Scratch["dead"] == true {
					return nil
				}
				if Type(m) == "error" && m["code"] == "schema_violation" && ReqID(m) != "" {
					s.Scratch["dead"] = true
				}
				return Same(m)
			}},

		// --- Events.
		{Name: "event-seq-from-one", Bug: "a request's events are numbered from 1",
			Kind: KindEvent, Capability: "tools", Run: run(conformance.CheckEvents),
			Host: func(_ *State, m Msg) []Msg {
				if n, ok := m["seq"].(json.Number); ok && IsEvent(m) {
					i, _ := n.Int64()
					m["seq"] = num(int(i) + 1)
				}
				return Same(m)
			}},
		{Name: "event-wrong-namespace", Bug: "a tool call's events are typed session/event",
			Kind: KindEvent, Capability: "tools", Run: run(conformance.CheckEvents),
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "tool/event" {
					m["type"] = "session/event"
				}
				return Same(m)
			}},
		{Name: "event-twice", Bug: "every event is sent twice with the same seq",
			Kind: KindEvent, Capability: "tools", Run: run(conformance.CheckEvents),
			Host: func(_ *State, m Msg) []Msg {
				if !IsEvent(m) {
					return Same(m)
				}
				twin := copyMsg(m).(map[string]any)
				twin["id"] = fmt.Sprint(m["id"], "-again")
				return []Msg{m, twin}
			}},
		{Name: "events-not-streamed", Bug: "a streaming tool call sends no event on the wire (they are only in the result)",
			Kind: KindEvent, Capability: "tools", Run: run(conformance.CheckEvents),
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "tool/event" {
					return nil
				}
				return Same(m)
			}},
		{Name: "event-data-dropped", Bug: "events go on the wire without their data",
			Kind: KindEvent, Capability: "tools", Run: run(conformance.CheckEvents),
			Host: func(_ *State, m Msg) []Msg {
				if IsEvent(m) {
					m["data"] = map[string]any{}
				}
				return Same(m)
			}},
		{Name: "skill-events-reversed", Bug: "a skill call's result lists its events in reverse order",
			Kind: KindEvent, Capability: "skills", Run: run(conformance.CheckSkillsCall),
			Host: onType("skill/call/resp", func(_ *State, m Msg) {
				ev := list(Obj(m, "result"), "events")
				for i, j := 0, len(ev)-1; i < j; i, j = i+1, j-1 {
					ev[i], ev[j] = ev[j], ev[i]
				}
			})},
		{Name: "quiet-call-loses-events", Bug: "a tool call with streaming false collects no events in its result",
			Kind: KindEvent, Capability: "tools", Run: run(conformance.CheckEventsQuiet),
			Host: func(s *State, m Msg) []Msg {
				if r := Obj(m, "result"); Type(m) == "tool/call/resp" && r != nil && s.Request(ReqID(m))["streaming"] == false {
					r["events"] = []any{}
				}
				return Same(m)
			}},

		// --- The handshake and gating.
		{Name: "unknown-capability-enabled", Bug: "a capability the host does not have is reported enabled",
			Kind: KindGating, Run: run(conformance.CheckHandshake),
			Host: onType("handshake/resp", func(_ *State, m Msg) {
				for _, e := range list(m, "accepted_caps") {
					if o, ok := e.(map[string]any); ok && o["name"] == "no_such_capability" {
						o["enabled"] = true
					}
				}
			})},
		{Name: "accepted-caps-sorted", Bug: "accepted_caps come sorted by name, not in the order requested",
			Kind: KindGating, Run: run(conformance.CheckHandshake),
			Host: onType("handshake/resp", func(_ *State, m Msg) {
				caps := list(m, "accepted_caps")
				name := func(i int) string { o, _ := caps[i].(map[string]any); return fmt.Sprint(o["name"]) }
				sort.SliceStable(caps, func(i, j int) bool { return name(i) < name(j) })
			})},
		{Name: "max-parallel-zero", Bug: "the handshake says max_parallel 0",
			Kind: KindHandshake, Run: run(conformance.CheckHandshake),
			Host: onType("handshake/resp", func(_ *State, m Msg) {
				if m["ok"] == true {
					m["max_parallel"] = num(0)
				}
			})},
		{Name: "second-handshake-malformed", Bug: "a well-formed second handshake on a live session is answered schema_violation, a code of shape, for a condition of state",
			Kind: KindHandshake, Run: run(conformance.CheckHandshake),
			Host: onType("handshake/resp", func(_ *State, m Msg) {
				e, _ := m["error"].(map[string]any)
				if d, _ := e["detail"].(map[string]any); d != nil && d["reason"] == "already_handshaken" {
					e["code"] = "schema_violation"
					e["detail"] = map[string]any{"field": "type"}
				}
			})},
		{Name: "req-id-number-accepted", Bug: "a request whose req_id is a number is served (the envelope's req_id is not checked to be a string)",
			Kind: KindEnvelope, Run: run(conformance.CheckEnvelopeID),
			Agent: func(_ *State, m Msg) []Msg {
				if _, ok := m["req_id"].(json.Number); ok && Type(m) == "ping" {
					delete(m, "req_id")
				}
				return Same(m)
			}},
		{Name: "learn-ungated", Bug: "a session that asked for no capability is served learn/stats",
			Kind: KindGating, Capability: "learn", Run: run(conformance.CheckCapability),
			Host: errorsOf(func(_ *State, req Msg) bool { return Type(req) == "learn/stats/req" }, func(_ *State, req, _ Msg) Msg {
				return Msg{"type": "learn/stats/resp", "components": []any{}}
			})},
		{Name: "gating-unauthorized", Bug: "a capability the session did not ask for is answered unauthorized",
			Kind: KindGating, Run: run(conformance.CheckCapability),
			Host: onType("error", func(_ *State, m Msg) {
				if m["code"] == "capability_missing" {
					m["code"], m["retryable"] = "unauthorized", false
					delete(m, "capability_name")
				}
			})},
		{Name: "session-gated", Bug: "the always-on session namespace is refused capability_missing when the handshake did not name it",
			Kind: KindGating, Capability: "session", Run: run(conformance.CheckNegotiated),
			Agent: func(s *State, m Msg) []Msg {
				if Type(m) == "handshake/req" {
					named := false
					for _, c := range list(m, "agent_caps") {
						named = named || c == "session"
					}
					s.Scratch["no-session"] = !named
				}
				return Same(m)
			},
			Host: func(s *State, m Msg) []Msg {
				if strings.HasPrefix(Type(m), "session/") && strings.HasSuffix(Type(m), "/resp") && s.Scratch["no-session"] == true {
					return []Msg{{"type": "error", "id": m["id"], "proto": "1.0", "ts": m["ts"], "req_id": m["req_id"], "code": "capability_missing",
						"message": "capability session was not negotiated", "retryable": false, "capability_name": "session"}}
				}
				return Same(m)
			}},
		{Name: "failed-handshake-session", Bug: "a refused handshake still gives a session_id",
			Kind: KindHandshake, Run: run(conformance.CheckHandshakeFailures),
			Host: onType("handshake/resp", func(_ *State, m Msg) {
				if m["ok"] == false {
					m["session_id"] = "s-refused-but-made"
				}
			})},
		{Name: "ping-before-handshake", Bug: "a ping before the handshake is answered pong",
			Kind: KindHandshake, Run: run(conformance.CheckHandshakeFailures),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "error" && m["code"] == "unauthorized" && Type(s.Request(ReqID(m))) == "ping" && !s.Handshaken() {
					return []Msg{{"type": "pong", "id": m["id"], "proto": "1.0", "ts": m["ts"], "req_id": m["req_id"], "uptime_seconds": num(1)}}
				}
				return Same(m)
			}},

		// --- Isolation.
		{Name: "handle-shared", Bug: "every session has the same public handle",
			Kind: KindIsolation, Capability: "session", Run: run(conformance.CheckIsolationIDs),
			Host: onType("session/info/resp", func(_ *State, m Msg) { m["handle"] = "h-00000000000000000000000000000000" })},
		{Name: "info-names-first-session", Bug: "session/info names the first session the host opened, not the sender's",
			Kind: KindIsolation, Capability: "session", Run: run(conformance.CheckIsolationIDs),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "handshake/resp" && m["ok"] == true && s.Shared.Get("first") == nil {
					s.Shared.Set("first", m["session_id"])
				}
				if Type(m) == "session/info/resp" && s.Shared.Get("first") != nil {
					m["session_id"] = s.Shared.Get("first")
				}
				return Same(m)
			}},
		{Name: "proc-list-global", Bug: "proc/list lists every session's processes",
			Kind: KindIsolation, Capability: "proc", Run: run(conformance.CheckIsolationState),
			Host: func(s *State, m Msg) []Msg {
				switch Type(m) {
				case "proc/spawn/resp":
					addShared(s, "procs", copyMsg(m["process"]))
				case "proc/list/resp":
					m["processes"] = append(list(m, "processes"), othersShared(s, "procs")...)
				}
				return Same(m)
			}},
		{Name: "snapshot-list-global", Bug: "session/snapshot/list lists other sessions' snapshots (own false)",
			Kind: KindIsolation, Capability: "session", Run: run(conformance.CheckIsolationState),
			Host: func(s *State, m Msg) []Msg {
				switch Type(m) {
				case "session/snapshot/resp":
					addShared(s, "snaps", Msg{"snapshot_id": m["snapshot_id"], "target": m["target"], "bytes": m["bytes"], "created": m["ts"], "own": false})
				case "session/snapshot/list/resp":
					m["snapshots"] = append(list(m, "snapshots"), othersShared(s, "snaps")...)
				}
				return Same(m)
			}},
		{Name: "subagent-list-global", Bug: "subagent/list lists other sessions' subagents",
			Kind: KindIsolation, Capability: "subagents", Run: run(conformance.CheckIsolationState),
			Host: func(s *State, m Msg) []Msg {
				switch Type(m) {
				case "subagent/spawn/resp":
					addShared(s, "subs", copyMsg(m["subagent"]))
				case "subagent/list/resp":
					m["subagents"] = append(list(m, "subagents"), othersShared(s, "subs")...)
				}
				return Same(m)
			}},
		{Name: "episode-steppable-by-others", Bug: "a session can step another session's episode",
			Kind: KindIsolation, Capability: "env", Run: run(conformance.CheckIsolationState),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "env/reset/resp" {
					addShared(s, "episodes", m["episode_id"])
				}
				return errorsOf(func(s *State, req Msg) bool {
					if Type(req) != "env/step/req" {
						return false
					}
					for _, e := range othersShared(s, "episodes") {
						if e == req["episode_id"] {
							return true
						}
					}
					return false
				}, func(_ *State, req, _ Msg) Msg {
					return Msg{"type": "env/step/resp", "episode_id": req["episode_id"], "observation": nil, "reward": num(0), "terminated": false,
						"truncated": false, "info": Msg{}, "step": num(1)}
				})(s, m)
			}},
		{Name: "working-memory-shared", Bug: "the working tier is shared by namespace: another session's working entry is retrieved",
			Kind: KindIsolation, Capability: "memory", Run: run(conformance.CheckIsolationState),
			Agent: onAgent("memory/store/req", func(s *State, m Msg) {
				for _, e := range list(m, "entries") {
					if o, ok := e.(map[string]any); ok && o["tier"] == "working" {
						addShared(s, "working", copyMsg(o))
					}
				}
			}),
			Host: onType("memory/retrieve/resp", func(s *State, m Msg) {
				req := s.Request(ReqID(m))
				for _, k := range list(req, "keys") {
					for _, e := range othersShared(s, "working") {
						if o := e.(map[string]any); o["key"] == k && len(list(m, "entries")) == 0 {
							m["entries"] = []any{o}
							m["missing"] = []any{}
						}
					}
				}
			})},
		{Name: "toolkit-config-global", Bug: "a toolkit configured by one session is configured for all",
			Kind: KindIsolation, Capability: "toolkits", Run: run(conformance.CheckIsolationState),
			Host: func(s *State, m Msg) []Msg {
				switch Type(m) {
				case "toolkit/configure/resp":
					if m["status"] == "ok" {
						addShared(s, "configured", m["toolkit_name"])
					}
				case "toolkit/list/resp":
					for _, t := range list(m, "toolkits") {
						o, _ := t.(map[string]any)
						for _, n := range othersShared(s, "configured") {
							if o != nil && o["name"] == n {
								o["configured"], o["state"] = true, "configured"
							}
						}
					}
				}
				return Same(m)
			}},
		{Name: "body-session-id-ignored", Bug: "a session_id in a request's body is ignored instead of checked against the sender's",
			Kind: KindIsolation, Run: run(conformance.CheckIsolationState),
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) != "handshake/req" {
					delete(m, "session_id")
				}
				return Same(m)
			}},
		{Name: "chain-names-global", Bug: "a chain defined by one session runs by its name in another",
			Kind: KindIsolation, Capability: "chains", Run: run(conformance.CheckIsolationState),
			Agent: onAgent("chain/define/req", func(s *State, m Msg) { addShared(s, "chains", m["name"]) }),
			Host: errorsOf(func(s *State, req Msg) bool {
				if Type(req) != "chain/run/req" {
					return false
				}
				for _, n := range othersShared(s, "chains") {
					if n == req["name"] {
						return true
					}
				}
				return false
			}, func(_ *State, _, _ Msg) Msg {
				return Msg{"type": "chain/run/resp", "success": true, "outputs": Msg{"n": Msg{}}, "final_output": Msg{}, "ran": []any{"n"}, "skipped": []any{},
					"failed": []any{}, "duration_ms": num(0)}
			})},
		{Name: "snapshot-delete-any", Bug: "deleting another session's snapshot says deleted true",
			Kind: KindIsolation, Capability: "session", Run: run(conformance.CheckIsolationState),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "session/snapshot/delete/resp" {
					m["deleted"] = true
					return Same(m)
				}
				return errorsOf(func(_ *State, req Msg) bool { return Type(req) == "session/snapshot/delete/req" }, func(_ *State, req, _ Msg) Msg {
					return Msg{"type": "session/snapshot/delete/resp", "snapshot_id": req["snapshot_id"], "deleted": true}
				})(s, m)
			}},

		// --- tools and toolkits.
		{Name: "tool-list-drops-last", Bug: "tool/list leaves out the last tool of every page",
			Kind: KindReply, Capability: "tools", Run: run(conformance.CheckToolsList),
			Host: onType("tool/list/resp", func(_ *State, m Msg) {
				if t := list(m, "tools"); len(t) > 1 {
					m["tools"] = t[:len(t)-1]
				}
			})},
		{Name: "tool-query-ignored", Bug: "tool/list ignores query and lists every tool",
			Kind: KindReply, Capability: "tools", Run: run(conformance.CheckToolsList),
			Agent: onAgent("tool/list/req", func(_ *State, m Msg) { delete(m, "query") })},
		{Name: "tool-stdout-trimmed", Bug: "a command's stdout comes back with its trailing newline trimmed",
			Kind: KindReply, Capability: "tools", Run: run(conformance.CheckToolsCall),
			Host: onType("tool/call/resp", func(_ *State, m Msg) {
				if d := Obj(Obj(m, "result"), "data"); d != nil {
					if o, ok := d["stdout"].(string); ok {
						d["stdout"] = strings.TrimRight(o, "\n")
					}
				}
			})},
		{Name: "timeout-no-code", Bug: "a tool call past its timeout fails without an error_code",
			Kind: KindReply, Capability: "tools", Run: run(conformance.CheckToolsTimeout),
			Host: onType("tool/call/resp", func(_ *State, m Msg) {
				if r := Obj(m, "result"); r != nil && r["success"] == false && r["error_code"] == "TOOL_ERROR" {
					delete(r, "error_code")
				}
			})},
		{Name: "toolkit-tools-unattributed", Bug: "the tools of a configured toolkit are listed without their toolkit",
			Kind: KindReply, Capability: "toolkits", Run: run(conformance.CheckToolkitsConfigure),
			Host: onType("tool/list/resp", func(_ *State, m Msg) {
				for _, t := range list(m, "tools") {
					if o, ok := t.(map[string]any); ok {
						delete(o, "toolkit")
					}
				}
			})},
		{Name: "configure-error-vague", Bug: "a configuration refused for missing fields says only \"invalid configuration\"",
			Kind: KindRefusal, Capability: "toolkits", Run: run(conformance.CheckToolkitsErrors),
			Host: onType("toolkit/configure/resp", func(_ *State, m Msg) {
				if m["status"] == "error" {
					m["message"] = "invalid configuration"
				}
			})},

		// --- memory.
		{Name: "recall-finds-nothing", Bug: "memory/recall never finds anything",
			Kind: KindReply, Capability: "memory", Run: run(conformance.CheckMemoryRoundTrip),
			Host: onType("memory/recall/resp", func(_ *State, m Msg) { m["hits"] = []any{} })},
		{Name: "stored-reversed", Bug: "memory/store reports the stored keys in reverse order",
			Kind: KindReply, Capability: "memory", Run: run(conformance.CheckMemoryRoundTrip),
			Host: onType("memory/store/resp", func(_ *State, m Msg) {
				st := list(m, "stored")
				for i, j := 0, len(st)-1; i < j; i, j = i+1, j-1 {
					st[i], st[j] = st[j], st[i]
				}
			})},
		{Name: "missing-not-reported", Bug: "memory/retrieve does not report the keys it did not find",
			Kind: KindReply, Capability: "memory", Run: run(conformance.CheckMemoryRoundTrip),
			Host: onType("memory/retrieve/resp", func(_ *State, m Msg) { m["missing"] = []any{} })},
		{Name: "forget-forgets-nothing", Bug: "memory/forget answers and deletes nothing",
			Kind: KindReply, Capability: "memory", Run: run(conformance.CheckMemoryRoundTrip),
			Agent: func(s *State, m Msg) []Msg {
				if Type(m) == "memory/forget/req" && len(list(m, "keys")) > 0 {
					s.Inject(reply(m, "memory/forget/resp", Msg{"deleted": num(len(list(m, "keys")))}))
					return nil
				}
				return Same(m)
			}},
		{Name: "retrieve-tier-ignored", Bug: "memory/retrieve ignores its tier",
			Kind: KindReply, Capability: "memory", Run: run(conformance.CheckMemoryRoundTrip),
			Agent: onAgent("memory/retrieve/req", func(_ *State, m Msg) { delete(m, "tier") })},

		// --- env.
		{Name: "step-counter-stuck", Bug: "env/step always reports step 0",
			Kind: KindReply, Capability: "env", Run: run(conformance.CheckEnvEpisode),
			Host: onType("env/step/resp", func(_ *State, m Msg) { m["step"] = num(0) })},
		{Name: "observe-stale", Bug: "env/observe returns the observation of the reset, not of the last step",
			Kind: KindReply, Capability: "env", Run: run(conformance.CheckEnvEpisode),
			Host: func(s *State, m Msg) []Msg {
				switch Type(m) {
				case "env/reset/resp":
					s.Scratch["obs:"+fmt.Sprint(m["episode_id"])] = copyMsg(m["observation"])
				case "env/observe/resp":
					if o, ok := s.Scratch["obs:"+fmt.Sprint(m["episode_id"])]; ok {
						m["observation"] = o
					}
				}
				return Same(m)
			}},
		{Name: "close-keeps-episode", Bug: "env/close says closed and leaves the episode open",
			Kind: KindReply, Capability: "env", Run: run(conformance.CheckEnvEpisode),
			Agent: dropAndAnswer("env/close/req", func(req Msg) Msg {
				return reply(req, "env/close/resp", Msg{"episode_id": req["episode_id"], "closed": true})
			})},
		{Name: "reset-ignores-episode", Bug: "a reset naming an open episode starts a new one",
			Kind: KindReply, Capability: "env", Run: run(conformance.CheckEnvEpisode),
			Agent: onAgent("env/reset/req", func(_ *State, m Msg) { delete(m, "episode_id") })},
		{Name: "data-add-wrong-checksum", Bug: "env/data/add reports a checksum other than the staged file's",
			Kind: KindReply, Capability: "env", Run: run(conformance.CheckEnvData),
			Host: onType("env/data/add/resp", func(_ *State, m Msg) {
				for _, f := range list(m, "added") {
					if o, ok := f.(map[string]any); ok {
						o["sha256"] = strings.Repeat("0", 64)
					}
				}
			})},

		// --- proc.
		{Name: "read-loses-stdout", Bug: "proc/read returns no output",
			Kind: KindReply, Capability: "proc", Run: run(conformance.CheckProcLifecycle),
			Host: onType("proc/read/resp", func(_ *State, m Msg) {
				if o := Obj(m, "stdout"); o != nil {
					o["data"] = ""
				}
			})},
		{Name: "wait-times-out", Bug: "proc/wait reports timed_out for a process that exited",
			Kind: KindReply, Capability: "proc", Run: run(conformance.CheckProcLifecycle),
			Host: onType("proc/wait/resp", func(_ *State, m Msg) { m["timed_out"] = true })},
		{Name: "exit-code-one", Bug: "a process that exited 0 is reported exit_code 1",
			Kind: KindReply, Capability: "proc", Run: run(conformance.CheckProcLifecycle),
			Host: func(_ *State, m Msg) []Msg {
				if p := Obj(m, "process"); p != nil && p["exit_code"] != nil {
					p["exit_code"] = num(1)
				}
				return Same(m)
			}},
		{Name: "written-zero", Bug: "proc/write reports 0 bytes written",
			Kind: KindReply, Capability: "proc", Run: run(conformance.CheckProcLifecycle),
			Host: onType("proc/write/resp", func(_ *State, m Msg) { m["written"] = num(0) })},

		// --- learn.
		{Name: "export-count-off", Bug: "learn/export counts one line more than it returns",
			Kind: KindReply, Capability: "learn", Run: run(conformance.CheckLearnFeedback),
			Host: onType("learn/export/resp", func(_ *State, m Msg) {
				if n, ok := m["count"].(json.Number); ok {
					i, _ := n.Int64()
					m["count"] = num(int(i) + 1)
				}
			})},
		{Name: "adapt-replays-nothing", Bug: "learn/adapt replays no feedback",
			Kind: KindReply, Capability: "learn", Run: run(conformance.CheckLearnRank),
			Host: onType("learn/adapt/resp", func(_ *State, m Msg) { m["feedbacks"] = num(0) })},
		{Name: "rank-ties", Bug: "learn/rank gives every candidate rank 1",
			Kind: KindReply, Capability: "learn", Run: run(conformance.CheckLearnRank),
			Host: onType("learn/rank/resp", func(_ *State, m Msg) {
				for _, r := range list(m, "ranked") {
					if o, ok := r.(map[string]any); ok {
						o["rank"] = num(1)
					}
				}
			})},
		{Name: "untried-not-flagged", Bug: "learn/rank does not flag a never rated candidate untried",
			Kind: KindReply, Capability: "learn", Run: run(conformance.CheckLearnRank),
			Host: onType("learn/rank/resp", func(_ *State, m Msg) {
				for _, r := range list(m, "ranked") {
					if o, ok := r.(map[string]any); ok {
						o["untried"] = false
					}
				}
			})},
		{Name: "experience-stored-none", Bug: "learn/experience says it stored nothing",
			Kind: KindReply, Capability: "learn", Run: run(conformance.CheckLearnExperience),
			Host: onType("learn/experience/resp", func(_ *State, m Msg) { m["stored"] = num(0) })},

		// --- skills.
		{Name: "discover-without-version", Bug: "skill/discover lists skills without their version",
			Kind: KindReply, Capability: "skills", Run: run(conformance.CheckSkillsDiscover),
			Host: onType("skill/discover/resp", func(_ *State, m Msg) {
				for _, sk := range list(m, "skills") {
					if o, ok := sk.(map[string]any); ok {
						o["version"] = ""
					}
				}
			})},
		{Name: "skill-data-lost", Bug: "a skill call's result loses its data",
			Kind: KindReply, Capability: "skills", Run: run(conformance.CheckSkillsCall),
			Host: onType("skill/call/resp", func(_ *State, m Msg) {
				if r := Obj(m, "result"); r != nil {
					r["data"] = Msg{}
				}
			})},
		{Name: "skill-version-wrong", Bug: "a skill call's result names version 0.0.0",
			Kind: KindReply, Capability: "skills", Run: run(conformance.CheckSkillsCall),
			Host: onType("skill/call/resp", func(_ *State, m Msg) {
				if r := Obj(m, "result"); r != nil {
					r["version"] = "0.0.0"
				}
			})},
		{Name: "skill-register-lost", Bug: "skill/register answers and registers nothing",
			Kind: KindReply, Capability: "skills", Run: run(conformance.CheckSkillsDiscover),
			Agent: dropAndAnswer("skill/register/req", func(req Msg) Msg {
				man := Obj(req, "manifest")
				return reply(req, "skill/register/resp", Msg{"skill": Msg{"name": man["name"], "version": man["version"], "description": "",
					"tags": []any{}, "input_schema": Msg{}, "output_schema": Msg{}, "toolkits": []any{}}})
			})},

		// --- chains.
		{Name: "ran-misses-last", Bug: "chain/run's ran leaves out the last node that ran",
			Kind: KindReply, Capability: "chains", Run: run(conformance.CheckChainsRun),
			Host: onType("chain/run/resp", func(_ *State, m Msg) {
				if r := list(m, "ran"); len(r) > 0 {
					m["ran"] = r[:len(r)-1]
				}
			})},
		{Name: "skipped-empty", Bug: "chain/run never reports skipped nodes",
			Kind: KindReply, Capability: "chains", Run: run(conformance.CheckChainsRun),
			Host: onType("chain/run/resp", func(_ *State, m Msg) { m["skipped"] = []any{} })},
		{Name: "define-name-ignored", Bug: "chain/define stores the chain under a name of its own",
			Kind: KindReply, Capability: "chains", Run: run(conformance.CheckChainsDefine),
			Agent: onAgent("chain/define/req", func(_ *State, m Msg) { m["name"] = fmt.Sprint(m["name"], "-stored") }),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "chain/define/resp" {
					m["name"] = strings.TrimSuffix(fmt.Sprint(m["name"]), "-stored")
				}
				return Same(m)
			}},
		{Name: "abort-succeeds", Bug: "a chain stopped by a failing node reports success",
			Kind: KindReply, Capability: "chains", Run: run(conformance.CheckChainsFailure),
			Host: onType("chain/run/resp", func(_ *State, m Msg) {
				if m["success"] == false {
					m["success"] = true
				}
			})},

		// --- mcp.
		{Name: "mcp-origin-wrong", Bug: "the configured MCP server is listed with origin session",
			Kind: KindReply, Capability: "mcp", Run: run(conformance.CheckMCPServer),
			Host: onType("mcp/server/list/resp", func(_ *State, m Msg) {
				for _, x := range list(m, "servers") {
					if o, ok := x.(map[string]any); ok {
						o["origin"] = "session"
					}
				}
			})},
		{Name: "mcp-tools-unprefixed", Bug: "an MCP server's tools are listed under their own names, without <server_id>__",
			Kind: KindReply, Capability: "mcp", Run: run(conformance.CheckMCPServer),
			Host: onType("tool/list/resp", func(_ *State, m Msg) {
				for _, t := range list(m, "tools") {
					if o, ok := t.(map[string]any); ok {
						if n, ok := o["name"].(string); ok {
							if _, rest, found := strings.Cut(n, "__"); found {
								o["name"] = rest
							}
						}
					}
				}
			})},
		{Name: "prompt-empty", Bug: "mcp/prompt/get returns no messages",
			Kind: KindReply, Capability: "mcp", Run: run(conformance.CheckMCPServer),
			Host: onType("mcp/prompt/get/resp", func(_ *State, m Msg) { m["messages"] = []any{} })},
		{Name: "register-off-allowlist", Bug: "registering an MCP server off the allowlist is ok true",
			Kind: KindRefusal, Capability: "mcp", Run: run(conformance.CheckMCPServers),
			Host: onType("mcp/server/register/resp", func(_ *State, m Msg) { m["ok"] = true; delete(m, "error") })},

		// --- subagents.
		{Name: "terminate-no-op", Bug: "subagent/terminate answers and leaves the subagent as it was",
			Kind: KindReply, Capability: "subagents", Run: run(conformance.CheckSubagents),
			Agent: dropAndAnswer("subagent/terminate/req", func(req Msg) Msg {
				return reply(req, "subagent/terminate/resp", Msg{"subagent_id": req["subagent_id"], "terminated": []any{req["subagent_id"]}})
			})},
		{Name: "record-depth-zero", Bug: "a subagent's record says depth 0",
			Kind: KindReply, Capability: "subagents", Run: run(conformance.CheckSubagents),
			Host: func(_ *State, m Msg) []Msg {
				if r := Obj(m, "subagent"); r != nil {
					r["depth"] = num(0)
				}
				return Same(m)
			}},
		{Name: "spawn-without-token", Bug: "subagent/spawn answers an empty auth_token",
			Kind: KindReply, Capability: "subagents", Run: run(conformance.CheckSubagents),
			Host: onType("subagent/spawn/resp", func(_ *State, m Msg) { m["auth_token"] = "" })},

		// --- session.
		{Name: "snapshot-not-own", Bug: "the session's own snapshots are listed own false",
			Kind: KindReply, Capability: "session", Run: run(conformance.CheckSessionSnapshot),
			Host: onType("session/snapshot/list/resp", func(_ *State, m Msg) {
				for _, x := range list(m, "snapshots") {
					if o, ok := x.(map[string]any); ok {
						o["own"] = false
					}
				}
			})},
		{Name: "restore-names-another", Bug: "session/restore names a snapshot other than the one restored",
			Kind: KindReply, Capability: "session", Run: run(conformance.CheckSessionSnapshot),
			Host: onType("session/restore/resp", func(_ *State, m Msg) { m["snapshot_id"] = "file-" + strings.Repeat("0", 32) })},
		{Name: "fork-twice", Bug: "session/fork of count 1 reports the fork twice",
			Kind: KindReply, Capability: "session", Run: run(conformance.CheckSessionFork),
			Host: onType("session/fork/resp", func(_ *State, m Msg) {
				if f := list(m, "forks"); len(f) == 1 {
					m["forks"] = []any{f[0], copyMsg(f[0])}
				}
			})},
		{Name: "trajectory-format", Bug: "session/trajectory/export says format json for JSON Lines",
			Kind: KindReply, Capability: "session", Run: run(conformance.CheckSessionTrajectory),
			Host: onType("session/trajectory/export/resp", func(_ *State, m Msg) { m["format"] = "json" })},
		{Name: "info-wrong-agent", Bug: "session/info names an agent_id other than the handshake's",
			Kind: KindReply, Capability: "session", Run: run(c),
			Host: onType("session/info/resp", func(_ *State, m Msg) { m["agent_id"] = "agent" })},

		// --- proc, a request the kit may not send.
		{Name: "signal-ignored", Bug: "proc/signal answers with the process's record and sends no signal",
			Kind: KindReply, Capability: "proc", Run: run(conformance.CheckProcKill),
			Agent: onAgent("proc/signal/req", func(s *State, m Msg) {
				m["type"] = "proc/status/req"
				delete(m, "signal")
				s.Scratch["signal:"+fmt.Sprint(m["id"])] = true
			}),
			Host: onType("proc/status/resp", func(s *State, m Msg) {
				if s.Scratch["signal:"+ReqID(m)] == true {
					m["type"] = "proc/signal/resp"
				}
			})},
	}
}
