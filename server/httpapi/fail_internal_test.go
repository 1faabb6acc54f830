package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	gen "github.com/aephost/aep/gen/httpapi"
)

// TestFailBodies checks the one error function behind oapi-codegen's three
// hooks: the status each error maps to, our JSON body, and that a 5xx never
// carries the internal error's text.
func TestFailBodies(t *testing.T) {
	a := &api{log: slog.New(slog.DiscardHandler)}
	secret := "dial tcp 10.0.0.7:5432: password=hunter2"
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"internal", errors.New(secret), 500, "internal"},
		{"wrapped internal", fmt.Errorf("visit: %w", errors.New(secret)), 500, "internal"},
		{"missing header", &gen.RequiredHeaderError{ParamName: "X-Session-Id", Err: errors.New("x")}, 400, "bad_request"},
		{"repeated header", &gen.TooManyValuesForParamError{ParamName: "X-Session-Id", Count: 2}, 400, "bad_request"},
		{"body too large", fmt.Errorf("can't read body: %w", &http.MaxBytesError{Limit: 10}), 413, "too_large"},
		{"refusal", &statusError{403, "forbidden", "origin not allowed"}, 403, "forbidden"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			a.fail(&respWriter{ResponseWriter: w}, httptest.NewRequest("POST", "/send", nil), tc.err)
			body := w.Body.String()
			if w.Code != tc.status || !strings.Contains(body, `"error":"`+tc.code+`"`) || !strings.Contains(body, `"ok":false`) {
				t.Fatalf("got %d %s", w.Code, body)
			}
			if tc.status >= 500 && (strings.Contains(body, "hunter2") || !strings.Contains(body, "correlation")) {
				t.Fatalf("5xx body %s leaks the error or lacks a correlation id", body)
			}
		})
	}
	// After a response began (a stream), nothing more is written.
	w := httptest.NewRecorder()
	rw := &respWriter{ResponseWriter: w}
	rw.WriteHeader(200)
	_, _ = rw.Write([]byte(": aep stream\n\n"))
	a.fail(rw, httptest.NewRequest("GET", "/stream", nil), errors.New(secret))
	if w.Body.String() != ": aep stream\n\n" {
		t.Fatalf("error written into a started stream: %q", w.Body.String())
	}
}
