package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aephost/aep/wire"
)

// cgroups are the per-run control groups of a confined run: a memory one
// (its oom_kill count decides OutOfMemory) and a pids one. Under cgroup v2
// both are one directory. Each is a fresh child of a base directory
// `aep-sandbox`, so the oom_kill count of a run starts at zero.
type cgroups struct {
	v2   bool
	mem  string // directory, "" when no memory cgroup is used
	pids string // directory, "" when no pids cgroup is used
}

// layout is what the host's cgroup mounts allow, found once.
type layout struct {
	v2      string // v2 base directory, if v2 is the mounted hierarchy
	memBase string // v1 memory base directory
	pidBase string // v1 pids base directory
	why     string // why no cgroup can be made, for logs and docs
}

var (
	layoutOnce sync.Once
	hostLayout layout
)

// findLayout looks at the mounts: cgroup v2 when /sys/fs/cgroup is the
// unified hierarchy, v1 memory and pids controllers otherwise. The bases
// are made below the host's own cgroup in v1 (so limits above it still
// count) and at the v2 root, since a v2 cgroup that holds processes cannot
// give controllers to children (the no-internal-processes rule).
func findLayout() layout {
	layoutOnce.Do(func() {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			base := "/sys/fs/cgroup/aep-sandbox"
			if err := enableV2("/sys/fs/cgroup", base); err != nil {
				hostLayout.why = err.Error()
				return
			}
			hostLayout.v2 = base
			return
		}
		own := ownV1Paths()
		mounts := v1Mounts()
		for ctl, dst := range map[string]*string{"memory": &hostLayout.memBase, "pids": &hostLayout.pidBase} {
			mnt, ok := mounts[ctl]
			if !ok {
				continue
			}
			base := filepath.Join(mnt, own[ctl], "aep-sandbox")
			if err := os.MkdirAll(base, 0o755); err != nil {
				hostLayout.why = fmt.Sprintf("cgroup %s: %v", ctl, err)
				continue
			}
			*dst = base
		}
		if hostLayout.memBase == "" && hostLayout.why == "" {
			hostLayout.why = "no cgroup memory controller is mounted"
		}
	})
	return hostLayout
}

func enableV2(root, base string) error {
	ctls, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return err
	}
	want := []string{}
	for _, c := range []string{"memory", "pids"} {
		if bytes.Contains(ctls, []byte(c)) {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return errors.New("cgroup v2 offers neither memory nor pids")
	}
	line := []byte(strings.Join(want, " "))
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), line, 0); err != nil {
		return fmt.Errorf("cgroup v2: enabling controllers: %w", err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), line, 0); err != nil {
		return fmt.Errorf("cgroup v2: enabling controllers below %s: %w", base, err)
	}
	return nil
}

// ownV1Paths maps each v1 controller to the host's own cgroup path.
func ownV1Paths() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			out[c] = f[2]
		}
	}
	return out
}

// v1Mounts maps v1 controllers to their mount points.
func v1Mounts() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		l := sc.Text()
		i := strings.Index(l, " - ")
		if i < 0 {
			continue
		}
		pre, post := strings.Fields(l[:i]), strings.Fields(l[i+3:])
		if len(pre) < 5 || len(post) < 3 || post[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(post[2], ",") {
			if o == "memory" || o == "pids" {
				out[o] = pre[4]
			}
		}
	}
	return out
}

// newCgroups makes the run's cgroups with the limits; with neither a memory
// nor a pids cgroup it returns nil (the init then uses rlimits).
func newCgroups(lim Limits) (*cgroups, error) {
	l := findLayout()
	name := "run-" + wire.RandomHex(6)
	cg := &cgroups{}
	switch {
	case l.v2 != "":
		dir := filepath.Join(l.v2, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		cg.v2, cg.mem, cg.pids = true, dir, dir
		if lim.MemoryBytes > 0 {
			if err := writeInt(dir, "memory.max", lim.MemoryBytes); err != nil {
				cg.remove()
				return nil, err
			}
			_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
		}
		if lim.MaxProcs > 0 {
			if err := writeInt(dir, "pids.max", int64(lim.MaxProcs)); err != nil {
				cg.remove()
				return nil, err
			}
		}
		return cg, nil
	case l.memBase == "" && l.pidBase == "":
		return nil, nil
	}
	if l.memBase != "" {
		cg.mem = filepath.Join(l.memBase, name)
		if err := os.Mkdir(cg.mem, 0o755); err != nil {
			return nil, err
		}
		if lim.MemoryBytes > 0 {
			if err := writeInt(cg.mem, "memory.limit_in_bytes", lim.MemoryBytes); err != nil {
				cg.remove()
				return nil, err
			}
			// No swap either, where the kernel accounts it.
			_ = writeInt(cg.mem, "memory.memsw.limit_in_bytes", lim.MemoryBytes)
		}
	}
	if l.pidBase != "" {
		cg.pids = filepath.Join(l.pidBase, name)
		if err := os.Mkdir(cg.pids, 0o755); err != nil {
			cg.remove()
			return nil, err
		}
		if lim.MaxProcs > 0 {
			if err := writeInt(cg.pids, "pids.max", int64(lim.MaxProcs)); err != nil {
				cg.remove()
				return nil, err
			}
		}
	}
	return cg, nil
}

func writeInt(dir, file string, v int64) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", file, err)
	}
	return nil
}

// procsFiles opens cgroup.procs of each cgroup for the init, which joins by
// writing "0" (itself) before it starts the command, so no process of the
// command ever runs outside the limits.
func (cg *cgroups) procsFiles() ([]*os.File, error) {
	var out []*os.File
	for _, d := range cg.dirs() {
		f, err := os.OpenFile(filepath.Join(d, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func (cg *cgroups) dirs() []string {
	var out []string
	if cg.mem != "" {
		out = append(out, cg.mem)
	}
	if cg.pids != "" && cg.pids != cg.mem {
		out = append(out, cg.pids)
	}
	return out
}

// oomKills is the oom_kill count of the memory cgroup (v1 memory.oom_control,
// v2 memory.events).
func (cg *cgroups) oomKills() int64 {
	if cg.mem == "" {
		return 0
	}
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(cg.mem, file))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// killAll sends SIGKILL to every process of the cgroups: a command that left
// its process group (setsid) is still in them.
func (cg *cgroups) killAll() {
	for _, d := range cg.dirs() {
		if cg.v2 {
			if os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0) == nil {
				continue
			}
		}
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove deletes the cgroups once their processes are gone.
func (cg *cgroups) remove() {
	for _, d := range cg.dirs() {
		for i := 0; i < 50; i++ {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			cg.killAll()
			time.Sleep(2 * time.Millisecond)
		}
	}
}
