package skills

// Skills registered at run time (skill/register) and hot reload of the
// operator's skills directory (docs/DECISIONS.md, Capability gaps users hit).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/semver"

	"github.com/aephost/aep/ent/skillregistration"
	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Defaults of the run-time registration settings.
const (
	DefaultMaxRegisterBytes = 4 << 20
	DefaultMaxRegistered    = 32
	DefaultReloadSeconds    = 2.0
)

// ErrRegisterDisabled is the cause of skill/register on a host whose
// operator did not set allow_register.
var ErrRegisterDisabled = wire.Reason("register_disabled", errors.New("skill/register is off on this host: the operator enables it with the skills plugin's allow_register"))

// registered is a session's run-time skills.
type registered struct {
	mu     sync.Mutex
	skills []*regSkill
}

type regSkill struct {
	*skill
	subagents bool // visible to subagents whose memory scope is not isolated
}

// catalog is a set of skills by name, newest version first, with the names sorted.
type catalog struct {
	names  []string
	byName map[string][]*skill
}

// newCatalog sorts byName's versions and lists its names.
func newCatalog(byName map[string][]*skill) catalog {
	c := catalog{byName: byName}
	for n, vs := range byName {
		sort.Slice(vs, func(i, j int) bool { return semver.Compare("v"+vs[i].Version, "v"+vs[j].Version) > 0 })
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c
}

// operator returns the skills of the operator's directory.
func (p *Plugin) operator() catalog {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return catalog{names: p.names, byName: p.byName}
}

// catalogFor returns what session sid may call: the operator's skills, its
// own registrations, and those its ancestors registered for subagents, as
// long as no link on the way has the isolated memory scope.
func (p *Plugin) catalogFor(sid string) catalog {
	op := p.operator()
	regs := p.visible(sid)
	if len(regs) == 0 {
		return op
	}
	byName := make(map[string][]*skill, len(op.byName)+len(regs))
	for n, vs := range op.byName {
		byName[n] = append([]*skill(nil), vs...)
	}
	for _, r := range regs {
		byName[r.Name] = append(byName[r.Name], r.skill)
	}
	return newCatalog(byName)
}

func (p *Plugin) visible(sid string) []*regSkill {
	if p.regs == nil {
		return nil
	}
	var out []*regSkill
	add := func(id string, subagentsOnly bool) {
		r, ok := p.regs.Get(id)
		if !ok {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.skills {
			if !subagentsOnly || s.subagents {
				out = append(out, s)
			}
		}
	}
	add(sid, false)
	if p.host == nil {
		return out
	}
	// sid is the session's public handle (wire.Scope.SessionID).
	s, ok := p.host.SessionByHandle(sid)
	for ok && s.Parent() != nil {
		if info, _ := s.Child(); info.MemoryScope == "isolated" {
			break
		}
		s = s.Parent()
		add(s.Handle(), true)
	}
	return out
}

// SkillRegister answers skill/register/req.
func (p *Plugin) SkillRegister(ctx context.Context, s wire.Scope, req *msg.SkillRegisterReq) (*msg.SkillRegisterResp, error) {
	if !p.AllowRegister {
		return nil, ErrRegisterDisabled
	}
	sid := s.SessionID()
	total := 0
	for i, f := range req.Files {
		if err := checkFilePath(f.Path); err != nil {
			return nil, &wire.FieldError{Field: fmt.Sprintf("files[%d].path", i), Reason: err.Error()}
		}
		if strings.EqualFold(path.Clean(f.Path), ManifestFile) {
			return nil, &wire.FieldError{Field: fmt.Sprintf("files[%d].path", i), Reason: "the manifest comes in manifest, not as a file"}
		}
		total += len(f.Content)
	}
	manifest, err := json.Marshal(req.Manifest)
	if err != nil {
		return nil, &wire.FieldError{Field: "manifest", Reason: err.Error()}
	}
	if total+len(manifest) > p.MaxRegisterBytes {
		return nil, &wire.FieldError{Field: "files", Reason: fmt.Sprintf("the skill is over the plugin's max_register_bytes (%d)", p.MaxRegisterBytes)}
	}
	r, err := p.regs.GetOrCreate(sid)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	n := len(r.skills)
	r.mu.Unlock()
	if n >= p.MaxRegistered {
		return nil, wire.Reason("register_limit", fmt.Errorf("this session already registered %d skills (max_registered)", n))
	}
	// The folder is written under the work root, named at random, and
	// loaded by the same code as the operator's folders.
	dir, err := os.MkdirTemp(p.regRoot, "skill-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("registered skill folder: %w", err)
	}
	sk, err := writeAndLoad(dir, manifest, req.Files)
	if err != nil {
		os.RemoveAll(dir)
		return nil, &wire.FieldError{Field: "manifest", Reason: err.Error()}
	}
	if err := p.capLimits(sk); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for _, o := range p.catalogFor(sid).byName[sk.Name] {
		if semver.Compare("v"+o.Version, "v"+sk.Version) == 0 {
			os.RemoveAll(dir)
			return nil, &wire.FieldError{Field: "manifest.version", Reason: fmt.Sprintf("skill %s %s is already known to this session; register another version", sk.Name, sk.Version)}
		}
	}
	scope := string(req.Scope)
	if scope == "" {
		scope = string(msg.SkillRegisterReqScopeSession)
	}
	if p.store != nil {
		files, _ := json.Marshal(req.Files)
		if err := p.store.SkillRegistration.Create().SetSessionID(sid).SetName(sk.Name).SetVersion(sk.Version).SetScope(scope).
			SetManifest(manifest).SetFiles(files).Exec(ctx); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("storing the registered skill: %w", err)
		}
	}
	r.mu.Lock()
	r.skills = append(r.skills, &regSkill{skill: sk, subagents: scope == string(msg.SkillRegisterReqScopeSubagents)})
	r.mu.Unlock()
	p.log.Info("skill registered", "session", sid, "skill", sk.Name, "version", sk.Version, "scope", scope)
	return &msg.SkillRegisterResp{Skill: sk.definition(true)}, nil
}

// ErrOverRegisterLimits is the cause of a registered skill whose manifest
// asks for more than the operator's register_limits.
var ErrOverRegisterLimits = errors.New("the skill asks for more than this host lets a registered skill have (the skills plugin's register_limits)")

// capLimits holds a registered skill to the operator's register_limits:
// a limit its manifest asks for above the cap refuses the registration
// (naming each), one it leaves out is lowered to the cap.
func (p *Plugin) capLimits(sk *skill) error {
	c := p.RegisterLimits
	asked := Limits{}
	if sk.Limits != nil {
		asked = *sk.Limits
	}
	var over []string
	check := func(name string, asked, eff, cap float64) float64 {
		if asked > cap {
			over = append(over, fmt.Sprintf("limits.%s %g (at most %g)", name, asked, cap))
		}
		return min(eff, cap)
	}
	sk.limits.TimeoutSeconds = check("timeout_seconds", asked.TimeoutSeconds, sk.limits.TimeoutSeconds, c.TimeoutSeconds)
	sk.limits.CPUSeconds = check("cpu_seconds", asked.CPUSeconds, sk.limits.CPUSeconds, c.CPUSeconds)
	sk.limits.MemoryMB = int64(check("memory_mb", float64(asked.MemoryMB), float64(sk.limits.MemoryMB), float64(c.MemoryMB)))
	sk.limits.MaxProcs = int(check("max_procs", float64(asked.MaxProcs), float64(sk.limits.MaxProcs), float64(c.MaxProcs)))
	sk.limits.OutputBytes = int(check("output_bytes", float64(asked.OutputBytes), float64(sk.limits.OutputBytes), float64(c.OutputBytes)))
	if asked.Network && !c.Network {
		over = append(over, "limits.network (not allowed)")
	}
	if len(over) > 0 {
		return wire.Reason("register_limits", fmt.Errorf("%w: %s", ErrOverRegisterLimits, strings.Join(over, ", ")))
	}
	return nil
}

// checkFilePath refuses a path that could leave the skill's folder.
func checkFilePath(p string) error {
	switch {
	case strings.ContainsRune(p, 0):
		return errors.New("holds a NUL")
	case strings.HasPrefix(p, "/") || strings.Contains(p, `\`):
		return errors.New("must be relative, with / separators")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return errors.New(`must not contain a ".." segment`)
		}
	}
	if c := path.Clean(p); c == "." || c == "" {
		return errors.New("names no file")
	}
	return nil
}

// writeAndLoad writes the manifest and files into dir and loads it as a
// skill folder, with the checks of start-up.
func writeAndLoad(dir string, manifest []byte, files []msg.SkillFile) (*skill, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, f := range files {
		data := []byte(f.Content)
		if f.Base64 {
			if data, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
				return nil, fmt.Errorf("file %s: base64: %w", f.Path, err)
			}
		}
		name := path.Clean(f.Path)
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil { // the umask may narrow it; see below
				return nil, fmt.Errorf("file %s: %w", f.Path, err)
			}
			if err := root.Chmod(d, 0o755); err != nil {
				return nil, fmt.Errorf("file %s: %w", f.Path, err)
			}
		}
		mode := os.FileMode(0o644)
		if f.Executable {
			mode = 0o755
		}
		if err := root.WriteFile(name, data, mode); err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
		if err := root.Chmod(name, mode); err != nil { // WriteFile's mode passes the umask
			return nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	if err := root.WriteFile(ManifestFile, manifest, 0o644); err != nil {
		return nil, err
	}
	return load(dir)
}

// dropRegistered forgets a session's registrations when it ends.
func (p *Plugin) dropRegistered(sid string, r *registered) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.skills {
		os.RemoveAll(s.dir)
	}
	r.skills = nil
	if p.store != nil && p.storeOpen() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.store.SkillRegistration.Delete().Where(skillregistration.SessionID(sid)).Exec(ctx); err != nil {
			p.log.Warn("registered skills of an ended session not deleted from the store", "session", sid, "err", err)
		}
	}
}

func (p *Plugin) storeOpen() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return !p.stopped
}

// loadDir loads every skill folder of dir; a bad folder or a duplicate
// name and version is an error naming it.
func loadDir(dir string) (map[string][]*skill, error) {
	byName := map[string][]*skill{}
	if dir == "" {
		return byName, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("skills dir: %w", err)
	}
	for _, e := range entries {
		d := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(d, ManifestFile)); err != nil || !e.IsDir() {
			continue
		}
		sk, err := load(d)
		if err != nil {
			return nil, fmt.Errorf("skill folder %s: %w", e.Name(), err)
		}
		for _, o := range byName[sk.Name] {
			if semver.Compare("v"+o.Version, "v"+sk.Version) == 0 {
				return nil, fmt.Errorf("skill %s %s is in two folders: %s and %s", sk.Name, sk.Version, o.dir, d)
			}
		}
		byName[sk.Name] = append(byName[sk.Name], sk)
	}
	return byName, nil
}

// fingerprint sums up what a reload would read: every manifest's path,
// size and modification time, and the folders' own times (a file of a
// skill written in place changes its folder's time only when it is
// created or renamed; editing an entrypoint in place needs no reload).
func fingerprint(dir string) string {
	var b strings.Builder
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "error: " + err.Error()
	}
	for _, e := range entries {
		for _, p := range []string{filepath.Join(dir, e.Name()), filepath.Join(dir, e.Name(), ManifestFile)} {
			if fi, err := os.Stat(p); err == nil {
				fmt.Fprintf(&b, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
			}
		}
	}
	return b.String()
}

// watch reloads the operator's directory when its fingerprint changes. A
// directory that no longer loads keeps the skills loaded before, and the
// log says why; calls under way keep the skill they found.
// last is the fingerprint taken before the skills now loaded were read,
// so a change made while they were read is seen by the first tick.
func (p *Plugin) watch(last string, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		fp := fingerprint(p.Dir)
		if fp == last {
			continue
		}
		byName, err := loadDir(p.Dir)
		if err != nil {
			p.log.Warn("skills directory not reloaded; the skills loaded before stay", "dir", p.Dir, "err", err)
			last = fp
			continue
		}
		c := newCatalog(byName)
		p.mu.Lock()
		p.byName, p.names = c.byName, c.names
		p.mu.Unlock()
		last = fp
		p.log.Info("skills directory reloaded", "dir", p.Dir, "skills", len(c.names))
	}
}

// Cleanup stops the reload loop.
func (p *Plugin) Cleanup() error {
	p.mu.Lock()
	p.stopped = true
	stop := p.stop
	p.stop = nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		p.watching.Wait()
	}
	if p.regs != nil {
		p.regs.DropAll()
	}
	if p.regRoot != "" {
		return os.RemoveAll(p.regRoot)
	}
	return nil
}

var (
	_ msg.SkillHandler    = (*Plugin)(nil)
	_ server.CleanerUpper = (*Plugin)(nil)
)
