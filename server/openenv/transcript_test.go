package openenv_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// match compares a frame with what a transcript expects, as JSON values:
// "<*>" matches anything, "<string>" any string, and objects must have
// exactly the expected keys. It returns where they differ, "" if nowhere.
func match(want, got any, at string) string {
	if s, ok := want.(string); ok {
		switch s {
		case "<*>":
			return ""
		case "<string>":
			if _, ok := got.(string); ok {
				return ""
			}
			return fmt.Sprintf("%s: want a string, got %v", at, got)
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", at, got)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Sprintf("%s: unexpected key %q (%v)", at, k, g[k])
			}
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s: missing key %q", at, k)
			}
			if d := match(v, gv, at+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %v, got %v", at, want, got)
		}
		for i := range w {
			if d := match(w[i], g[i], at+"["+strconv.Itoa(i)+"]"); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("%s: want %v (%T), got %v (%T)", at, want, want, got, got)
	}
	return ""
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("transcript JSON %s: %v", s, err)
	}
	return v
}

// lines reads a transcript: its lines without comments and blank lines,
// with $TOKEN replaced.
func lines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(string(b), "$TOKEN", token)))
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// replayWS runs a WebSocket transcript on a new connection.
func replayWS(t *testing.T, r *rig, env, name string) {
	w := dial(t, r.wsURL(env), nil)
	for i, l := range lines(t, name) {
		switch {
		case strings.HasPrefix(l, "> "):
			w.send(l[2:])
		case strings.HasPrefix(l, "< "):
			d, err := w.recv()
			if err != nil {
				t.Fatalf("%s line %d: want %s, connection ended: %v", name, i, l[2:], err)
			}
			var got any
			if err := json.Unmarshal(d, &got); err != nil {
				t.Fatalf("%s: frame %s is not JSON", name, d)
			}
			if diff := match(decode(t, l[2:]), got, "frame"); diff != "" {
				t.Fatalf("%s line %d: %s\n got %s", name, i, diff, d)
			}
		case strings.HasPrefix(l, "! close "):
			want, _ := strconv.Atoi(strings.TrimPrefix(l, "! close "))
			d, err := w.recv()
			var ce websocket.CloseError
			if err == nil || !errors.As(err, &ce) || int(ce.Code) != want {
				t.Fatalf("%s line %d: want close %d, got frame %s, err %v", name, i, want, d, err)
			}
		default:
			t.Fatalf("%s: bad line %q", name, l)
		}
	}
}

// TestWebSocketTranscripts replays reference §6.2 and the error frames of
// §4.3 against the face, with a client that sends no headers.
func TestWebSocketTranscripts(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, name := range []string{"ws_session.txt", "ws_errors.txt"} {
		t.Run(name, func(t *testing.T) { replayWS(t, r, "guess", name) })
	}
}

// TestHTTPTranscript replays reference §6.1 against the stateless routes.
func TestHTTPTranscript(t *testing.T) {
	r := newRig(t, rigOpts{})
	ls := lines(t, "http.txt")
	for i := 0; i < len(ls); i += 2 {
		req := strings.SplitN(ls[i], " ", 3)
		if len(req) < 2 || i+1 >= len(ls) || !strings.HasPrefix(ls[i+1], "= ") {
			t.Fatalf("http.txt: bad request line %q", ls[i])
		}
		method, path, rest := req[0], req[1], ""
		if len(req) == 3 {
			rest = req[2]
		}
		var header map[string][]string
		if rest == "auth" || strings.HasPrefix(rest, "auth ") {
			header = bearerHeader(token)
			rest = strings.TrimPrefix(strings.TrimPrefix(rest, "auth"), " ")
		}
		status, _, body := httpDo(t, method, r.base("guess")+path, rest, header)
		wantStatus, wantBody, _ := strings.Cut(ls[i+1][2:], " ")
		if strconv.Itoa(status) != wantStatus {
			t.Fatalf("%s: status %d, want %s; body %s", ls[i], status, wantStatus, body)
		}
		var got any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: body %s is not JSON", ls[i], body)
		}
		if diff := match(decode(t, wantBody), got, "body"); diff != "" {
			t.Fatalf("%s: %s\n got %s", ls[i], diff, body)
		}
	}
}
