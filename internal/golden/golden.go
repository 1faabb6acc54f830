// Package golden replays agent scripts of txtar archives against a host and
// compares normalised transcripts: the wire-level golden tests of the
// protocol, shared by the kernel's tests (server/testdata/golden) and the capabilities' tests
// (capabilities/all/testdata/golden).
//
// An archive holds:
//   - config.yaml (optional): the host configuration; without it the
//     harness's DefaultConfig. Each $TMP in it becomes a fresh temporary
//     directory of the archive.
//   - agent: a script, one step a line (blank lines and # comments skipped):
//     {json}          send the line, then record host lines up to and
//     including the first that is not an event;
//     &{json}         send the line and record nothing yet;
//     !send "quoted"  like {json}, for a Go-quoted line (invalid UTF-8);
//     !wait ID        record host lines until the non-event answer to ID;
//     !live           record the host's number of handshaken sessions;
//     !closed         record host lines until the pipe reports the session closed;
//     !session NAME   switch to (or open) the pipe NAME; the first is "A";
//     !attach NAME ID open the pipe NAME to the waiting child session ID
//     (its transport id, or its public handle: transcripts
//     show every transport id as <session>)
//     and switch to it (a subagent's session);
//     and the verbs of [Harness.NewHost]'s extra steps.
//     In a sent line, $SESSION is replaced by the current session's id, $TMP
//     by the archive's temporary directory, and each placeholder <field:N>
//     already seen in a host line by the value it stands for.
//   - host: the transcript of what the host sent, rewritten by -update.
//
// After the script every pipe must stay silent for a moment, so a late
// message (an event after its reply, a second reply) shows up as a diff.
//
// Each host line is checked with [Harness.Check] (the conformance kit)
// before it is normalised: values that differ from run to run become
// placeholders, by field name, so a transcript is the same on every run
// (see [Harness.IDFields] and [Harness.VolatileFields]).
package golden

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/aephost/aep/server"
)

var update = flag.Bool("update", false, "rewrite the host sections of testdata/golden/*.txtar")

// Step is an extra script verb: it gets the rest of the script line.
type Step func(r *Run, arg string) error

// Archive is what [Harness.NewHost] learns about the archive being replayed.
type Archive struct {
	T *testing.T
	// Ctx ends when the archive's time is up.
	Ctx context.Context
	// Config is the archive's config.yaml, parsed.
	Config server.Config
	// TmpDir is the archive's temporary directory, $TMP in the archive.
	TmpDir string
}

// Harness replays the archives of one directory.
type Harness struct {
	// Dir holds the *.txtar archives; default testdata/golden.
	Dir string
	// DefaultConfig is the config.yaml of an archive that has none.
	DefaultConfig string
	// NewHost builds the host of one archive from its parsed config, with
	// the extra steps (verb "!name" → step) its script may use; those steps
	// may keep state of this host. The harness closes the host at the end.
	NewHost func(a *Archive) (*server.Host, map[string]Step, error)
	// Check checks one line the host sent (the conformance kit); an error
	// fails the test. Nil checks nothing.
	Check func(line []byte) error
	// IDFields name fields whose string values are identifiers the host
	// chose at random. The N-th distinct value of field f in an archive
	// becomes <f:N> wherever it appears later, so a transcript still shows
	// which id is which, and the script sends <f:N> to mean that value.
	IDFields []string
	// VolatileFields name fields whose values differ from run to run
	// (durations, timestamps, pids); each value becomes "<field>".
	VolatileFields []string
}

// Run replays every archive of h.Dir as a subtest.
func (h Harness) Run(t *testing.T) {
	dir := h.Dir
	if dir == "" {
		dir = filepath.Join("testdata", "golden")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no golden files in %s", dir)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			h.replay(t, file)
		})
	}
}

func (h Harness) replay(t *testing.T, file string) {
	ar, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var script, want []byte
	cfgText := []byte(h.DefaultConfig)
	hostIdx := -1
	for i, f := range ar.Files {
		switch f.Name {
		case "config.yaml":
			cfgText = f.Data
		case "agent":
			script = f.Data
		case "host":
			want, hostIdx = f.Data, i
		default:
			t.Fatalf("unknown section %q", f.Name)
		}
	}
	tmp := t.TempDir()
	cfg, err := server.ParseConfig(bytes.ReplaceAll(cfgText, []byte("$TMP"), []byte(tmp)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	host, steps, err := h.NewHost(&Archive{T: t, Ctx: ctx, Config: cfg, TmpDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close(ctx)

	r := &Run{
		t: t, ctx: ctx, h: host, harness: &h, steps: steps, tmp: tmp,
		pipes: map[string]*server.LinePipe{}, ids: map[string]string{}, counts: map[string]int{},
	}
	r.compile()
	if err := r.Use("A"); err != nil {
		t.Fatal(err)
	}
	for n, raw := range strings.Split(string(script), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := r.step(line); err != nil {
			t.Fatalf("%s: agent line %d %q: %v", file, n+1, line, err)
		}
	}
	for _, name := range r.order {
		r.cur = r.pipes[name]
		r.drainSilence(name)
	}
	got := r.out.Bytes()
	if *update {
		if hostIdx < 0 {
			ar.Files = append(ar.Files, txtar.File{Name: "host"})
			hostIdx = len(ar.Files) - 1
		}
		ar.Files[hostIdx].Data = got
		if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("host transcript differs (run with -update to accept)\n--- got\n%s--- want\n%s", got, want)
	}
}

// Run is one archive being replayed; extra steps drive it.
type Run struct {
	t       *testing.T
	ctx     context.Context
	h       *server.Host
	harness *Harness
	steps   map[string]Step
	tmp     string
	pipes   map[string]*server.LinePipe
	order   []string
	cur     *server.LinePipe
	out     bytes.Buffer

	idField  *regexp.Regexp    // "f":"value" of the IDFields
	volatile *regexp.Regexp    // "f":value of the VolatileFields
	ids      map[string]string // value → <f:N>
	byPlace  map[string]string // <f:N> → value
	counts   map[string]int    // field → distinct values seen
}

// T is the archive's test.
func (r *Run) T() *testing.T { return r.t }

// Ctx ends when the archive's time is up.
func (r *Run) Ctx() context.Context { return r.ctx }

// Host is the host under test.
func (r *Run) Host() *server.Host { return r.h }

// Printf records a line of the step's own in the transcript.
func (r *Run) Printf(format string, args ...any) {
	fmt.Fprintf(&r.out, format, args...)
	if !strings.HasSuffix(format, "\n") {
		r.out.WriteByte('\n')
	}
}

// Use switches to the pipe name, opening a new session for it the first time.
func (r *Run) Use(name string) error {
	p, ok := r.pipes[name]
	if !ok {
		var err error
		if p, err = r.h.ConnectLines(256); err != nil {
			return err
		}
		r.add(name, p)
	}
	r.cur = p
	return nil
}

// Attach opens the pipe name to the waiting child session id (after
// placeholder substitution) and switches to it.
func (r *Run) Attach(name, id string) error {
	if _, ok := r.pipes[name]; ok {
		return fmt.Errorf("pipe %s is already open", name)
	}
	id = r.expand(id)
	if s, ok := r.h.SessionByHandle(id); ok {
		id = s.ID()
	}
	p, err := r.h.ConnectLinesTo(id, 256)
	if err != nil {
		return err
	}
	r.add(name, p)
	r.cur = p
	return nil
}

func (r *Run) add(name string, p *server.LinePipe) {
	r.pipes[name] = p
	r.order = append(r.order, name)
	r.t.Cleanup(func() { p.Close() })
}

func (r *Run) step(line string) error {
	verb, arg, _ := strings.Cut(line, " ")
	switch {
	case strings.HasPrefix(line, "{"):
		return r.SendAndRead(line)
	case strings.HasPrefix(line, "&{"):
		return r.Send(line[1:])
	case verb == "!send":
		s, err := strconv.Unquote(arg)
		if err != nil {
			return err
		}
		return r.SendAndRead(s)
	case verb == "!wait":
		for {
			l, err := r.read()
			if err != nil {
				return err
			}
			if !IsEvent(l) && reqID(l) == arg {
				return nil
			}
		}
	case verb == "!live":
		r.Printf("live sessions: %d", r.h.LiveSessions())
		return nil
	case verb == "!closed":
		for {
			_, err := r.read()
			if errors.Is(err, server.ErrSessionClosed) {
				r.Printf("closed")
				return nil
			}
			if err != nil {
				return err
			}
		}
	case verb == "!session":
		if err := r.Use(arg); err != nil {
			return err
		}
		r.Printf("session %s", arg)
		return nil
	case verb == "!attach":
		name, id, ok := strings.Cut(arg, " ")
		if !ok {
			return errors.New("usage: !attach NAME ID")
		}
		if err := r.Attach(name, id); err != nil {
			return err
		}
		r.Printf("session %s", name)
		return nil
	}
	if s, ok := r.steps[verb]; ok {
		return s(r, arg)
	}
	return fmt.Errorf("unknown step")
}

// expand replaces $SESSION, $TMP and the placeholders of ids seen so far.
func (r *Run) expand(line string) string {
	if r.cur != nil {
		line = strings.ReplaceAll(line, "$SESSION", r.cur.Session().ID())
	}
	line = strings.ReplaceAll(line, "$TMP", r.tmp)
	if strings.Contains(line, "<") {
		for place, v := range r.byPlace {
			line = strings.ReplaceAll(line, place, v)
		}
	}
	return line
}

// Send sends one agent line on the current pipe and records nothing.
func (r *Run) Send(line string) error {
	return r.cur.WriteLine(r.ctx, []byte(r.expand(line)))
}

// SendAndRead sends one agent line, then records host lines up to and
// including the first that is not an event.
func (r *Run) SendAndRead(line string) error {
	if err := r.Send(line); err != nil {
		return err
	}
	for {
		l, err := r.read()
		if err != nil {
			return err
		}
		if !IsEvent(l) {
			return nil
		}
	}
}

// read records one host line after checking it.
func (r *Run) read() ([]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	l, err := r.cur.ReadLine(ctx)
	if err != nil {
		return nil, err
	}
	r.check(l)
	r.out.Write(r.normalize(l))
	r.out.WriteByte('\n')
	return l, nil
}

// drainSilence records whatever a pipe still sends within a short while.
func (r *Run) drainSilence(name string) {
	for {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Millisecond)
		l, err := r.cur.ReadLine(ctx)
		cancel()
		if err != nil {
			return
		}
		r.check(l)
		fmt.Fprintf(&r.out, "late on %s: %s\n", name, r.normalize(l))
	}
}

// check reports a host line that does not conform. It reports with Errorf,
// so one bad line does not hide the rest of the transcript.
func (r *Run) check(line []byte) {
	if r.harness.Check == nil {
		return
	}
	if err := r.harness.Check(line); err != nil {
		r.t.Errorf("host line %s\n\tdoes not conform: %v", line, err)
	}
}

var (
	reReqID = regexp.MustCompile(`"req_id":"([^"]*)"`)
	reType  = regexp.MustCompile(`^\{"type":"([^"]*)"`)
	// kernelVolatiles are the envelope's and the kernel's own volatile
	// values: the host's message id and ts, session ids, uptime and
	// correlation ids.
	kernelVolatiles = []struct {
		re   *regexp.Regexp
		repl string
	}{
		{regexp.MustCompile(`^(\{"type":"[^"]*","id":)"[^"]*"`), `$1"<id>"`},
		{regexp.MustCompile(`"ts":[0-9.eE+-]+`), `"ts":"<ts>"`},
		{regexp.MustCompile(`"uptime_seconds":[0-9.eE+-]+`), `"uptime_seconds":"<uptime>"`},
		{regexp.MustCompile(`\bs-[A-Za-z0-9.-]+-[0-9a-f]{32}\b`), `<session>`},
		{regexp.MustCompile(`h-[0-9a-f]{32}`), `<handle>`},
		{regexp.MustCompile(`err-[0-9a-f]{16}`), `err-<corr>`},
	}
)

// jsonString matches the body of a JSON string, escapes included.
const jsonString = `"((?:[^"\\]|\\.)*)"`

func fieldAlternation(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return "(" + strings.Join(q, "|") + ")"
}

func (r *Run) compile() {
	r.byPlace = map[string]string{}
	if len(r.harness.IDFields) > 0 {
		r.idField = regexp.MustCompile(`"` + fieldAlternation(r.harness.IDFields) + `":` + jsonString)
	}
	if len(r.harness.VolatileFields) > 0 {
		r.volatile = regexp.MustCompile(`"` + fieldAlternation(r.harness.VolatileFields) +
			`":(` + `"(?:[^"\\]|\\.)*"` + `|-?[0-9][0-9.eE+-]*)`)
	}
}

// normalize replaces the values that differ from run to run by
// placeholders: first the ids of IDFields, numbered by first appearance
// (longest value first, so one id that contains another keeps its own
// placeholder), then the temporary directory, the kernel's volatile values
// and the VolatileFields.
func (r *Run) normalize(line []byte) []byte {
	out := line
	if r.idField != nil {
		for _, m := range r.idField.FindAllSubmatch(out, -1) {
			field, v := string(m[1]), string(m[2])
			if _, seen := r.ids[v]; seen || v == "" || strings.HasPrefix(v, "<") {
				continue
			}
			r.counts[field]++
			place := fmt.Sprintf("<%s:%d>", field, r.counts[field])
			r.ids[v], r.byPlace[place] = place, v
		}
		vals := make([]string, 0, len(r.ids))
		for v := range r.ids {
			vals = append(vals, v)
		}
		sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
		for _, v := range vals {
			out = bytes.ReplaceAll(out, []byte(v), []byte(r.ids[v]))
		}
	}
	out = bytes.ReplaceAll(out, []byte(r.tmp), []byte("$TMP"))
	for _, v := range kernelVolatiles {
		out = v.re.ReplaceAll(out, []byte(v.repl))
	}
	if r.volatile != nil {
		out = r.volatile.ReplaceAll(out, []byte(`"$1":"<$1>"`))
	}
	return out
}

// IsEvent reports whether a host line is an event ("<ns>/event").
func IsEvent(line []byte) bool {
	m := reType.FindSubmatch(line)
	return m != nil && strings.HasSuffix(string(m[1]), "/event")
}

func reqID(line []byte) string {
	m := reReqID.FindSubmatch(line)
	if m == nil {
		return ""
	}
	return string(m[1])
}
