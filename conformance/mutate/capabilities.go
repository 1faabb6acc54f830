package mutate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/aephost/aep/conformance"
)

// Helpers for mutants that touch one type.

// onType applies f to every host message of type typ.
func onType(typ string, f func(s *State, m Msg)) func(*State, Msg) []Msg {
	return func(s *State, m Msg) []Msg {
		if Type(m) == typ {
			f(s, m)
		}
		return Same(m)
	}
}

// answerErrors replaces an error answering a request of reqType with the
// reply fake makes: a host that serves what it should refuse.
func answerErrors(reqType string, fake func(req Msg) Msg) func(*State, Msg) []Msg {
	return func(s *State, m Msg) []Msg {
		if Type(m) != "error" {
			return Same(m)
		}
		req := s.Request(ReqID(m))
		if Type(req) != reqType {
			return Same(m)
		}
		r := fake(req)
		r["id"], r["proto"], r["ts"], r["req_id"] = fmt.Sprint(m["id"]), "1.0", m["ts"], m["req_id"]
		return []Msg{r}
	}
}

// reply makes a host message answering req.
func reply(req Msg, typ string, body Msg) Msg {
	m := Msg{"type": typ, "id": fmt.Sprint("mut-", req["id"]), "proto": "1.0", "ts": json.Number("1"), "req_id": req["id"]}
	for k, v := range body {
		m[k] = v
	}
	return m
}

func list(m Msg, key string) []any {
	l, _ := m[key].([]any)
	return l
}

// capabilityMutants break one check each, of the scenarios per
// capability and of the rules not covered by the mutants of the bugs an
// earlier kit missed.
func capabilityMutants() []Mutant {
	c := func(ids ...string) []string { return ids }
	return []Mutant{
		{Name: "handshake-no-session-id", Bug: "a successful handshake gives no session_id",
			Catch: c(conformance.CheckHandshake), Run: c(conformance.CheckHandshake),
			Host: onType("handshake/resp", func(_ *State, m Msg) {
				if m["ok"] == true {
					delete(m, "session_id")
				}
			})},
		{Name: "proto-refused-as-schema-violation", Bug: "a request with another proto after the handshake is schema_violation, not version_mismatch",
			Catch: c(conformance.CheckEnvelopeProtoCode), Run: c(conformance.CheckEnvelopeProto),
			Host: onType("error", func(_ *State, m Msg) {
				if m["code"] == "version_mismatch" {
					m["code"] = "schema_violation"
				}
			})},
		{Name: "no-id-not-refused", Bug: "a request without an id is answered as a ping, not refused",
			Catch: c(conformance.CheckEnvelopeID), Run: c(conformance.CheckEnvelopeID),
			Host: onType("error", func(_ *State, m Msg) {
				if m["req_id"] == "" {
					for k := range m {
						if k != "id" && k != "proto" && k != "ts" && k != "req_id" {
							delete(m, k)
						}
					}
					m["type"], m["uptime_seconds"] = "pong", json.Number("1")
				}
			})},
		{Name: "repeated-host-id", Bug: "every host message has the same id",
			Catch: c(conformance.CheckHostIDs), Run: c(conformance.CheckSessionInfo),
			Host: func(_ *State, m Msg) []Msg { m["id"] = "h-same"; return Same(m) }},
		{Name: "capability-missing-unnamed", Bug: "capability_missing does not name the capability",
			Catch: c(conformance.CheckCapabilityNameSet), Run: c(conformance.CheckCapability),
			Host: onType("error", func(_ *State, m Msg) {
				if m["code"] == "capability_missing" {
					delete(m, "capability_name")
				}
			})},
		{Name: "events-always-streamed", Bug: "a tool call with streaming false puts its events on the wire",
			Catch: c(conformance.CheckEventsQuiet), Run: c(conformance.CheckEventsQuiet),
			Host: func(s *State, m Msg) []Msg {
				r := Obj(m, "result")
				if Type(m) != "tool/call/resp" || r == nil || s.Request(ReqID(m))["streaming"] == true {
					return Same(m)
				}
				var out []Msg
				for i, e := range list(r, "events") {
					ev, _ := e.(map[string]any)
					out = append(out, Msg{"type": "tool/event", "id": fmt.Sprint(m["id"], "-e", i), "proto": "1.0", "ts": m["ts"],
						"req_id": m["req_id"], "kind": ev["kind"], "data": ev["data"], "seq": json.Number(fmt.Sprint(i))})
				}
				return append(out, m)
			}},
		{Name: "child-gets-everything", Bug: "a subagent's child session is reported, and served, every capability",
			Catch: c(conformance.CheckSubagentGating), Run: c(conformance.CheckSubagentGating), Over: "websocket",
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "subagent/spawn/resp" {
					s.Shared.Set(fmt.Sprint(m["session_id"]), true)
				}
				if Type(m) == "handshake/resp" && m["ok"] == true && s.Shared.Get(fmt.Sprint(m["session_id"])) == true {
					for _, e := range list(m, "accepted_caps") {
						if o, ok := e.(map[string]any); ok && o["name"] != "no_such_capability" {
							o["enabled"] = true
						}
					}
				}
				return Same(m)
			}},
		{Name: "memory-ids-global", Bug: "a memory_id of another session is served",
			Catch: c(conformance.CheckIsolationState), Run: c(conformance.CheckIsolationState),
			Host: answerErrors("memory/retrieve/req", func(req Msg) Msg {
				return reply(req, "memory/retrieve/resp", Msg{"entries": []any{}, "missing": req["keys"]})
			})},
		{Name: "valid-refused", Bug: "a valid ping is refused as schema_violation",
			Catch: c(conformance.CheckValidExamples), Run: c(conformance.CheckValidExamples),
			Host: onType("pong", func(s *State, m Msg) {
				if strings.HasPrefix(ReqID(m), "ex-v") {
					delete(m, "uptime_seconds")
					m["type"], m["code"], m["message"], m["retryable"] = "error", "schema_violation", "refused", false
				}
			})},
		{Name: "tool-list-unsorted", Bug: "tool/list is not sorted by name",
			Catch: c(conformance.CheckToolsList), Run: c(conformance.CheckToolsList),
			Host: onType("tool/list/resp", func(_ *State, m Msg) {
				t := list(m, "tools")
				for i, j := 0, len(t)-1; i < j; i, j = i+1, j-1 {
					t[i], t[j] = t[j], t[i]
				}
			})},
		{Name: "failure-without-error", Bug: "a failed tool result carries no error text",
			Catch: c(conformance.CheckToolsResultError), Run: c(conformance.CheckToolsUnknown),
			Host: onType("tool/call/resp", func(_ *State, m Msg) {
				if r := Obj(m, "result"); r != nil && r["success"] == false {
					delete(r, "error")
				}
			})},
		{Name: "tool-data-lost", Bug: "a successful tool result loses its data",
			Catch: c(conformance.CheckToolsCall), Run: c(conformance.CheckToolsCall),
			Host: onType("tool/call/resp", func(_ *State, m Msg) {
				if r := Obj(m, "result"); r != nil && r["success"] == true {
					r["data"] = map[string]any{}
				}
			})},
		{Name: "tool-timeout-ignored", Bug: "a tool call's timeout is ignored",
			Catch: c(conformance.CheckToolsTimeout), Run: c(conformance.CheckToolsTimeout),
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) == "tool/call/req" {
					delete(m, "timeout")
				}
				return Same(m)
			}},
		{Name: "toolkit-preconfigured", Bug: "a fresh session's toolkits are reported configured",
			Catch: c(conformance.CheckToolkitsList), Run: c(conformance.CheckToolkitsList),
			Host: onType("toolkit/list/resp", func(_ *State, m Msg) {
				for _, t := range list(m, "toolkits") {
					if o, ok := t.(map[string]any); ok {
						o["configured"], o["state"] = true, "running"
					}
				}
			})},
		{Name: "configure-anything", Bug: "configuring an unknown toolkit, or one without its required fields, is status ok",
			Catch: c(conformance.CheckToolkitsErrors), Run: c(conformance.CheckToolkitsErrors),
			Host: onType("toolkit/configure/resp", func(_ *State, m Msg) { m["status"] = "ok" })},
		{Name: "configured-not-listed", Bug: "a configured toolkit is still listed as not configured",
			Catch: c(conformance.CheckToolkitsConfigure), Run: c(conformance.CheckToolkitsConfigure),
			Host: onType("toolkit/list/resp", func(_ *State, m Msg) {
				for _, t := range list(m, "toolkits") {
					if o, ok := t.(map[string]any); ok {
						o["configured"], o["state"] = false, "installed"
					}
				}
			})},
		{Name: "forget-everything", Bug: "a memory/forget without a selector is accepted",
			Catch: c(conformance.CheckMemoryErrors), Run: c(conformance.CheckMemoryErrors),
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) == "memory/forget/req" && m["keys"] == nil && m["tags"] == nil && m["tier"] == nil && m["older_than"] == nil {
					m["tier"] = "working"
				}
				return Same(m)
			}},
		{Name: "spaces-of-another-env", Bug: "env/spaces names another environment",
			Catch: c(conformance.CheckEnvList), Run: c(conformance.CheckEnvList),
			Host: onType("env/spaces/resp", func(_ *State, m Msg) { m["env_name"] = "aep-conformance-other" })},
		{Name: "seed-ignored", Bug: "episodes reset with the same seed start from different observations",
			Catch: c(conformance.CheckEnvSeed), Run: c(conformance.CheckEnvSeed),
			Host: onType("env/reset/resp", func(s *State, m Msg) {
				n, _ := s.Scratch["resets"].(int)
				s.Scratch["resets"] = n + 1
				m["observation"] = Msg{"reset": json.Number(fmt.Sprint(n))}
			})},
		{Name: "batch-reordered", Bug: "a batched step answers the episodes in another order",
			Catch: c(conformance.CheckEnvBatch), Run: c(conformance.CheckEnvBatch),
			Host: onType("env/step_batch/resp", func(_ *State, m Msg) {
				r := list(m, "results")
				for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
					r[i], r[j] = r[j], r[i]
				}
			})},
		{Name: "unknown-env-reset", Bug: "a reset of an unknown environment starts an episode",
			Catch: c(conformance.CheckEnvErrors), Run: c(conformance.CheckEnvErrors),
			Host: answerErrors("env/reset/req", func(req Msg) Msg {
				return reply(req, "env/reset/resp", Msg{"episode_id": "ep-made-up", "env_name": req["env_name"], "observation": nil, "info": Msg{}})
			})},
		{Name: "data-reset-keeps-files", Bug: "env/data/reset answers and leaves the data root as it was",
			Catch: c(conformance.CheckEnvData), Run: c(conformance.CheckEnvData),
			Agent: func(s *State, m Msg) []Msg {
				if Type(m) == "env/data/reset" || Type(m) == "env/data/reset/req" {
					s.Inject(reply(m, "env/data/reset/resp", Msg{"restored": json.Number("0")}))
					return nil
				}
				return Same(m)
			}},
		{Name: "stdin-lost", Bug: "what is written to a process's stdin is lost",
			Catch: c(conformance.CheckProcLifecycle), Run: c(conformance.CheckProcLifecycle),
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) == "proc/write/req" {
					m["data"] = ""
				}
				return Same(m)
			}},
		{Name: "kill-reports-exited", Bug: "a killed process is reported exited, not signaled",
			Catch: c(conformance.CheckProcKill), Run: c(conformance.CheckProcKill),
			Host: onType("proc/kill/resp", func(_ *State, m Msg) {
				if p := Obj(m, "process"); p != nil {
					p["state"] = "exited"
				}
			})},
		{Name: "unknown-proc-status", Bug: "the status of an unknown proc_id is answered",
			Catch: c(conformance.CheckProcErrors), Run: c(conformance.CheckProcErrors),
			Host: answerErrors("proc/status/req", func(req Msg) Msg {
				return reply(req, "proc/status/resp", Msg{"process": Msg{"proc_id": req["proc_id"], "argv": []any{"x"}, "cwd": ".", "state": "lost",
					"pid": json.Number("0"), "sandboxed": false, "started_at": json.Number("1")}})
			})},
		{Name: "feedback-not-recorded", Bug: "learn/feedback says it recorded nothing",
			Catch: c(conformance.CheckLearnFeedback), Run: c(conformance.CheckLearnFeedback),
			Host: onType("learn/feedback/resp", func(_ *State, m Msg) { m["recorded"] = json.Number("0") })},
		{Name: "experience-no-batch", Bug: "learn/experience gives no batch id",
			Catch: c(conformance.CheckLearnExperience), Run: c(conformance.CheckLearnExperience),
			Host: onType("learn/experience/resp", func(_ *State, m Msg) { m["batch_id"] = "" })},
		{Name: "rank-drops-candidates", Bug: "learn/rank leaves candidates out",
			Catch: c(conformance.CheckLearnRank), Run: c(conformance.CheckLearnRank),
			Host: onType("learn/rank/resp", func(_ *State, m Msg) {
				if r := list(m, "ranked"); len(r) > 1 {
					m["ranked"] = r[:1]
				}
			})},
		{Name: "skill-get-another", Bug: "skill/get returns another skill than the one named",
			Catch: c(conformance.CheckSkillsDiscover), Run: c(conformance.CheckSkillsDiscover),
			Host: onType("skill/get/resp", func(_ *State, m Msg) {
				if sk := Obj(m, "skill"); sk != nil {
					sk["name"] = "aep-conformance-other"
				}
			})},
		{Name: "skill-call-fails", Bug: "the fixture's skill call is reported failed",
			Catch: c(conformance.CheckSkillsCall), Run: c(conformance.CheckSkillsCall),
			Host: onType("skill/call/resp", func(_ *State, m Msg) {
				if r := Obj(m, "result"); r != nil {
					r["success"], r["error"] = false, "mutated"
				}
			})},
		{Name: "unknown-skill-served", Bug: "skill/get of an unknown skill is answered",
			Catch: c(conformance.CheckSkillsErrors), Run: c(conformance.CheckSkillsErrors),
			Host: answerErrors("skill/get/req", func(req Msg) Msg {
				return reply(req, "skill/get/resp", Msg{"skill": Msg{"name": req["name"], "version": "1.0.0", "description": "", "tags": []any{},
					"input_schema": Msg{}, "output_schema": Msg{}, "toolkits": []any{}}})
			})},
		{Name: "define-miscounts", Bug: "chain/define miscounts the nodes",
			Catch: c(conformance.CheckChainsDefine), Run: c(conformance.CheckChainsDefine),
			Host: onType("chain/define/resp", func(_ *State, m Msg) { m["nodes"] = json.Number("1") })},
		{Name: "cycle-runs", Bug: "a chain with a cycle is run instead of refused",
			Catch: c(conformance.CheckChainsInvalid), Run: c(conformance.CheckChainsInvalid),
			Host: answerErrors("chain/run/req", func(req Msg) Msg {
				return reply(req, "chain/run/resp", Msg{"success": false, "outputs": Msg{}, "final_output": nil, "ran": []any{}, "skipped": []any{},
					"failed": []any{}, "duration_ms": json.Number("0")})
			})},
		{Name: "failures-hidden", Bug: "a node that failed is not reported in failed",
			Catch: c(conformance.CheckChainsFailure), Run: c(conformance.CheckChainsFailure),
			Host: onType("chain/run/resp", func(_ *State, m Msg) { m["failed"] = []any{} })},
		{Name: "fixture-chain-output", Bug: "the fixture's chain's final_output is lost",
			Catch: c(conformance.CheckChainsFixture), Run: c(conformance.CheckChainsFixture),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "chain/run/resp" && Obj(s.Request(ReqID(m)), "input")["word"] != nil {
					m["final_output"] = nil
				}
				return Same(m)
			}},
		{Name: "unregister-anything", Bug: "unregistering a server the session never registered is ok true",
			Catch: c(conformance.CheckMCPServers), Run: c(conformance.CheckMCPServers),
			Host: onType("mcp/server/unregister/resp", func(_ *State, m Msg) { m["ok"] = true; delete(m, "error") })},
		{Name: "resource-empty", Bug: "reading an MCP resource returns no contents",
			Catch: c(conformance.CheckMCPServer), Run: c(conformance.CheckMCPServer),
			Host: onType("mcp/resource/read/resp", func(_ *State, m Msg) { m["contents"] = []any{} })},
		{Name: "spawned-running", Bug: "a subagent just spawned is reported running before its handshake",
			Catch: c(conformance.CheckSubagents), Run: c(conformance.CheckSubagents),
			Host: onType("subagent/spawn/resp", func(_ *State, m Msg) {
				if r := Obj(m, "subagent"); r != nil {
					r["status"] = "running"
				}
			})},
		{Name: "grant-anything", Bug: "a subagent may be granted a capability its parent does not hold",
			Catch: c(conformance.CheckSubagentsErrors), Run: c(conformance.CheckSubagentsErrors),
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) == "subagent/spawn/req" {
					delete(m, "capabilities")
				}
				return Same(m)
			}},
		{Name: "operator-session-unmarked", Bug: "session/info of a session the operator opened does not say operator_opened",
			Catch: c(conformance.CheckSessionOperator), Run: c(conformance.CheckSessionOperator),
			Host: onType("session/info/resp", func(_ *State, m Msg) { delete(m, "operator_opened") })},
		{Name: "info-not-in-flight", Bug: "session/info does not count itself in flight",
			Catch: c(conformance.CheckSessionInfo), Run: c(conformance.CheckSessionInfo),
			Host: onType("session/info/resp", func(_ *State, m Msg) { m["in_flight"] = json.Number("0") })},
		{Name: "fork-is-sender", Bug: "session/fork answers the sender's own id as the fork's",
			Catch: c(conformance.CheckSessionFork), Run: c(conformance.CheckSessionFork),
			Host: func(s *State, m Msg) []Msg {
				if Type(m) == "handshake/resp" && m["ok"] == true {
					s.Scratch["id"] = m["session_id"]
				}
				if Type(m) == "session/fork/resp" {
					for _, f := range list(m, "forks") {
						if o, ok := f.(map[string]any); ok {
							o["session_id"] = s.Scratch["id"]
						}
					}
				}
				return Same(m)
			}},
		{Name: "fork-group-dropped", Bug: "session/fork/resp leaves out the forks' sibling group",
			Catch: c(conformance.CheckSessionLineage), Run: c(conformance.CheckSessionLineage),
			Host: onType("session/fork/resp", func(_ *State, m Msg) { delete(m, "group") })},
		{Name: "trajectory-miscounts", Bug: "a trajectory export counts more records than it returns",
			Catch: c(conformance.CheckSessionTrajectory), Run: c(conformance.CheckSessionTrajectory),
			Host: onType("session/trajectory/export/resp", func(_ *State, m Msg) {
				m["records"] = json.Number(fmt.Sprint(len(list(m, "lines")) + 1))
			})},
		{Name: "silent-rollback", Bug: "a restore below the caller's last_point succeeds as if nothing were lost",
			Catch: c(conformance.CheckSessionPoints), Run: c(conformance.CheckSessionPoints),
			Agent: func(_ *State, m Msg) []Msg {
				if Type(m) == "session/restore/req" {
					delete(m, "last_point")
				}
				return Same(m)
			}},
		{Name: "no-session-header", Bug: "POST /send without X-Session-Id, or with an unknown one, is accepted",
			Catch: c(conformance.CheckHTTPSession), Run: c(conformance.CheckHTTPSession),
			HTTP: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/send" && (r.Header.Get("X-Session-Id") == "" || strings.HasPrefix(r.Header.Get("X-Session-Id"), "aep-conformance")) {
						Discard(w, r, http.StatusAccepted)
						return
					}
					next.ServeHTTP(w, r)
				})
			}},
		{Name: "oversize-line-served", Bug: "a line over the message limit is served as if it were within it",
			Catch: c(conformance.CheckTransportSize), Run: c(conformance.CheckTransportSize), Over: "websocket",
			Agent: func(_ *State, m Msg) []Msg {
				if p, ok := m["pad"].(string); ok && len(p) > 1<<19 {
					delete(m, "pad")
				}
				return Same(m)
			}},
	}
}
