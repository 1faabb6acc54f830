// Package openenv serves aep's environments to OpenEnv clients (TRL,
// open-instruct and other trainers): each environment of the env
// capability is an OpenEnv environment server under /openenv/<env>/ on
// the agent listener, speaking the wire protocol of OpenEnv's reference
// (openenv-core 0.2.3, docs/openenv.md): WebSocket /ws, one aep session
// per connection, and the stateless HTTP routes /reset, /step, /state,
// /health, /metadata, /schema and /openapi.json.
//
// It is a transport, like server/httpapi and server/mcpface: it imports no
// capability, and every session it opens is an ordinary aep session of
// the tenant whose secret the client presents, so the handshake's check
// and throttle, budgets, audit, trajectories and tenant isolation apply
// as on aep's own transports. The HTTP transport's edge (Origin and Host,
// sizes, deadlines, the client's address) runs in front of it
// (httpapi.Face).
package openenv

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
)

// Prefix is where the face is mounted: /openenv/<env>/<route>.
const Prefix = "/openenv/"

// Catalog is implemented by a plugin that can describe its environments
// without a session (capabilities/env's Plugin.EnvCatalog): the face
// serves each one. It is matched by method, so the plugin need not
// import this package.
type Catalog interface {
	EnvCatalog() []msg.EnvInfo
}

// Options tune the face. Zero fields take the defaults.
type Options struct {
	// Ping is the keep-alive interval of a WebSocket connection; a ping
	// unanswered within another interval drops it (default 20s).
	Ping time.Duration
}

// Face serves the host's environments to OpenEnv clients. It is safe for
// concurrent use.
type Face struct {
	h        *server.Host
	agentID  string
	log      *slog.Logger
	envs     map[string]*envFace
	names    []string
	watch    *watchdog
	ping     time.Duration
	maxFrame int
}

// envFace is one environment's face and the bodies of its unauthenticated
// routes, made once.
type envFace struct {
	info     msg.EnvInfo
	schema   []byte
	metadata []byte
	openapi  []byte
}

// New returns the OpenEnv face of h: every environment of every loaded
// plugin that is a [Catalog] (the first plugin naming an environment
// serves it), configured by h's openenv_face block.
func New(h *server.Host, opts Options) *Face {
	if opts.Ping <= 0 {
		opts.Ping = 20 * time.Second
	}
	agent := h.Config().OpenEnvFace.AgentID
	if agent == "" {
		agent = "openenv"
	}
	f := &Face{h: h, agentID: agent, log: h.Logger().With("transport", "openenv"), envs: map[string]*envFace{},
		watch: newWatchdog(), ping: opts.Ping, maxFrame: h.Config().Server.Limits.MaxMessageBytes}
	for _, name := range h.Plugins() {
		impl, _ := h.PluginImpl(name)
		c, ok := impl.(Catalog)
		if !ok {
			continue
		}
		for _, info := range c.EnvCatalog() {
			if _, dup := f.envs[info.EnvName]; dup {
				continue
			}
			f.envs[info.EnvName] = newEnvFace(info)
			f.names = append(f.names, info.EnvName)
		}
	}
	sort.Strings(f.names)
	return f
}

// Envs returns the names of the environments served.
func (f *Face) Envs() []string { return append([]string(nil), f.names...) }

func newEnvFace(info msg.EnvInfo) *envFace {
	ef := &envFace{info: info}
	ef.schema = mustJSON(map[string]any{"action": actionSchema(info), "observation": observationSchema(info), "state": stateSchema()})
	ef.metadata = mustJSON(map[string]any{"name": info.EnvName, "description": info.Description,
		"readme_content": nil, "version": nil, "author": nil, "documentation_url": nil})
	ef.openapi = mustJSON(openAPI(info))
	return ef
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("openenv: " + err.Error()) // only maps of JSON values are marshalled
	}
	return b
}

// route splits a path under Prefix into the environment and its route:
// the route is the last segment, the environment everything before it,
// so a task environment (task/<folder>) is /openenv/task/<folder>/ws.
func route(path string) (env, rt string, ok bool) {
	rest, found := strings.CutPrefix(path, Prefix)
	if !found {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// Upgrade reports whether r is a WebSocket upgrade of the face
// (httpapi.Face.Upgrade): GET /openenv/<env>/ws.
func (f *Face) Upgrade(r *http.Request) bool {
	_, rt, ok := route(r.URL.Path)
	return ok && rt == "ws" && r.Method == http.MethodGet
}

// ServeHTTP routes /openenv/<env>/<route>. An environment or route not
// served is 404 {"detail": "Not Found"}, as FastAPI answers.
func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, rt, ok := route(r.URL.Path)
	ef := f.envs[name]
	if !ok || ef == nil {
		writeDetail(w, http.StatusNotFound, "Not Found")
		return
	}
	method := func(want string) bool {
		if r.Method == want || (want == http.MethodGet && r.Method == http.MethodHead) {
			return true
		}
		w.Header().Set("Allow", want)
		writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return false
	}
	switch rt {
	case "ws":
		if method(http.MethodGet) {
			f.serveWS(w, r, ef)
		}
	case "health":
		if method(http.MethodGet) {
			f.health(w)
		}
	case "metadata":
		if method(http.MethodGet) {
			writeBody(w, http.StatusOK, ef.metadata)
		}
	case "schema":
		if method(http.MethodGet) {
			writeBody(w, http.StatusOK, ef.schema)
		}
	case "openapi.json":
		if method(http.MethodGet) {
			writeBody(w, http.StatusOK, ef.openapi)
		}
	case "reset":
		if method(http.MethodPost) {
			f.httpReset(w, r, ef)
		}
	case "step":
		if method(http.MethodPost) {
			f.httpStep(w, r, ef)
		}
	case "state":
		if method(http.MethodGet) {
			f.httpState(w, r, ef)
		}
	default:
		writeDetail(w, http.StatusNotFound, "Not Found")
	}
}

// health answers {"status": "healthy"}, or 503 {"status": "unhealthy"}
// once the host is draining: a readiness poll (OpenEnv's from_env waits
// for 200) then stops sending new clients to it.
func (f *Face) health(w http.ResponseWriter) {
	if f.h.Draining() {
		writeBody(w, http.StatusServiceUnavailable, []byte(`{"status":"unhealthy"}`))
		return
	}
	writeBody(w, http.StatusOK, []byte(`{"status":"healthy"}`))
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, mustJSON(v))
}

func writeDetail(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, map[string]any{"detail": detail})
}

// bearer is the token of an Authorization: Bearer header, if any.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return ""
	}
	return strings.TrimSpace(h[len(p):])
}

// errUnavailable is a session the host could not open (closing, draining).
var errUnavailable = errors.New("the host is not taking new sessions (draining or closing)")

// openAPI describes the face's HTTP routes for one environment, enough
// for `openenv validate`: info.version 1.x, and /reset, /step and /state
// all present (simulation mode).
func openAPI(info msg.EnvInfo) map[string]any {
	obj := map[string]any{"type": "object"}
	jsonBody := func(desc string, schema any) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	resp := func(desc string) map[string]any {
		return map[string]any{"200": jsonBody(desc, obj)}
	}
	secured := []any{map[string]any{"bearer": []any{}}}
	result := map[string]any{"type": "object", "required": []string{"observation", "reward", "done"}, "properties": map[string]any{
		"observation": obj, "reward": map[string]any{"type": []string{"number", "null"}}, "done": map[string]any{"type": "boolean"}}}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "OpenEnv Environment HTTP API", "version": "1.0.0",
			"description": "aep environment " + info.EnvName + " served to OpenEnv clients (docs/openenv.md): the wire protocol of openenv-core 0.2.3. " +
				"The WebSocket /ws is the stateful session; the HTTP routes are stateless. POST /mcp is not served (aep's MCP face is /mcp on the host)."},
		"servers": []any{map[string]any{"url": Prefix + info.EnvName}},
		"paths": map[string]any{
			"/reset": map[string]any{"post": map[string]any{"summary": "Reset a fresh environment", "security": secured,
				"requestBody": jsonBody("reset kwargs: seed, episode_id, options, aep_token, other keys as options", obj),
				"responses":   map[string]any{"200": jsonBody("the first observation", result)}}},
			"/step": map[string]any{"post": map[string]any{"summary": "Step a fresh environment once", "security": secured,
				"requestBody": jsonBody("{action: {action: <aep action>}, timeout_s?, aep_token?}", obj),
				"responses":   map[string]any{"200": jsonBody("the step's observation", result)}}},
			"/state":    map[string]any{"get": map[string]any{"summary": "State of a fresh environment", "security": secured, "responses": resp("State")}},
			"/health":   map[string]any{"get": map[string]any{"summary": "Health", "responses": resp(`{"status": "healthy"}`)}},
			"/metadata": map[string]any{"get": map[string]any{"summary": "Environment metadata", "responses": resp("EnvironmentMetadata")}},
			"/schema":   map[string]any{"get": map[string]any{"summary": "Action, observation and state schemas", "responses": resp("{action, observation, state}")}},
		},
		"components": map[string]any{"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
}

// withTimeout bounds ctx by timeout_s, when given.
func withTimeout(ctx context.Context, seconds *float64) (context.Context, context.CancelFunc) {
	if seconds == nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Duration(*seconds*float64(time.Second)))
}
