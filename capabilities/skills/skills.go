// Package skills serves the skills capability (schemas/skills.json): skill
// folders loaded from a directory at start-up, several versions of a skill
// side by side, each call run in the sandbox (server/sandbox) with its
// arguments as JSON on stdin, its stderr's JSON lines turned into events and
// its stdout checked against the skill's output schema.
package skills

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kaptinlin/jsonschema"
	"golang.org/x/mod/semver"

	"github.com/aephost/aep/ent"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/wire"
)

func init() {
	server.RegisterModule(new(Plugin))
}

// Module registers the plugin as module aep.skills.builtin, the skills capability,
// named skills.builtin in the default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "aep.skills.builtin", Capability: "skills", DefaultName: "skills.builtin", New: func() server.Plugin { return new(Plugin) }}
}

// ManifestFile is the name of a skill folder's manifest.
const ManifestFile = "skill.json"

// Default limits of a skill whose manifest sets none.
var DefaultLimits = Limits{TimeoutSeconds: 60, CPUSeconds: 30, MemoryMB: 256, MaxProcs: 64, OutputBytes: 1 << 20}

// Limits are a manifest's sandbox limits.
type Limits struct {
	TimeoutSeconds float64 `json:"timeout_seconds"`
	CPUSeconds     float64 `json:"cpu_seconds"`
	MemoryMB       int64   `json:"memory_mb"`
	MaxProcs       int     `json:"max_procs"`
	OutputBytes    int     `json:"output_bytes"`
	Network        bool    `json:"network"`
}

// Manifest is a skill folder's skill.json.
type Manifest struct {
	Name         string         `json:"name"`
	Version      string         `json:"version"`
	Description  string         `json:"description"`
	Tags         []string       `json:"tags"`
	InputSchema  map[string]any `json:"input_schema"`
	OutputSchema map[string]any `json:"output_schema"`
	Instructions string         `json:"instructions"`
	Toolkits     []string       `json:"toolkits"`
	// Entrypoint is the command; arguments starting with "./" are paths in
	// the skill folder.
	Entrypoint []string `json:"entrypoint"`
	Limits     *Limits  `json:"limits"`
}

type skill struct {
	Manifest
	dir    string
	limits Limits
	in     *jsonschema.Schema
	out    *jsonschema.Schema
}

// Plugin serves the skill namespace. Its exported fields are its settings.
type Plugin struct {
	// Settings are the plugin's `config` (schemas/config/skills.json, docs/config.md).
	Settings `yaml:",inline"`

	mode sandbox.Mode // the mode skills run in
	log  *slog.Logger

	mu       sync.RWMutex        // guards byName and names, replaced by a reload
	byName   map[string][]*skill // newest version first
	names    []string
	stopped  bool
	stop     chan struct{}
	watching sync.WaitGroup
	regs     *server.SessionState[registered]
	host     *server.Host
	store    *ent.Client
	regRoot  string // folders of registered skills
}

// Provision loads every skill folder; a bad manifest stops the host with
// the folder named, and so does a sandbox that cannot work here.
func (p *Plugin) Provision(ctx context.Context, env server.PluginEnv) error {
	p.log = env.Logger
	p.mode = sandbox.ModeAuto
	if env.Host != nil {
		p.mode = env.Host.SandboxMode()
	}
	if p.SandboxMode != "" {
		p.mode = p.SandboxMode
	}
	if _, _, err := sandbox.Describe(p.mode); err != nil {
		return fmt.Errorf("skills need the configured sandbox (server.isolation.sandbox): %w", err)
	}
	if p.WorkRoot == "" {
		if env.DataDir != "" {
			p.WorkRoot = filepath.Join(env.DataDir, env.Name, "work")
		} else {
			p.WorkRoot = filepath.Join(os.TempDir(), "aep-skills")
		}
	}
	if err := os.MkdirAll(p.WorkRoot, 0o755); err != nil {
		return fmt.Errorf("work_root: %w", err)
	}
	var err error
	if p.MaxRegisterBytes <= 0 {
		p.MaxRegisterBytes = DefaultMaxRegisterBytes
	}
	if p.MaxRegistered <= 0 {
		p.MaxRegistered = DefaultMaxRegistered
	}
	// register_limits: each cap left out is the default limit; network
	// stays off unless the operator turns it on.
	rl := &p.RegisterLimits
	rl.TimeoutSeconds = or(rl.TimeoutSeconds, DefaultLimits.TimeoutSeconds)
	rl.CPUSeconds = or(rl.CPUSeconds, DefaultLimits.CPUSeconds)
	rl.MemoryMB = or(rl.MemoryMB, DefaultLimits.MemoryMB)
	rl.MaxProcs = or(rl.MaxProcs, DefaultLimits.MaxProcs)
	rl.OutputBytes = or(rl.OutputBytes, DefaultLimits.OutputBytes)
	if p.ReloadSeconds == 0 {
		p.ReloadSeconds = DefaultReloadSeconds
	}
	p.host = env.Host
	if env.Store != nil {
		p.store = env.Store.Client
	}
	// Registered skills' folders must be readable by the sandbox's own uid
	// through every parent, which a private data directory is not: they
	// live in a directory of their own that others may pass through but
	// not list (0711), each folder under an unguessable name.
	if p.regRoot, err = os.MkdirTemp("", "aep-registered-skills-"); err != nil {
		return fmt.Errorf("registered skills: %w", err)
	}
	if err := os.Chmod(p.regRoot, 0o711); err != nil {
		return fmt.Errorf("registered skills: %w", err)
	}
	p.regs = server.NewSessionState[registered](env, nil, p.dropRegistered)
	fp := fingerprint(p.Dir)
	byName, err := loadDir(p.Dir)
	if err != nil {
		return err
	}
	c := newCatalog(byName)
	p.byName, p.names = c.byName, c.names
	if p.Dir != "" && p.ReloadSeconds > 0 {
		stop := make(chan struct{})
		p.stop = stop
		p.watching.Add(1)
		go func() {
			defer p.watching.Done()
			p.watch(fp, time.Duration(p.ReloadSeconds*float64(time.Second)), stop)
		}()
	}
	return nil
}

func load(dir string) (*skill, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	sk := &skill{dir: dir, limits: DefaultLimits}
	if err = dec.Decode(&sk.Manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	switch {
	case sk.Name == "":
		return nil, errors.New("name is empty")
	case !semver.IsValid("v"+sk.Version) || strings.Count(sk.Version, ".") < 2:
		return nil, fmt.Errorf("version %q is not a semantic version (major.minor.patch)", sk.Version)
	case len(sk.Entrypoint) == 0:
		return nil, errors.New("entrypoint is empty")
	}
	if sk.Limits != nil {
		l := *sk.Limits
		sk.limits = Limits{TimeoutSeconds: or(l.TimeoutSeconds, DefaultLimits.TimeoutSeconds), CPUSeconds: or(l.CPUSeconds, DefaultLimits.CPUSeconds),
			MemoryMB: or(l.MemoryMB, DefaultLimits.MemoryMB), MaxProcs: or(l.MaxProcs, DefaultLimits.MaxProcs),
			OutputBytes: or(l.OutputBytes, DefaultLimits.OutputBytes), Network: l.Network}
		if err := checkLimits(sk.limits); err != nil {
			return nil, err
		}
	}
	if sk.InputSchema == nil {
		sk.InputSchema = map[string]any{"type": "object"}
	}
	if sk.OutputSchema == nil {
		sk.OutputSchema = map[string]any{}
	}
	if sk.in, err = compile(sk.InputSchema); err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	if sk.out, err = compile(sk.OutputSchema); err != nil {
		return nil, fmt.Errorf("output_schema: %w", err)
	}
	if sk.Tags == nil {
		sk.Tags = []string{}
	}
	if sk.Toolkits == nil {
		sk.Toolkits = []string{}
	}
	return sk, nil
}

// checkLimits refuses limits that would not reach the sandbox as given:
// seconds outside what a time.Duration holds (too many overflow to a
// negative value, too few truncate to zero, and the sandbox reads both as
// no limit at all) and a memory_mb whose bytes overflow int64 and wrap
// to another limit (found by FuzzLoadManifest).
func checkLimits(l Limits) error {
	for _, s := range []struct {
		field   string
		seconds float64
	}{{"timeout_seconds", l.TimeoutSeconds}, {"cpu_seconds", l.CPUSeconds}} {
		if ns := s.seconds * float64(time.Second); ns < 1 || ns >= math.MaxInt64 {
			return fmt.Errorf("limits.%s %g is out of range: give between 1e-9 and 9e9 seconds", s.field, s.seconds)
		}
	}
	if maxMB := int64(math.MaxInt64 >> 20); l.MemoryMB > maxMB {
		return fmt.Errorf("limits.memory_mb %d is out of range: give at most %d", l.MemoryMB, maxMB)
	}
	return nil
}

func or[T int | int64 | float64](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// compile builds a validator with every loader removed (docs/DECISIONS.md, Security
// defaults: validators never load references over the network).
func compile(schema map[string]any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	for scheme := range c.Loaders {
		delete(c.Loaders, scheme)
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	return c.Compile(raw)
}

// violations lists where v fails s, as JSON pointers.
func violations(s *jsonschema.Schema, v any) []string {
	res := s.Validate(v)
	if res.IsValid() {
		return nil
	}
	seen := map[string]bool{}
	var where []string
	for _, d := range res.ToList().Details {
		if !d.Valid && !seen[d.InstanceLocation] {
			seen[d.InstanceLocation] = true
			loc := d.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			where = append(where, loc)
		}
	}
	sort.Strings(where)
	if len(where) == 0 {
		where = []string{"/"}
	}
	return where
}

func (sk *skill) definition(withInstructions bool) msg.SkillDefinition {
	d := msg.SkillDefinition{Name: sk.Name, Version: sk.Version, Description: sk.Description, Tags: sk.Tags,
		InputSchema: sk.InputSchema, OutputSchema: sk.OutputSchema, Toolkits: sk.Toolkits,
		Limits: &msg.SkillLimits{TimeoutSeconds: sk.limits.TimeoutSeconds, CpuSeconds: sk.limits.CPUSeconds, MemoryMb: int(sk.limits.MemoryMB),
			MaxProcs: sk.limits.MaxProcs, OutputBytes: sk.limits.OutputBytes, Network: sk.limits.Network}}
	if withInstructions {
		d.Instructions = &sk.Instructions
	}
	return d
}

// ErrUnknownSkill is the cause for a name or version the host does not have.
var ErrUnknownSkill = fmt.Errorf("unknown skill: %w", wire.ErrNotFound)

// find returns the version asked for, or the newest, of the skills session
// sid may call.
func (p *Plugin) find(sid, name, version string) (*skill, error) {
	vs := p.catalogFor(sid).byName[name]
	if len(vs) == 0 {
		return nil, fmt.Errorf("skill %q: %w", name, ErrUnknownSkill)
	}
	if version == "" {
		return vs[0], nil
	}
	for _, sk := range vs {
		if semver.Compare("v"+sk.Version, "v"+version) == 0 {
			return sk, nil
		}
	}
	have := make([]string, len(vs))
	for i, sk := range vs {
		have[i] = sk.Version
	}
	return nil, fmt.Errorf("skill %q has no version %q (have %s): %w", name, version, strings.Join(have, ", "), ErrUnknownSkill)
}

// SkillDiscover answers skill/discover/req.
func (p *Plugin) SkillDiscover(ctx context.Context, s wire.Scope, req *msg.SkillDiscoverReq) (*msg.SkillDiscoverResp, error) {
	out := &msg.SkillDiscoverResp{Skills: []msg.SkillDefinition{}}
	name, version := deref(req.Name), deref(req.Version)
	c := p.catalogFor(s.SessionID())
	for _, n := range c.names {
		if name != "" && n != name {
			continue
		}
		for i, sk := range c.byName[n] {
			if version != "" && semver.Compare("v"+sk.Version, "v"+version) != 0 {
				continue
			}
			if version == "" && name == "" && !req.AllVersions && i > 0 {
				break
			}
			if len(req.FilterTags) > 0 && !anyTag(sk.Tags, req.FilterTags) {
				continue
			}
			out.Skills = append(out.Skills, sk.definition(false))
		}
	}
	return out, nil
}

func anyTag(have, want []string) bool {
	for _, w := range want {
		for _, h := range have {
			if h == w {
				return true
			}
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// SkillGet answers skill/get/req.
func (p *Plugin) SkillGet(ctx context.Context, s wire.Scope, req *msg.SkillGetReq) (*msg.SkillGetResp, error) {
	sk, err := p.find(s.SessionID(), req.Name, deref(req.Version))
	if err != nil {
		return nil, err
	}
	return &msg.SkillGetResp{Skill: sk.definition(true)}, nil
}

// missingToolkits asks the kernel which of the skill's toolkits are not
// configured in the session (plugins never import each other, docs/DECISIONS.md, Dispatch).
func missingToolkits(ctx context.Context, s wire.Scope, need []string) ([]string, error) {
	if len(need) == 0 {
		return nil, nil
	}
	if !s.Enabled("toolkits") {
		return need, nil
	}
	resp, err := s.Dispatch(ctx, &msg.ToolkitListReq{})
	if err != nil {
		return nil, fmt.Errorf("listing toolkits: %w", err)
	}
	list, ok := resp.(*msg.ToolkitListResp)
	if !ok {
		return nil, fmt.Errorf("listing toolkits: unexpected %T", resp)
	}
	configured := map[string]bool{}
	for _, k := range list.Toolkits {
		configured[k.Name] = k.Configured
	}
	var missing []string
	for _, n := range need {
		if !configured[n] {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

// ErrToolkitMissing is the cause when a skill needs a toolkit that is not
// configured in the session; nothing ran.
var ErrToolkitMissing = fmt.Errorf("needed toolkit not configured: %w", wire.ErrDenied)

// SkillCall answers skill/call/req.
func (p *Plugin) SkillCall(ctx context.Context, s wire.Scope, req *msg.SkillCallReq) (*msg.SkillCallResp, error) {
	sk, err := p.find(s.SessionID(), req.Name, deref(req.Version))
	if err != nil {
		return nil, err
	}
	var args []byte
	if req.Arguments != nil {
		args = *req.Arguments
	}
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = []byte("{}")
	}
	var argv any
	if err := json.Unmarshal(args, &argv); err != nil {
		return nil, &wire.FieldError{Field: "arguments", Reason: "not JSON"}
	}
	if where := violations(sk.in, argv); where != nil {
		return nil, &wire.FieldError{Field: "arguments" + pointerPath(where[0]), Reason: fmt.Sprintf("does not match the input_schema of skill %s %s at %s", sk.Name, sk.Version, strings.Join(where, ", "))}
	}
	missing, err := missingToolkits(ctx, s, sk.Toolkits)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, &wire.Error{Code: wire.CodeCapabilityMissing, Capability: "toolkits",
			Message: fmt.Sprintf("skill %s %s needs toolkit(s) not configured in this session: %s; configure them with toolkit/configure first", sk.Name, sk.Version, strings.Join(missing, ", ")),
			Detail:  map[string]any{"missing_toolkits": missing}, Err: ErrToolkitMissing}
	}
	return p.run(ctx, s, sk, args, req)
}

// pointerPath turns "/a/0" into ".a[0]"-ish field paths for FieldError.
func pointerPath(ptr string) string {
	if ptr == "/" || ptr == "" {
		return ""
	}
	var b strings.Builder
	for _, seg := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if seg != "" && strings.Trim(seg, "0123456789") == "" {
			b.WriteString("[" + seg + "]")
		} else {
			b.WriteString("." + seg)
		}
	}
	return b.String()
}

// capped keeps the first n bytes and notes what it cut.
type capped struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	n         int
	truncated bool
}

// Write keeps what fits and reports all of p written: a short write would
// stop the copy from the skill's pipe, and the skill, writing on into a
// closed pipe, would die of SIGPIPE (exit 141) instead of being reported
// as past its output cap.
func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.n - c.buf.Len(); n > room {
		c.truncated = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

func (c *capped) bytes() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Bytes(), c.truncated
}

func (p *Plugin) run(ctx context.Context, s wire.Scope, sk *skill, args []byte, req *msg.SkillCallReq) (*msg.SkillCallResp, error) {
	start := time.Now()
	// The call is a unit of the session's leaf work, its memory limit in
	// the session's sandbox memory, and it works in a directory inside the
	// session's own, so whatever it writes counts in the session's disk
	// budget (server/budget.go).
	var (
		lf      *server.Leaf
		memory  = sk.limits.MemoryMB << 20
		fsize   int64
		workDir = p.WorkRoot
		err     error
	)
	if p.host != nil {
		if lf, err = p.host.AcquireLeaf(ctx, s.SessionID()); err != nil {
			return nil, err
		}
		defer lf.Release()
		if memory, fsize, err = lf.ReserveProcess(ctx, memory); err != nil {
			return nil, err
		}
		if d, err := p.host.SessionDir(s.SessionID()); err == nil && !d.ReadOnly {
			workDir = d.Path
		}
	}
	work, err := os.MkdirTemp(workDir, ".skill-call-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	defer os.RemoveAll(work)
	if lf != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(lf.Context(), func() { cancel(lf.Err()) })
		defer stop()
	}
	timeout := time.Duration(sk.limits.TimeoutSeconds * float64(time.Second))
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = min(timeout, time.Duration(*req.Timeout*float64(time.Second)))
	}
	argvs := make([]string, len(sk.Entrypoint))
	for i, a := range sk.Entrypoint {
		if strings.HasPrefix(a, "./") {
			a = filepath.Join(sk.dir, a)
		}
		argvs[i] = a
	}
	stdout := &capped{n: sk.limits.OutputBytes}
	evR, evW := io.Pipe()
	var events []msg.SkillEvent
	evDone := make(chan struct{})
	streaming := req.Streaming == nil || *req.Streaming // absent means true (schemas/skills.json)
	go func() {
		defer close(evDone)
		events = p.readEvents(evR, s, streaming, sk.limits.OutputBytes)
	}()
	absDir := sk.dir
	home := work
	if mech, _ := sandbox.Mechanism(p.mode); sandbox.TierOf(mech) == sandbox.TierNamespaces {
		home = sandbox.Workspace // where tier (a) shows the work directory
	}
	spec := sandbox.Spec{Argv: argvs, Dir: work, WorkDir: work, Sandboxed: true, Mode: p.mode,
		ReadOnly: []string{absDir}, Network: sk.limits.Network,
		Env: []string{sandbox.DefaultPath, "HOME=" + home, "SKILL_DIR=" + absDir, "SKILL_NAME=" + sk.Name, "SKILL_VERSION=" + sk.Version, "LANG=C.UTF-8"},
		Limits: sandbox.Limits{Timeout: timeout, CPUTime: time.Duration(sk.limits.CPUSeconds * float64(time.Second)),
			MemoryBytes: memory, MaxProcs: sk.limits.MaxProcs, FileBytes: fsize},
		Stdout: stdout, Stderr: evW}
	proc, err := sandbox.Start(spec)
	if err != nil {
		evW.Close()
		<-evDone
		return nil, fmt.Errorf("skill %s %s: %w", sk.Name, sk.Version, err)
	}
	go func() {
		_, _ = proc.Stdin.Write(args)
		proc.Stdin.Close()
	}()
	res, werr := proc.Wait(ctx)
	if werr != nil {
		proc.Kill()
		<-proc.Done()
	}
	evW.Close()
	<-evDone
	if werr != nil {
		if lf != nil && lf.Err() != nil {
			return nil, fmt.Errorf("skill %s %s ended: %w", sk.Name, sk.Version, lf.Err())
		}
		return nil, werr
	}
	// Limits are errors (docs/DECISIONS.md, Sandbox outcomes); events already went out.
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("skill %s %s: %w", sk.Name, sk.Version, err)
	}
	out := msg.SkillResult{Name: sk.Name, Version: sk.Version, Events: events, DurationMs: int(time.Since(start).Milliseconds())}
	if out.Events == nil {
		out.Events = []msg.SkillEvent{}
	}
	data, truncated := stdout.bytes()
	out.Truncated = &truncated
	if res.Outcome == sandbox.Exited {
		out.ExitCode = ptr(res.ExitCode)
	}
	fail := func(format string, a ...any) (*msg.SkillCallResp, error) {
		out.Error = ptr(fmt.Sprintf(format, a...))
		return &msg.SkillCallResp{Result: out}, nil
	}
	switch {
	case res.Outcome != sandbox.Exited:
		return fail("skill ended: %s", res.Reason)
	case truncated:
		return fail("skill output exceeded %d bytes", sk.limits.OutputBytes)
	case res.ExitCode != 0:
		return fail("skill exited with code %d", res.ExitCode)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fail("skill output is not JSON: %v", err)
	}
	if where := violations(sk.out, v); where != nil {
		return fail("skill output does not match its output_schema at %s", strings.Join(where, ", "))
	}
	raw := json.RawMessage(bytes.TrimSpace(data))
	out.Data = &raw
	out.Success = true
	return &msg.SkillCallResp{Result: out}, nil
}

func ptr[T any](v T) *T { return &v }

// readEvents turns the skill's stderr into events: each line that is a JSON
// object {"kind": progress|status|log|artifact, "data": {...}} (or with the
// data fields inline) becomes one event, in order; other lines become log
// events at level "stderr". At most limit bytes are read into events; the
// rest is drained, and so is the part of a line past the limit, so a line
// that never ends holds no more than limit bytes of the host's memory.
func (p *Plugin) readEvents(r io.Reader, s wire.Scope, streaming bool, limit int) []msg.SkillEvent {
	var out []msg.SkillEvent
	br := bufio.NewReaderSize(r, 64<<10)
	read := 0
	for {
		line, n, err := readLine(br, limit-read)
		if n > 0 && read < limit {
			read += n
			if ev, ok := parseEvent(bytes.TrimRight(line, "\r\n")); ok {
				out = append(out, ev)
				if streaming {
					_ = s.Emit(wire.EventKind(ev.Kind), ev.Data)
				}
			}
		}
		if err != nil {
			_, _ = io.Copy(io.Discard, r)
			return out
		}
	}
}

// readLine reads up to and including the next newline (or to the end of
// br) and returns at most keep bytes of it, with the number of bytes it
// consumed.
func readLine(br *bufio.Reader, keep int) (line []byte, n int, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		n += len(frag)
		if room := keep - len(line); room > 0 {
			line = append(line, frag[:min(len(frag), room)]...)
		}
		if err != bufio.ErrBufferFull {
			return line, n, err
		}
	}
}

func parseEvent(line []byte) (msg.SkillEvent, bool) {
	if len(bytes.TrimSpace(line)) == 0 {
		return msg.SkillEvent{}, false
	}
	var m map[string]any
	if json.Unmarshal(line, &m) == nil {
		kind, _ := m["kind"].(string)
		switch msg.SkillEventKind(kind) {
		case msg.SkillEventKindProgress, msg.SkillEventKindStatus, msg.SkillEventKindLog, msg.SkillEventKindArtifact:
			data, ok := m["data"].(map[string]any)
			if !ok {
				delete(m, "kind")
				data = m
			}
			return msg.SkillEvent{Kind: msg.SkillEventKind(kind), Data: data}, true
		}
	}
	return msg.SkillEvent{Kind: msg.SkillEventKindLog, Data: map[string]any{"level": "stderr", "message": strings.ToValidUTF8(string(line), "\uFFFD")}}, true
}

var (
	_ msg.SkillHandler   = (*Plugin)(nil)
	_ server.Provisioner = (*Plugin)(nil)
)
