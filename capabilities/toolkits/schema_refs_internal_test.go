package toolkits

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kaptinlin/jsonschema"
)

// TestSchemaRefsNeverFetched checks that schema references are never fetched (kaptinlin/jsonschema
// with network loaders off, docs/DECISIONS.md, Security defaults): a toolkit schema
// whose $ref points at a loopback HTTP server is refused at compile time,
// naming the reference, and no request reaches that server. The library on
// its own would silently validate as if the $ref were absent, so a
// constraint behind it would be skipped. A local $ref still works. A
// control shows the library's default compiler does fetch the reference,
// so the server would see a fetch if one happened.
func TestSchemaRefsNeverFetched(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"type":"string","maxLength":3}`))
	}))
	defer srv.Close()
	remote := map[string]any{
		"type":       "object",
		"required":   []any{"host"},
		"properties": map[string]any{"host": map[string]any{"$ref": srv.URL + "/host.json"}},
	}
	k := &Toolkit{Name: "remote", Schema: remote}
	err := k.compile()
	if err == nil || !strings.Contains(err.Error(), srv.URL+"/host.json") || !strings.Contains(err.Error(), "never fetched") {
		t.Fatalf("compile of a schema with a remote $ref: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the toolkit's compiler fetched a remote $ref %d times", n)
	}

	local := map[string]any{
		"type":       "object",
		"required":   []any{"host"},
		"properties": map[string]any{"host": map[string]any{"$ref": "#/$defs/short"}},
		"$defs":      map[string]any{"short": map[string]any{"type": "string", "maxLength": 3}},
	}
	k = &Toolkit{Name: "local", Schema: local}
	if err := k.compile(); err != nil {
		t.Fatalf("a local $ref: %v", err)
	}
	if _, err := k.validate(map[string]any{"host": "abc"}); err != nil {
		t.Fatalf("a value the local $ref allows: %v", err)
	}
	if _, err := k.validate(map[string]any{"host": "a-long-host-name"}); err == nil || !strings.Contains(err.Error(), "/host") {
		t.Fatalf("a value the local $ref forbids: %v", err)
	}

	// Control: the library's default compiler does fetch the remote $ref.
	raw, err := json.Marshal(remote)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := jsonschema.NewCompiler().Compile(raw); err == nil {
		s.Validate(map[string]any{"host": "a-long-host-name"})
	}
	if hits.Load() == 0 {
		t.Fatal("the default compiler did not fetch the $ref either: the check above proves nothing")
	}
}
