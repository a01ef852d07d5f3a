package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// The store keeps the directories it works in open (hostpath KeepParents):
// after one operation in a/b, a/b is not looked up again. Seen from outside,
// a/b renamed behind the store's back is still found under its old name.
// (The store's tree changes only through the store; this is what makes
// keeping them safe, and why docs/troubleshooting.md says not to edit it.)
func TestStoreKeepsItsDirectoriesOpen(t *testing.T) {
	r := newStoreRig(t, consistency.Delegated, writeback.Options{Delay: time.Hour}, func(h string) {
		os.MkdirAll(filepath.Join(h, "a", "b"), 0o755)
		os.WriteFile(filepath.Join(h, "a", "b", "f"), []byte("x"), 0o644)
	})
	for _, dir := range []string{"", "a", "a/b"} {
		if err := r.s.EnsurePopulated(dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.s.Lstat("a/b/f"); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(r.base, "tree")
	if err := os.Rename(filepath.Join(tree, "a"), filepath.Join(tree, "z")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.Lstat("a/b/f"); err != nil {
		t.Errorf("Lstat a/b/f after a/b's second use: %v; want the directory kept open from the first", err)
	}
}
