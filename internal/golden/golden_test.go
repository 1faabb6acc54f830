package golden

import "testing"

// TestNormalize replays host lines through one archive's normaliser: ids
// are numbered per field in order of first appearance and keep their
// placeholder wherever they reappear, volatile fields lose their values,
// the temporary directory becomes $TMP, and the kernel's own volatile
// values keep the placeholders the kernel's transcripts use.
func TestNormalize(t *testing.T) {
	r := &Run{
		harness: &Harness{IDFields: []string{"proc_id", "episode_id"}, VolatileFields: []string{"pid", "started_at", "ended_at"}},
		tmp:     "/tmp/TestGolden123/001",
		ids:     map[string]string{}, counts: map[string]int{},
	}
	r.compile()
	steps := []struct{ in, want string }{
		{
			`{"type":"proc/spawn/resp","id":"h-9","proto":"1.0","ts":1700000000.25,"req_id":"p1","process":{"proc_id":"p-aaaaaaaaaaaa","pid":4242,"started_at":1700000000.5,"ended_at":null,"cwd":"/tmp/TestGolden123/001/w"}}`,
			`{"type":"proc/spawn/resp","id":"<id>","proto":"1.0","ts":"<ts>","req_id":"p1","process":{"proc_id":"<proc_id:1>","pid":"<pid>","started_at":"<started_at>","ended_at":null,"cwd":"$TMP/w"}}`,
		},
		{
			`{"type":"proc/list/resp","id":"h-10","req_id":"l1","processes":[{"proc_id":"p-bbbbbbbbbbbb"},{"proc_id":"p-aaaaaaaaaaaa"}]}`,
			`{"type":"proc/list/resp","id":"<id>","req_id":"l1","processes":[{"proc_id":"<proc_id:2>"},{"proc_id":"<proc_id:1>"}]}`,
		},
		{
			`{"type":"error","id":"h-11","req_id":"e1","message":"process \"p-bbbbbbbbbbbb\" of s-host-1.example-0123456789abcdef0123456789abcdef: err-fedcba9876543210","episode_id":"ep-cccccc"}`,
			`{"type":"error","id":"<id>","req_id":"e1","message":"process \"<proc_id:2>\" of <session>: err-<corr>","episode_id":"<episode_id:1>"}`,
		},
		{
			`{"type":"pong","id":"h-12","req_id":"p1","uptime_seconds":3.5,"ended_at":"x"}`,
			`{"type":"pong","id":"<id>","req_id":"p1","uptime_seconds":"<uptime>","ended_at":"<ended_at>"}`,
		},
	}
	for i, s := range steps {
		if got := string(r.normalize([]byte(s.in))); got != s.want {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got, s.want)
		}
	}
	sent := `{"type":"proc/kill/req","id":"k","proc_id":"<proc_id:2>","path":"$TMP/a","other":"<proc_id:9>"}`
	want := `{"type":"proc/kill/req","id":"k","proc_id":"p-bbbbbbbbbbbb","path":"/tmp/TestGolden123/001/a","other":"<proc_id:9>"}`
	if got := r.expand(sent); got != want {
		t.Errorf("expand:\n got %s\nwant %s", got, want)
	}
}

func TestIsEvent(t *testing.T) {
	for line, want := range map[string]bool{
		`{"type":"tool/event","id":"x","req_id":"c"}`:     true,
		`{"type":"tool/call/resp","id":"x","req_id":"c"}`: false,
		`{"type":"error","id":"x"}`:                       false,
		`not json`:                                        false,
	} {
		if got := IsEvent([]byte(line)); got != want {
			t.Errorf("IsEvent(%s) = %v, want %v", line, got, want)
		}
	}
}
