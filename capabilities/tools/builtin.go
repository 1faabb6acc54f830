package tools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/server/sandbox"
	"github.com/aephost/aep/server/toolrun"
)

// registerBuiltins adds the workspace tools.
func registerBuiltins(r *toolrun.Registry, execOK bool, run func(ctx context.Context, ws *workspace, in runIn) (runOut, error)) error {
	b := &builtins{runner: run}
	errs := []error{
		toolrun.Register(r, "read_file", "Read a text file of the workspace, from an optional byte offset; output past the cap is truncated.", b.read, toolrun.Tags("file", "read"), toolrun.Idempotent()),
		toolrun.Register(r, "write_file", "Write a file of the workspace, creating parent directories; replaces the content unless append is set.", b.write, toolrun.Tags("file", "write")),
		toolrun.Register(r, "list_dir", "List the entries of a workspace directory.", b.list, toolrun.Tags("file", "read"), toolrun.Idempotent()),
		toolrun.Register(r, "glob", "Find workspace files whose path matches a glob pattern (* and ? within a path segment, ** across segments).", b.glob, toolrun.Tags("file", "search"), toolrun.Idempotent()),
		toolrun.Register(r, "grep", "Search workspace files for lines matching a regular expression, optionally only in files matching a glob.", b.grep, toolrun.Tags("file", "search"), toolrun.Idempotent()),
	}
	if execOK {
		errs = append(errs, toolrun.Register(r, "run_command", "Run a program with an argv list (no shell) in the workspace, with a timeout and output caps; stdout and stderr lines are streamed as log events.", b.run, toolrun.Tags("process", "exec"), toolrun.Streaming()))
	}
	return errors.Join(errs...)
}

// builtins are the workspace tools; each call finds its session's
// workspace in its context (wsOf), so no session reaches another's files.
type builtins struct {
	runner func(ctx context.Context, ws *workspace, in runIn) (runOut, error)
}

type readIn struct {
	Path     string `json:"path" desc:"File path relative to the workspace."`
	Offset   int64  `json:"offset,omitempty" desc:"Byte offset to start at."`
	MaxBytes int    `json:"max_bytes,omitempty" desc:"Read at most this many bytes (bounded by the host's output cap)."`
}

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Size      int64  `json:"size" desc:"Size of the whole file."`
	Truncated bool   `json:"truncated"`
}

func (o readOut) ToolOutput() toolrun.Output {
	return toolrun.Output{Data: o, Truncated: o.Truncated, Summary: fmt.Sprintf("read %d of %d bytes of %s", len(o.Content), o.Size, o.Path)}
}

func (b *builtins) read(ctx context.Context, in readIn) (readOut, error) {
	rel, err := cleanPath(in.Path)
	if err != nil {
		return readOut{}, err
	}
	f, err := confine.Open(wsOf(ctx).root, rel, os.O_RDONLY, 0)
	if err != nil {
		return readOut{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return readOut{}, err
	}
	if fi.IsDir() {
		return readOut{}, fmt.Errorf("%s is a directory", in.Path)
	}
	limit := toolrun.MaxOutput(ctx) - 512 // room for the other fields
	if in.MaxBytes > 0 && in.MaxBytes < limit {
		limit = in.MaxBytes
	}
	if in.Offset > 0 {
		if _, err := f.Seek(in.Offset, io.SeekStart); err != nil {
			return readOut{}, err
		}
	}
	buf, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return readOut{}, err
	}
	out := readOut{Path: in.Path, Size: fi.Size()}
	// The limit counts encoded bytes, so the content fits the cap once
	// escaped (toolrun.MaxOutput).
	buf, out.Truncated = toolrun.CutEncoded(buf, limit)
	out.Content = string(buf)
	return out, nil
}

type writeIn struct {
	Path    string `json:"path" desc:"File path relative to the workspace."`
	Content string `json:"content"`
	Append  bool   `json:"append,omitempty"`
}

type writeOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (b *builtins) write(ctx context.Context, in writeIn) (writeOut, error) {
	rel, err := cleanPath(in.Path)
	if err != nil {
		return writeOut{}, err
	}
	if rel == "." {
		return writeOut{}, fmt.Errorf("%w: a file path is required", ErrPath)
	}
	if err := wsOf(ctx).check(int64(len(in.Content))); err != nil {
		return writeOut{}, err
	}
	if dir := path.Dir(rel); dir != "." {
		if err := wsOf(ctx).root.MkdirAll(dir, 0o755); err != nil {
			return writeOut{}, err
		}
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if in.Append {
		flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := confine.Open(wsOf(ctx).root, rel, flag, 0o644)
	if err != nil {
		return writeOut{}, err
	}
	n, err := f.WriteString(in.Content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return writeOut{Path: in.Path, Bytes: n}, err
}

type listIn struct {
	Path string `json:"path,omitempty" desc:"Directory relative to the workspace; default the root."`
}

type dirEntry struct {
	Name string `json:"name"`
	Type string `json:"type" desc:"file, dir or symlink."`
	Size int64  `json:"size"`
}

type listOut struct {
	Path    string     `json:"path"`
	Entries []dirEntry `json:"entries"`
}

func (b *builtins) list(ctx context.Context, in listIn) (listOut, error) {
	rel, err := cleanPath(in.Path)
	if err != nil {
		return listOut{}, err
	}
	f, err := confine.Open(wsOf(ctx).root, rel, os.O_RDONLY, 0)
	if err != nil {
		return listOut{}, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return listOut{}, err
	}
	out := listOut{Path: in.Path, Entries: []dirEntry{}}
	for _, e := range ents {
		d := dirEntry{Name: e.Name(), Type: "file"}
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			d.Type = "symlink"
		case e.IsDir():
			d.Type = "dir"
		}
		if fi, err := e.Info(); err == nil && d.Type == "file" {
			d.Size = fi.Size()
		}
		out.Entries = append(out.Entries, d)
	}
	sort.Slice(out.Entries, func(i, j int) bool { return out.Entries[i].Name < out.Entries[j].Name })
	return out, nil
}

type globIn struct {
	Pattern string `json:"pattern" desc:"Glob over paths relative to the workspace, e.g. src/**/*.go."`
}

type globOut struct {
	Matches   []string `json:"matches"`
	Truncated bool     `json:"truncated"`
}

func (o globOut) ToolOutput() toolrun.Output { return toolrun.Output{Data: o, Truncated: o.Truncated} }

// maxMatches bounds glob and grep results before the byte cap applies.
const maxMatches = 10000

// globRegexp translates a glob into a regular expression over slash paths.
func globRegexp(pat string) (*regexp.Regexp, error) {
	if _, err := cleanPath(pat); err != nil {
		return nil, err
	}
	var sb strings.Builder
	sb.WriteString("^")
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch {
		case c == '*' && i+1 < len(pat) && pat[i+1] == '*':
			i++
			if i+1 < len(pat) && pat[i+1] == '/' {
				i++
				sb.WriteString("(?:.*/)?")
			} else {
				sb.WriteString(".*")
			}
		case c == '*':
			sb.WriteString("[^/]*")
		case c == '?':
			sb.WriteString("[^/]")
		default:
			sb.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	sb.WriteString("$")
	return regexp.Compile(sb.String())
}

// walk visits the regular files of the workspace; it does not follow
// symlinks, so a link out of the root is never read.
func (b *builtins) walk(ctx context.Context, fn func(p string) bool) error {
	return fs.WalkDir(wsOf(ctx).root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, not fatal
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Type().IsRegular() && !fn(p) {
			return fs.SkipAll
		}
		return nil
	})
}

func (b *builtins) glob(ctx context.Context, in globIn) (globOut, error) {
	re, err := globRegexp(in.Pattern)
	if err != nil {
		return globOut{}, err
	}
	out := globOut{Matches: []string{}}
	err = b.walk(ctx, func(p string) bool {
		if re.MatchString(p) {
			if len(out.Matches) == maxMatches {
				out.Truncated = true
				return false
			}
			out.Matches = append(out.Matches, p)
		}
		return true
	})
	return out, err
}

type grepIn struct {
	Pattern string `json:"pattern" desc:"RE2 regular expression."`
	Glob    string `json:"glob,omitempty" desc:"Only files whose path matches this glob."`
}

type grepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

type grepOut struct {
	Matches   []grepMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}

func (o grepOut) ToolOutput() toolrun.Output { return toolrun.Output{Data: o, Truncated: o.Truncated} }

func (b *builtins) grep(ctx context.Context, in grepIn) (grepOut, error) {
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return grepOut{}, fmt.Errorf("pattern: %w", err)
	}
	var only *regexp.Regexp
	if in.Glob != "" {
		if only, err = globRegexp(in.Glob); err != nil {
			return grepOut{}, err
		}
	}
	budget := toolrun.MaxOutput(ctx) / 2
	out := grepOut{Matches: []grepMatch{}}
	err = b.walk(ctx, func(p string) bool {
		if only != nil && !only.MatchString(p) {
			return true
		}
		f, err := confine.Open(wsOf(ctx).root, p, os.O_RDONLY, 0)
		if err != nil {
			return true
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			if !re.Match(sc.Bytes()) {
				continue
			}
			text := sc.Text()
			budget -= toolrun.EncodedLen([]byte(p)) + toolrun.EncodedLen(sc.Bytes()) + 32
			if budget < 0 || len(out.Matches) == maxMatches {
				out.Truncated = true
				return false
			}
			out.Matches = append(out.Matches, grepMatch{Path: p, Line: n, Text: text})
		}
		return true
	})
	return out, err
}

type runIn struct {
	Argv           []string `json:"argv" desc:"Program and arguments; no shell is involved."`
	Cwd            string   `json:"cwd,omitempty" desc:"Working directory relative to the workspace."`
	Stdin          string   `json:"stdin,omitempty"`
	Timeout        float64  `json:"timeout,omitempty" desc:"Seconds before the process group is killed."`
	MaxOutputBytes int      `json:"max_output_bytes,omitempty" desc:"Cap of stdout and of stderr each (bounded by the host's cap)."`
}

type runOut struct {
	ExitCode  int    `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	// started is false for a command refused or failing before it ran:
	// such a call has no exit code and no output, only its error.
	started bool
}

func (o runOut) ToolOutput() toolrun.Output {
	if !o.started {
		return toolrun.Output{}
	}
	code := o.ExitCode
	return toolrun.Output{Data: o, ExitCode: &code, Truncated: o.Truncated}
}

// capBuffer keeps the start of what is written to it, up to max bytes once
// encoded as JSON (toolrun.MaxOutput), and notes the rest.
type capBuffer struct {
	buf     bytes.Buffer
	enc     int // encoded length of buf
	max     int
	dropped bool
}

func (c *capBuffer) add(line []byte) {
	if c.dropped {
		return
	}
	keep, cut := toolrun.CutEncoded(line, c.max-c.enc)
	c.buf.Write(keep)
	c.enc += toolrun.EncodedLen(keep)
	c.dropped = cut
}

// maxLogLine bounds one log event of run_command: a longer line (or output
// without newlines) is sent in pieces, so neither the reader nor an event
// grows with the output.
const maxLogLine = 64 << 10

func (b *builtins) run(ctx context.Context, in runIn) (runOut, error) {
	if len(in.Argv) == 0 || in.Argv[0] == "" {
		return runOut{}, errors.New("argv must name a program")
	}
	for _, a := range in.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return runOut{}, errors.New("argv contains a NUL byte")
		}
	}
	return b.runner(ctx, wsOf(ctx), in)
}

// runContained runs a command of run_command in the session's sandbox
// (server/sandbox, docs/SECURITY.md, Isolation): only system paths and the
// session directory (at /workspace) visible, the shared env allowlist, an
// unprivileged uid, a pids limit, every descendant ended with the call.
func runContained(mode sandbox.Mode, quota int64) func(ctx context.Context, ws *workspace, in runIn) (runOut, error) {
	return func(ctx context.Context, ws *workspace, in runIn) (runOut, error) {
		rel, err := cleanPath(in.Cwd)
		if err != nil {
			return runOut{}, err
		}
		dir, err := ws.real(rel)
		if err != nil {
			return runOut{}, err
		}
		if in.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(in.Timeout*float64(time.Second)))
			defer cancel()
		}
		limit := toolrun.MaxOutput(ctx)/2 - 256
		if in.MaxOutputBytes > 0 && in.MaxOutputBytes < limit {
			limit = in.MaxOutputBytes
		}
		home := ws.dir
		if mech, _ := sandbox.Mechanism(mode); sandbox.TierOf(mech) == sandbox.TierNamespaces {
			home = sandbox.Workspace
		}
		env, _ := sandbox.Environ(nil, home, nil)
		lim := sandbox.Limits{MaxProcs: sandbox.DefaultMaxProcs, FileBytes: quota}
		// The process is its tool call's unit of leaf work: its memory is
		// reserved in the session's budget, and its directory watched
		// (server/budget.go). Without a kernel (an embedded registry) it
		// runs with the quota alone.
		var stopped <-chan struct{}
		leaf := server.LeafFrom(ctx)
		if leaf != nil {
			mem, fsize, err := leaf.ReserveProcess(ctx, 0)
			if err != nil {
				return runOut{}, err
			}
			lim.MemoryBytes, lim.FileBytes = mem, fsize
			stopped = leaf.Context().Done()
		}
		outR, outW := io.Pipe()
		errR, errW := io.Pipe()
		p, err := sandbox.Start(sandbox.Spec{Argv: in.Argv, Dir: dir, Env: env, Sandboxed: true, Mode: mode,
			WorkDir: ws.dir, WorkReadOnly: ws.readOnly, Stdout: outW, Stderr: errW, Limits: lim})
		if err != nil {
			return runOut{}, err
		}
		go func() {
			_, _ = io.WriteString(p.Stdin, in.Stdin)
			p.Stdin.Close()
		}()
		outBuf, errBuf := &capBuffer{max: limit}, &capBuffer{max: limit}
		var wg sync.WaitGroup
		pump := func(r io.Reader, buf *capBuffer, stream, level string) {
			defer wg.Done()
			br := bufio.NewReaderSize(r, maxLogLine)
			for {
				line, err := br.ReadSlice('\n')
				if err == bufio.ErrBufferFull {
					err = nil
				}
				if len(line) > 0 {
					buf.add(line)
					_ = toolrun.Emit(ctx, "log", map[string]any{"level": level, "stream": stream, "message": strings.TrimRight(string(line), "\n")})
				}
				if err != nil {
					return
				}
			}
		}
		wg.Add(2)
		go pump(outR, outBuf, "stdout", "info")
		go pump(errR, errBuf, "stderr", "error")
		var budgetErr error
		select {
		case <-p.Done():
		case <-ctx.Done():
			p.Kill()
			<-p.Done()
		case <-stopped:
			// The session passed a budget (its directory's disk).
			budgetErr = leaf.Err()
			p.Kill()
			<-p.Done()
		}
		outW.Close()
		errW.Close()
		wg.Wait()
		res := p.Result()
		out := runOut{Stdout: outBuf.buf.String(), Stderr: errBuf.buf.String(), Truncated: outBuf.dropped || errBuf.dropped, started: true, ExitCode: res.ExitCode}
		switch {
		case budgetErr != nil:
			return out, fmt.Errorf("command ended: %w", budgetErr)
		case ctx.Err() == context.DeadlineExceeded:
			return out, fmt.Errorf("command killed after its timeout: %w", ctx.Err())
		case ctx.Err() != nil:
			return out, ctx.Err()
		case res.Outcome != sandbox.Exited:
			return out, fmt.Errorf("command %s: %s", res.Outcome, res.Reason)
		case res.ExitCode != 0:
			return out, fmt.Errorf("command failed: exit status %d", res.ExitCode)
		}
		return out, nil
	}
}
