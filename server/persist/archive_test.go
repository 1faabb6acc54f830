package persist

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aephost/aep/wire"
)

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func file(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(body))}, body: body}
}

func dir(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o700}}
}

// makeArchive writes entries as a gzip-compressed tar stream, as they are,
// whatever they say.
func makeArchive(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipped compresses raw bytes (for archives tar.Writer refuses to write).
func gzipped(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	return buf.Bytes()
}

// listTree returns "path" for directories and "path=content" for files
// under dir, sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		switch {
		case e.IsDir():
			out = append(out, rel+"/")
		case e.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, rel+"="+string(b))
		default:
			out = append(out, rel+"?"+e.Type().String())
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

var testLimits = filesLimits{maxBytes: 1 << 20, maxEntries: 100}

// TestArchiveRoundTrip: directories and regular files come back with their
// contents, execute bit and times; links, fifos and sockets are skipped
// and listed.
func TestArchiveRoundTrip(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "a", "b"), 0o755))
	must(os.MkdirAll(filepath.Join(src, "empty"), 0o755))
	must(os.WriteFile(filepath.Join(src, "top.txt"), []byte("top"), 0o644))
	must(os.WriteFile(filepath.Join(src, "a", "b", "deep.txt"), []byte("deep"), 0o644))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "zero"), nil, 0o644))
	must(os.Symlink("/etc/passwd", filepath.Join(src, "a", "link")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(os.Chtimes(filepath.Join(src, "top.txt"), when, when))

	archive, info := archiveDir(src, testLimits, nil)
	if info.State != filesStored || archive == nil {
		t.Fatalf("archive: %+v", info)
	}
	if info.Entries != 7 || info.Bytes != int64(len("top")+len("deep")+len("#!/bin/sh\n")) {
		t.Fatalf("counted %d entries, %d bytes", info.Entries, info.Bytes)
	}
	if info.SkippedCount != 2 || !slices.Equal(info.Skipped, []string{"symlink a/link", "fifo fifo"}) {
		t.Fatalf("skipped %d %v", info.SkippedCount, info.Skipped)
	}
	parent := t.TempDir()
	dst := filepath.Join(parent, "h-dst")
	must(os.MkdirAll(dst, 0o700))
	must(os.WriteFile(filepath.Join(dst, "old.txt"), []byte("replaced"), 0o600))
	sf, err := stageFiles(archive, dst, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if got := listTree(t, dst); !slices.Equal(got, []string{"old.txt=replaced"}) {
		t.Fatalf("staging touched the directory: %v", got)
	}
	must(sf.commit())
	want := []string{"a/", "a/b/", "a/b/deep.txt=deep", "empty/", "run.sh=#!/bin/sh\n", "top.txt=top", "zero="}
	if got := listTree(t, dst); !slices.Equal(got, want) {
		t.Fatalf("restored %q, want %q", got, want)
	}
	if sf.bytes != info.Bytes || sf.entries != info.Entries {
		t.Fatalf("restored %d bytes %d entries, archived %d %d", sf.bytes, sf.entries, info.Bytes, info.Entries)
	}
	fi, _ := os.Stat(filepath.Join(dst, "run.sh"))
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("run.sh mode %v", fi.Mode())
	}
	fi, _ = os.Stat(filepath.Join(dst, "top.txt"))
	if fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(when) {
		t.Fatalf("top.txt mode %v time %v", fi.Mode(), fi.ModTime())
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Fatalf("left beside the directory: %v", ents)
	}
	// A missing directory is an empty archive, which empties the target.
	archive, info = archiveDir(filepath.Join(src, "absent"), testLimits, nil)
	if info.State != filesStored || info.Entries != 0 {
		t.Fatalf("missing directory: %+v", info)
	}
	sf, err = stageFiles(archive, dst, testLimits)
	must(err)
	must(sf.commit())
	if got := listTree(t, dst); len(got) != 0 {
		t.Fatalf("after an empty archive: %v", got)
	}
}

// TestArchiveOmitted: a directory past a bound, or holding a secret, is
// not archived in part: the files part is omitted with its reason.
func TestArchiveOmitted(t *testing.T) {
	src := t.TempDir()
	for i, body := range []string{"aaaa", "bbbb", "the-secret-canary"} {
		if err := os.WriteFile(filepath.Join(src, string(rune('a'+i))), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		lim     filesLimits
		secrets []Secret
		reason  string
		limit   int64
	}{
		{"disabled", filesLimits{maxBytes: 0, maxEntries: 10}, nil, omitDisabled, 0},
		{"too large", filesLimits{maxBytes: 20, maxEntries: 10}, nil, omitTooLarge, 20},
		{"too many", filesLimits{maxBytes: 1 << 20, maxEntries: 2}, nil, omitTooMany, 2},
		{"secret", testLimits, []Secret{{"a test secret", "secret-canary"}}, omitSecret, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive, info := archiveDir(src, tc.lim, tc.secrets)
			if archive != nil || info.State != filesOmitted || info.Reason != tc.reason || info.Limit != tc.limit {
				t.Fatalf("got %d bytes, %+v; want omitted %s (limit %d)", len(archive), info, tc.reason, tc.limit)
			}
		})
	}
	if _, info := archiveDir(src, filesLimits{maxBytes: 25, maxEntries: 3}, nil); info.State != filesStored {
		t.Fatalf("at the bounds exactly: %+v", info)
	}
}

// TestExtractRefusesHostileArchives: every archive that is not plain
// directories and regular files under clean relative names within the
// bounds is refused, and the session directory is left as it was.
func TestExtractRefusesHostileArchives(t *testing.T) {
	valid := makeArchive(t, dir("d/"), file("d/x", "hello"))
	var rawDot bytes.Buffer // tar.Writer keeps these names as given
	{
		tw := tar.NewWriter(&rawDot)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../../escape", Size: 1, Mode: 0o600})
		tw.Write([]byte("x"))
		tw.Close()
	}
	withTrailer := append(append([]byte{}, makeArchive(t, file("a", "1"))...), []byte("trailing garbage")...)
	var trailingInTar bytes.Buffer
	{
		zw := gzip.NewWriter(&trailingInTar)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "a", Size: 1, Mode: 0o600})
		tw.Write([]byte("1"))
		tw.Close()
		zw.Write([]byte("not zero padding"))
		zw.Close()
	}
	badCRC := append([]byte{}, valid...)
	badCRC[len(badCRC)-8] ^= 0xff
	for _, tc := range []struct {
		name    string
		archive []byte
		lim     filesLimits
		want    error
	}{
		{"parent escape", makeArchive(t, file("../x", "owned")), testLimits, ErrFilesArchive},
		{"deep escape", gzipped(t, rawDot.Bytes()), testLimits, ErrFilesArchive},
		{"escape inside", makeArchive(t, dir("a/"), file("a/../../x", "owned")), testLimits, ErrFilesArchive},
		{"absolute", makeArchive(t, file("/tmp/aep-owned", "owned")), testLimits, ErrFilesArchive},
		{"absolute dir", makeArchive(t, dir("/etc/")), testLimits, ErrFilesArchive},
		{"dot", makeArchive(t, file("./x", "x")), testLimits, ErrFilesArchive},
		{"double slash", makeArchive(t, dir("a/"), file("a//x", "x")), testLimits, ErrFilesArchive},
		{"empty name", makeArchive(t, dir("./")), testLimits, ErrFilesArchive},
		{"long name", makeArchive(t, file(strings.Repeat("n", maxArchiveName+1), "x")), testLimits, ErrFilesArchive},
		{"symlink", makeArchive(t, tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}}), testLimits, ErrFilesArchive},
		{"symlink then through it", makeArchive(t, tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: ".."}}, file("l/x", "owned")), testLimits, ErrFilesArchive},
		{"hard link", makeArchive(t, file("a", "1"), tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "b", Linkname: "a"}}), testLimits, ErrFilesArchive},
		{"device", makeArchive(t, tarEntry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}), testLimits, ErrFilesArchive},
		{"fifo", makeArchive(t, tarEntry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "p"}}), testLimits, ErrFilesArchive},
		{"duplicate file", makeArchive(t, file("a", "1"), file("a", "2")), testLimits, ErrFilesArchive},
		{"file over dir", makeArchive(t, dir("a/"), file("a", "2")), testLimits, ErrFilesArchive},
		{"missing parent", makeArchive(t, file("nodir/x", "1")), testLimits, ErrFilesArchive},
		{"oversized", makeArchive(t, file("big", strings.Repeat("x", 2048))), filesLimits{maxBytes: 1024, maxEntries: 10}, ErrQuota},
		{"oversized in sum", makeArchive(t, file("a", strings.Repeat("x", 600)), file("b", strings.Repeat("x", 600))), filesLimits{maxBytes: 1024, maxEntries: 10}, ErrQuota},
		{"too many entries", makeArchive(t, file("a", "1"), file("b", "2"), file("c", "3")), filesLimits{maxBytes: 1024, maxEntries: 2}, wire.ErrDenied},
		{"truncated", valid[:len(valid)/2], testLimits, ErrFilesArchive},
		{"truncated body", makeArchive(t, file("a", strings.Repeat("x", 4096)))[:60], testLimits, ErrFilesArchive},
		{"bad checksum", badCRC, testLimits, ErrFilesArchive},
		{"not gzip", []byte("plain text, not an archive"), testLimits, ErrFilesArchive},
		{"empty", nil, testLimits, ErrFilesArchive},
		{"garbage after gzip", withTrailer, testLimits, ErrFilesArchive},
		{"garbage after tar", trailingInTar.Bytes(), testLimits, ErrFilesArchive},
		{"gzip of garbage", gzipped(t, bytes.Repeat([]byte("nonsense"), 200)), testLimits, ErrFilesArchive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "h-session")
			if err := os.MkdirAll(dst, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, "mine.txt"), []byte("kept"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := stageFiles(tc.archive, dst, tc.lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if got := listTree(t, parent); !slices.Equal(got, []string{"h-session/", "h-session/mine.txt=kept"}) {
				t.Fatalf("after a refused archive: %v", got)
			}
			if _, err := os.Lstat("/tmp/aep-owned"); err == nil {
				t.Fatal("an absolute entry was written")
			}
		})
	}
}

// TestExtractStaysInRoot: even into a directory holding a link out, an
// archive cannot write through it (the os.Root behind the name checks).
func TestExtractStaysInRoot(t *testing.T) {
	outside := t.TempDir()
	in := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(in, "out")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(in)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, _, err = extractArchive(makeArchive(t, file("out/x", "owned")), root, testLimits)
	if !errors.Is(err, ErrFilesArchive) {
		t.Fatalf("got %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the root: %v", ents)
	}
}

// rawTar is the tar stream of entries, uncompressed.
func rawTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return buf.Bytes()
}

// FuzzExtractArchive: no input makes the reader panic, write outside its
// root, or write past its bounds. With wrap set the input is a tar stream
// the fuzzer shapes, compressed here, so mutations reach the tar reader
// past gzip's checksum; without it the input is the archive as stored.
func FuzzExtractArchive(f *testing.F) {
	f.Add(makeArchive(f, dir("d/"), file("d/x", "hello"), file("y", "")), false)
	f.Add(makeArchive(f, file("../x", "owned")), false)
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, false)
	f.Add([]byte{}, false)
	f.Add(rawTar(f, dir("d/"), file("d/x", "hello"), file("y", "")), true)
	f.Add(rawTar(f, tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/"}}, file("l/x", "y")), true)
	f.Add(rawTar(f, file("a", strings.Repeat("x", 3000))), true)
	f.Add(rawTar(f, tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("p/", 60) + "f", Size: 1, Mode: 0o755, Format: tar.FormatPAX}, body: "x"}), true)
	lim := filesLimits{maxBytes: 2048, maxEntries: 8}
	f.Fuzz(func(t *testing.T, data []byte, wrap bool) {
		if wrap {
			data = gzipped(t, data)
		}
		parent := t.TempDir()
		in := filepath.Join(parent, "root")
		if err := os.Mkdir(in, 0o700); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(in)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		n, entries, err := extractArchive(data, root, lim)
		if err == nil && (n > lim.maxBytes || entries > lim.maxEntries) {
			t.Fatalf("accepted %d bytes, %d entries past the bounds", n, entries)
		}
		if err != nil && !errors.Is(err, ErrFilesArchive) && !errors.Is(err, ErrQuota) && !errors.Is(err, wire.ErrDenied) {
			t.Fatalf("an error of no known kind: %v", err)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 1 {
			t.Fatalf("written beside the root: %v", ents)
		}
		var total int64
		count := 0
		filepath.WalkDir(in, func(p string, e fs.DirEntry, err error) error {
			if err != nil || p == in {
				return nil
			}
			count++
			if !e.IsDir() && !e.Type().IsRegular() {
				t.Fatalf("made a %v: %s", e.Type(), p)
			}
			if fi, err := e.Info(); err == nil && e.Type().IsRegular() {
				total += fi.Size()
			}
			return nil
		})
		if total > lim.maxBytes || count > lim.maxEntries {
			t.Fatalf("wrote %d bytes, %d entries past the bounds", total, count)
		}
	})
}
