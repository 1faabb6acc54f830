package httpapi

import (
	"net/http"
	"strings"
)

// router routes the transport's requests. Exact patterns ("POST /send",
// "GET /ws", a mount such as "/mcp") are looked up in a map; every other
// request goes to an http.ServeMux holding the same patterns, so a path no
// pattern names, a method a path does not take (405 with Allow) or a path
// to be cleaned is answered as a ServeMux answers it. A ServeMux walks its
// pattern tree on every request, with allocations, and the transport had
// up to three of them in a row (mounts, GET /ws, the generated routes).
// It is the generated handler's BaseRouter (gen/httpapi ServeMux).
type router struct {
	exact    map[string]map[string]route // path → method ("" for any) → route
	fallback *http.ServeMux
}

type route struct {
	pattern string
	h       http.Handler
}

func newRouter() *router {
	return &router{exact: map[string]map[string]route{}, fallback: http.NewServeMux()}
}

// Handle registers h for pattern, in http.ServeMux syntax.
func (rt *router) Handle(pattern string, h http.Handler) {
	rt.fallback.Handle(pattern, h) // panics on a bad or conflicting pattern, as a ServeMux does
	method, path, ok := exactPattern(pattern)
	if !ok {
		return
	}
	ms := rt.exact[path]
	if ms == nil {
		ms = map[string]route{}
		rt.exact[path] = ms
	}
	ms[method] = route{pattern: pattern, h: h}
	if _, head := ms[http.MethodHead]; method == http.MethodGet && !head {
		ms[http.MethodHead] = route{pattern: pattern, h: h} // as a ServeMux matches HEAD by GET
	}
}

// HandleFunc registers f for pattern.
func (rt *router) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	rt.Handle(pattern, http.HandlerFunc(f))
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ms, ok := rt.exact[r.URL.Path]; ok {
		rte, ok := ms[r.Method]
		if !ok {
			rte, ok = ms[""]
		}
		if ok {
			r.Pattern = rte.pattern
			rte.h.ServeHTTP(w, r)
			return
		}
	}
	rt.fallback.ServeHTTP(w, r)
}

// exactPattern splits a pattern that names one path, with or without a
// method: no host, no wildcard, not a subtree (a trailing slash).
func exactPattern(pattern string) (method, path string, ok bool) {
	method, path, found := strings.Cut(pattern, " ")
	if !found {
		method, path = "", pattern
	}
	path = strings.TrimLeft(path, " \t")
	if method == http.MethodConnect || !strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") ||
		strings.ContainsAny(path, "{}") || strings.Contains(path, "//") || strings.Contains(path, "/.") {
		return "", "", false
	}
	return method, path, true
}
