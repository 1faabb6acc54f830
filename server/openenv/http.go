package openenv

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/httpapi"
	"github.com/aephost/aep/wire"
)

// The stateless HTTP routes (reference §3.1–3.3): each call is served by a
// fresh aep session of its own, with a fresh episode, closed before the
// answer is written, as OpenEnv builds and closes a fresh environment per
// request. The token is an Authorization: Bearer header, or aep_token in
// the body of POST /reset and /step.

// body reads a request's JSON object body; an empty body is {}. A body
// that is not an object is answered 422 here (ok false).
func body(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, bool) {
	b, err := io.ReadAll(r.Body) // bounded by the HTTP transport's guard (413)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeDetail(w, http.StatusRequestEntityTooLarge, "body is over the limit of "+strconv.FormatInt(mb.Limit, 10)+" bytes")
			return nil, false
		}
		writeDetail(w, http.StatusBadRequest, "the body could not be read")
		return nil, false
	}
	if len(b) == 0 {
		return map[string]json.RawMessage{}, true
	}
	m, ok := object(b)
	if !ok {
		typ, text := "model_attributes_type", "Input should be a valid dictionary or object to extract fields from"
		if !json.Valid(b) {
			typ, text = "json_invalid", "JSON decode error"
		}
		unprocessable(w, []pyError{{Type: typ, Loc: []any{"body"}, Msg: text}})
		return nil, false
	}
	return m, true
}

func unprocessable(w http.ResponseWriter, errs []pyError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": errs})
}

// open authenticates an HTTP call: a fresh session, handshaken with the
// bearer header's token or else the body's aep_token. It answers the
// refusal itself (ok false).
func (f *Face) open(w http.ResponseWriter, r *http.Request, token string, record *bool) (*backend, bool) {
	if h := bearer(r); h != "" {
		token = h
	}
	if token == "" {
		unauthorized(w, "the aep token is required: an Authorization: Bearer header, or aep_token in the body")
		return nil, false
	}
	b, err := f.newBackend(nil, httpapi.SessionOptions(r.Context())...)
	if err != nil {
		writeDetail(w, http.StatusServiceUnavailable, errUnavailable.Error())
		return nil, false
	}
	if err := b.handshake(r.Context(), f.agentID, token, record); err != nil {
		b.close()
		f.refuseHTTP(w, err)
		return nil, false
	}
	return b, true
}

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="aep", error="invalid_token"`)
	writeDetail(w, http.StatusUnauthorized, detail)
}

// refuseHTTP answers a handshake that failed.
func (f *Face) refuseHTTP(w http.ResponseWriter, err error) {
	var e *aepError
	if !errors.As(err, &e) {
		writeDetail(w, http.StatusServiceUnavailable, errUnavailable.Error())
		return
	}
	switch {
	case e.code == string(wire.CodeUnauthorized):
		unauthorized(w, "the aep token was refused")
	case e.reason() == "throttled":
		if secs, ok := e.detail["retry_after_seconds"].(float64); ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
		}
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"detail": e.message, "aep_code": e.code, "aep_reason": "throttled"})
	case e.code == string(wire.CodeCapabilityMissing):
		writeJSON(w, http.StatusForbidden, map[string]any{"detail": e.message, "aep_code": e.code})
	default:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"detail": e.message, "aep_code": e.code, "aep_reason": e.reason()})
	}
}

// failHTTP answers an aep error of a reset or step: the agent's fault
// (schema_violation, or an action outside the action space: invalid_action)
// is 422 with the location given, any other is 500
// with the aep code, as an exception in OpenEnv's environment is.
func failHTTP(w http.ResponseWriter, err error, loc []any) {
	var e *aepError
	if errors.As(err, &e) && e.agentFault() {
		body := map[string]any{"detail": []pyError{{Type: "value_error", Loc: loc, Msg: e.message}}, "aep_code": e.code}
		if r := e.reason(); r != "" {
			body["aep_reason"] = r
		}
		writeJSON(w, http.StatusUnprocessableEntity, body)
		return
	}
	if errors.As(err, &e) {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"detail": e.message, "aep_code": e.code, "aep_reason": e.reason()})
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"detail": "the step did not finish within timeout_s", "aep_code": string(wire.CodeTimeout)})
		return
	}
	writeJSON(w, http.StatusInternalServerError, map[string]any{"detail": "the aep session ended before its reply"})
}

// endOnCancel ends the session when ctx ends (the client went away, or
// timeout_s ran out), which cancels the request running in it.
func endOnCancel(ctx context.Context, b *backend) func() bool {
	return context.AfterFunc(ctx, b.close)
}

// httpReset is POST /reset.
func (f *Face) httpReset(w http.ResponseWriter, r *http.Request, ef *envFace) {
	data, ok := body(w, r)
	if !ok {
		return
	}
	args, errs := parseReset(data, true, []any{"body"})
	if errs != nil && args.token == "" && bearer(r) == "" {
		// Nothing but the unauthenticated routes answers before the token.
		unauthorized(w, "the aep token is required: an Authorization: Bearer header, or aep_token in the body")
		return
	}
	b, ok := f.open(w, r, args.token, args.record)
	if !ok {
		return
	}
	defer b.close()
	if errs != nil {
		unprocessable(w, errs)
		return
	}
	defer endOnCancel(r.Context(), b)()
	m, err := b.do(r.Context(), &msg.EnvResetReq{EnvName: ef.info.EnvName, Seed: args.seed, Options: args.opts})
	if err != nil {
		failHTTP(w, err, []any{"body"})
		return
	}
	resp := m.(*msg.EnvResetResp)
	writeBody(w, http.StatusOK, appendResult(nil, result{obs: resp.Observation, info: resp.Info}))
}

// httpStep is POST /step: a fresh episode (reset without seed or options)
// stepped once with the action.
func (f *Face) httpStep(w http.ResponseWriter, r *http.Request, ef *envFace) {
	data, ok := body(w, r)
	if !ok {
		return
	}
	var token string
	var errs []pyError
	if v, ok := data[keyToken]; ok {
		if json.Unmarshal(v, &token) != nil || token == "" {
			errs = append(errs, wrongType("string_type", "Input should be a non-empty string", []any{"body", keyToken}, nil))
		}
	}
	if token == "" && bearer(r) == "" {
		unauthorized(w, "the aep token is required: an Authorization: Bearer header, or aep_token in the body")
		return
	}
	var timeout *float64
	if v, ok := data["timeout_s"]; ok && !isNull(v) {
		var t float64
		if json.Unmarshal(v, &t) != nil || t <= 0 || math.IsInf(t, 0) {
			errs = append(errs, wrongType("greater_than", "Input should be greater than 0", []any{"body", "timeout_s"}, v))
		} else {
			timeout = &t
		}
	}
	if v, ok := data["request_id"]; ok && !isNull(v) {
		var s string
		if json.Unmarshal(v, &s) != nil || len([]rune(s)) > 255 {
			errs = append(errs, wrongType("string_type", "Input should be a valid string of at most 255 characters", []any{"body", "request_id"}, v))
		}
	}
	raw, present := data["action"]
	var action json.RawMessage
	if !present {
		errs = append(errs, missing([]any{"body", "action"}, nil))
	}
	b, ok := f.open(w, r, token, recordOf(data))
	if !ok {
		return
	}
	defer b.close()
	if errs != nil {
		unprocessable(w, errs)
		return
	}
	// The action's own errors are located relative to the action object
	// (reference §3.2).
	if action, errs = actionOf(raw, nil); errs != nil {
		unprocessable(w, errs)
		return
	}
	ctx, cancel := withTimeout(r.Context(), timeout)
	defer cancel()
	defer endOnCancel(ctx, b)()
	m, err := b.do(ctx, &msg.EnvResetReq{EnvName: ef.info.EnvName})
	if err != nil {
		failHTTP(w, ctxErr(ctx, err), []any{"body"})
		return
	}
	ep := m.(*msg.EnvResetResp).EpisodeID
	m, err = b.do(ctx, &msg.EnvStepReq{EpisodeID: ep, Action: action})
	if err != nil {
		failHTTP(w, ctxErr(ctx, err), []any{"action"})
		return
	}
	st := m.(*msg.EnvStepResp)
	reward := st.Reward
	writeBody(w, http.StatusOK, appendResult(nil, result{obs: st.Observation, info: st.Info,
		terminated: st.Terminated, truncated: st.Truncated, reward: &reward}))
}

// ctxErr is the deadline when it is why the request ended (the session was
// closed under it).
func ctxErr(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// recordOf reads aep_record_trajectory of a body.
func recordOf(data map[string]json.RawMessage) *bool {
	var b bool
	if v, ok := data[keyRecord]; ok && json.Unmarshal(v, &b) == nil {
		return &b
	}
	return nil
}

// httpState is GET /state: the state of a fresh environment, which has no
// episode yet. The token is a bearer header (a GET has no body).
func (f *Face) httpState(w http.ResponseWriter, r *http.Request, ef *envFace) {
	b, ok := f.open(w, r, "", nil)
	if !ok {
		return
	}
	b.close()
	writeJSON(w, http.StatusOK, stateOf(nil, nil, ""))
}

var _ server.Sink = (*backend)(nil)
