package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	admin "github.com/aephost/aep/gen/adminapi"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/operator"
	"github.com/aephost/aep/wire"
)

// The admin API (docs/operating.md, Admin API): the paths of openapi.yaml
// tagged admin, generated into gen/adminapi and served on the operator
// listener only, always behind the operator token — on loopback too,
// since it acts as any tenant. Each action goes through the kernel's
// admin entry points (operator.Host, server.Host.Operator) and is audited
// with the operator as its actor.

// adminBodyLimit bounds an admin request's body: the largest is a list of
// capabilities.
const adminBodyLimit = 64 << 10

// defaultListLimit is how many sessions a list returns unless it says.
const defaultListLimit = 1000

// inspectSnapshots bounds the snapshots an inspect lists.
const inspectSnapshots = 50

// adminAPI implements [admin.StrictServerInterface] over one host.
type adminAPI struct {
	h        *server.Host
	op       operator.Host
	reload   func(context.Context) error
	stopping <-chan struct{}
	log      *slog.Logger

	// drainMu lets one drain or undrain run at a time.
	drainMu sync.Mutex
}

var _ admin.StrictServerInterface = (*adminAPI)(nil)

// adminHandler serves the admin API of h behind the token check. Without a
// token every admin request is refused (403): the API is off.
func adminHandler(h *server.Host, o OperatorOptions) http.Handler {
	a := &adminAPI{h: h, op: h.Operator(), reload: o.Reload, stopping: o.Stopping, log: o.Logger}
	if a.log == nil {
		a.log = h.Logger()
	}
	mux := http.NewServeMux()
	strict := admin.NewStrictHandlerWithOptions(a, nil, admin.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: a.badRequest, ResponseErrorHandlerFunc: a.internal})
	admin.HandlerWithOptions(strict, admin.StdHTTPServerOptions{BaseRouter: mux, ErrorHandlerFunc: a.badRequest})
	allow := parseAllowList(h.Config().Server.AllowedOrigins)
	want := []byte("Bearer " + o.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.Token == "" {
			adminError(w, http.StatusForbidden, "off", "the admin API is off: operator.token is not set")
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aep operator"`)
			adminError(w, http.StatusUnauthorized, "unauthorized", "the operator token is required (Authorization: Bearer <operator.token>)")
			return
		}
		// A page of another origin cannot send the token without it being
		// given; still, an admin request from a browser must come from an
		// origin the host allows, as on the agent listener.
		if or := r.Header.Get("Origin"); or != "" && !allow.origin(or) {
			adminError(w, http.StatusForbidden, "forbidden", "origin "+wire.Clip(or)+" is not allowed")
			return
		}
		if r.ContentLength > adminBodyLimit {
			adminError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body is over the limit of %d bytes", adminBodyLimit))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, adminBodyLimit)
		}
		mux.ServeHTTP(w, r)
	})
}

func adminError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, admin.Error{Ok: false, Error: code, Message: message})
}

// badRequest answers a parameter or body the generated code could not
// bind.
func (a *adminAPI) badRequest(w http.ResponseWriter, r *http.Request, err error) {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		adminError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body is over the limit of %d bytes", mb.Limit))
		return
	}
	msg := "malformed request"
	var inv *admin.InvalidParamFormatError
	switch {
	case errors.As(err, &inv):
		msg = "parameter " + inv.ParamName + " is malformed"
	case strings.Contains(err.Error(), "decode JSON body"):
		msg = "the body is not the JSON object this path takes"
	}
	adminError(w, http.StatusBadRequest, "bad_request", msg)
}

// internal answers an error the API did not expect: a correlation id on
// the wire, the error in the log.
func (a *adminAPI) internal(w http.ResponseWriter, r *http.Request, err error) {
	corr := "admin-" + rand.Text()[:12]
	a.log.Error("admin API error", "correlation", corr, "method", r.Method, "path", r.URL.Path, "err", err)
	adminError(w, http.StatusInternalServerError, "internal", "internal error (correlation "+corr+")")
}

// audit writes the audit line of one action.
func (a *adminAPI) audit(action, handle, tenant, target, code string, t0 time.Time) {
	a.op.Audit(operator.Action{Action: action, Session: handle, Tenant: tenant, Target: target, Code: code,
		Started: t0, Duration: time.Since(t0)})
}

// problem is how the API answers an error of the kernel: the error's own
// message when it is meant for clients, else a correlation id (the error
// goes to the log).
func (a *adminAPI) problem(action string, err error) admin.Error {
	e := wire.AsError(err)
	if !e.Internal {
		return admin.Error{Ok: false, Error: "conflict", Message: e.Message}
	}
	corr := "admin-" + rand.Text()[:12]
	a.log.Error("admin action failed", "action", action, "correlation", corr, "err", err)
	return admin.Error{Ok: false, Error: "internal", Message: "the action failed; the host's log has it under correlation " + corr}
}

func noSession(handle string) admin.Error {
	return admin.Error{Ok: false, Error: "not_found", Message: "no session has the handle " + wire.Clip(handle)}
}

func sessionModel(r operator.SessionReport) admin.AdminSession {
	now := time.Now()
	out := admin.AdminSession{Handle: r.Handle, Tenant: r.Tenant, AgentId: r.AgentID, State: admin.AdminSessionState(r.State),
		Transport: r.Transport, Created: r.Created.UTC(), AgeSeconds: float32(now.Sub(r.Created).Seconds()),
		IdleSeconds: float32(now.Sub(r.LastActive).Seconds()), InFlight: r.InFlight, OperatorOpened: r.OperatorOpened,
		Capabilities: r.Capabilities}
	if out.Capabilities == nil {
		out.Capabilities = []string{}
	}
	if r.ParentHandle != "" {
		p := r.ParentHandle
		out.ParentHandle = &p
	}
	if r.Forked {
		f := true
		out.Forked = &f
	}
	if b := r.Budgets; b != nil {
		use := func(l, u int) admin.BudgetUse { return admin.BudgetUse{Limit: int64(l), Used: int64(u)} }
		out.Budgets = &admin.AdminBudgets{
			LeafWork:              use(b.LeafWork.Limit, b.LeafWork.Used),
			SandboxMemoryBytes:    use(b.SandboxMemoryBytes.Limit, b.SandboxMemoryBytes.Used),
			DiskBytes:             use(b.DiskBytes.Limit, b.DiskBytes.Used),
			Files:                 use(b.Files.Limit, b.Files.Used),
			WorkingMemoryBytes:    use(b.WorkingMemoryBytes.Limit, b.WorkingMemoryBytes.Used),
			PersistentMemoryBytes: use(b.PersistentMemoryBytes.Limit, b.PersistentMemoryBytes.Used),
		}
		if b.Steps != nil {
			s := use(b.Steps.Limit, b.Steps.Used)
			out.Budgets.Steps = &s
		}
	}
	if n := r.Newest; n != nil {
		ref := snapshotRef(*n)
		out.NewestSnapshot = &ref
	}
	return out
}

func snapshotRef(n operator.SnapshotNote) admin.AdminSnapshotRef {
	return admin.AdminSnapshotRef{SnapshotId: n.ID, Target: admin.AdminSnapshotRefTarget(n.Target), Kind: n.Kind, Created: n.At.UTC(), Bytes: n.Bytes}
}

// AdminListSessions implements GET /admin/sessions.
func (a *adminAPI) AdminListSessions(ctx context.Context, req admin.AdminListSessionsRequestObject) (admin.AdminListSessionsResponseObject, error) {
	t0 := time.Now()
	limit := defaultListLimit
	if l := req.Params.Limit; l != nil {
		if *l < 1 || *l > 100000 {
			a.audit("sessions.list", "", "", "", "bad_request", t0)
			return admin.AdminListSessions400JSONResponse{AdminBadRequestJSONResponse: admin.AdminBadRequestJSONResponse{
				Ok: false, Error: "bad_request", Message: "limit: want 1 to 100000"}}, nil
		}
		limit = *l
	}
	list, total, pending := a.op.Sessions(limit)
	out := admin.AdminSessionList{Draining: a.h.Draining(), Total: total, Pending: pending, Sessions: make([]admin.AdminSession, len(list))}
	for i, r := range list {
		out.Sessions[i] = sessionModel(r)
	}
	a.audit("sessions.list", "", "", "", "", t0)
	return admin.AdminListSessions200JSONResponse(out), nil
}

// AdminInspectSession implements GET /admin/sessions/{handle}.
func (a *adminAPI) AdminInspectSession(ctx context.Context, req admin.AdminInspectSessionRequestObject) (admin.AdminInspectSessionResponseObject, error) {
	t0 := time.Now()
	r, err := a.op.Session(req.Handle)
	if err != nil {
		a.audit("session.inspect", wire.Clip(req.Handle), "", "", "not_found", t0)
		return admin.AdminInspectSession404JSONResponse{AdminNoSessionJSONResponse: admin.AdminNoSessionJSONResponse(noSession(req.Handle))}, nil
	}
	out := admin.AdminSessionDetail{Session: sessionModel(r), Snapshots: []admin.AdminSnapshotRef{}}
	snaps, err := a.op.Snapshots(ctx, req.Handle, inspectSnapshots)
	if err != nil && !errors.Is(err, operator.ErrNoSuchSession) {
		p := a.problem("session.inspect", err)
		out.SnapshotsError = &p.Message
	}
	for _, n := range snaps {
		out.Snapshots = append(out.Snapshots, snapshotRef(n))
	}
	a.audit("session.inspect", r.Handle, r.Tenant, "", "", t0)
	return admin.AdminInspectSession200JSONResponse(out), nil
}

// AdminTerminateSession implements POST /admin/sessions/{handle}/terminate.
func (a *adminAPI) AdminTerminateSession(ctx context.Context, req admin.AdminTerminateSessionRequestObject) (admin.AdminTerminateSessionResponseObject, error) {
	t0 := time.Now()
	r, err := a.op.Terminate(req.Handle)
	if err != nil {
		a.audit("session.terminate", wire.Clip(req.Handle), "", "", "not_found", t0)
		return admin.AdminTerminateSession404JSONResponse{AdminNoSessionJSONResponse: admin.AdminNoSessionJSONResponse(noSession(req.Handle))}, nil
	}
	a.audit("session.terminate", r.Handle, r.Tenant, "", "", t0)
	r.State = "closed"
	return admin.AdminTerminateSession200JSONResponse(sessionModel(r)), nil
}

// AdminSnapshotSession implements POST /admin/sessions/{handle}/snapshot.
func (a *adminAPI) AdminSnapshotSession(ctx context.Context, req admin.AdminSnapshotSessionRequestObject) (admin.AdminSnapshotSessionResponseObject, error) {
	t0 := time.Now()
	target := ""
	if req.Body != nil && req.Body.Target != nil {
		target = string(*req.Body.Target)
		if target != "file" && target != "sql" {
			a.audit("session.snapshot", wire.Clip(req.Handle), "", "", "bad_request", t0)
			return admin.AdminSnapshotSession400JSONResponse{AdminBadRequestJSONResponse: admin.AdminBadRequestJSONResponse{
				Ok: false, Error: "bad_request", Message: "target: want file or sql"}}, nil
		}
	}
	r, err := a.op.Session(req.Handle)
	if err != nil {
		a.audit("session.snapshot", wire.Clip(req.Handle), "", "", "not_found", t0)
		return admin.AdminSnapshotSession404JSONResponse{AdminNoSessionJSONResponse: admin.AdminNoSessionJSONResponse(noSession(req.Handle))}, nil
	}
	t, err := a.op.Snapshot(ctx, req.Handle, target)
	switch {
	case errors.Is(err, operator.ErrNoSuchSession):
		a.audit("session.snapshot", r.Handle, r.Tenant, "", "not_found", t0)
		return admin.AdminSnapshotSession404JSONResponse{AdminNoSessionJSONResponse: admin.AdminNoSessionJSONResponse(noSession(req.Handle))}, nil
	case err != nil:
		p := a.problem("session.snapshot", err)
		a.audit("session.snapshot", r.Handle, r.Tenant, "", p.Error, t0)
		if p.Error == "internal" {
			return nil, err
		}
		return admin.AdminSnapshotSession409JSONResponse(p), nil
	}
	files := "local"
	if t.Files != nil {
		files = string(t.Files.State)
	}
	a.audit("session.snapshot", r.Handle, r.Tenant, t.ID, "", t0)
	return admin.AdminSnapshotSession200JSONResponse{SnapshotId: t.ID, Target: admin.AdminSnapshotTarget(t.Target), Bytes: t.Bytes, Files: files}, nil
}

// AdminOpenSession implements POST /admin/sessions.
func (a *adminAPI) AdminOpenSession(ctx context.Context, req admin.AdminOpenSessionRequestObject) (admin.AdminOpenSessionResponseObject, error) {
	t0 := time.Now()
	bad := func(msg string) (admin.AdminOpenSessionResponseObject, error) {
		a.audit("session.open", "", "", "", "bad_request", t0)
		return admin.AdminOpenSession400JSONResponse{AdminBadRequestJSONResponse: admin.AdminBadRequestJSONResponse{Ok: false, Error: "bad_request", Message: msg}}, nil
	}
	if req.Body == nil || req.Body.Tenant == "" || len(req.Body.Tenant) > 128 {
		return bad("tenant: want the name of one of the host's tenants")
	}
	var caps []string
	if req.Body.Capabilities != nil {
		caps = *req.Body.Capabilities
		if caps == nil {
			caps = []string{}
		}
	}
	o, err := a.op.Open(req.Body.Tenant, caps)
	switch {
	case errors.Is(err, operator.ErrNoSuchTenant):
		a.audit("session.open", "", wire.Clip(req.Body.Tenant), "", "not_found", t0)
		return admin.AdminOpenSession404JSONResponse{Ok: false, Error: "not_found", Message: "no tenant is named " + wire.Clip(req.Body.Tenant)}, nil
	case errors.Is(err, wire.ErrInvalid):
		return bad(err.Error())
	case errors.Is(err, operator.ErrUnavailable):
		a.audit("session.open", "", req.Body.Tenant, "", "unavailable", t0)
		return admin.AdminOpenSession503JSONResponse{Ok: false, Error: "unavailable", Message: err.Error()}, nil
	case err != nil:
		a.audit("session.open", "", req.Body.Tenant, "", "internal", t0)
		return nil, err
	}
	a.audit("session.open", o.Handle, o.Tenant, "", "", t0)
	return admin.AdminOpenSession201JSONResponse{SessionId: o.ID, Token: o.Token, Handle: o.Handle, Tenant: o.Tenant, Expires: o.Expires.UTC()}, nil
}

// stoppingNow reports whether the host is stopping (SIGTERM): no drain or
// undrain may run then.
func (a *adminAPI) stoppingNow() bool {
	if a.stopping == nil {
		return false
	}
	select {
	case <-a.stopping:
		return true
	default:
		return false
	}
}

// AdminDrain implements POST /admin/drain: the host's drain (as on
// SIGTERM, server.Host.Drain), then the sessions it saved are ended so
// their clients move; the host keeps running.
func (a *adminAPI) AdminDrain(ctx context.Context, req admin.AdminDrainRequestObject) (admin.AdminDrainResponseObject, error) {
	t0 := time.Now()
	cfg := a.h.Config().Operator
	snapshot, timeout := cfg.SnapshotOnDrain, time.Duration(cfg.DrainTimeout)
	if req.Body != nil {
		if req.Body.Snapshot != nil {
			snapshot = *req.Body.Snapshot
		}
		if t := req.Body.Timeout; t != nil {
			d, err := time.ParseDuration(*t)
			if err != nil || d <= 0 || d > time.Hour {
				a.audit("drain", "", "", "", "bad_request", t0)
				return admin.AdminDrain400JSONResponse{AdminBadRequestJSONResponse: admin.AdminBadRequestJSONResponse{
					Ok: false, Error: "bad_request", Message: "timeout: want a duration from 1ns to 1h, such as 30s"}}, nil
			}
			timeout = d
		}
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	conflict := func(msg string) (admin.AdminDrainResponseObject, error) {
		a.audit("drain", "", "", "", "conflict", t0)
		return admin.AdminDrain409JSONResponse{Ok: false, Error: "conflict", Message: msg}, nil
	}
	if !a.drainMu.TryLock() {
		return conflict("another drain or undrain is under way")
	}
	defer a.drainMu.Unlock()
	if a.stoppingNow() {
		return conflict("the host is stopping (SIGTERM): it drains on its own")
	}
	// The drain runs to its end even if the caller goes away: it has
	// sealed the host, and its snapshots are what the sessions move with.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	a.log.Info("draining at the operator's request: no new sessions; waiting for requests in flight", "timeout", timeout, "snapshot", snapshot)
	res, err := a.h.Drain(dctx, snapshot)
	handles := make([]string, 0, len(res.Snapshots))
	// Without a store a drain takes no snapshot, whatever it was asked.
	out := admin.AdminDrainResult{Draining: true, Snapshot: res.Snapshotted, Unfinished: res.Unfinished, NotSaved: res.NotSaved}
	out.Snapshots = make([]struct {
		Handle     string `json:"handle"`
		SnapshotId string `json:"snapshot_id"`
	}, 0, len(res.Snapshots))
	for hd, id := range res.Snapshots {
		handles = append(handles, hd)
		out.Snapshots = append(out.Snapshots, struct {
			Handle     string `json:"handle"`
			SnapshotId string `json:"snapshot_id"`
		}{hd, id})
	}
	// Each session saved is ended, so its client moves now (docs/deploy.md,
	// How a client survives a drain) rather than at its next request.
	out.Ended = a.op.EndSessions(handles)
	out.TookSeconds = float32(time.Since(t0).Seconds())
	code := ""
	if err != nil {
		p := a.problem("drain", err)
		out.Error = &p.Message
		code = "partial"
	}
	a.log.Info("drained at the operator's request", "snapshots", len(res.Snapshots), "sessions_ended", out.Ended,
		"sessions_not_saved", res.NotSaved, "unfinished", res.Unfinished, "took", time.Since(t0))
	a.audit("drain", "", "", fmt.Sprintf("snapshots=%d ended=%d not_saved=%d", len(res.Snapshots), out.Ended, res.NotSaved), code, t0)
	return admin.AdminDrain200JSONResponse(out), nil
}

// AdminUndrain implements POST /admin/undrain.
func (a *adminAPI) AdminUndrain(ctx context.Context, req admin.AdminUndrainRequestObject) (admin.AdminUndrainResponseObject, error) {
	t0 := time.Now()
	conflict := func(msg string) (admin.AdminUndrainResponseObject, error) {
		a.audit("undrain", "", "", "", "conflict", t0)
		return admin.AdminUndrain409JSONResponse{Ok: false, Error: "conflict", Message: msg}, nil
	}
	if !a.drainMu.TryLock() {
		return conflict("a drain is under way; undrain once it answered")
	}
	defer a.drainMu.Unlock()
	if a.stoppingNow() {
		return conflict("the host is stopping (SIGTERM)")
	}
	was := a.op.Undrain()
	a.audit("undrain", "", "", "", "", t0)
	return admin.AdminUndrain200JSONResponse{Draining: a.h.Draining(), WasDraining: was}, nil
}

// AdminReload implements POST /admin/reload: the reload SIGHUP makes.
func (a *adminAPI) AdminReload(ctx context.Context, req admin.AdminReloadRequestObject) (admin.AdminReloadResponseObject, error) {
	t0 := time.Now()
	if a.reload == nil {
		a.audit("reload", "", "", "", "conflict", t0)
		return admin.AdminReload409JSONResponse{Ok: false, Error: "conflict", Message: "the host was started without --config: there is no file to reload"}, nil
	}
	if err := a.reload(ctx); err != nil {
		a.audit("reload", "", "", "", "invalid", t0)
		return admin.AdminReload422JSONResponse{Ok: false, Error: "invalid", Message: "tenants not reloaded; the running ones stay: " + err.Error()}, nil
	}
	names := a.h.TenantNames()
	a.audit("reload", "", "", strings.Join(names, ","), "", t0)
	return admin.AdminReload200JSONResponse{Tenants: names}, nil
}
