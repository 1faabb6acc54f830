package env

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/wire"
)

// The data plane (spec §4.2 Env data plane): each session works in its
// data directory (see dataRoot). Every access goes through an os.Root so no wire
// path, symlink included, reaches outside its root. Temporary directories
// live in DataRoot beside the session directories (same filesystem, so the
// final renames are atomic) under names no session id can take.

const tmpPrefix = ".aep-tmp-"

// ErrNoDataPlane marks a host whose data root is unusable; it reaches the
// agent with detail.reason "data_plane_unavailable". Its causes name host
// paths, so they go to the log, never into the error.
var ErrNoDataPlane = wire.Reason("data_plane_unavailable", errors.New("env data plane unavailable"))

// ErrNoStaging answers env/data/add on a host with no staging_root: it is
// [ErrNoDataPlane] with detail.reason "staging_root_unset", since only the
// operator's configuration can change it.
var ErrNoStaging = wire.Reason("staging_root_unset", fmt.Errorf("%w: no staging_root is configured, so nothing can be added", ErrNoDataPlane))

// Data-plane operations, for what each subagent scope may do (see dataRoot).
const (
	opRead  = "get"
	opAdd   = "add"
	opReset = "reset"
)

// ErrSharedReset answers env/data/reset from a shared-scope subagent: its
// data root is its parent's, and a reset would wipe data the parent relies
// on (docs/DECISIONS.md, Isolation).
var ErrSharedReset = fmt.Errorf("this session shares its parent's data root (memory scope shared): env/data/reset would wipe the parent's data, so only the session that owns it (the parent) may reset it: %w", wire.ErrDenied)

// ErrReadOnlyData answers env/data/add and env/data/reset from a
// restricted subagent, which reads its parent's data and writes none.
var ErrReadOnlyData = fmt.Errorf("the data root is read-only for a restricted subagent: %w", wire.ErrDenied)

// dataRoot opens the directory that holds the session's data directory,
// and names that directory in it (temporary directories go beside it, on
// the same file system, so the final renames are atomic). Under a host
// with the default data root the data directory is data/ in the session's
// directory (server/persist/dirs.go), which every sandbox shows at
// /workspace/data (spec §2.11); a subagent's follows its memory scope:
// shared → its parent's (a reset is refused), restricted → its parent's,
// read-only (add and reset refused), isolated → its own, snapshot → its
// own copy made at spawn. Otherwise it is <DataRoot>/<session id>.
func (p *Plugin) dataRoot(sessionID, op string) (*os.Root, string, error) {
	if p.dataErr != nil {
		return nil, "", ErrNoDataPlane // the cause was logged by Provision
	}
	if p.inSession {
		d, err := p.host.SessionDir(sessionID)
		if err != nil {
			return nil, "", err
		}
		switch {
		case op != opRead && d.ReadOnly:
			return nil, "", ErrReadOnlyData
		case op == opReset && d.Owner != sessionID:
			return nil, "", ErrSharedReset
		}
		root, err := os.OpenRoot(d.Path)
		if err != nil {
			p.log.Warn("env data plane: opening the session directory", "error", err)
			return nil, "", ErrNoDataPlane
		}
		if err := root.Mkdir(sessionData, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			root.Close()
			p.log.Warn("env data plane: making the session's data directory", "error", err)
			return nil, "", ErrNoDataPlane
		}
		return root, sessionData, nil
	}
	sid, err := cleanRel("session_id", sessionID)
	if err != nil || strings.Contains(sid, "/") || strings.HasPrefix(sid, ".") {
		// The session id is a bearer secret: neither the wire nor the log gets it.
		p.log.Warn("env data plane: a session id cannot name a directory")
		return nil, "", fmt.Errorf("%w: the session cannot have a data directory", ErrNoDataPlane)
	}
	root, err := os.OpenRoot(p.DataRoot)
	if err != nil {
		p.log.Warn("env data plane unavailable", "error", err)
		return nil, "", ErrNoDataPlane
	}
	if err := root.Mkdir(sid, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		root.Close()
		p.log.Warn("env data plane: making the session's data directory", "error", err)
		return nil, "", ErrNoDataPlane
	}
	return root, sid, nil
}

// sessionData is the data directory's name in a session directory.
const sessionData = "data"

func tmpName() string { return tmpPrefix + newEpisodeID()[3:] }

// EnvDataAdd answers env/data/add: every part is copied from the staging
// root into a temporary directory and verified (size, sha256) before any is
// moved into the session's data root, so a failed part leaves it as it was.
func (p *Plugin) EnvDataAdd(ctx context.Context, s wire.Scope, req *msg.EnvDataAddReq) (*msg.EnvDataAddResp, error) {
	if p.StagingRoot == "" {
		return nil, ErrNoStaging
	}
	root, sid, err := p.dataRoot(s.SessionID(), opAdd)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if p.inSession {
		var total int64
		for _, part := range req.Parts {
			total += int64(part.Size)
		}
		if err := p.host.CheckWrite(s.SessionID(), total); err != nil {
			return nil, err
		}
	}
	staging, err := os.OpenRoot(p.StagingRoot)
	if err != nil {
		p.log.Warn("env data plane: opening the staging root", "error", err)
		return nil, fmt.Errorf("%w: the staging root cannot be opened", ErrNoDataPlane)
	}
	defer staging.Close()

	dests := make([]string, len(req.Parts))
	seen := map[string]int{}
	for i, part := range req.Parts {
		f := fmt.Sprintf("parts[%d]", i)
		d, err := cleanRel(f+".path", part.Path)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[d]; dup {
			return nil, fmt.Errorf("%s.path %q is also parts[%d].path: %w", f, part.Path, j, wire.ErrInvalid)
		}
		seen[d] = i
		if _, err := cleanRel(f+".source", part.Source); err != nil {
			return nil, err
		}
		if _, err := hex.DecodeString(part.Sha256); err != nil {
			return nil, &wire.FieldError{Field: f + ".sha256", Reason: "must be hex"}
		}
		dests[i] = d
	}

	tmp := tmpName()
	if err := root.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	defer root.RemoveAll(tmp)
	added := make([]msg.DataFile, len(req.Parts))
	for i, part := range req.Parts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		df, err := copyVerified(staging, root, part, path.Join(tmp, fmt.Sprint(i)))
		if err != nil {
			return nil, fmt.Errorf("parts[%d]: %w", i, err)
		}
		df.Path = dests[i]
		added[i] = df
	}
	if err := commit(root, sid, tmp, dests); err != nil {
		return nil, err
	}
	for i := range added {
		if fi, err := root.Lstat(path.Join(sid, dests[i])); err == nil {
			added[i].Mtime = wire.Epoch(fi.ModTime())
		}
	}
	return &msg.EnvDataAddResp{Added: added}, nil
}

// copyVerified copies one part into dst (relative to root), hashing as it
// goes, and checks size and checksum.
func copyVerified(staging, root *os.Root, part msg.DataPart, dst string) (msg.DataFile, error) {
	src, err := staging.Open(part.Source)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return msg.DataFile{}, fmt.Errorf("source %q does not exist in the staging root: %w", part.Source, wire.ErrNotFound)
		}
		if e := rootErr("source", part.Source, err); e != err {
			return msg.DataFile{}, e
		}
		return msg.DataFile{}, fmt.Errorf("source %q: %w", part.Source, err)
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
		return msg.DataFile{}, fmt.Errorf("source %q is not a regular file: %w", part.Source, wire.ErrInvalid)
	}
	out, err := root.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return msg.DataFile{}, err
	}
	h := sha256.New()
	// Read at most one byte more than declared: a larger file fails fast.
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(src, int64(part.Size)+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return msg.DataFile{}, fmt.Errorf("copying %q: %w", part.Source, err)
	}
	if n != int64(part.Size) {
		return msg.DataFile{}, fmt.Errorf("source %q: size mismatch: declared %d bytes, file has %s: %w", part.Source, part.Size, sizeText(n, int64(part.Size)), wire.ErrInvalid)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if !strings.EqualFold(sum, part.Sha256) {
		return msg.DataFile{}, fmt.Errorf("source %q: sha256 mismatch: declared %s, file has %s: %w", part.Source, strings.ToLower(part.Sha256), sum, wire.ErrInvalid)
	}
	return msg.DataFile{Size: int(n), Sha256: sum}, nil
}

func sizeText(n, declared int64) string {
	if n > declared {
		return "more"
	}
	return fmt.Sprint(n)
}

// commit moves the verified files tmp/<i> to sid/<dests[i]>. Files they
// replace are moved aside first; on any failure everything done is undone.
func commit(root *os.Root, sid, tmp string, dests []string) (err error) {
	type done struct{ dst, backup string }
	var moved []done
	var made []string
	defer func() {
		if err == nil {
			return
		}
		for i := len(moved) - 1; i >= 0; i-- {
			_ = root.Remove(moved[i].dst)
			if moved[i].backup != "" {
				_ = root.Rename(moved[i].backup, moved[i].dst)
			}
		}
		for i := len(made) - 1; i >= 0; i-- {
			_ = root.Remove(made[i])
		}
	}()
	for i, d := range dests {
		dst := path.Join(sid, d)
		// Create missing parent directories one by one, remembering them.
		dir := path.Dir(d)
		if dir != "." {
			cur := sid
			for _, seg := range strings.Split(dir, "/") {
				cur = path.Join(cur, seg)
				fi, err := root.Lstat(cur)
				switch {
				case err == nil && fi.IsDir():
					continue
				case err == nil && fi.Mode()&fs.ModeSymlink != 0:
					return fmt.Errorf("parts[%d].path %q: %q is a symbolic link, which is never followed: %w", i, d, strings.TrimPrefix(cur, sid+"/"), ErrPath)
				case err == nil:
					return fmt.Errorf("parts[%d].path %q: %q is not a directory: %w", i, d, strings.TrimPrefix(cur, sid+"/"), wire.ErrInvalid)
				case errors.Is(err, fs.ErrNotExist):
					if err := root.Mkdir(cur, 0o755); err != nil {
						return rootErr(fmt.Sprintf("parts[%d].path", i), d, err)
					}
					made = append(made, cur)
				default:
					return rootErr(fmt.Sprintf("parts[%d].path", i), d, err)
				}
			}
		}
		backup := ""
		if fi, err := root.Lstat(dst); err == nil {
			if fi.IsDir() {
				return fmt.Errorf("parts[%d].path %q is a directory: %w", i, d, wire.ErrInvalid)
			}
			backup = path.Join(tmp, fmt.Sprintf("old-%d", i))
			if err := root.Rename(dst, backup); err != nil {
				return rootErr(fmt.Sprintf("parts[%d].path", i), d, err)
			}
		}
		if err := root.Rename(path.Join(tmp, fmt.Sprint(i)), dst); err != nil {
			if backup != "" {
				_ = root.Rename(backup, dst)
			}
			return rootErr(fmt.Sprintf("parts[%d].path", i), d, err)
		}
		moved = append(moved, done{dst: dst, backup: backup})
	}
	return nil
}

// EnvDataGet answers env/data/get: metadata of the selected regular files
// (symbolic links are never followed or reported), text inline on request.
func (p *Plugin) EnvDataGet(ctx context.Context, s wire.Scope, req *msg.EnvDataGetReq) (*msg.EnvDataGetResp, error) {
	root, sid, err := p.dataRoot(s.SessionID(), opRead)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sroot, err := root.OpenRoot(sid)
	if err != nil {
		return nil, err
	}
	defer sroot.Close()
	limit := p.InlineMaxBytes
	if req.MaxInlineBytes != nil && *req.MaxInlineBytes < limit {
		limit = *req.MaxInlineBytes
	}
	out := &msg.EnvDataGetResp{Files: []msg.DataFile{}}
	add := func(rel string) error {
		df, err := describe(sroot, rel, req.Inline, limit)
		if err != nil {
			return err
		}
		out.Files = append(out.Files, df)
		return nil
	}
	switch {
	case req.Path != nil && *req.Path != "":
		rel, err := cleanRel("path", *req.Path)
		if err != nil {
			return nil, err
		}
		fi, err := sroot.Lstat(rel)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("path %q does not exist in the data root: %w", *req.Path, wire.ErrNotFound)
			}
			return nil, rootErr("path", *req.Path, err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("path %q is not a regular file: %w", *req.Path, wire.ErrInvalid)
		}
		return out, add(rel)
	default:
		pattern := ""
		if req.Glob != nil && *req.Glob != "" {
			if pattern, err = checkGlob(*req.Glob); err != nil {
				return nil, err
			}
		}
		// WalkDir reports a symbolic link as itself and never descends into
		// one: a linked directory's files are not the data root's.
		err := fs.WalkDir(sroot.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if pattern != "" && !doublestar.MatchUnvalidated(pattern, rel) {
				return nil
			}
			return add(rel)
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}

// Bounds of a glob: its length, and its {a,b} groups, each of which can
// multiply the work of matching one path by its number of alternatives.
const (
	maxGlobBytes  = 1024
	maxGlobGroups = 4
)

// checkGlob returns the cleaned glob of env/data/get: path.Match syntax per
// segment, a `**` segment matching zero or more whole segments (so `**`
// is every file, `in/**` every file under in/, `**/*.txt` every .txt at
// any depth), and {a,b} alternatives (docs/DECISIONS.md, env data plane).
func checkGlob(glob string) (string, error) {
	if len(glob) > maxGlobBytes {
		return "", &wire.FieldError{Field: "glob", Reason: fmt.Sprintf("longer than %d bytes", maxGlobBytes)}
	}
	pattern, err := cleanRel("glob", glob)
	if err != nil {
		return "", err
	}
	if !doublestar.ValidatePattern(pattern) {
		return "", &wire.FieldError{Field: "glob", Reason: "malformed pattern (an unclosed [ or {, or a trailing \\)"}
	}
	if strings.Count(pattern, "{") > maxGlobGroups {
		return "", &wire.FieldError{Field: "glob", Reason: fmt.Sprintf("more than %d {a,b} groups", maxGlobGroups)}
	}
	return pattern, nil
}

// describe returns the metadata of one regular file.
func describe(root *os.Root, rel string, inline bool, limit int) (msg.DataFile, error) {
	// A regular file found by the walk may be a FIFO by now: the open
	// never blocks on it (internal/confine).
	f, err := confine.Open(root, rel, os.O_RDONLY, 0)
	if err != nil {
		return msg.DataFile{}, rootErr("path", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return msg.DataFile{}, err
	}
	h := sha256.New()
	var text []byte
	var w io.Writer = h
	var buf strings.Builder
	if inline && fi.Size() <= int64(limit) {
		w = io.MultiWriter(h, &buf)
	}
	if _, err := io.Copy(w, f); err != nil {
		return msg.DataFile{}, err
	}
	df := msg.DataFile{Path: rel, Size: int(fi.Size()), Sha256: hex.EncodeToString(h.Sum(nil)), Mtime: wire.Epoch(fi.ModTime())}
	if buf.Len() > 0 || (inline && fi.Size() == 0) {
		text = []byte(buf.String())
		if utf8.Valid(text) {
			c := string(text)
			df.Content = &c
		}
	}
	return df, nil
}

// EnvDataReset answers env/data/reset: the session's data root becomes a
// fresh copy of the baseline corpus, built aside and swapped in. Episodes
// are not touched (spec §3).
func (p *Plugin) EnvDataReset(ctx context.Context, s wire.Scope, req *msg.EnvDataResetReq) (*msg.EnvDataResetResp, error) {
	root, sid, err := p.dataRoot(s.SessionID(), opReset)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fresh := tmpName()
	if err := root.Mkdir(fresh, 0o755); err != nil {
		return nil, err
	}
	restored := 0
	if p.BaselineDir != "" {
		if restored, err = copyTree(ctx, p.BaselineDir, root, fresh); err != nil {
			_ = root.RemoveAll(fresh)
			return nil, fmt.Errorf("re-staging the baseline: %w", err)
		}
	}
	trash := tmpName()
	if err := root.Rename(sid, trash); err != nil {
		_ = root.RemoveAll(fresh)
		return nil, err
	}
	if err := root.Rename(fresh, sid); err != nil {
		_ = root.Rename(trash, sid)
		_ = root.RemoveAll(fresh)
		return nil, err
	}
	if err := root.RemoveAll(trash); err != nil {
		p.log.Warn("removing old data root", "session_id", sid, "error", err)
	}
	return &msg.EnvDataResetResp{Restored: restored}, nil
}

// copyTree copies the regular files under src (an operator-configured
// directory; symbolic links in it are skipped) to dst inside root and
// returns how many it copied.
func copyTree(ctx context.Context, src string, root *os.Root, dst string) (int, error) {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			return root.Mkdir(target, 0o755)
		case d.Type().IsRegular():
			// A submission's files are the agent's: opened as files only,
			// never blocking (internal/confine).
			in, err := confine.OpenPath(p, os.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			n++
			return out.Close()
		}
		return nil
	})
	return n, err
}
