package mutate

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/aephost/aep/conformance"
)

// Catalogue returns the mutants of the kit's own tests: the bugs a kit
// without per-capability scenarios missed, the rules the kit always
// checked, bugs of the HTTP edge, and one bug for every other check
// (capabilities.go), each with the checks it must fail.
func Catalogue() []Mutant {
	return append(missedAndRules(), capabilityMutants()...)
}

func missedAndRules() []Mutant {
	return []Mutant{
		// The bugs an earlier kit missed.
		{
			Name: "wrong-capability-name", Bug: "an error names another capability in capability_name",
			Catch: []string{conformance.CheckCapabilityName}, Run: []string{conformance.CheckCapability},
			Host: func(_ *State, m Msg) []Msg {
				if c, ok := m["capability_name"].(string); ok && Type(m) == "error" {
					m["capability_name"] = map[bool]string{true: "memory", false: "tools"}[c == "tools"]
				}
				return Same(m)
			},
		},
		{
			Name: "unknown-tool-success", Bug: "calling an unknown tool is answered success: true (error_code UNKNOWN_TOOL kept)",
			Catch: []string{conformance.CheckToolsUnknown, conformance.CheckToolsResult}, Run: []string{conformance.CheckToolsUnknown},
			Host: func(_ *State, m Msg) []Msg {
				if r := Obj(m, "result"); Type(m) == "tool/call/resp" && r["error_code"] == "UNKNOWN_TOOL" {
					r["success"] = true
				}
				return Same(m)
			},
		},
		{
			Name: "tool-result-names-another", Bug: "a tool result names a tool other than the one called",
			Catch: []string{conformance.CheckToolsResult}, Run: []string{conformance.CheckToolsCall},
			Host: func(_ *State, m Msg) []Msg {
				if r := Obj(m, "result"); Type(m) == "tool/call/resp" && r != nil {
					r["tool_name"] = "read_file"
				}
				return Same(m)
			},
		},
		{
			Name: "streamed-events-missing", Bug: "the events a streaming tool call put on the wire are missing from result.events",
			Catch: []string{conformance.CheckEventsCollected}, Run: []string{conformance.CheckEventsCollected},
			Host: func(s *State, m Msg) []Msg {
				if r := Obj(m, "result"); Type(m) == "tool/call/resp" && r != nil && s.Request(ReqID(m))["streaming"] == true {
					r["events"] = []any{}
				}
				return Same(m)
			},
		},
		{
			Name: "negative-uptime", Bug: "pong's uptime_seconds is negative",
			// The bundle bounds uptime_seconds too (schemas/core.json Pong).
			Catch: []string{conformance.CheckPing, conformance.CheckHostStrict}, Run: []string{conformance.CheckPing},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "pong" {
					m["uptime_seconds"] = json.Number("-3.5")
				}
				return Same(m)
			},
		},
		{
			Name: "nested-extra-field", Bug: "objects inside host messages (a tool result, an accepted_caps entry, a session/info capability) carry a field the contract does not name",
			// The bundle closes host messages at every depth, so the bundle's
			// own check finds the field first (host.closed reports only what
			// host.strict leaves).
			Catch: []string{conformance.CheckHostStrict}, Run: []string{conformance.CheckToolsUnknown},
			Host: func(_ *State, m Msg) []Msg {
				if r := Obj(m, "result"); r != nil {
					r["x_internal"] = true
				}
				if caps, ok := m["accepted_caps"].([]any); ok {
					for _, c := range caps {
						if o, ok := c.(map[string]any); ok {
							o["x_internal"] = true
						}
					}
				}
				return Same(m)
			},
		},
		{
			Name: "disabled-but-served", Bug: "the handshake reports memory enabled: false, and memory/* is served all the same",
			Catch: []string{conformance.CheckNegotiated}, Run: []string{conformance.CheckNegotiated},
			Host: func(_ *State, m Msg) []Msg {
				if caps, ok := m["accepted_caps"].([]any); ok && (Type(m) == "handshake/resp" || Type(m) == "session/info/resp") {
					for _, c := range caps {
						if o, ok := c.(map[string]any); ok && o["name"] == "memory" {
							o["enabled"] = false
						}
					}
				}
				return Same(m)
			},
		},
		{
			Name: "same-session-id", Bug: "every session is given the same session_id",
			Catch: []string{conformance.CheckIsolationIDs}, Run: []string{conformance.CheckIsolationIDs},
			Host: func(_ *State, m Msg) []Msg {
				if _, ok := m["session_id"].(string); ok && (Type(m) == "handshake/resp" || Type(m) == "session/info/resp") {
					m["session_id"] = "s-aep-conformance-same"
				}
				return Same(m)
			},
		},
		// The two the earlier kit never triggered.
		{
			Name: "proto-after-handshake", Bug: "after the handshake the host accepts requests of any proto",
			Catch: []string{conformance.CheckEnvelopeProto}, Run: []string{conformance.CheckEnvelopeProto},
			Agent: func(s *State, m Msg) []Msg {
				if s.Handshaken() && m["proto"] != "1.0" {
					m["proto"] = "1.0"
				}
				return Same(m)
			},
		},
		{
			Name: "reply-proto-after-handshake", Bug: "after the handshake the host's replies carry proto 1.1",
			Catch: []string{conformance.CheckHostStrict}, Run: []string{conformance.CheckSessionInfo},
			Host: func(s *State, m Msg) []Msg {
				if s.Handshaken() && Type(m) != "handshake/resp" {
					m["proto"] = "1.1"
				}
				return Same(m)
			},
		},
		// Successful replies of the other capabilities.
		{
			Name: "memory-wrong-content", Bug: "memory/retrieve returns content other than what was stored",
			Catch: []string{conformance.CheckMemoryRoundTrip}, Run: []string{conformance.CheckMemoryRoundTrip},
			Host: func(_ *State, m Msg) []Msg {
				if es, ok := m["entries"].([]any); ok && Type(m) == "memory/retrieve/resp" {
					for _, e := range es {
						if o, ok := e.(map[string]any); ok {
							o["content"] = "mutated"
						}
					}
				}
				return Same(m)
			},
		},
		{
			Name: "env-step-wrong-episode", Bug: "env/step answers for another episode than the one stepped",
			Catch: []string{conformance.CheckEnvEpisode}, Run: []string{conformance.CheckEnvEpisode},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "env/step/resp" {
					m["episode_id"] = "ep-aep-conformance-other"
				}
				return Same(m)
			},
		},
		{
			Name: "chain-output-not-from-nodes", Bug: "chain/run's final_output is not the output of the node named",
			Catch: []string{conformance.CheckChainsRun}, Run: []string{conformance.CheckChainsRun},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "chain/run/resp" {
					m["final_output"] = map[string]any{}
				}
				return Same(m)
			},
		},
		{
			Name: "restore-does-nothing", Bug: "session/restore answers success and restores nothing",
			Catch: []string{conformance.CheckSessionSnapshot}, Run: []string{conformance.CheckSessionSnapshot},
			Agent: func(s *State, m Msg) []Msg {
				if Type(m) != "session/restore/req" || m["snapshot_id"] == nil {
					return Same(m)
				}
				s.Inject(Msg{"type": "session/restore/resp", "id": fmt.Sprint("mut-", m["id"]), "proto": "1.0", "ts": json.Number("1"),
					"req_id": m["id"], "snapshot_id": m["snapshot_id"], "restored": []any{}})
				return nil
			},
		},
		{
			Name: "cancel-ignored", Bug: "cancel is ignored: the request runs on and is answered as if never cancelled",
			Catch: []string{conformance.CheckCancel}, Run: []string{conformance.CheckCancel},
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) == "cancel" {
					return nil
				}
				return Same(m)
			},
		},
		{
			Name: "event-after-reply", Bug: "a request's events are sent after its reply",
			Catch: []string{conformance.CheckEvents}, Run: []string{conformance.CheckEventsCollected},
			Host: func(s *State, m Msg) []Msg {
				held, _ := s.Scratch["held"].([]Msg)
				if IsEvent(m) {
					s.Scratch["held"] = append(held, m)
					return nil
				}
				var out []Msg
				out = append(out, m)
				var keep []Msg
				for _, e := range held {
					if ReqID(e) == ReqID(m) {
						out = append(out, e)
					} else {
						keep = append(keep, e)
					}
				}
				s.Scratch["held"] = keep
				return out
			},
		},
		// The rules the kit always checked.
		{
			Name: "extra-field", Bug: "every host message carries a field the contract does not name",
			Catch: []string{conformance.CheckHostStrict}, Run: []string{conformance.CheckSessionInfo},
			Host: func(_ *State, m Msg) []Msg { m["x_extra"] = json.Number("1"); return Same(m) },
		},
		{
			Name: "duplicate-pong", Bug: "every ping is answered twice",
			Catch: []string{conformance.CheckReplyOnce}, Run: []string{conformance.CheckReplyOnce},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "pong" {
					twin := Msg{}
					for k, v := range m {
						twin[k] = v
					}
					twin["id"] = fmt.Sprint(m["id"], "-twin")
					return []Msg{m, twin}
				}
				return Same(m)
			},
		},
		{
			Name: "retryable", Bug: "parse_error is said to be retryable",
			Catch: []string{conformance.CheckRetryable}, Run: []string{conformance.CheckInvalidExamples},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "error" && m["code"] == "parse_error" {
					m["retryable"] = true
				}
				return Same(m)
			},
		},
		{
			Name: "no-gating", Bug: "a capability the session did not ask for is answered runtime_error instead of capability_missing",
			Catch: []string{conformance.CheckCapability}, Run: []string{conformance.CheckCapability},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "error" && m["code"] == "capability_missing" {
					m["code"], m["retryable"] = "runtime_error", true
				}
				return Same(m)
			},
		},
		{
			Name: "accept-wrong-token", Bug: "a handshake with a wrong token is accepted",
			Catch: []string{conformance.CheckHandshakeFailures}, Run: []string{conformance.CheckHandshakeFailures},
			Host: func(_ *State, m Msg) []Msg {
				if e, ok := m["error"].(map[string]any); ok && Type(m) == "handshake/resp" && e["code"] == "unauthorized" {
					m["ok"], m["session_id"] = true, "s"
					delete(m, "error")
					delete(m, "reason")
				}
				return Same(m)
			},
		},
		{
			Name: "host-sends-request", Bug: "the host sends a request of its own after each pong",
			Catch: []string{conformance.CheckDirection}, Run: []string{conformance.CheckPing},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "pong" {
					return []Msg{m, {"type": "tool/call/req", "id": fmt.Sprint("inj-", m["id"]), "proto": "1.0", "ts": json.Number("1"), "tool_name": "x", "arguments": map[string]any{}}}
				}
				return Same(m)
			},
		},
		{
			Name: "invalid-accepted", Bug: "a message that fails its schema is answered runtime_error instead of schema_violation",
			Catch: []string{conformance.CheckInvalidExamples}, Run: []string{conformance.CheckInvalidExamples},
			Host: func(_ *State, m Msg) []Msg {
				if Type(m) == "error" && m["code"] == "schema_violation" {
					m["code"], m["retryable"] = "runtime_error", true
				}
				return Same(m)
			},
		},
		// A host whose answer depends on the transport: each transport's
		// run passes, the comparison across them does not.
		{
			Name: "websocket-budget-differs", Bug: "over WebSocket, session/info reports the leaf_work budget at half its limit (the WebSocket handler builds sessions from another default)",
			Catch: []string{conformance.CheckTransportsAgree}, Run: []string{conformance.CheckSessionInfo}, OnlyOver: "websocket",
			Host: onType("session/info/resp", func(_ *State, m Msg) {
				if b := Obj(Obj(m, "budgets"), "leaf_work"); b != nil {
					if n, ok := b["limit"].(json.Number); ok {
						i, _ := n.Int64()
						b["limit"] = json.Number(fmt.Sprint(i / 2))
					}
				}
			}),
		},
		// The HTTP edge: a proxy in front of the host breaks it.
		{
			Name: "origin-ignored", Bug: "requests from a foreign Origin are served",
			Catch: []string{conformance.CheckHTTPOrigin}, Run: []string{conformance.CheckHTTPOrigin},
			HTTP: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r.Header.Del("Origin")
					next.ServeHTTP(w, r)
				})
			},
		},
		{
			Name: "host-ignored", Bug: "requests naming a foreign Host are served",
			Catch: []string{conformance.CheckHTTPHost}, Run: []string{conformance.CheckHTTPHost},
			HTTP: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r.Host = "127.0.0.1"
					next.ServeHTTP(w, r)
				})
			},
		},
		{
			Name: "no-size-limit", Bug: "a POST /send body of any size is accepted",
			Catch: []string{conformance.CheckHTTPSize}, Run: []string{conformance.CheckHTTPSize},
			HTTP: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/send" && r.ContentLength > 1<<20 {
						Discard(w, r, http.StatusAccepted)
						return
					}
					next.ServeHTTP(w, r)
				})
			},
		},
	}
}

// Missed names the mutants of the bugs an earlier kit let through: the
// eight it missed and the two it never provoked.
var Missed = []string{
	"wrong-capability-name", "unknown-tool-success", "tool-result-names-another", "streamed-events-missing",
	"negative-uptime", "nested-extra-field", "disabled-but-served", "same-session-id",
	"proto-after-handshake", "reply-proto-after-handshake",
}
