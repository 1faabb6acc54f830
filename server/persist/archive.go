package persist

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
//     the session's directory (two renames, stage.go), so a malformed
//     archive changes nothing.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
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
	"sync"
	"syscall"
	"time"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/internal/confine"
	"github.com/aephost/aep/wire"
)

// Files states a snapshot records (payload files.state).
const (
	filesStored  = "stored"  // the archive is in the store row, or beside a file snapshot
	filesOmitted = "omitted" // not stored; Reason says why
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

// taken is what the reply to a snapshot says of the files of f: local
// for one that carries none (f nil: a file snapshot of a subagent that
// works in its parent's directory, which stays on this host's disk).
func (f *filesInfo) taken() *msg.SnapshotFiles {
	if f == nil {
		return &msg.SnapshotFiles{State: msg.SnapshotFilesStateLocal}
	}
	return f.wire(msg.SnapshotFilesState(f.State))
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
func archiveDir(dir string, lim filesLimits, secrets []Secret) ([]byte, filesInfo) {
	a := &archiver{lim: lim, secrets: secrets}
	if lim.maxBytes <= 0 {
		return a.omit(omitDisabled, 0)
	}
	root, err := os.OpenRoot(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return a.write(nil)
	case err != nil:
		return a.omit(omitUnreadable, 0)
	}
	defer root.Close()
	a.root = root
	if reason, limit := a.measure(); reason != "" {
		return a.omit(reason, limit)
	}
	return a.write(root)
}

// archiver is one run of archiveDir.
type archiver struct {
	lim     filesLimits
	secrets []Secret
	root    *os.Root
	info    filesInfo
	tw      *tar.Writer
	// reason is why the writing walk stopped, when a bound or a secret
	// stopped it.
	reason string
}

// omit ends the run without an archive, for reason; limit is the bound
// passed, if any.
func (a *archiver) omit(reason string, limit int64) ([]byte, filesInfo) {
	a.info.State, a.info.Reason, a.info.Limit = filesOmitted, reason, limit
	return nil, a.info
}

// skip records an entry that is not archived.
func (a *archiver) skip(kind, p string) {
	a.info.SkippedCount++
	if len(a.info.Skipped) < maxSkippedListed {
		a.info.Skipped = append(a.info.Skipped, kind+" "+p)
	}
}

// measure counts entries and bytes from the directory listing alone, and
// returns the bound they pass ("" when none), with its limit.
func (a *archiver) measure() (reason string, limit int64) {
	err := fs.WalkDir(a.root.FS(), ".", a.measureEntry)
	switch {
	case err != nil:
		return omitUnreadable, 0
	case a.info.Entries > a.lim.maxEntries:
		return omitTooMany, int64(a.lim.maxEntries)
	case a.info.Bytes > a.lim.maxBytes:
		return omitTooLarge, a.lim.maxBytes
	}
	return "", 0
}

func (a *archiver) measureEntry(p string, e fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if p == "." {
		return nil
	}
	switch {
	case e.IsDir():
		a.info.Entries++
	case e.Type().IsRegular():
		a.info.Entries++
		fi, err := e.Info()
		if err != nil {
			return err
		}
		a.info.Bytes += fi.Size()
	default:
		a.skip(entryKind(e.Type()), p)
	}
	if a.info.Entries > a.lim.maxEntries || a.info.Bytes > a.lim.maxBytes {
		return fs.SkipAll
	}
	return nil
}

// gzipWriters reuses the compressors of archives: a flate compressor is
// some 1 MiB of tables, and a drain makes one per session at once
// (server.snapshots.drain_parallel), whose garbage otherwise costs the
// drain more than its store writes (docs/PERFORMANCE.md, Drain).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

// write writes the archive of root (nil: an empty one), counting again:
// the directory may change while it is read.
func (a *archiver) write(root *os.Root) ([]byte, filesInfo) {
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	defer func() {
		zw.Reset(io.Discard) // holds no reference to buf
		gzipWriters.Put(zw)
	}()
	a.tw = tar.NewWriter(zw)
	a.info.Entries, a.info.Bytes, a.info.Skipped, a.info.SkippedCount = 0, 0, nil, 0
	if root != nil {
		err := fs.WalkDir(root.FS(), ".", a.writeEntry)
		if reason, limit := a.stoppedBy(err); reason != "" {
			return a.omit(reason, limit)
		}
	}
	if err := a.tw.Close(); err != nil {
		return a.omit(omitUnreadable, 0)
	}
	if err := zw.Close(); err != nil {
		return a.omit(omitUnreadable, 0)
	}
	sum := sha256.Sum256(buf.Bytes())
	a.info.State, a.info.ArchiveBytes, a.info.SHA256 = filesStored, int64(buf.Len()), hex.EncodeToString(sum[:])
	return buf.Bytes(), a.info
}

// stoppedBy says why the writing walk, which returned err, leaves no
// archive ("" when it completed), with the bound passed.
func (a *archiver) stoppedBy(err error) (reason string, limit int64) {
	switch {
	case a.reason == omitTooMany:
		return a.reason, int64(a.lim.maxEntries)
	case a.reason == omitTooLarge:
		return a.reason, a.lim.maxBytes
	case a.reason != "":
		return a.reason, 0
	case err != nil:
		return omitUnreadable, 0
	}
	return "", 0
}

func (a *archiver) writeEntry(p string, e fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if p == "." {
		return nil
	}
	if !e.IsDir() && !e.Type().IsRegular() {
		a.skip(entryKind(e.Type()), p)
		return nil
	}
	if a.info.Entries++; a.info.Entries > a.lim.maxEntries {
		a.reason = omitTooMany
		return fs.SkipAll
	}
	if e.IsDir() {
		return a.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o700, Format: tar.FormatPAX})
	}
	return a.writeFile(p)
}

// writeFile adds root's regular file p, unless it changed into something
// else (skipped), passes the byte bound or holds a secret (the walk stops).
func (a *archiver) writeFile(p string) error {
	data, mode, mtime, err := readRegular(a.root, p, a.lim.maxBytes-a.info.Bytes)
	switch {
	case errors.Is(err, errTooLarge):
		a.reason = omitTooLarge
		return fs.SkipAll
	case errors.Is(err, errNotRegular):
		a.info.Entries--
		a.skip("changed", p)
		return nil
	case err != nil:
		return err
	}
	if what := findSecret(data, a.secrets); what != "" {
		a.reason = omitSecret
		return fs.SkipAll
	}
	a.info.Bytes += int64(len(data))
	if err := a.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = a.tw.Write(data)
	return err
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

// badArchive is an [ErrFilesArchive] saying what is wrong.
func badArchive(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFilesArchive, fmt.Sprintf(format, args...))
}

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
	// A bytes.Reader is an io.ByteReader, so gzip reads no further than
	// its one member and what follows it can be seen.
	r := bytes.NewReader(archive)
	zr, err := gzip.NewReader(r)
	if err != nil {
		return 0, 0, badArchive("not gzip: %v", err)
	}
	zr.Multistream(false)
	// Headers and padding are bounded with the entries: a stream of empty
	// blocks or headers cannot run on past the bounds.
	budget := lim.maxBytes + int64(lim.maxEntries+2)*(2*512+maxArchiveName+512) + 2*512
	x := &extractor{root: root, lim: lim, lr: &limitedReader{r: zr, n: budget}, seen: map[string]bool{}}
	x.tr = tar.NewReader(x.lr)
	for {
		hdr, err := x.tr.Next()
		if err == io.EOF {
			break
		}
		if err := x.entry(hdr, err); err != nil {
			return x.total, x.entries, err
		}
	}
	return x.total, x.entries, x.end(r)
}

// extractor is one run of extractArchive.
type extractor struct {
	root    *os.Root
	lim     filesLimits
	lr      *limitedReader
	tr      *tar.Reader
	total   int64
	entries int
	seen    map[string]bool
}

// entry extracts the entry of header hdr, which tar returned with err.
func (x *extractor) entry(hdr *tar.Header, err error) error {
	if x.lr.over {
		return fmt.Errorf("the files archive is larger than its bounds allow (%d bytes of files, %d entries): %w", x.lim.maxBytes, x.lim.maxEntries, ErrQuota)
	}
	if err != nil {
		return badArchive("%v", err)
	}
	if x.entries++; x.entries > x.lim.maxEntries {
		return fmt.Errorf("the files archive holds more than %d entries (server.snapshots.files_max_entries): %w", x.lim.maxEntries, wire.ErrDenied)
	}
	name, err := archiveEntryName(hdr.Name, hdr.Typeflag == tar.TypeDir)
	if err != nil {
		return badArchive("%v", err)
	}
	if x.seen[name] {
		return badArchive("entry %.80q appears twice", name)
	}
	x.seen[name] = true
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(hdr, name)
	case tar.TypeReg:
		return x.file(hdr, name)
	}
	return badArchive("entry %.80q is of type %q: only directories and regular files are restored", name, hdr.Typeflag)
}

func (x *extractor) dir(hdr *tar.Header, name string) error {
	if hdr.Size != 0 {
		return badArchive("directory %.80q has a size", name)
	}
	if err := x.root.Mkdir(name, 0o700); err != nil {
		return badArchive("directory %.80q: %v", name, err)
	}
	return nil
}

func (x *extractor) file(hdr *tar.Header, name string) error {
	if hdr.Size < 0 {
		return badArchive("file %.80q has a negative size", name)
	}
	if x.total+hdr.Size > x.lim.maxBytes {
		return fmt.Errorf("the files are larger than the %d bytes allowed: %w", x.lim.maxBytes, ErrQuota)
	}
	mode := fs.FileMode(0o600)
	if hdr.Mode&0o111 != 0 {
		mode = 0o700
	}
	// O_EXCL: a name met twice, or anything already there
	// (a link included), is refused, never written through.
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscallNoFollow, mode)
	if err != nil {
		return badArchive("file %.80q: %v", name, err)
	}
	n, err := io.Copy(f, x.tr)
	x.total += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if x.lr.over {
		return fmt.Errorf("the files archive is larger than its bounds allow: %w", ErrQuota)
	}
	if err != nil || n != hdr.Size {
		return badArchive("file %.80q is cut short: %v", name, err)
	}
	if !hdr.ModTime.IsZero() {
		_ = x.root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

// end checks what follows the archive's last entry: nothing may but zero
// padding, and reading to the end also checks the gzip trailer's CRC; r
// is the archive's reader, which must be spent.
func (x *extractor) end(r *bytes.Reader) error {
	rest, err := io.ReadAll(io.LimitReader(x.lr, 64<<10))
	if err != nil && !x.lr.over {
		return badArchive("%v", err)
	}
	if x.lr.over || len(rest) == 64<<10 || bytes.ContainsFunc(rest, func(r rune) bool { return r != 0 }) || r.Len() > 0 {
		return badArchive("data after the archive")
	}
	return nil
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
