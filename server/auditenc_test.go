package server

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

// TestAppendRecordMatchesJSON checks that the hand-written audit encoder
// writes what encoding/json writes for AuditRecord's tags.
func TestAppendRecordMatchesJSON(t *testing.T) {
	ts := time.Date(2026, 11, 21, 22, 0, 0, 123456789, time.FixedZone("x", 3600))
	cases := []AuditRecord{
		{},
		{TS: ts, SessionID: "s-1", ReqID: "r\"1\\", CorrelationID: "c\n\t\u2028<&>", Type: "tool/call/req", Capability: "tools",
			Plugin: "p", Success: true, ErrorCode: "", DurationMS: 1.25, InputBytes: 10, OutputBytes: 20, Target: "read_\"file\""},
		{TS: ts, ReqID: "bad\xffutf8", Declined: true, Success: true, DurationMS: 1e-7},
		{TS: ts, ErrorCode: "runtime_error", DurationMS: 123456789.5, InputBytes: math.MaxInt32},
		{TS: ts, SessionID: "h-1", Tenant: "team-a", Type: "admin/session.terminate", Success: true, Actor: "operator"},
	}
	for i, r := range cases {
		got := appendRecord(nil, r)
		if got[len(got)-1] != '\n' {
			t.Fatalf("case %d: no newline", i)
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var g, w map[string]any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("case %d: %v in %s", i, err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if r.ReqID == "bad\xffutf8" { // both replace invalid UTF-8 with U+FFFD
			if g["req_id"] != w["req_id"] {
				t.Fatalf("case %d: req_id %q vs %q", i, g["req_id"], w["req_id"])
			}
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkAppendRecord(b *testing.B) {
	r := AuditRecord{TS: time.Now(), SessionID: "s-0123456789abcdef", ReqID: "h1-2", Type: "echo/say/req", Capability: "echo", Plugin: "echo", Success: true, DurationMS: 0.012, InputBytes: 90, OutputBytes: 80}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRecord(buf[:0], r)
	}
}
