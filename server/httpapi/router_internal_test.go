package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRouterAnswersAsServeMux: for every request, the router picks the
// handler an http.ServeMux with the same patterns picks, or answers as it
// does (404, 405 with Allow, a redirect to the cleaned path), whether the
// request takes the router's exact table or its fallback.
func TestRouterAnswersAsServeMux(t *testing.T) {
	patterns := []string{"POST /session", "POST /send", "GET /stream", "GET /healthz", "GET /ws", "/mcp", "GET /files/{name}", "/tree/"}
	build := func(reg func(string, http.Handler)) {
		for _, p := range patterns {
			name := p
			reg(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Route", name)
				w.Header().Set("X-Pattern", r.Pattern)
				w.WriteHeader(299)
			}))
		}
	}
	mux, rt := http.NewServeMux(), newRouter()
	build(mux.Handle)
	build(rt.Handle)
	if len(rt.exact) != 6 {
		t.Fatalf("exact paths %v, want the six without wildcard or subtree", rt.exact)
	}
	cases := []struct{ method, target string }{
		{"POST", "/send"}, {"GET", "/send"}, {"PUT", "/send"}, {"HEAD", "/stream"}, {"GET", "/stream"},
		{"POST", "/stream"}, {"GET", "/ws"}, {"HEAD", "/ws"}, {"POST", "/ws"}, {"GET", "/mcp"}, {"POST", "/mcp"},
		{"DELETE", "/mcp"}, {"GET", "/mcp/"}, {"GET", "/nope"}, {"POST", "/send/"}, {"POST", "//send"},
		{"POST", "/./send"}, {"GET", "/files/a"}, {"GET", "/tree/x/y"}, {"GET", "/tree"}, {"POST", "/s%65nd"},
		{"OPTIONS", "*"}, {"CONNECT", "/send"}, {"GET", "/"},
	}
	for _, c := range cases {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		mux.ServeHTTP(want, httptest.NewRequest(c.method, c.target, nil))
		rt.ServeHTTP(got, httptest.NewRequest(c.method, c.target, nil))
		for _, h := range []string{"X-Route", "X-Pattern", "Allow", "Location"} {
			if got.Header().Get(h) != want.Header().Get(h) {
				t.Errorf("%s %s: %s %q, a ServeMux gives %q", c.method, c.target, h, got.Header().Get(h), want.Header().Get(h))
			}
		}
		if got.Code != want.Code || got.Body.String() != want.Body.String() {
			t.Errorf("%s %s: %d %q, a ServeMux gives %d %q", c.method, c.target, got.Code, got.Body, want.Code, want.Body)
		}
	}
}

// TestRouterExactTakesNoAllocation: a request for an exact pattern costs
// the router no allocation (a ServeMux made two for POST /send).
func TestRouterExactTakesNoAllocation(t *testing.T) {
	rt := newRouter()
	rt.HandleFunc("POST /send", func(http.ResponseWriter, *http.Request) {})
	rt.HandleFunc("GET /stream", func(http.ResponseWriter, *http.Request) {})
	r := httptest.NewRequest("POST", "/send", nil)
	if n := testing.AllocsPerRun(100, func() { rt.ServeHTTP(nil, r) }); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}
