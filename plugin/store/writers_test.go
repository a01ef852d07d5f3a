package store

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// rule D4 for a file renamed while open for writing, when its writeback
// hold has not followed the rename by the file's release: Renamed, which
// the FUSE layer calls after each rename, counts the rename and then moves
// the holds (followRenames), and the release can come in between, or the
// move can have failed to journal the new name. Release moves the hold to
// the name the file has now before it lets go, so what the kernel wrote
// through passthrough after the rename, which the plugin never saw, is
// written back under that name. Without it the hold was released on the
// old name, the new name had been written back clean after the rename,
// and the later writes never reached the host.
func TestD4_AWriterRenamedWhileOpenIsWrittenBackUnderItsNewName(t *testing.T) {
	s := openTestStore(t, consistency.Delegated, func(h string) {
		if err := os.WriteFile(filepath.Join(h, "a"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err := s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var mu sync.Mutex
	name := "a" // the file's name as the FUSE tree has it
	relNow := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return name, true
	}
	f, err := s.Open(ctx, "a", unix.O_WRONLY, relNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.BeginWrite(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename(ctx, "a", "b", 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	name = "b"
	mu.Unlock()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(s.Host().Path(), "b")); err != nil || string(got) != "old" {
		t.Fatalf("host b after the rename: %q, %v; want %q", got, err, "old")
	}
	// The kernel's passthrough write, straight into the store file.
	if err := os.WriteFile(filepath.Join(s.Local().Path(), "b"), []byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	// Renamed's first step, as the FUSE layer calls it after a rename; the
	// release comes before its followRenames reaches f (or that failed).
	s.heldWriters.renames.Add(1)
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(s.Host().Path(), "b")); err != nil || string(got) != "new" {
		t.Fatalf("host b after the writer's release: %q, %v; want %q, written after the rename", got, err, "new")
	}
	if _, err := os.Lstat(filepath.Join(s.Host().Path(), "a")); !os.IsNotExist(err) {
		t.Fatalf("host a after the writeback: %v; want it gone (renamed to b)", err)
	}
}
