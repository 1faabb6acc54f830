// Package inspector serves the web inspector (docs/inspector.md): a page
// on the operator listener, at /inspector/, that shows a live host — its
// sessions by tenant and agent with their budgets, answers per second and
// errors — and one session as a timeline of its messages, following it
// live. It is read-only and always behind the operator token, on loopback
// too: it shows every tenant's data. Each view is audited, and every
// string it sends is cut of the secrets the host knows (redact.go).
//
// It asks the host only through server/inspect and the session list its
// caller passes in, so the kernel pays for it only while a page is open:
// the host view installs one watch for all its pages, a session view one
// tap on that session, each removed when the last page leaves.
package inspector

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aephost/aep/server/inspect"
)

// Prefix is where the inspector is served.
const Prefix = "/inspector/"

//go:embed assets
var assets embed.FS

// Session is one row of the host view: a live session as the admin API
// reports it (server/operator, SessionReport).
type Session struct {
	Handle         string    `json:"handle"`
	Tenant         string    `json:"tenant"`
	AgentID        string    `json:"agent_id"`
	State          string    `json:"state"`
	Transport      string    `json:"transport"`
	Created        time.Time `json:"created"`
	LastActive     time.Time `json:"last_active"`
	InFlight       int       `json:"in_flight"`
	Parent         string    `json:"parent,omitempty"`
	OperatorOpened bool      `json:"operator_opened,omitempty"`
	Forked         bool      `json:"forked,omitempty"`
	// Budgets is the session's msg.SessionBudgets, or nil.
	Budgets any `json:"budgets,omitempty"`
}

// Options say what the inspector serves and to whom.
type Options struct {
	// Host is the kernel's inspector accessor (operator.Host.Inspect).
	Host inspect.Host
	// Token is operator.token; without one the inspector is off.
	Token string
	// Sessions lists the live sessions; Draining says whether the host
	// drains.
	Sessions func() []Session
	Draining func() bool
	// AllowHost and AllowOrigin are the listener's Host and Origin
	// rules (server/httpapi, allowList).
	AllowHost, AllowOrigin func(string) bool
	Logger                 *slog.Logger
	// Open opens an agent session for a tenant as the admin API's
	// POST /admin/sessions does (server/operator, Host.Open), with caps
	// narrowing its capabilities when not nil, and attaches to it in the
	// host; nil: the page drives no session (drive.go).
	Open func(tenant string, caps []string) (Opened, error)
	// Tenants names the host's tenants, for the page's open form.
	Tenants func() []string
	// Lineage reads the recorded tree of the lineage a session belongs
	// to, and Export writes an export as `aep export trajectories` does,
	// returning the records written (lineage.go); nil without a store.
	Lineage func(ctx context.Context, handle string) (nodes []LineageNode, truncated bool, err error)
	Export  func(ctx context.Context, r ExportRequest, w io.Writer) (records int, err error)
	// Snapshots lists the stored snapshots a live session may restore,
	// newest first (server/operator, Host.Snapshots).
	Snapshots func(ctx context.Context, handle string) ([]SnapshotRef, error)
}

// Handler serves the inspector under [Prefix].
type Handler struct {
	o      Options
	cookie []byte // the value of the cookie a login sets
	mux    *http.ServeMux
	hub    hub
	drive  drivers
}

// cookieName is the inspector's login cookie: an HMAC of the operator
// token, so the token itself is never stored by the browser.
const cookieName = "aep_inspector"

// New returns the inspector's handler.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	mac := hmac.New(sha256.New, []byte(o.Token))
	mac.Write([]byte("aep inspector login"))
	h := &Handler{o: o, cookie: []byte(hex.EncodeToString(mac.Sum(nil)))}
	h.hub.init(o.Host)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /inspector/{$}", h.index)
	mux.HandleFunc("POST /inspector/login", h.login)
	mux.HandleFunc("GET /inspector/app.js", h.asset("assets/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /inspector/app.css", h.asset("assets/app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /inspector/api/host", h.authed(h.hostStream))
	mux.HandleFunc("GET /inspector/api/session", h.authed(h.sessionStream))
	mux.HandleFunc("GET /inspector/form.js", h.asset("assets/form.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /inspector/views.js", h.asset("assets/views.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /inspector/api/contract", h.authed(h.contractBundle))
	mux.HandleFunc("GET /inspector/api/drive", h.authed(h.driveTenants))
	mux.HandleFunc("POST /inspector/api/drive/open", h.authed(h.driveOpen))
	mux.HandleFunc("POST /inspector/api/drive/send", h.authed(h.driveSend))
	mux.HandleFunc("POST /inspector/api/drive/close", h.authed(h.driveClose))
	mux.HandleFunc("GET /inspector/api/lineage", h.authed(h.lineage))
	mux.HandleFunc("GET /inspector/api/export", h.authed(h.export))
	h.mux = mux
	return h
}

// csp is the page's Content-Security-Policy: its own script and style
// only, no inline code, no frames, connections to itself alone.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if h.o.AllowHost != nil && !h.o.AllowHost(r.Host) {
		http.Error(w, "host not allowed", http.StatusForbidden)
		return
	}
	if or := r.Header.Get("Origin"); or != "" && (h.o.AllowOrigin != nil && !h.o.AllowOrigin(or) || !sameOrigin(or, r)) {
		// Beyond the listener's rules, only the inspector's own pages: a
		// page of another port on loopback is the same site to a cookie.
		http.Error(w, "origin not allowed", http.StatusForbidden)
		return
	}
	if h.o.Token == "" {
		http.Error(w, "the inspector is off: operator.token is not set", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/inspector" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether origin is the origin r was sent to.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && strings.EqualFold(u.Host, r.Host)
}

// authorized reports whether r carries the operator token, as a bearer
// header or as the login cookie.
func (h *Handler) authorized(r *http.Request) bool {
	if a := r.Header.Get("Authorization"); a != "" {
		return subtle.ConstantTimeCompare([]byte(a), []byte("Bearer "+h.o.Token)) == 1
	}
	c, err := r.Cookie(cookieName)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), h.cookie) == 1
}

func (h *Handler) authed(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aep operator"`)
			http.Error(w, "the operator token is required", http.StatusUnauthorized)
			return
		}
		f(w, r)
	}
}

// index serves the page, or the login form to a browser without the
// cookie. A link with ?token= logs in and drops the token from the
// address at once.
func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		h.loginWith(w, r, tok)
		return
	}
	if !h.authorized(r) {
		h.loginPage(w, http.StatusUnauthorized, "")
		return
	}
	h.serveAsset(w, "assets/index.html", "text/html; charset=utf-8")
}

// login takes the token from the login form. The form is posted from the
// page itself: a post without an Origin of this listener is refused, so
// another site cannot log a browser in with a token of its choosing.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Origin") == "" {
		http.Error(w, "a login must come from the inspector's own page", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad login form", http.StatusBadRequest)
		return
	}
	h.loginWith(w, r, r.PostForm.Get("token"))
}

func (h *Handler) loginWith(w http.ResponseWriter, r *http.Request, tok string) {
	if subtle.ConstantTimeCompare([]byte(tok), []byte(h.o.Token)) != 1 {
		h.loginPage(w, http.StatusUnauthorized, "That is not the operator token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: string(h.cookie), Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// loginPage is a form with no script: it shows no data.
func (h *Handler) loginPage(w http.ResponseWriter, status int, note string) {
	page, err := assets.ReadFile("assets/login.html")
	if err != nil {
		http.Error(w, "login page missing", http.StatusInternalServerError)
		return
	}
	// note is one of this file's constant sentences, never a request's text.
	p := strings.Replace(string(page), "<!--note-->", note, 1)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(p))
}

func (h *Handler) asset(name, ctype string) http.HandlerFunc {
	return h.authed(func(w http.ResponseWriter, _ *http.Request) { h.serveAsset(w, name, ctype) })
}

func (h *Handler) serveAsset(w http.ResponseWriter, name, ctype string) {
	b, err := assets.ReadFile(name)
	if err != nil {
		http.Error(w, "asset missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(b)
}

// hub counts the answers the sessions send while a host view is open,
// with one watch for every host page.
type hub struct {
	host  inspect.Host
	mu    sync.Mutex
	pages int
	stop  func()
	stats map[string]*sessionStats

	// The session list, shared by the host pages: listing measures each
	// session's directory (its disk budget), so it is made at most once
	// per tick for all pages, and less often when it is slow — at most a
	// tenth of the time is spent on it.
	listMu    sync.Mutex
	list      []Session
	listAt    time.Time
	listEvery time.Duration
}

// sessions returns the session list, made again when it is older than
// the interval its last making set.
func (b *hub) sessions(fetch func() []Session) []Session {
	b.listMu.Lock()
	defer b.listMu.Unlock()
	if !b.listAt.IsZero() && time.Since(b.listAt) < b.listEvery {
		return b.list
	}
	t0 := time.Now()
	b.list = fetch()
	took := time.Since(t0)
	b.listAt, b.listEvery = time.Now(), max(hostTick*9/10, 10*took)
	return b.list
}

// sessionStats are a session's answers since the watch began.
type sessionStats struct {
	Answers, Errors, ToolFailed uint64
	LastError                   string
	ended                       bool
}

func (b *hub) init(h inspect.Host) { b.host = h }

// open adds a host page; the first installs the watch.
func (b *hub) open() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pages++
	if b.pages == 1 {
		b.stats = map[string]*sessionStats{}
		b.stop = b.host.Watch(b.event)
	}
}

// close removes a host page; the last removes the watch.
func (b *hub) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pages--
	if b.pages == 0 {
		b.stop()
		b.stop, b.stats = nil, nil
	}
}

// event is the watch: it runs on the session's goroutine and only counts.
func (b *hub) event(e inspect.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stats == nil {
		return
	}
	st := b.stats[e.Session]
	if st == nil {
		if len(b.stats) >= maxStats {
			return
		}
		st = &sessionStats{}
		b.stats[e.Session] = st
	}
	switch e.Kind {
	case "ended":
		st.ended = true
	case "answer":
		st.Answers++
		switch {
		case e.ToolFailed:
			st.ToolFailed++
		case e.Code != "":
			st.Errors++
			st.LastError = e.Code
		}
	}
}

// maxStats bounds the sessions the hub counts for.
const maxStats = 100000

// counts returns a copy of every session's counts and forgets the
// sessions that ended.
func (b *hub) counts() map[string]sessionStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]sessionStats, len(b.stats))
	for k, v := range b.stats {
		out[k] = *v
		if v.ended {
			delete(b.stats, k)
		}
	}
	return out
}
