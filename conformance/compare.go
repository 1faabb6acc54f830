package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The comparison across transports: [Compare] runs the kit over every
// transport a host offers, one after the other, and holds the answers of
// one run to the others' (transports.agree). Every transport carries the
// same protocol messages (docs/transports.md), so the same request in the
// same scenario must get the same answer — the same type, code and
// contents — whatever carried it, except for what names a run, a session
// or a moment: ids, run-unique names, times.

// answer is what a request of the run got: its reply and the events of
// its request, as they came, normalized only when compared.
type answer struct {
	// key names the request within the run, the same on every transport:
	// the scenario, the session (its label and place among sessions of
	// that label), the request's place among the session's requests.
	key    string
	req    string         // the request's type
	reply  map[string]any // nil: no reply came
	events []map[string]any
	mode   compareMode
}

// compareMode says how an answer is held to another run's.
type compareMode int

const (
	// compareExact: the reply and the events, ids, names and times aside.
	compareExact compareMode = iota
	// compareUnordered: the same, with every list taken as a multiset
	// and the events by their number and kinds, for a request whose work
	// the host does concurrently (a chain's parallel nodes finish in
	// either order, and report progress as they do).
	compareUnordered
	// compareLoose: the reply's type and error code only, for a request
	// whose contents are not the scenario's to fix: a probe that only
	// asks whether a namespace is served (learn/stats/req answers with
	// host-wide counters), a chain whose failing node races the other.
	compareLoose
	// comparePoll: a request repeated until the host is done (reading a
	// process's output): how many it takes is timing, so the session's
	// other requests are numbered without them, and each is compared
	// loosely with the other run's of the same place, if it made one.
	comparePoll
)

// sessionKey names a new session of the running scenario.
func (k *kit) sessionKey(label string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	base := k.scenario + "/" + label
	k.sessions[base]++
	return base + "#" + strconv.Itoa(k.sessions[base])
}

// transportBranch marks the running scenario as going on by a path of
// this transport's own (a feature it lacks, the HTTP edge's own rules):
// the requests it makes from here on are compared only with runs that
// took the same path.
func (k *kit) transportBranch(what string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.branch += "|" + what
}

// answered records what the request p of s got (m nil: nothing came).
// The first answer of a request counts: a reply arriving after the kit
// gave up on it is not the answer the scenario went on with.
func (k *kit) answered(s *session, p *pending, m *msg) {
	if s.key == "" {
		s.key = k.sessionKey(s.label)
	}
	key := s.key + k.branch + "/" + strconv.Itoa(p.ord)
	if p.poll > 0 {
		key += ".poll" + strconv.Itoa(p.poll)
	}
	a := answer{key: key, req: p.typ, events: p.events, mode: p.mode}
	if m != nil {
		a.reply = m.body
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.answerKeys[a.key] {
		return
	}
	k.answerKeys[a.key] = true
	k.answers = append(k.answers, a)
}

// Comparison is the outcome of [Compare]: a report per transport, and the
// check transports.agree over all of them.
type Comparison struct {
	Reports []*Report `json:"reports"`
	Agree   Result    `json:"agree"`
	// OK is false when a report is not OK or the transports disagree
	// (unless the baseline lists transports.agree).
	OK bool `json:"ok"`
}

// Compare runs the kit over each target in turn, each as [Run] would,
// and compares their answers (transports.agree, MUST): for every request
// that two runs both made, the reply's type, code and contents must be
// the same, and so must the events of its request, once ids, times and
// the run's unique names are set aside (normalize). Requests only one
// transport made (the checks a transport cannot carry) are not compared.
// Each report also says transports.agree skipped: the comparison's result
// is Agree.
func Compare(ctx context.Context, targets []Target, opts Options) (*Comparison, error) {
	if len(targets) < 2 {
		return nil, errors.New("conformance: a comparison needs two transports or more")
	}
	names := map[string]bool{}
	for _, t := range targets {
		if names[t.Name] {
			return nil, fmt.Errorf("conformance: transport %q given twice", t.Name)
		}
		names[t.Name] = true
	}
	c := &Comparison{OK: true}
	for _, t := range targets {
		rep, err := Run(ctx, t, opts)
		if err != nil {
			return nil, fmt.Errorf("conformance: over %s: %w", t.Name, err)
		}
		c.Reports = append(c.Reports, rep)
		c.OK = c.OK && rep.OK
	}
	info, _ := checkInfo(CheckTransportsAgree)
	c.Agree = Result{CheckInfo: info}
	c.Agree.Problems, c.Agree.Checked = agree(c.Reports)
	reason, listed := opts.Baseline.reason(CheckTransportsAgree)
	switch {
	case len(c.Agree.Problems) > 0 && listed:
		c.Agree.Status, c.Agree.Expected = XFail, reason
	case len(c.Agree.Problems) > 0:
		c.Agree.Status, c.OK = Fail, false
	case c.Agree.Checked == 0:
		c.Agree.Status, c.Agree.Note = Skip, "no request was made over two transports"
	default:
		c.Agree.Status = Pass
		if listed {
			c.Agree.Note = "the baseline lists it as failing, but it passed: remove the entry"
		}
	}
	if len(c.Agree.Problems) > 2000 {
		c.Agree.Problems = append(c.Agree.Problems[:20:20], fmt.Sprintf("… and %d more", len(c.Agree.Problems)-20))
	}
	return c, nil
}

// agree compares the runs' answers: each request is held to the first
// run that made it. It returns the differences, in the order of the
// runs and their requests, and the number of answers compared.
func agree(reps []*Report) (problems []string, checked int) {
	type seen struct {
		norm *normalizer
		a    answer
		over string
	}
	uniqs := make([]string, len(reps))
	for i, r := range reps {
		uniqs[i] = r.uniq
	}
	first := map[string]seen{}
	for _, r := range reps {
		n := newNormalizer(r, uniqs)
		for _, a := range r.answers {
			ref, ok := first[a.key]
			if !ok {
				first[a.key] = seen{n, a, r.Transport}
				continue
			}
			checked++
			mode := max(ref.a.mode, a.mode)
			want, got := ref.norm.answer(ref.a, mode), n.answer(a, mode)
			if path, w, g, same := diff(want, got, ""); !same {
				problems = append(problems, fmt.Sprintf("%s (%s): over %s %s, over %s %s",
					a.key, a.req, ref.over, describeAt(path, w), r.Transport, describeAt(path, g)))
			}
		}
	}
	return problems, checked
}

func describeAt(path string, v any) string {
	if path == "" {
		return show(v)
	}
	return path + " " + show(v)
}

// normalizer sets aside what legitimately differs between two runs of
// the kit against one host:
//   - the host's ids: a field named as an id (isIDKey) keeps only whether
//     it is there and empty, and any string a host gave under such a name
//     is replaced wherever it appears again, inside a text too;
//   - times and what follows from them (isTimeKey, isMeasureKey);
//   - the run's unique names, and the elements of a list that name
//     another compared run's: host-wide state (learn's components, the
//     persistent memory tiers) holds what the earlier runs left;
//   - the order of a request's events, which concurrent work (a chain's
//     parallel nodes) may emit in either order: they are compared as a
//     multiset, while each run's own checks hold their seq.
//
// A text that is JSON, or JSON Lines (learn/export's jsonl), is compared
// as the values it holds.
type normalizer struct {
	uniq   string   // the run's unique name, replaced first
	others []string // the other compared runs' unique names
	// texts replaces every id the host gave inside a text: one pass over
	// each text however many ids a host made up (a replacer matches them
	// all at once, longest first, so an id containing another is
	// replaced whole).
	texts *strings.Replacer
}

func newNormalizer(r *Report, uniqs []string) *normalizer {
	n := &normalizer{}
	for _, u := range uniqs {
		if u != "" && u != r.uniq {
			n.others = append(n.others, u)
		}
	}
	seen := map[string]bool{}
	var ids []string
	var collect func(key string, v any)
	collect = func(key string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				collect(k, c)
			}
		case []any:
			for _, c := range x {
				collect(key, c)
			}
		case string:
			// req_id is the kit's own id (c-12), which a run's names
			// may hold by chance: not the host's to replace.
			if isIDKey(key) && key != "req_id" && len(x) >= 4 && !seen[x] {
				seen[x] = true
				ids = append(ids, x)
			}
		}
	}
	for _, a := range r.answers {
		collect("", a.reply)
		for _, e := range a.events {
			collect("", e)
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		if len(ids[i]) != len(ids[j]) {
			return len(ids[i]) > len(ids[j])
		}
		return ids[i] < ids[j]
	})
	n.uniq = r.uniq
	var pairs []string
	for _, id := range ids {
		pairs = append(pairs, id, "<id>")
	}
	n.texts = strings.NewReplacer(pairs...)
	return n
}

// isIDKey says whether a field names something a host makes up per run:
// the envelope's id and req_id, a session's id, handle and token, a
// process's pid, a fork's sibling group and the handles of a lineage
// (schemas/records/trajectory.json), and any other *_id or *_ids but
// those that name what the agent or the host's configuration chose.
func isIDKey(key string) bool {
	switch key {
	case "id", "ids", "req_id", "handle", "auth_token", "token", "pid", "group", "root", "parent", "episode":
		return true
	case "agent_id", "server_id", "correlation_id":
		return false
	}
	return strings.HasSuffix(key, "_id") || strings.HasSuffix(key, "_ids")
}

// isTimeKey says whether a field holds a moment or a duration.
func isTimeKey(key string) bool {
	switch key {
	case "ts", "uptime_seconds", "elapsed", "duration", "created", "updated", "modified",
		"mtime", "atime", "ctime", "started", "ended", "finished", "expires", "last_called", "last_seen":
		return true
	}
	return strings.HasSuffix(key, "_at") || strings.HasSuffix(key, "_ms") || strings.HasSuffix(key, "_seconds")
}

// isMeasureKey says whether a field measures what depends on ids, times
// or timing: a snapshot's bytes (an encoding of state holding ids and
// times), a session's requests in flight (how pipelined requests
// overlapped).
func isMeasureKey(key string) bool {
	return key == "bytes" || key == "in_flight"
}

// answer is a's reply and events with ids, names and times set aside,
// as mode compares them. The events are compared by their number and,
// for each field, the values it takes across them in any order: a
// request's events may interleave several parts of its work.
func (n *normalizer) answer(a answer, mode compareMode) map[string]any {
	if mode >= compareLoose {
		return loosely(a)
	}
	out := map[string]any{"request": a.req}
	if a.reply == nil {
		out["reply"] = "(none)"
	} else {
		out["reply"] = n.value(a.reply)
	}
	if mode == compareUnordered {
		out["reply"] = unordered(out["reply"])
	}
	if len(a.events) > 0 {
		if mode == compareUnordered {
			var kinds []any
			for _, e := range a.events {
				kinds = append(kinds, e["kind"])
			}
			out["events"] = map[string]any{"count": len(a.events), "kinds": unordered(kinds)}
			return out
		}
		columns := map[string][]any{}
		for _, e := range a.events {
			flatten(n.value(e), "", columns)
		}
		fields := map[string]any{}
		for path, vals := range columns {
			fields[path] = unordered(vals)
		}
		out["events"] = map[string]any{"count": len(a.events), "fields": fields}
	}
	return out
}

// canon is v's JSON, whole (show clips it), to sort by.
func canon(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// byKey sorts values by their keys.
type byKey struct {
	v    []any
	keys []string
}

func (b byKey) Len() int           { return len(b.v) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.v[i], b.v[j] = b.v[j], b.v[i]
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
}

// unordered sorts every list in v by the JSON of its elements.
func unordered(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, c := range x {
			out[k] = unordered(c)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, c := range x {
			out[i] = unordered(c)
		}
		keys := make([]string, len(out))
		for i, c := range out {
			keys[i] = canon(c)
		}
		sort.Sort(byKey{out, keys})
		return out
	default:
		return v
	}
}

// flatten adds each leaf of v to columns under its dotted path.
func flatten(v any, path string, columns map[string][]any) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			flatten(c, join(k), columns)
		}
	case []any:
		for i, c := range x {
			flatten(c, join(strconv.Itoa(i)), columns)
		}
	default:
		columns[path] = append(columns[path], v)
	}
}

// loosely is what a loose answer is compared by: its type and code.
func loosely(a answer) map[string]any {
	out := map[string]any{"request": a.req, "reply": "(none)"}
	if a.reply != nil {
		r := map[string]any{"type": a.reply["type"]}
		if c, ok := a.reply["code"]; ok {
			r["code"] = c
		}
		out["reply"] = r
	}
	return out
}

func (n *normalizer) value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, c := range x {
			switch {
			case isTimeKey(k):
				out[k] = "<time>"
			case isMeasureKey(k):
				out[k] = "<measure>"
			case isIDKey(k):
				out[k] = n.idValue(c)
			default:
				out[k] = n.value(c)
			}
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, c := range x {
			if n.ofAnotherRun(c) {
				continue
			}
			out = append(out, n.value(c))
		}
		return out
	case string:
		if j, ok := jsonText(x); ok {
			return map[string]any{"(json)": n.value(j)}
		}
		return n.text(x)
	default:
		return v
	}
}

// ofAnotherRun says whether v names another compared run's unique name.
func (n *normalizer) ofAnotherRun(v any) bool {
	if len(n.others) == 0 {
		return false
	}
	b := canon(v)
	for _, u := range n.others {
		if strings.Contains(b, u) {
			return true
		}
	}
	return false
}

// jsonText reads a text that is a JSON object or array, or JSON Lines of
// objects.
func jsonText(s string) (any, bool) {
	t := strings.TrimSpace(s)
	if t == "" || t[0] != '{' && t[0] != '[' {
		return nil, false
	}
	var v any
	if json.Unmarshal([]byte(t), &v) == nil {
		return v, true
	}
	var lines []any
	for _, l := range strings.Split(t, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		var x any
		if json.Unmarshal([]byte(l), &x) != nil {
			return nil, false
		}
		lines = append(lines, x)
	}
	return lines, true
}

// idValue keeps what an id's field says of its shape (absent, empty, a
// list of so many) and sets its value aside.
func (n *normalizer) idValue(v any) any {
	switch x := v.(type) {
	case string:
		if x == "" {
			return ""
		}
		return "<id>"
	case []any:
		out := make([]any, len(x))
		for i, c := range x {
			out[i] = n.idValue(c)
		}
		return out
	case nil:
		return nil
	default:
		return "<id>"
	}
}

func (n *normalizer) text(s string) string {
	if n.uniq != "" {
		s = strings.ReplaceAll(s, n.uniq, "<run>")
	}
	return n.texts.Replace(s)
}

// diff finds the first place where two normalized values differ, by a
// dotted path; same is true when there is none.
func diff(a, b any, path string) (at string, av, bv any, same bool) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return path, a, b, false
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			xv, xok := x[k]
			yv, yok := y[k]
			switch {
			case !xok:
				return join(k), "(absent)", yv, false
			case !yok:
				return join(k), xv, "(absent)", false
			}
			if p, av, bv, same := diff(xv, yv, join(k)); !same {
				return p, av, bv, false
			}
		}
		return "", nil, nil, true
	case []any:
		y, ok := b.([]any)
		if !ok {
			return path, a, b, false
		}
		if len(x) != len(y) {
			return path, fmt.Sprintf("%d elements", len(x)), fmt.Sprintf("%d elements", len(y)), false
		}
		for i := range x {
			if p, av, bv, same := diff(x[i], y[i], join(strconv.Itoa(i))); !same {
				return p, av, bv, false
			}
		}
		return "", nil, nil, true
	default:
		if equal(a, b) {
			return "", nil, nil, true
		}
		return path, a, b, false
	}
}

// WriteText writes each transport's report, then the comparison.
func (c *Comparison) WriteText(w io.Writer) error {
	for _, r := range c.Reports {
		if _, err := fmt.Fprintf(w, "=== over %s\n", r.Transport); err != nil {
			return err
		}
		if err := r.WriteText(w); err != nil {
			return err
		}
	}
	var b strings.Builder
	var names []string
	for _, r := range c.Reports {
		names = append(names, r.Transport)
	}
	fmt.Fprintf(&b, "=== across %s\n", strings.Join(names, ", "))
	x := c.Agree
	fmt.Fprintf(&b, "%-5s %-6s %-29s %s (%d compared)\n", strings.ToUpper(string(x.Status)), x.Level, x.ID, x.Cites, x.Checked)
	if x.Expected != "" {
		fmt.Fprintf(&b, "      expected by the baseline: %s\n", x.Expected)
	}
	if x.Note != "" {
		fmt.Fprintf(&b, "      %s\n", x.Note)
	}
	for _, p := range x.Problems {
		fmt.Fprintf(&b, "      - %s\n", p)
	}
	if c.OK {
		b.WriteString("conformant over every transport\n")
	} else {
		var bad []string
		for _, r := range c.Reports {
			if !r.OK {
				bad = append(bad, r.Transport)
			}
		}
		if x.Status == Fail {
			bad = append(bad, CheckTransportsAgree)
		}
		fmt.Fprintf(&b, "not conformant: %s\n", strings.Join(bad, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// DebugAnswers is temporary.
func DebugAnswers(r *Report, key string) string {
	var b strings.Builder
	for _, a := range r.answers {
		if strings.HasPrefix(a.key, key) {
			fmt.Fprintf(&b, "%s %s %s %s\n", a.key, a.req, show(a.reply), show(a.events))
		}
	}
	return b.String()
}

// Transports returns the targets of every HTTP-served transport the host
// at url offers — HTTP+SSE, single exchanges, WebSocket — for [Compare].
// url is the host's HTTP base (http://127.0.0.1:8765) or its WebSocket
// endpoint (ws://127.0.0.1:8765/ws; the base is its origin, and /ws the
// WebSocket path of a base). A transport is offered when a session opens
// over it and a line sent before the handshake is answered within
// timeout (by unauthorized, as spec §5 has it, or anything else); the
// others are in missing, with why.
func Transports(ctx context.Context, url string, timeout time.Duration) (offered []Target, missing map[string]error) {
	base, ws := url, ""
	switch {
	case strings.HasPrefix(url, "ws://") || strings.HasPrefix(url, "wss://"):
		ws = url
		base = WebSocketTarget(url, nil).HTTP
	default:
		base = strings.TrimSuffix(url, "/")
		ws = "ws" + strings.TrimPrefix(base, "http") + "/ws"
	}
	missing = map[string]error{}
	for _, t := range []Target{HTTPTarget(base, nil), ExchangeTarget(base, nil), WebSocketTarget(ws, nil)} {
		if err := answers(ctx, t, timeout); err != nil {
			missing[t.Name] = err
			continue
		}
		offered = append(offered, t)
	}
	return offered, missing
}

// answers opens a session over t and waits for the answer to a ping sent
// before any handshake.
func answers(ctx context.Context, t Target, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := t.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Send(ctx, []byte(`{"type":"ping","id":"aep-conformance-probe","proto":"1.0","ts":1}`)); err != nil {
		return err
	}
	if _, err := c.Recv(ctx); err != nil {
		return fmt.Errorf("no answer to a line: %w", err)
	}
	return nil
}
