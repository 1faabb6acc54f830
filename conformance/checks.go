package conformance

import "sort"

// Level says what a failed check means. A host that fails a MUST check is
// not conformant; a SHOULD check names what users of such a host expect
// and the protocol recommends without requiring it.
type Level string

const (
	Must   Level = "MUST"
	Should Level = "SHOULD"
)

// CheckInfo describes one check of the kit: what it judges, how strictly,
// and where the protocol says so.
type CheckInfo struct {
	ID    string `json:"check"`
	Level Level  `json:"level"`
	// Cites is the spec section, schema or decision the check holds a
	// host to.
	Cites string `json:"cites"`
	Title string `json:"title"`
	// Needs names what the check needs beyond a host and its token: a key
	// of the fixture file, or a feature of the transport. Without it the
	// check skips.
	Needs string `json:"needs,omitempty"`
}

// Check IDs. The kit reports them in the order of [Checks].
const (
	CheckHandshake         = "handshake"
	CheckHandshakeFailures = "handshake.failures"
	CheckReplyOnce         = "reply.once"
	CheckDirection         = "direction"
	CheckHostStrict        = "host.strict"
	CheckHostClosed        = "host.closed"
	CheckEnvelopeProto     = "envelope.proto"
	CheckEnvelopeProtoCode = "envelope.proto.code"
	CheckEnvelopeID        = "envelope.id"
	CheckHostIDs           = "envelope.host_ids"
	CheckPing              = "ping"
	CheckRetryable         = "error.retryable"
	CheckCapabilityName    = "error.capability_name"
	CheckCapabilityNameSet = "error.capability_name.present"
	CheckEvents            = "events"
	CheckEventsCollected   = "events.collected"
	CheckEventsQuiet       = "events.quiet"
	CheckCapability        = "capability.gating"
	CheckNegotiated        = "capability.negotiated"
	CheckSubagentGating    = "capability.subagent"
	CheckCancel            = "cancel"
	CheckIsolationIDs      = "isolation.ids"
	CheckIsolationState    = "isolation.state"
	CheckInvalidExamples   = "examples.invalid"
	CheckValidExamples     = "examples.valid"

	CheckToolsList         = "tools.list"
	CheckToolsUnknown      = "tools.unknown"
	CheckToolsResult       = "tools.result"
	CheckToolsResultError  = "tools.result.error"
	CheckToolsCall         = "tools.call"
	CheckToolsTimeout      = "tools.timeout"
	CheckToolkitsList      = "toolkits.list"
	CheckToolkitsErrors    = "toolkits.configure.errors"
	CheckToolkitsConfigure = "toolkits.configure"
	CheckMemoryRoundTrip   = "memory.roundtrip"
	CheckMemoryErrors      = "memory.errors"
	CheckEnvList           = "env.list"
	CheckEnvEpisode        = "env.episode"
	CheckEnvSeed           = "env.seed"
	CheckEnvBatch          = "env.batch"
	CheckEnvErrors         = "env.errors"
	CheckEnvData           = "env.data"
	CheckProcLifecycle     = "proc.lifecycle"
	CheckProcKill          = "proc.kill"
	CheckProcErrors        = "proc.errors"
	CheckLearnFeedback     = "learn.feedback"
	CheckLearnExperience   = "learn.experience"
	CheckLearnRank         = "learn.rank"
	CheckSkillsDiscover    = "skills.discover"
	CheckSkillsCall        = "skills.call"
	CheckSkillsErrors      = "skills.errors"
	CheckChainsRun         = "chains.run"
	CheckChainsDefine      = "chains.define"
	CheckChainsInvalid     = "chains.invalid"
	CheckChainsFailure     = "chains.failure"
	CheckChainsFixture     = "chains.fixture"
	CheckMCPServers        = "mcp.servers"
	CheckMCPServer         = "mcp.server"
	CheckSubagents         = "subagents.lifecycle"
	CheckSubagentsErrors   = "subagents.errors"
	CheckSessionInfo       = "session.info"
	CheckSessionSnapshot   = "session.snapshot"
	CheckSessionFork       = "session.fork"
	CheckSessionTrajectory = "session.trajectory"
	CheckSessionOperator   = "session.operator"
	CheckSessionPoints     = "session.points"

	CheckHTTPOrigin    = "http.origin"
	CheckHTTPHost      = "http.host"
	CheckHTTPSize      = "http.size"
	CheckHTTPSession   = "http.session"
	CheckTransportSize = "transport.size"

	CheckTransportsAgree = "transports.agree"
)

// The needs of checks that need something; see CheckInfo.Needs.
const (
	needAttach = "a transport that reaches a session by id (HTTP, WebSocket)"
	needHTTP   = "the HTTP transport (--url)"
	needStream = "fixture tools.streaming (or skills.call)"
	// needTransports: the kit run over several transports of one host.
	needTransports = "runs over two transports or more (--all-transports)"
	// needOperator: the host's admin API, for the operator-opened session.
	needOperator = "a session the operator opens (Options.OperatorSession; aep conformance --operator)"
)

var catalogue = []CheckInfo{
	// The handshake and the traffic rules every message is held to.
	{CheckHandshake, Must, "spec §2.4, §2.2, §4.2", "a handshake with the token opens a session: ok, session_id, max_parallel, one accepted_caps entry per requested name in order, enabled false where nothing serves it", ""},
	{CheckHandshakeFailures, Must, "spec §5 rule 3, §9 rule 2, §3; schemas/core.json HandshakeResp.session_id", "a wrong token is unauthorized, another proto version_mismatch, a malformed handshake schema_violation, each with ok false and no session (nor session_id); a request before a handshake is unauthorized", ""},
	{CheckReplyOnce, Must, "spec §2.1; docs/DECISIONS.md, Wire", "every request gets exactly one reply, of its reply type or error (a type the contract does not have: error), with req_id its id; a notification gets none", ""},
	{CheckDirection, Must, "spec §2.1; docs/DECISIONS.md, Wire", "a host sends only replies and events; a type only a host sends, sent by an agent, is parse_error", ""},
	{CheckHostStrict, Must, "spec §2.1; gen/contract/aep.schema.json HostMessage", "every line a host sends is one JSON object on one line that validates against the contract's HostMessage (no top-level field the contract does not name)", ""},
	{CheckHostClosed, Must, "schemas/*.json; docs/DECISIONS.md, The contract for third parties", "no object a host sends, at any depth, holds a field its schema does not declare (objects the schemas leave open, such as data, info and detail, stay open)", ""},
	{CheckEnvelopeProto, Must, "spec §9 rule 1; schemas/envelope.json Envelope.proto", "after the handshake, a request with another proto is refused with an error and the session goes on", ""},
	{CheckEnvelopeProtoCode, Should, "schemas/envelope.json Envelope.proto", "that refusal is version_mismatch", ""},
	{CheckEnvelopeID, Must, "spec §2.1; schemas/core.json Error.req_id", "a request without an id, or with an empty one, is refused with an error whose req_id is empty, and the session goes on", ""},
	{CheckHostIDs, Must, "spec §2.1; schemas/envelope.json Envelope.id", "every message a host sends in a session has an id of its own", ""},
	{CheckPing, Must, "schemas/core.json Ping, Pong", "a ping is answered by pong whose uptime_seconds is never negative and never goes back within a session", ""},
	{CheckRetryable, Must, "spec §7; schemas/errors/retryable.json", "every error's retryable is the contract's value for its code and detail.reason", ""},
	{CheckCapabilityName, Must, "spec §2.3, §7 condition 3", "an error's capability_name, when present, names the capability of the request's namespace", ""},
	{CheckCapabilityNameSet, Should, "spec §2.3", "capability_missing names the capability concerned in capability_name", ""},
	{CheckEvents, Must, "spec §6", "events of a request arrive while it is in flight, before its reply, typed <ns>/event, seq 0, 1, 2 …", ""},
	{CheckEventsCollected, Must, "spec §6 rule 1, §2.6; schemas/skills.json SkillResult.events", "the events streamed during a tool call (or a skill call) are the result's events, in order, and a streaming call that collects events streams them", needStream},
	{CheckEventsQuiet, Should, "schemas/tools.json ToolCallReq.streaming", "a tool call with streaming false puts no event on the wire, and still collects them in result.events", "fixture tools.streaming"},
	{CheckCapability, Must, "spec §7 condition 3", "in a session that asked for no capability, every gated namespace is capability_missing", ""},
	{CheckNegotiated, Must, "spec §2.2, §7 condition 3; docs/DECISIONS.md, Wire, Capability gating", "in sessions asking for every capability and for a part of them, each namespace is served exactly when its accepted_caps entry is enabled; the always-on session namespace is served and, when asked for, reported enabled", ""},
	{CheckSubagentGating, Must, "spec §2.2, §7 condition 3; schemas/subagents.json", "a subagent's child session opens with its own token only, and serves exactly the capabilities it was granted (and session), as its accepted_caps say", needAttach},
	{CheckCancel, Must, "schemas/core.json Cancel; docs/DECISIONS.md, Wire", "a request stopped by cancel is answered once, with error cancelled; cancel itself is never answered, nor a cancel of an id not in flight", "fixture tools.slow"},
	{CheckIsolationIDs, Must, "spec §5 rule 4; schemas/session.json SessionInfoResp", "sessions get distinct session_ids and handles, and session/info names the sender's own", ""},
	{CheckIsolationState, Must, "spec §5 rule 4; docs/DECISIONS.md, Wire (session_id in a body)", "a session cannot read or act on another's state by any id it can learn: memory ids and working keys, episodes, processes, chains, snapshots, subagents, toolkit configuration, a public handle, a session_id in a body", ""},
	{CheckInvalidExamples, Must, "spec §7 condition 1; docs/DECISIONS.md, Wire", "every invalid example is answered with parse_error or schema_violation", ""},
	{CheckValidExamples, Must, "spec §7 condition 1", "no valid example is answered with parse_error or schema_violation", ""},

	// tools and toolkits.
	{CheckToolsList, Must, "spec §2.5, §4.2 Tool list; schemas/tools.json ToolListReq, ToolListResp", "tool/list is sorted by name with unique names and no deferred tool; include_deferred finds more, never fewer; query and tags filter as described; limit and cursor page through the same list", ""},
	{CheckToolsUnknown, Must, "spec §7 (UNKNOWN_TOOL), §2.6", "calling an unknown tool is a tool/call/resp with success false, error_code UNKNOWN_TOOL, the tool's name and no events — never an error message", ""},
	{CheckToolsResult, Must, "spec §2.6, §7", "every tool result names the tool called, and one with an error_code is not a success", ""},
	{CheckToolsResultError, Should, "spec §7 (a failed tool returns an error text)", "a tool result with success false carries an error text", ""},
	{CheckToolsCall, Must, "spec §4.2 Tool call, §2.6", "the fixture's tool call succeeds and returns the data the fixture expects", "fixture tools.call"},
	{CheckToolsTimeout, Must, "spec §8; schemas/tools.json ToolCallReq.timeout", "a tool call past its timeout is a result with success false and error_code TOOL_ERROR", "fixture tools.slow"},
	{CheckToolkitsList, Must, "spec §2.8, §3; schemas/toolkits.json", "a fresh session's toolkits are not configured, and their tools are not in tool/list", ""},
	{CheckToolkitsErrors, Must, "spec §2.9 rules 1–3", "configuring an unknown toolkit, or one without its required fields, or with a value outside an enum, is status error naming the missing fields, or the field and its allowed values", ""},
	{CheckToolkitsConfigure, Must, "spec §2.9 rule 5, §3", "the fixture's configuration is status ok, after which the toolkit is configured and its tools are in tool/list with toolkit set", "fixture toolkits.configure"},

	// memory.
	{CheckMemoryRoundTrip, Must, "spec §2.11; schemas/memory.json", "a stored entry is retrieved by its key with its content and tier, upserted by key, found by recall, counted by stats and gone after forget; keys found nowhere are missing", ""},
	{CheckMemoryErrors, Must, "schemas/memory.json MemoryForgetReq, MemoryRetrieveReq", "an unknown memory_id is an error; a forget without a selector is schema_violation", ""},

	// env.
	{CheckEnvList, Must, "schemas/env.json EnvListResp, EnvSpacesReq", "env/list lists environments, and env/spaces of each names it", ""},
	{CheckEnvEpisode, Must, "spec §4.2 Env episode; schemas/env.json", "a reset starts an episode of the environment; a step follows it with the episode's id and step 1; observe, render, a reset of the same episode and close behave as described; a closed episode cannot be stepped", "fixture env.episode"},
	{CheckEnvSeed, Must, "schemas/env.json EnvResetReq.seed", "the same seed and actions give the same observations", "fixture env.episode"},
	{CheckEnvBatch, Must, "schemas/env.json EnvStepBatchReq", "a batched step answers each episode in the order given", "fixture env.episode"},
	{CheckEnvErrors, Must, "schemas/env.json EnvResetReq, EnvStepReq", "resetting an unknown environment or stepping an unknown episode is an error", ""},
	{CheckEnvData, Must, "spec §4.2 Env data plane, §3", "env/data/reset, env/data/get and env/data/add by the spec's exact types: a staged part is listed with its checksum, an episode reset leaves it, a data reset removes it", ""},

	// proc.
	{CheckProcLifecycle, Must, "schemas/proc.json", "a spawned process reads what is written to its stdin, its output is read back, wait sees it exit, status and list name it", "fixture proc.echo"},
	{CheckProcKill, Must, "schemas/proc.json ProcKillReq, ProcSignalReq, ProcRecord", "kill ends a running process, reported signaled; so does a TERM signal", "fixture proc.long"},
	{CheckProcErrors, Must, "schemas/proc.json", "an unknown proc_id is an error", ""},

	// learn.
	{CheckLearnFeedback, Must, "spec §2.11; schemas/learn.json LearnFeedbackReq, LearnExportReq", "feedback is recorded with ids and the rated component's weight, exported as JSON Lines; a CORRECTIVE without its correction is schema_violation", ""},
	{CheckLearnExperience, Must, "schemas/learn.json LearnExperienceReq", "a batch of transitions is stored under a batch id", ""},
	{CheckLearnRank, Must, "schemas/learn.json LearnRankReq, LearnAdaptReq, LearnStatsReq", "rank orders every candidate once (1…n; the order is not judged); adapt replays the feedback; stats lists the rated component", ""},

	// skills.
	{CheckSkillsDiscover, Must, "spec §2.11; schemas/skills.json SkillDiscoverResp, SkillGetReq", "discover lists skills with name and version; get returns the named skill", ""},
	{CheckSkillsCall, Must, "schemas/skills.json SkillCallReq, SkillResult", "the fixture's skill call succeeds with the data it expects", "fixture skills.call"},
	{CheckSkillsErrors, Must, "schemas/skills.json SkillGetReq, SkillCallReq", "getting or calling an unknown skill is an error", ""},

	// chains.
	{CheckChainsRun, Must, "spec §2.11; schemas/chains.json ChainRunReq, ChainRunResp", "a chain's result comes from its nodes: each node's output by id, final_output from the node named, ran in full, a branch not taken skipped", ""},
	{CheckChainsDefine, Must, "schemas/chains.json ChainDefineReq", "a defined chain runs by its name; an unknown name is an error", ""},
	{CheckChainsInvalid, Must, "schemas/chains.json ChainRunReq", "a graph with a cycle or an unknown node is schema_violation before any node runs", ""},
	{CheckChainsFailure, Must, "schemas/chains.json ChainRunReq, ChainNode.on_error", "a failing node is a reply, not an error message: skip records it and goes on, abort stops with success false naming it", ""},
	{CheckChainsFixture, Must, "schemas/chains.json ChainRunResp", "the fixture's chain succeeds with the final_output it expects", "fixture chains.run"},

	// mcp.
	{CheckMCPServers, Must, "spec §1 (mcp); schemas/mcp.json", "the server list is sorted by server_id; a URL off the allowlist is ok false with an error; unregistering an unknown server is ok false; an unknown server's resources are an error", ""},
	{CheckMCPServer, Must, "schemas/mcp.json", "the fixture's server is listed; its resources, a resource, its prompts, a prompt and its tools (named <server_id>__<tool>) are served", "fixture mcp.server_id"},

	// subagents.
	{CheckSubagents, Must, "spec §1 (subagents); schemas/subagents.json", "a spawned subagent has its own session id and token, a record naming it, its parent and its capabilities; list and status see it; terminate ends it", ""},
	{CheckSubagentsErrors, Must, "schemas/subagents.json SubagentSpawnReq, SubagentStatusReq", "an unknown subagent_id is an error; granting a capability the sender does not hold is schema_violation", ""},

	// session.
	{CheckSessionInfo, Must, "schemas/session.json SessionInfoResp", "session/info names the session's id, agent_id, accepted_caps and max_parallel as the handshake did, and counts itself in flight", ""},
	{CheckSessionSnapshot, Must, "spec §1.6, §3 (snapshot, restore); schemas/session.json", "a snapshot restores the state it saved (working memory); it is listed as the session's own until deleted; restoring an unknown snapshot is an error that changes nothing", ""},
	{CheckSessionFork, Must, "schemas/session.json SessionForkReq", "a fork is a new session of its own id, which opens with the host's token and holds a copy of the sender's state", ""},
	{CheckSessionTrajectory, Must, "schemas/session.json SessionTrajectoryExportResp", "a trajectory export counts the lines it returns", ""},
	{CheckSessionPoints, Must, "schemas/envelope.json Reply.point; schemas/session.json SessionRestoreReq; docs/DECISIONS.md, Points", "a host that keeps points (its replies carry `point`) moves it by one for each state-changing request answered and never for a read; a snapshot covers the point it was taken at; a restore below last_point is runtime_error point_gap naming what would be lost, and changes nothing; accept_gap restores it and says the gap; a restore resumes from the snapshot's point", ""},
	{CheckSessionOperator, Must, "spec §5; docs/operating.md, Admin API; schemas/session.json SessionInfoResp.operator_opened", "a session the operator opened for a tenant refuses the tenant's secret, opens with the token issued for it, and says operator_opened true in session/info; that token opens no other session, and an agent's own session does not say operator_opened", needOperator},

	// The HTTP transport's edge (openapi.yaml) and message sizes.
	{CheckHTTPOrigin, Must, "openapi.yaml (403); docs/SECURITY.md, The edge", "a foreign Origin is refused with 403 on every route: POST /session, POST /send, GET /stream, GET /ws", needHTTP},
	{CheckHTTPHost, Must, "openapi.yaml (403); docs/SECURITY.md, The edge", "a foreign Host is refused with 403", needHTTP},
	{CheckHTTPSize, Must, "openapi.yaml (413); docs/DECISIONS.md, Transports", "a POST /send body over the host's message limit is refused with 413 and the session goes on", needHTTP},
	{CheckHTTPSession, Must, "openapi.yaml (400, 404)", "POST /send without X-Session-Id is 400, with an unknown one 404", needHTTP},
	{CheckTransportSize, Should, "docs/DECISIONS.md, Wire (a line over the message limit)", "a line over the host's message limit is answered with an error and the connection goes on", ""},

	// Across transports (Compare).
	{CheckTransportsAgree, Must, "spec §1 rule 5; docs/transports.md (every transport carries the same protocol messages)", "the same request of the same scenario gets the same answer over every transport the host offers: reply type, error code, contents and events, ids, run-unique names and times aside", needTransports},
}

// Checks returns the kit's checks in report order.
func Checks() []CheckInfo {
	return append([]CheckInfo(nil), catalogue...)
}

func checkInfo(id string) (CheckInfo, bool) {
	for _, c := range catalogue {
		if c.ID == id {
			return c, true
		}
	}
	return CheckInfo{}, false
}

// checkIDs returns every check ID, sorted.
func checkIDs() []string {
	out := make([]string, len(catalogue))
	for i, c := range catalogue {
		out[i] = c.ID
	}
	sort.Strings(out)
	return out
}
