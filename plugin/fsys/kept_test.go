package fsys

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/store"
)

// waitKept waits until st keeps want files open (store.Kept): a node's
// kept file goes when the kernel forgets the node, which it tells the
// plugin in its own time.
func waitKept(t *testing.T, st *store.Store, want int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); st.Stats().Kept != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the store keeps %d files open, want %d", st.Stats().Kept, want)
		}
	}
}

// Rule C3 through the mount: a file read (and so kept open by its node),
// then written by a cached writer served from the host file, reads what
// the writer wrote: its next open does not read the kept store copy, which
// the writer's release left a stub. Without the store's stub generation
// the prefill of that open stored the stub's "old content" and zeros.
func TestC3_AReadAfterAHostWriterReadsItsWritesNotAKeptCopy(t *testing.T) {
	st := newOneFileStore(t, consistency.Cached, "old content")
	if !st.ServesFromHost() {
		t.Skip("the test folder's file system is not one cached writers are served from the host on")
	}
	m := mountStore(t, st)
	mnt := filepath.Join(m.Mountpoint(), "f")
	if b, err := os.ReadFile(mnt); err != nil || string(b) != "old content" {
		t.Fatalf("first read: %q %v", b, err)
	}
	waitKept(t, st, 1)
	// The reader's RELEASE comes after its close, in the kernel's own
	// time; a writer opening while it is still open would join the
	// reader's store copy instead of the host file.
	if !waitReleases(t, st, 1) {
		t.FailNow()
	}
	const want = "NEW content and more"
	if err := os.WriteFile(mnt, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := st.Stats().Ops["write"]; n != 0 {
		t.Fatalf("the writer was not served from the host (%d WRITEs)", n)
	}
	if !waitReleases(t, st, 2) {
		t.FailNow()
	}
	if b, err := os.ReadFile(mnt); err != nil || string(b) != want {
		t.Fatalf("read after the writer: %q %v, want %q", b, err, want)
	}
}

// Rules C2, C3, through a mount: a file the host empties while a container
// writer served from the host file has it open reads empty after the
// writer's close, not as the store copy was before. (With the copy left
// as it was, read "old content" for good: its base was the host's.)
func TestC3_AFileTheHostEmptiesUnderAHostWriterReadsEmptyAfterIt(t *testing.T) {
	st := newOneFileStore(t, consistency.Cached, "old content")
	if !st.ServesFromHost() {
		t.Skip("the test folder's file system is not one cached writers are served from the host on")
	}
	m := mountStore(t, st)
	mnt := filepath.Join(m.Mountpoint(), "f")
	if b, err := os.ReadFile(mnt); err != nil || string(b) != "old content" {
		t.Fatalf("first read: %q %v", b, err)
	}
	if !waitReleases(t, st, 1) {
		t.FailNow()
	}
	w, err := os.OpenFile(mnt, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(st.Host().Path(), "f"), 0); err != nil {
		w.Close()
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !waitReleases(t, st, 2) {
		t.FailNow()
	}
	if b, err := os.ReadFile(mnt); err != nil || len(b) != 0 {
		t.Fatalf("read after the writer: %q %v, want nothing (the host file is empty)", b, err)
	}
}

// A file removed in the container has its kept store file closed (its
// node forgotten), so its space is freed as on a native file system. Three
// reads leave one file kept, not one per open. (That the next open is
// served from it, not opened again, is TestKeptFileServesTheNextOpen's, in
// package store.)
func TestAKeptFileGoesWithTheFile(t *testing.T) {
	st := newOneFileStore(t, consistency.Delegated, "content")
	m := mountStore(t, st)
	mnt := filepath.Join(m.Mountpoint(), "f")
	for range 3 {
		if b, err := os.ReadFile(mnt); err != nil || string(b) != "content" {
			t.Fatalf("read: %q %v", b, err)
		}
	}
	waitKept(t, st, 1)
	if err := os.Remove(mnt); err != nil {
		t.Fatal(err)
	}
	waitKept(t, st, 0)
}
