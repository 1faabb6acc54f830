package server

// The files of a snapshot that leaves the host (docs/DECISIONS.md, Sessions
// that move). A sql snapshot carries a point-in-time copy of the session
// directory, so a session restored on another host — after a drain, or
// from the automatic snapshot of a host that died — gets its files back:
//
//   - what is copied: directories and regular files, nothing else.
//     Symbolic links, devices, fifos and sockets are skipped, and the
//     snapshot records each one skipped (the first maxSkippedListed by
//     path, all of them by count);
//   - the bound: server.snapshots.files_max_bytes of regular-file bytes
//     and files_max_entries entries. A directory past either is not
//     stored in part: the snapshot is taken without files, marked
//     `files: omitted` with the reason, which the snapshot's and the
//     restore's replies and the log show;
//   - the form: a tar stream, gzip-compressed (BestSpeed: an automatic
//     snapshot runs on a live host), stored beside the snapshot's document
//     in the store row, and verified on the way back against the sha256
//     the document's checksummed payload records;
//   - the restore: the archive is extracted into a fresh directory next to
//     the session's, through an os.Root, refusing every entry that is not a
//     plain relative path (`..`, absolute names, NUL, unclean names) or not
//     a directory or regular file, duplicates, and anything past the
//     session quota or the entry bound; only a complete extraction replaces
//     the session's directory (two renames), so a malformed archive
//     changes nothing.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/wire"
)

// Files states a snapshot records (payload files.state).
const (
	filesStored  = "stored"  // the archive is in the store row
	filesOmitted = "omitted" // not stored; Reason says why
	filesLocal   = "local"   // a file snapshot: the files stay on this host's disk
)

// Reasons a snapshot's files were omitted.
const (
	omitDisabled   = "disabled"         // server.snapshots.files_max_bytes is 0
	omitTooLarge   = "too_large"        // more bytes than files_max_bytes
	omitTooMany    = "too_many_entries" // more entries than files_max_entries
	omitSecret     = "secret"           // a file holds a secret the kernel knows
	omitUnreadable = "unreadable"       // the directory could not be read
)

// syscallNoFollow refuses to open a symbolic link as the last element.
const syscallNoFollow = syscall.O_NOFOLLOW

// maxSkippedListed bounds the skipped paths a snapshot lists.
const maxSkippedListed = 32

// maxArchiveName bounds an entry's name in an archive, in bytes.
const maxArchiveName = 4096

// filesInfo is what a snapshot's payload says of its files.
type filesInfo struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Limit is the bound that was passed, for too_large and too_many_entries.
	Limit int64 `json:"limit,omitempty"`
	// Bytes of regular files and Entries (files and directories), as
	// stored, or as found when omitted.
	Bytes   int64 `json:"bytes"`
	Entries int   `json:"entries"`
	// ArchiveBytes and SHA256 describe the stored archive.
	ArchiveBytes int64  `json:"archive_bytes,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	// Skipped lists "<kind> <path>" of entries that are not files or
	// directories (at most maxSkippedListed); SkippedCount counts them all.
	Skipped      []string `json:"skipped,omitempty"`
	SkippedCount int      `json:"skipped_count,omitempty"`
}

// wire is the reply's form of f with state (stored, omitted, local,
// restored or kept).
func (f *filesInfo) wire(state msg.SnapshotFilesState) *msg.SnapshotFiles {
	out := &msg.SnapshotFiles{State: state, Bytes: int(f.Bytes), Entries: f.Entries}
	if f.Reason != "" {
		r := f.Reason
		out.Reason = &r
	}
	if f.Limit > 0 {
		l := int(f.Limit)
		out.Limit = &l
	}
	if f.SkippedCount > 0 {
		out.Skipped = append([]string{}, f.Skipped...)
		n := f.SkippedCount
		out.SkippedCount = &n
	}
	return out
}

// filesLimits bound an archive, written or read.
type filesLimits struct {
	maxBytes   int64
	maxEntries int
}

// entryKind names what a non-file entry is, for the skipped list.
func entryKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "other"
}

// archiveDir archives the directories and regular files under dir into a
// gzip-compressed tar stream. It measures first (names and sizes only)
// and reads nothing of a directory past lim; a directory that grows past
// lim while it is read, or holds one of secrets, is omitted too. A
// missing dir is an empty archive. It never fails: what goes wrong is an
// omitted files part with its reason.
func archiveDir(dir string, lim filesLimits, secrets []namedSecret) ([]byte, filesInfo) {
	info := filesInfo{}
	omit := func(reason string, limit int64) ([]byte, filesInfo) {
		info.State, info.Reason, info.Limit = filesOmitted, reason, limit
		return nil, info
	}
	if lim.maxBytes <= 0 {
		return omit(omitDisabled, 0)
	}
	skip := func(kind, p string) {
		info.SkippedCount++
		if len(info.Skipped) < maxSkippedListed {
			info.Skipped = append(info.Skipped, kind+" "+p)
		}
	}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		root = nil
	} else if err != nil {
		return omit(omitUnreadable, 0)
	}
	if root != nil {
		defer root.Close()
		// Measure: entries and bytes, from the directory listing alone.
		err := fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == "." {
				return nil
			}
			switch {
			case e.IsDir():
				info.Entries++
			case e.Type().IsRegular():
				info.Entries++
				fi, err := e.Info()
				if err != nil {
					return err
				}
				info.Bytes += fi.Size()
			default:
				skip(entryKind(e.Type()), p)
			}
			if info.Entries > lim.maxEntries || info.Bytes > lim.maxBytes {
				return fs.SkipAll
			}
			return nil
		})
		switch {
		case err != nil:
			return omit(omitUnreadable, 0)
		case info.Entries > lim.maxEntries:
			return omit(omitTooMany, int64(lim.maxEntries))
		case info.Bytes > lim.maxBytes:
			return omit(omitTooLarge, lim.maxBytes)
		}
	}
	// Write, counting again: the directory may change while it is read.
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	info.Entries, info.Bytes, info.Skipped, info.SkippedCount = 0, 0, nil, 0
	reason := ""
	if root != nil {
		err = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == "." {
				return nil
			}
			if !e.IsDir() && !e.Type().IsRegular() {
				skip(entryKind(e.Type()), p)
				return nil
			}
			if info.Entries++; info.Entries > lim.maxEntries {
				reason = omitTooMany
				return fs.SkipAll
			}
			if e.IsDir() {
				return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o700, Format: tar.FormatPAX})
			}
			data, mode, mtime, err := readRegular(root, p, lim.maxBytes-info.Bytes)
			switch {
			case errors.Is(err, errTooLarge):
				reason = omitTooLarge
				return fs.SkipAll
			case errors.Is(err, errNotRegular):
				info.Entries--
				skip("changed", p)
				return nil
			case err != nil:
				return err
			}
			if what := findSecret(data, secrets); what != "" {
				reason = omitSecret
				return fs.SkipAll
			}
			info.Bytes += int64(len(data))
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		})
		switch {
		case reason == omitTooMany:
			return omit(reason, int64(lim.maxEntries))
		case reason == omitTooLarge:
			return omit(reason, lim.maxBytes)
		case reason != "":
			return omit(reason, 0)
		case err != nil:
			return omit(omitUnreadable, 0)
		}
	}
	if err := tw.Close(); err != nil {
		return omit(omitUnreadable, 0)
	}
	if err := zw.Close(); err != nil {
		return omit(omitUnreadable, 0)
	}
	sum := sha256.Sum256(buf.Bytes())
	info.State, info.ArchiveBytes, info.SHA256 = filesStored, int64(buf.Len()), hex.EncodeToString(sum[:])
	return buf.Bytes(), info
}

var (
	errTooLarge   = errors.New("over the bound")
	errNotRegular = errors.New("not a regular file")
)

// readRegular reads root's regular file p, at most max bytes
// (errTooLarge past them), with its archive mode (0700 when any execute
// bit is set, else 0600) and its modification time.
func readRegular(root *os.Root, p string, max int64) ([]byte, int64, time.Time, error) {
	// Never blocking: the walk's regular file may be a FIFO by now.
	f, err := confine.Open(root, p, os.O_RDONLY|syscallNoFollow, 0)
	if err != nil {
		return nil, 0, time.Time{}, errNotRegular // replaced by a link or a FIFO, or gone
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, time.Time{}, errNotRegular
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	if int64(len(data)) > max {
		return nil, 0, time.Time{}, errTooLarge
	}
	mode := int64(0o600)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o700
	}
	return data, mode, fi.ModTime(), nil
}

// ErrFilesArchive is the cause when a snapshot's files archive is
// malformed or hostile; nothing was extracted.
var ErrFilesArchive = fmt.Errorf("%w: its files archive", ErrSnapshotCorrupt)

// archiveEntryName checks an archive entry's name and returns it without
// a directory's trailing slash: a clean, relative, local path.
func archiveEntryName(name string, dir bool) (string, error) {
	if dir {
		name = strings.TrimSuffix(name, "/")
	}
	switch {
	case name == "" || name == ".":
		return "", errors.New("an entry has no name")
	case len(name) > maxArchiveName:
		return "", fmt.Errorf("an entry's name is longer than %d bytes", maxArchiveName)
	case strings.ContainsRune(name, 0):
		return "", errors.New("an entry's name holds a NUL byte")
	case path.IsAbs(name) || filepath.IsAbs(name):
		return "", fmt.Errorf("entry %.80q is an absolute path", name)
	case path.Clean(name) != name || !filepath.IsLocal(name):
		return "", fmt.Errorf("entry %.80q is not a clean path inside the directory", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." || el == "." {
			return "", fmt.Errorf("entry %.80q is not a clean path inside the directory", name)
		}
	}
	return name, nil
}

// extractArchive extracts a gzip-compressed tar stream (one gzip member,
// nothing after it) of directories and regular files into root, which is empty, within lim; it returns the
// bytes and entries extracted. Every error wraps [ErrFilesArchive], or
// [ErrQuota] or wire.ErrDenied for a bound passed; what was extracted
// before is left in root for the caller to remove.
func extractArchive(archive []byte, root *os.Root, lim filesLimits) (int64, int, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrFilesArchive, fmt.Sprintf(format, args...))
	}
	// A bytes.Reader is an io.ByteReader, so gzip reads no further than
	// its one member and what follows it can be seen.
	r := bytes.NewReader(archive)
	zr, err := gzip.NewReader(r)
	if err != nil {
		return 0, 0, bad("not gzip: %v", err)
	}
	zr.Multistream(false)
	// Headers and padding are bounded with the entries: a stream of empty
	// blocks or headers cannot run on past the bounds.
	budget := lim.maxBytes + int64(lim.maxEntries+2)*(2*512+maxArchiveName+512) + 2*512
	lr := &limitedReader{r: zr, n: budget}
	tr := tar.NewReader(lr)
	var (
		total   int64
		entries int
	)
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if lr.over {
			return total, entries, fmt.Errorf("the files archive is larger than its bounds allow (%d bytes of files, %d entries): %w", lim.maxBytes, lim.maxEntries, ErrQuota)
		}
		if err != nil {
			return total, entries, bad("%v", err)
		}
		if entries++; entries > lim.maxEntries {
			return total, entries, fmt.Errorf("the files archive holds more than %d entries (server.snapshots.files_max_entries): %w", lim.maxEntries, wire.ErrDenied)
		}
		isDir := hdr.Typeflag == tar.TypeDir
		name, err := archiveEntryName(hdr.Name, isDir)
		if err != nil {
			return total, entries, bad("%v", err)
		}
		if seen[name] {
			return total, entries, bad("entry %.80q appears twice", name)
		}
		seen[name] = true
		switch hdr.Typeflag {
		case tar.TypeDir:
			if hdr.Size != 0 {
				return total, entries, bad("directory %.80q has a size", name)
			}
			if err := root.Mkdir(name, 0o700); err != nil {
				return total, entries, bad("directory %.80q: %v", name, err)
			}
		case tar.TypeReg:
			if hdr.Size < 0 {
				return total, entries, bad("file %.80q has a negative size", name)
			}
			if total+hdr.Size > lim.maxBytes {
				return total, entries, fmt.Errorf("the files are larger than the %d bytes allowed: %w", lim.maxBytes, ErrQuota)
			}
			mode := fs.FileMode(0o600)
			if hdr.Mode&0o111 != 0 {
				mode = 0o700
			}
			// O_EXCL: a name met twice, or anything already there
			// (a link included), is refused, never written through.
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscallNoFollow, mode)
			if err != nil {
				return total, entries, bad("file %.80q: %v", name, err)
			}
			n, err := io.Copy(f, tr)
			total += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if lr.over {
				return total, entries, fmt.Errorf("the files archive is larger than its bounds allow: %w", ErrQuota)
			}
			if err != nil || n != hdr.Size {
				return total, entries, bad("file %.80q is cut short: %v", name, err)
			}
			if !hdr.ModTime.IsZero() {
				_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
			}
		default:
			return total, entries, bad("entry %.80q is of type %q: only directories and regular files are restored", name, hdr.Typeflag)
		}
	}
	// Nothing may follow the archive but zero padding; reading to the end
	// also checks the gzip trailer's CRC.
	rest, err := io.ReadAll(io.LimitReader(lr, 64<<10))
	if err != nil && !lr.over {
		return total, entries, bad("%v", err)
	}
	if lr.over || len(rest) == 64<<10 || bytes.ContainsFunc(rest, func(r rune) bool { return r != 0 }) || r.Len() > 0 {
		return total, entries, bad("data after the archive")
	}
	return total, entries, nil
}

// limitedReader is io.LimitReader that remembers it hit the limit.
type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.over = true
		return 0, io.ErrUnexpectedEOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// stagedFiles is an archive extracted beside the session directory it
// is to replace (stageFiles): commit puts it in place, discard drops it.
type stagedFiles struct {
	dir, stage string
	bytes      int64
	entries    int
	// leftover is why the replaced directory could not be removed after
	// a commit (logged; the restore stands).
	leftover error
}

// stageFiles extracts archive into a fresh directory beside dir (on the
// same file system, so that it can take dir's place by rename); on error
// nothing is left behind and dir is untouched.
func stageFiles(archive []byte, dir string, lim filesLimits) (*stagedFiles, error) {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(parent, ".restore-")
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(stage)
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	n, entries, err := extractArchive(archive, root, lim)
	root.Close()
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	return &stagedFiles{dir: dir, stage: stage, bytes: n, entries: entries}, nil
}

// discard removes the staged files.
func (sf *stagedFiles) discard() { os.RemoveAll(sf.stage) }

// commit replaces the session directory with the staged files: two
// renames, the old directory aside and the new one in its place; if the
// second fails the old one is put back. A process still writing in the
// old directory writes into the copy set aside, which is then removed.
func (sf *stagedFiles) commit() error {
	old := ""
	if _, err := os.Lstat(sf.dir); err == nil {
		old = sf.stage + ".old"
		if err := os.Rename(sf.dir, old); err != nil {
			sf.discard()
			return err
		}
	}
	if err := os.Rename(sf.stage, sf.dir); err != nil {
		sf.discard()
		if old != "" {
			if rerr := os.Rename(old, sf.dir); rerr != nil {
				return fmt.Errorf("%w; putting the old directory back also failed: %v", err, rerr)
			}
		}
		return err
	}
	if old != "" {
		sf.leftover = os.RemoveAll(old)
	}
	return nil
}

// dirFingerprint digests the names, sizes, modes and modification times
// under dir without reading a file: what tells an automatic snapshot that
// a session's files did not change. A missing directory is 0.
func dirFingerprint(dir string, maxEntries int) uint64 {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0
	}
	defer root.Close()
	h := fnv.New64a()
	n := 0
	var b [8]byte
	_ = fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > maxEntries+1 {
			return fs.SkipAll
		}
		io.WriteString(h, p)
		h.Write([]byte{0})
		if fi, err := e.Info(); err == nil {
			binary.LittleEndian.PutUint64(b[:], uint64(fi.Size()))
			h.Write(b[:])
			binary.LittleEndian.PutUint64(b[:], uint64(fi.ModTime().UnixNano()))
			h.Write(b[:])
			binary.LittleEndian.PutUint64(b[:], uint64(fi.Mode()))
			h.Write(b[:])
		}
		return nil
	})
	return h.Sum64() | 1 // never 0, which is "no directory"
}
