package persist

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/aephost/aep/gen/msg"
)

// writeCloneSource writes the tree TestCloneTree clones: files big and
// small, one empty, and a symbolic link.
func writeCloneSource(t *testing.T, src string, big []byte) {
	t.Helper()
	for p, b := range map[string][]byte{"a.txt": []byte("a"), "sub/deep/b.bin": big, "empty": nil} {
		os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o700)
		if err := os.WriteFile(filepath.Join(src, p), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
}

// cloneTree copies a session directory: files and directories, never a
// symbolic link; each copy is the fork's own. On a file system with
// reflinks (set AEP_TEST_REFLINK_DIR to a directory on XFS with
// reflink=1 or on btrfs) every file is a clone; elsewhere a copy.
func TestCloneTree(t *testing.T) {
	cases := []struct {
		name, base string
		want       msg.SessionForkRespCopy
	}{{"temp dir", "", ""}}
	if d := os.Getenv("AEP_TEST_REFLINK_DIR"); d != "" {
		cases = append(cases, struct {
			name, base string
			want       msg.SessionForkRespCopy
		}{"reflink file system", d, msg.SessionForkRespCopyReflink})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, err := os.MkdirTemp(tc.base, "clone-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(root)
			src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
			writeCloneSource(t, src, big)
			mode, err := cloneTree(src, dst)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && mode != tc.want {
				t.Fatalf("mode %s, want %s", mode, tc.want)
			}
			if mode != msg.SessionForkRespCopyReflink && mode != msg.SessionForkRespCopyCopy {
				t.Fatalf("mode %q", mode)
			}
			got, err := os.ReadFile(filepath.Join(dst, "sub/deep/b.bin"))
			if err != nil || !bytes.Equal(got, big) {
				t.Fatalf("clone differs (%v)", err)
			}
			if _, err := os.Lstat(filepath.Join(dst, "link")); !os.IsNotExist(err) {
				t.Fatalf("the symlink was copied: %v", err)
			}
			// Writing the copy leaves the source as it was.
			if err := os.WriteFile(filepath.Join(dst, "sub/deep/b.bin"), []byte("changed"), 0o600); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(src, "sub/deep/b.bin")); !bytes.Equal(b, big) {
				t.Fatal("writing the clone changed the source")
			}
			empty, err := cloneTree(filepath.Join(src, "sub"), filepath.Join(root, "none"))
			if err != nil || empty == msg.SessionForkRespCopyNone {
				t.Fatalf("a tree with a file: %s %v", empty, err)
			}
			os.MkdirAll(filepath.Join(root, "bare/x"), 0o700)
			if m, err := cloneTree(filepath.Join(root, "bare"), filepath.Join(root, "bare2")); err != nil || m != msg.SessionForkRespCopyNone {
				t.Fatalf("a tree without files: %s %v", m, err)
			}
		})
	}
}
