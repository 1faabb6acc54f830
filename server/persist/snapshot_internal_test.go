package persist

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFileAtomic: the file appears whole with mode 0600 and no temp
// file is left behind.
func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	for _, data := range []string{"first", "second, longer"} {
		if err := writeFileAtomic(dir, "x.json", []byte(data)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "x.json"))
		if err != nil || string(b) != data {
			t.Fatalf("read %q, %v", b, err)
		}
		fi, _ := os.Stat(filepath.Join(dir, "x.json"))
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v", fi.Mode().Perm())
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("%d entries in the directory", len(entries))
		}
	}
}
