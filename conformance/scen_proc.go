package conformance

import (
	"context"
	"strings"
	"time"
)

// proc: a process of the fixture's command lives its life as
// schemas/proc.json describes.
func (k *kit) proc(ctx context.Context) error {
	if !k.offers("proc", CheckProcLifecycle, CheckProcKill, CheckProcErrors) {
		return nil
	}
	s := k.sessionFor(ctx, CheckProcErrors, "proc", k.opts.Caps)
	if s == nil {
		return nil
	}
	defer s.close(ctx)
	e := CheckProcErrors
	none := k.name("no-such-proc")
	k.wantError(e, s.call(ctx, "proc/status/req", map[string]any{"proc_id": none}), "proc/status of an unknown proc_id")
	k.wantError(e, s.call(ctx, "proc/read/req", map[string]any{"proc_id": none}), "proc/read of an unknown proc_id")
	k.wantError(e, s.call(ctx, "proc/kill/req", map[string]any{"proc_id": none}), "proc/kill of an unknown proc_id")
	k.want(e, s.call(ctx, "proc/list/req", nil), "proc/list/resp", "proc/list")

	pf := k.opts.Fixture.Proc
	if pf == nil || len(pf.Echo) == 0 {
		k.skip("needs fixture proc.echo", CheckProcLifecycle)
	} else {
		k.procEcho(ctx, s, pf.Echo)
	}
	if pf == nil || len(pf.Long) == 0 {
		k.skip("needs fixture proc.long", CheckProcKill)
		return nil
	}
	c := CheckProcKill
	m := s.call(ctx, "proc/spawn/req", map[string]any{"argv": pf.Long})
	if !k.want(c, m, "proc/spawn/resp", "proc/spawn of the fixture's long command") {
		return nil
	}
	id := str(m.body, "process.proc_id")
	k.expect(c, str(m.body, "process.state") == "running", "the fixture's long command is %s just after spawn", str(m.body, "process.state"))
	m = s.call(ctx, "proc/kill/req", map[string]any{"proc_id": id})
	if k.want(c, m, "proc/kill/resp", "proc/kill") {
		k.expect(c, str(m.body, "process.proc_id") == id, "proc/kill names %q", str(m.body, "process.proc_id"))
		k.expect(c, str(m.body, "process.state") == "signaled", "a killed process is %s, want signaled", str(m.body, "process.state"))
	}
	m = s.call(ctx, "proc/status/req", map[string]any{"proc_id": id})
	if k.want(c, m, "proc/status/resp", "proc/status after kill") {
		k.expect(c, str(m.body, "process.state") != "running", "a killed process is still running")
	}
	// A TERM signal ends it as well, and the process is then signaled
	// (schemas/proc.json ProcSignalReq: never crashed).
	m = s.call(ctx, "proc/spawn/req", map[string]any{"argv": pf.Long})
	if !k.want(c, m, "proc/spawn/resp", "proc/spawn of the fixture's long command, to be signaled") {
		return nil
	}
	id = str(m.body, "process.proc_id")
	m = s.call(ctx, "proc/signal/req", map[string]any{"proc_id": id, "signal": "TERM"})
	if k.want(c, m, "proc/signal/resp", "proc/signal TERM") {
		k.expect(c, str(m.body, "process.proc_id") == id, "proc/signal names %q", str(m.body, "process.proc_id"))
	}
	m = s.call(ctx, "proc/wait/req", map[string]any{"proc_id": id, "timeout": 5})
	if k.want(c, m, "proc/wait/resp", "proc/wait after TERM") {
		timedOut, _ := boolean(m.body, "timed_out")
		k.expect(c, !timedOut && str(m.body, "process.state") == "signaled", "the fixture's long command after TERM: %s, want signaled", m)
	}
	s.call(ctx, "proc/kill/req", map[string]any{"proc_id": id})
	return nil
}

func (k *kit) procEcho(ctx context.Context, s *session, argv []string) {
	c := CheckProcLifecycle
	m := s.call(ctx, "proc/spawn/req", map[string]any{"argv": argv})
	if !k.want(c, m, "proc/spawn/resp", "proc/spawn of the fixture's echo command") {
		return
	}
	id := str(m.body, "process.proc_id")
	k.expect(c, id != "", "proc/spawn gave no proc_id: %s", m)
	k.expect(c, equal(strs(m.body, "process.argv"), argv), "proc/spawn's record has argv %v, spawned %v", strs(m.body, "process.argv"), argv)
	text := "aep-conformance " + k.uniq + "\n"
	m = s.call(ctx, "proc/write/req", map[string]any{"proc_id": id, "data": text, "eof": true})
	if k.want(c, m, "proc/write/resp", "proc/write with eof") {
		n, _ := num(m.body, "written")
		k.expect(c, int(n) == len(text), "proc/write of %d bytes says written %v", len(text), n)
	}
	// Within the kit's own wait for a reply (10 s by default).
	m = s.call(ctx, "proc/wait/req", map[string]any{"proc_id": id, "timeout": 5})
	if k.want(c, m, "proc/wait/resp", "proc/wait") {
		timedOut, _ := boolean(m.body, "timed_out")
		code, _ := num(m.body, "process.exit_code")
		k.expect(c, !timedOut && str(m.body, "process.state") == "exited" && code == 0, "the echo command after end of input: %s, want exited with exit_code 0", m)
	}
	// Read until everything is there (a host may still be draining).
	var out string
	deadline := time.Now().Add(5 * time.Second)
	for cursor := 0.0; ; {
		m = s.callAs(ctx, comparePoll, "proc/read/req", map[string]any{"proc_id": id, "stdout_cursor": cursor})
		if !k.want(c, m, "proc/read/resp", "proc/read") {
			break
		}
		out += str(m.body, "stdout.data")
		cursor, _ = num(m.body, "stdout.next_cursor")
		if eof, _ := boolean(m.body, "stdout.eof"); eof || strings.Contains(out, text) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.expect(c, strings.Contains(out, text), "proc/read gave stdout %q, the process was given %q", out, text)
	m = s.call(ctx, "proc/status/req", map[string]any{"proc_id": id})
	if k.want(c, m, "proc/status/resp", "proc/status") {
		k.expect(c, str(m.body, "process.proc_id") == id && str(m.body, "process.state") == "exited", "proc/status: %s, want %s exited", m, id)
	}
	m = s.call(ctx, "proc/list/req", nil)
	if k.want(c, m, "proc/list/resp", "proc/list") {
		found := false
		for _, p := range arr(m.body, "processes") {
			found = found || str(p, "proc_id") == id
		}
		k.expect(c, found, "proc/list lacks the process %s", id)
	}
}
