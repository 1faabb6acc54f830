package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	gen "github.com/aephost/aep/gen/httpapi"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/inspector"
	"github.com/aephost/aep/server/operator"
	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
	"github.com/aephost/aep/wire"
)

// Readyz implements GET /readyz: 503 while draining, closed, or when the
// store does not answer (server.Host.Ready).
func (a *api) Readyz(ctx context.Context, _ gen.ReadyzRequestObject) (gen.ReadyzResponseObject, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.h.Ready(rctx); err != nil {
		msg := "not ready"
		switch {
		case errors.Is(err, server.ErrDraining):
			msg = "draining"
		case errors.Is(err, server.ErrClosed):
			msg = "closed"
		default:
			// The store's error may name a DSN; it goes to the log only.
			a.log.Warn("readyz: not ready", "err", err)
			msg = "store unreachable"
		}
		return gen.Readyz503JSONResponse{Ok: false, Error: "unavailable", Message: msg}, nil
	}
	return gen.Readyz200JSONResponse{Ok: true, Sessions: a.h.LiveSessions()}, nil
}

// bufferedBytes is what the replay rings of this handler's SSE streams hold.
func (a *api) bufferedBytes() int64 {
	a.mu.RLock()
	sts := make([]*stream, 0, len(a.streams))
	for _, st := range a.streams {
		sts = append(sts, st)
	}
	a.mu.RUnlock()
	var n int64
	for _, st := range sts {
		st.mu.Lock()
		n += int64(st.bytes)
		st.mu.Unlock()
	}
	return n
}

// bufferedBytes is what the replay rings of the hub's WebSocket sessions hold.
func (hub *wsHub) bufferedBytes() int64 {
	hub.mu.Lock()
	wss := make([]*wsSession, 0, len(hub.sessions))
	for _, ws := range hub.sessions {
		wss = append(wss, ws)
	}
	hub.mu.Unlock()
	var n int64
	for _, ws := range wss {
		ws.mu.Lock()
		n += int64(ws.bytes)
		ws.mu.Unlock()
	}
	return n
}

// OperatorOptions say how the operator listener serves.
type OperatorOptions struct {
	// Token is operator.token. With one, every request must carry
	// "Authorization: Bearer <token>" (compared in constant time); without
	// one, /metrics is open (the caller must bind a loopback address,
	// ServeOperator enforces it) and the admin API is off.
	Token string
	// Reload reloads the tenants from the configuration file, as SIGHUP
	// does (POST /admin/reload); nil when there is no file.
	Reload func(context.Context) error
	// Stopping is closed once the host stops (SIGTERM): the admin API then
	// refuses to drain or undrain, as the host drains on its own.
	Stopping <-chan struct{}
	// Logger defaults to the host's.
	Logger *slog.Logger
	// Listening, when set, is told the address the listener is bound to
	// (an ephemeral port is chosen only then).
	Listening func(addr string)
	// Store is the host's store: the inspector reads lineages and exports
	// trajectories from it as `aep export` does; nil: it shows none.
	Store *store.Store
}

// OperatorHandler serves the operator's surface of h: GET /metrics in the
// Prometheus text format, behind the token when there is one, the admin
// API under /admin/ (admin.go) and the web inspector under /inspector/
// (server/inspector), both always behind the token. The inspector checks
// the token itself: a browser carries it as a login cookie.
func OperatorHandler(h *server.Host, o OperatorOptions) http.Handler {
	insp := inspectorHandler(h, o)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.MetricsRegistry(), promhttp.HandlerOpts{}))
	adm := adminHandler(h, o)
	mux.Handle("/admin/", adm)
	mux.Handle("/admin", adm)
	if o.Token == "" {
		return withInspector(insp, mux)
	}
	want := []byte("Bearer " + o.Token)
	return withInspector(insp, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aep operator"`)
			if strings.HasPrefix(r.URL.Path, "/admin") {
				adminError(w, http.StatusUnauthorized, "unauthorized", "the operator token is required (Authorization: Bearer <operator.token>)")
				return
			}
			http.Error(w, "operator token required", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// withInspector routes /inspector and below to the inspector, the rest to
// next.
func withInspector(insp, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/inspector" || strings.HasPrefix(r.URL.Path, inspector.Prefix) {
			insp.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// inspectorHandler is the web inspector of h, with the listener's Host and
// Origin rules and the admin API's session list (server/operator).
func inspectorHandler(h *server.Host, o OperatorOptions) http.Handler {
	allow := parseAllowList(h.Config().Server.AllowedOrigins)
	log := o.Logger
	if log == nil {
		log = h.Logger()
	}
	op := h.Operator()
	return inspector.New(inspector.Options{Host: op.Inspect(), Token: o.Token, Draining: h.Draining,
		AllowHost: allow.host, AllowOrigin: allow.origin, Logger: log,
		Sessions: func() []inspector.Session {
			list, _, _ := op.Sessions(defaultListLimit)
			out := make([]inspector.Session, len(list))
			for i, s := range list {
				out[i] = inspector.Session{Handle: s.Handle, Tenant: s.Tenant, AgentID: s.AgentID, State: s.State,
					Transport: s.Transport, Created: s.Created, LastActive: s.LastActive, InFlight: s.InFlight,
					Parent: s.ParentHandle, OperatorOpened: s.OperatorOpened, Forked: s.Forked}
				if s.Budgets != nil {
					out[i].Budgets = s.Budgets
				}
			}
			return out
		},
		Tenants: func() []string {
			cfg := h.Config().Server
			var names []string
			if cfg.AuthToken != "" {
				names = append(names, "default")
			}
			for _, t := range cfg.Tenants {
				names = append(names, t.Name)
			}
			return names
		},
		Open: func(tenant string, caps []string) (inspector.Opened, error) {
			return openForInspector(h, tenant, caps)
		},
		Lineage: lineageFor(o.Store),
		Export:  exportFor(o.Store),
		Snapshots: func(ctx context.Context, handle string) ([]inspector.SnapshotRef, error) {
			list, err := op.Snapshots(ctx, handle, 50)
			out := make([]inspector.SnapshotRef, len(list))
			for i, n := range list {
				out[i] = inspector.SnapshotRef{ID: n.ID, Target: n.Target, Kind: n.Kind, At: n.At, Bytes: n.Bytes}
			}
			return out, err
		},
	})
}

// lineageFor reads a lineage's tree from st (server/persist, LineageTree).
func lineageFor(st *store.Store) func(context.Context, string) ([]inspector.LineageNode, bool, error) {
	if st == nil {
		return nil
	}
	return func(ctx context.Context, handle string) ([]inspector.LineageNode, bool, error) {
		nodes, more, err := persist.LineageTree(ctx, st, handle)
		out := make([]inspector.LineageNode, len(nodes))
		for i, n := range nodes {
			out[i] = inspector.LineageNode{Handle: n.Handle, Parent: n.Parent, ForkPoint: n.ForkPoint, Group: n.Group,
				Records: n.Records, Steps: n.Steps, Return: n.Return, EpisodeReturn: n.EpisodeReturn}
		}
		return out, more, err
	}
}

// exportFor exports from st exactly as `aep export trajectories` does.
func exportFor(st *store.Store) func(context.Context, inspector.ExportRequest, io.Writer) (int, error) {
	if st == nil {
		return nil
	}
	return func(ctx context.Context, r inspector.ExportRequest, w io.Writer) (int, error) {
		res, err := persist.ExportTrajectories(ctx, st, persist.ExportOptions{Handle: r.Handle, Group: r.Group,
			Descendants: r.Descendants, Prefix: r.Prefix, Format: r.Format}, w)
		return res.Records, err
	}
}

// openForInspector opens a session for a tenant as POST /admin/sessions
// does, audited as that action is, and attaches an in-process pipe to it
// for the inspector, which handshakes with the token it returns.
func openForInspector(h *server.Host, tenant string, caps []string) (inspector.Opened, error) {
	t0 := time.Now()
	op := h.Operator()
	o, err := op.Open(tenant, caps)
	if err != nil {
		op.Audit(operator.Action{Action: "session.open", Tenant: wire.Clip(tenant), Target: "inspector", Code: "refused",
			Started: t0, Duration: time.Since(t0)})
		return inspector.Opened{}, err
	}
	pipe, err := h.ConnectLinesTo(o.ID, 256)
	if err != nil {
		return inspector.Opened{}, fmt.Errorf("attach to the opened session: %w", err)
	}
	op.Audit(operator.Action{Action: "session.open", Session: o.Handle, Tenant: o.Tenant, Target: "inspector",
		Started: t0, Duration: time.Since(t0)})
	ask := caps
	if ask == nil {
		ask = h.Served() // the handshake then accepts what the tenant may use
	}
	return inspector.Opened{Handle: o.Handle, Tenant: o.Tenant, Token: o.Token, Caps: ask, Conn: pipe}, nil
}

// ServeOperator serves [OperatorHandler] on listenAddr until ctx ends. An
// address that is not loopback is refused without a token: metrics tell
// an outsider how busy the host is and which tools it runs.
func ServeOperator(ctx context.Context, h *server.Host, listenAddr string, o OperatorOptions) error {
	log := o.Logger
	if log == nil {
		log = h.Logger()
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return fmt.Errorf("operator listen on %s: %w", listenAddr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && o.Token == "" {
		ln.Close()
		return fmt.Errorf("operator.listen %s is not loopback: operator.token is required", listenAddr)
	}
	srv := &http.Server{Handler: OperatorHandler(h, o), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	adminAPI, insp := "/admin/", "http://"+ln.Addr().String()+inspector.Prefix
	if o.Token == "" {
		adminAPI = "off: operator.token is not set"
		insp = adminAPI
	}
	log.Info("operator endpoint serving /metrics", "addr", ln.Addr().String(), "admin_api", adminAPI, "inspector", insp)
	if o.Listening != nil {
		o.Listening(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("operator serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
