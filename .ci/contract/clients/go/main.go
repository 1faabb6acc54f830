// The Go client quicktype generates from the contract (aep.go, package
// main) sends one line of every message type an agent sends to a real
// host, through the single exchange (POST /send with Accept:
// application/json: no WebSocket or SSE library), each line decoded with
// the generated type of its message and sent as that type marshals it.
// A reply that refuses a line as malformed (parse_error, schema_violation,
// version_mismatch), or a refused handshake, fails the run.
//
// usage: go run . <host base URL> <requests.json>
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

type request struct {
	Type string `json:"type"`
	Def  string `json:"def"`
	Name string `json:"name"`
	Line string `json:"line"`
}

var malformed = map[string]bool{"parse_error": true, "schema_violation": true, "version_mismatch": true}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run . <host base URL> <requests.json>")
		os.Exit(2)
	}
	base := os.Args[1]
	raw, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	var reqs []request
	if err := json.Unmarshal(raw, &reqs); err != nil {
		fail("%v", err)
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	resp, err := hc.Post(base+"/session", "application/json", nil)
	if err != nil {
		fail("POST /session: %v", err)
	}
	var sess struct {
		SessionID string `json:"session_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if err != nil || sess.SessionID == "" {
		fail("POST /session: %v", err)
	}
	bad := 0
	for _, r := range reqs {
		codec, ok := codecs[r.Def]
		if !ok {
			fail("%s: no generated type %s", r.Type, r.Def)
		}
		body, err := codec([]byte(r.Line))
		if err != nil {
			bad++
			fmt.Fprintf(os.Stderr, "FAIL %s %s: the generated type does not round-trip the line: %v\n", r.Type, r.Name, err)
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/send", bytes.NewReader(body))
		req.Header.Set("X-Session-Id", sess.SessionID)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			fail("%s: POST /send: %v", r.Type, err)
		}
		reply, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			fmt.Printf("%-32s %-24s 202 (a notification)\n", r.Type, r.Name)
			continue
		}
		var m struct {
			Type  string          `json:"type"`
			Code  string          `json:"code"`
			OK    *bool           `json:"ok"`
			Error json.RawMessage `json:"error"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(reply, &m) != nil {
			bad++
			fmt.Fprintf(os.Stderr, "FAIL %s %s: HTTP %d %s\n", r.Type, r.Name, resp.StatusCode, reply)
			continue
		}
		var hsErr struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(m.Error, &hsErr)
		switch {
		case m.Type == "error" && malformed[m.Code], m.Type == "handshake/resp" && (m.OK == nil || !*m.OK):
			bad++
			fmt.Fprintf(os.Stderr, "FAIL %s %s: sent %s\n  answered %s\n", r.Type, r.Name, body, reply)
		default:
			fmt.Printf("%-32s %-24s %s %s\n", r.Type, r.Name, m.Type, m.Code)
		}
	}
	if bad > 0 {
		fail("%d of %d lines refused or not sent", bad, len(reqs))
	}
	fmt.Printf("go (quicktype): %d lines of %d message types sent, none refused as malformed\n", len(reqs), countTypes(reqs))
}

func countTypes(reqs []request) int {
	seen := map[string]bool{}
	for _, r := range reqs {
		seen[r.Type] = true
	}
	return len(seen)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go client: "+format+"\n", args...)
	os.Exit(1)
}
