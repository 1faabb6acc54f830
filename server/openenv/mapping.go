package openenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/aephost/aep/gen/msg"
)

// The mapping of fields between OpenEnv and aep (docs/openenv.md, Fields).
//
// An OpenEnv action is an object; aep actions are any JSON value of the
// environment's action space. Every action is therefore wrapped the same
// way, whatever the space: {"action": <aep action>}, with OpenEnv's
// optional "metadata" accepted and dropped. An observation is
// {"observation": <aep observation>, "info", "terminated", "truncated"},
// with OpenEnv's reward and done beside it (done = terminated or
// truncated). One rule for every environment keeps /schema, the docs and
// a trainer's parsing code the same across environments.

// pyError is one entry of a validation error list, shaped as Pydantic's
// (type, loc, msg, input), which OpenEnv's VALIDATION_ERROR frames and
// FastAPI's 422 bodies carry.
type pyError struct {
	Type  string          `json:"type"`
	Loc   []any           `json:"loc"`
	Msg   string          `json:"msg"`
	Input json.RawMessage `json:"input,omitempty"`
}

func missing(loc []any, input json.RawMessage) pyError {
	return pyError{Type: "missing", Loc: loc, Msg: "Field required", Input: input}
}

func extra(loc []any, input json.RawMessage) pyError {
	return pyError{Type: "extra_forbidden", Loc: loc, Msg: "Extra inputs are not permitted", Input: input}
}

func wrongType(typ, msg string, loc []any, input json.RawMessage) pyError {
	return pyError{Type: typ, Loc: loc, Msg: msg, Input: input}
}

// at prefixes a loc, as FastAPI prefixes a body field's errors with "body".
func at(prefix []any, loc ...any) []any {
	return append(append([]any{}, prefix...), loc...)
}

// object decodes b as a JSON object into its keys and raw values. ok is
// false when b is not an object (null included).
func object(b []byte) (map[string]json.RawMessage, bool) {
	ms, ok := members(b)
	if !ok {
		return nil, false
	}
	m := make(map[string]json.RawMessage, len(ms))
	for _, x := range ms {
		m[x.key] = x.val
	}
	return m, true
}

// isObject reports whether a raw value (valid JSON) is an object.
func isObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

func isNull(b json.RawMessage) bool {
	return string(bytes.TrimSpace(b)) == "null"
}

// Reserved keys of reset data: consumed by the face, never given to the
// environment. aep_token is the session's secret (docs/SECURITY.md, The
// OpenEnv face).
const (
	keyToken  = "aep_token"
	keyRecord = "aep_record_trajectory"
)

// resetArgs is what a reset's data (WebSocket) or body (POST /reset) says.
type resetArgs struct {
	token  string // "" when none was given
	record *bool
	seed   *int
	label  *string // OpenEnv's episode_id: the caller's name for the episode
	opts   *json.RawMessage
}

// parseReset reads reset kwargs. http applies POST /reset's validation
// (seed ≥ 0, episode_id ≤ 255 characters), which OpenEnv's WebSocket path
// does not (reference §9 item 5). loc prefixes the locations of errors.
// The token is taken whatever else is wrong, so that a reset that fails
// its validation is still answered in an authenticated session.
func parseReset(data map[string]json.RawMessage, http bool, loc []any) (resetArgs, []pyError) {
	var a resetArgs
	var errs []pyError
	if v, ok := data[keyToken]; ok {
		var s string
		if err := json.Unmarshal(v, &s); err != nil || s == "" {
			errs = append(errs, wrongType("string_type", "Input should be a non-empty string", at(loc, keyToken), nil))
		} else {
			a.token = s
		}
	}
	if v, ok := data[keyRecord]; ok && !isNull(v) {
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			errs = append(errs, wrongType("bool_type", "Input should be a valid boolean", at(loc, keyRecord), v))
		} else {
			a.record = &b
		}
	}
	if v, ok := data["seed"]; ok && !isNull(v) {
		n, ok := integer(v)
		switch {
		case !ok:
			errs = append(errs, wrongType("int_type", "Input should be a valid integer", at(loc, "seed"), v))
		case http && n < 0:
			errs = append(errs, wrongType("greater_than_equal", "Input should be greater than or equal to 0", at(loc, "seed"), v))
		default:
			a.seed = &n
		}
	}
	if v, ok := data["episode_id"]; ok && !isNull(v) {
		var s string
		switch err := json.Unmarshal(v, &s); {
		case err != nil:
			errs = append(errs, wrongType("string_type", "Input should be a valid string", at(loc, "episode_id"), v))
		case len([]rune(s)) > 255:
			errs = append(errs, wrongType("string_too_long", "String should have at most 255 characters", at(loc, "episode_id"), nil))
		default:
			a.label = &s
		}
	}
	// options, and every other key, are the environment's reset options:
	// OpenEnv forwards unknown kwargs to the environment's reset, aep
	// takes them as options.
	opts := map[string]json.RawMessage{}
	if v, ok := data["options"]; ok && !isNull(v) {
		o, ok := object(v)
		if !ok {
			errs = append(errs, wrongType("dict_type", "Input should be a valid dictionary", at(loc, "options"), v))
		}
		for k, x := range o {
			opts[k] = x
		}
	}
	for k, v := range data {
		switch k {
		case keyToken, keyRecord, "seed", "episode_id", "options":
			continue
		}
		if strings.HasPrefix(k, "aep_") {
			errs = append(errs, extra(at(loc, k), v))
			continue
		}
		if _, dup := opts[k]; dup {
			errs = append(errs, wrongType("value_error", "Value error, "+strconv.Quote(k)+" is given both in options and beside it", at(loc, k), v))
			continue
		}
		opts[k] = v
	}
	if len(opts) > 0 {
		b, _ := json.Marshal(opts)
		raw := json.RawMessage(b)
		a.opts = &raw
	}
	return a, errs
}

// integer reads a JSON integer; a number with a zero fraction (7.0) is
// one, as in JSON Schema and Pydantic's lax mode. Booleans are not.
func integer(v json.RawMessage) (int, bool) {
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return 0, false
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return int(i), true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int(f), true
}

// actionOf unwraps an OpenEnv action object {"action": …, "metadata"?}.
// loc prefixes the locations of errors.
func actionOf(raw json.RawMessage, loc []any) (json.RawMessage, []pyError) {
	o, ok := members(raw)
	if !ok {
		return nil, []pyError{wrongType("model_type", "Input should be a valid dictionary or instance of Action", loc, clipInput(raw))}
	}
	var errs []pyError
	act, ok := get(o, "action")
	if !ok {
		errs = append(errs, missing(at(loc, "action"), clipInput(raw)))
	}
	for _, m := range o {
		switch m.key {
		case "action":
		case "metadata":
			if !isObject(m.val) {
				errs = append(errs, wrongType("dict_type", "Input should be a valid dictionary", at(loc, "metadata"), clipInput(m.val)))
			}
		default:
			errs = append(errs, extra(at(loc, m.key), clipInput(m.val)))
		}
	}
	if errs != nil {
		return nil, errs
	}
	return act, nil
}

// appendReward writes an aep reward as a JSON float: OpenEnv's HTTP
// responses coerce rewards to float, so 1 is written 1.0, as Python would.
func appendReward(b []byte, r float64) []byte {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return append(b, "null"...) // never from aep: rewards are JSON numbers
	}
	start := len(b)
	b = strconv.AppendFloat(b, r, 'g', -1, 64)
	if !bytes.ContainsAny(b[start:], ".e") {
		b = append(b, ".0"...)
	}
	return b
}

// result is an OpenEnv observation message's data: one aep reset or step.
type result struct {
	obs, info             json.RawMessage
	terminated, truncated bool
	reward                *float64 // nil for a reset, which has none
}

// appendResult writes {"observation": {...}, "reward": …, "done": …}.
func appendResult(b []byte, r result) []byte {
	b = append(b, `{"observation":{"observation":`...)
	b = appendRaw(b, r.obs)
	b = append(b, `,"info":`...)
	if len(r.info) == 0 {
		b = append(b, "{}"...)
	} else {
		b = appendRaw(b, r.info)
	}
	b = append(b, `,"terminated":`...)
	b = strconv.AppendBool(b, r.terminated)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, r.truncated)
	b = append(b, `},"reward":`...)
	if r.reward == nil {
		b = append(b, "null"...)
	} else {
		b = appendReward(b, *r.reward)
	}
	b = append(b, `,"done":`...)
	b = strconv.AppendBool(b, r.terminated || r.truncated)
	return append(b, '}')
}

// appendRaw writes a JSON value the host produced (valid JSON already),
// compacted so a frame stays one line.
func appendRaw(b []byte, v json.RawMessage) []byte {
	if len(v) == 0 {
		return append(b, "null"...)
	}
	if bytes.ContainsAny(v, "\n\r\t") {
		var buf bytes.Buffer
		if json.Compact(&buf, v) == nil {
			return append(b, buf.Bytes()...)
		}
	}
	return append(b, v...)
}

// episode is what a WebSocket connection knows of its episode.
type episode struct {
	id     string  // aep's episode id; "" before the first reset
	label  *string // the episode_id the client gave its reset, if any
	step   int
	done   bool // the last reply was terminated or truncated
	broken bool // a request failed in the environment since the last reset
}

// state is OpenEnv's State of the connection's episode: episode_id (the
// client's name for it, else aep's id) and step_count, plus aep's own
// fields, which State's extra keys allow.
// aep_session is the session's public handle (docs/SECURITY.md, Session
// ids are bearer secrets; sessions have public handles), by which the
// operator exports its trajectory (`aep export trajectories --session`).
func stateOf(ep *episode, o *msg.EnvObserveResp, handle string) map[string]any {
	if ep == nil || ep.id == "" {
		st := map[string]any{"episode_id": nil, "step_count": 0}
		if handle != "" {
			st["aep_session"] = handle
		}
		return st
	}
	id := ep.id
	if ep.label != nil {
		id = *ep.label
	}
	return map[string]any{"episode_id": id, "step_count": o.Step, "aep_episode_id": ep.id,
		"env_name": o.EnvName, "status": string(o.Status), "total_reward": o.TotalReward, "aep_session": handle}
}

// Schemas (GET /schema): Pydantic-shaped JSON Schemas of the action and
// observation wrappers above, with the environment's own spaces inside,
// and OpenEnv's base State with aep's extra keys.

// embed places an aep space inside a wrapper schema. A space's own $defs
// (and draft-07 definitions) move to the wrapper's root, where its
// "#/$defs/…" references then resolve as they did in the space.
func embed(space json.RawMessage, root map[string]any) any {
	var v any
	if err := json.Unmarshal(space, &v); err != nil {
		return map[string]any{}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return v // a boolean schema
	}
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := m[k].(map[string]any); ok {
			into, _ := root[k].(map[string]any)
			if into == nil {
				into = map[string]any{}
				root[k] = into
			}
			for name, s := range d {
				into[name] = s
			}
			delete(m, k)
		}
	}
	delete(m, "$schema")
	return m
}

func actionSchema(info msg.EnvInfo) map[string]any {
	root := map[string]any{
		"title":                "Action",
		"type":                 "object",
		"additionalProperties": false,
		"description":          fmt.Sprintf("An action of aep environment %q: the aep action under \"action\" (docs/openenv.md).", info.EnvName),
	}
	root["properties"] = map[string]any{
		"action": embed(info.ActionSpace, root),
		"metadata": map[string]any{"type": "object", "additionalProperties": true, "title": "Metadata",
			"description": "OpenEnv's action metadata: accepted and not passed to the environment."},
	}
	root["required"] = []string{"action"}
	return root
}

func observationSchema(info msg.EnvInfo) map[string]any {
	root := map[string]any{
		"title":                "Observation",
		"type":                 "object",
		"additionalProperties": false,
		"description": fmt.Sprintf("An observation of aep environment %q. On the wire done, reward and metadata are lifted out "+
			"of it (OpenEnv's serialize_observation): the observation object holds observation, info, terminated and truncated.", info.EnvName),
	}
	root["properties"] = map[string]any{
		"done":        map[string]any{"type": "boolean", "default": false, "title": "Done", "description": "terminated or truncated"},
		"reward":      map[string]any{"anyOf": []any{map[string]any{"type": "boolean"}, map[string]any{"type": "integer"}, map[string]any{"type": "number"}, map[string]any{"type": "null"}}, "default": nil, "title": "Reward", "description": "the step's reward; null after a reset"},
		"metadata":    map[string]any{"type": "object", "additionalProperties": true, "title": "Metadata", "description": "never sent"},
		"observation": embed(info.ObservationSpace, root),
		"info":        map[string]any{"type": "object", "additionalProperties": true, "title": "Info", "description": "the environment's info dict"},
		"terminated":  map[string]any{"type": "boolean", "title": "Terminated", "description": "the episode reached a terminal state of its task"},
		"truncated":   map[string]any{"type": "boolean", "title": "Truncated", "description": "the episode was cut short before a terminal state"},
	}
	root["required"] = []string{"observation", "info", "terminated", "truncated"}
	return root
}

func stateSchema() map[string]any {
	return map[string]any{
		"title":                "State",
		"type":                 "object",
		"additionalProperties": true,
		"description":          "State of the connection's episode: OpenEnv's base State and aep's extra keys.",
		"properties": map[string]any{
			"episode_id":     map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}, "default": nil, "title": "Episode Id", "description": "the episode_id given to reset, else aep's episode id"},
			"step_count":     map[string]any{"type": "integer", "minimum": 0, "default": 0, "title": "Step Count"},
			"aep_episode_id": map[string]any{"type": "string", "title": "Aep Episode Id"},
			"env_name":       map[string]any{"type": "string", "title": "Env Name"},
			"status":         map[string]any{"enum": []string{"running", "terminated", "truncated"}, "title": "Status"},
			"total_reward":   map[string]any{"type": "number", "title": "Total Reward"},
			"aep_session":    map[string]any{"type": "string", "title": "Aep Session", "description": "the aep session's public handle, for trajectory export"},
		},
	}
}
