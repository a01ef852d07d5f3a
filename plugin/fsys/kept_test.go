package fsys

import (
	"os"
	"path/filepath"
	"sync/atomic"
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

// newReadCachedMount mounts a cached store of one file, f ("old content"),
// where a writer is served from the host file, and reads f through the
// mount (so its store copy is whole) until the read is released: a writer
// opening while the reader is still counted would join the reader's store
// copy instead of the host file. It returns the store and f's path in the
// mount.
func newReadCachedMount(t *testing.T) (*store.Store, string) {
	t.Helper()
	st := newOneFileStore(t, consistency.Cached, "old content")
	if !st.ServesFromHost() {
		t.Skip("the test folder's file system is not one cached writers are served from the host on")
	}
	mnt := filepath.Join(mountStore(t, st).Mountpoint(), "f")
	readReleased(t, st, mnt, "old content")
	return st, mnt
}

// Rule C3 through the mount: a file read (and so kept open by its node),
// then written by a cached writer served from the host file, reads what
// the writer wrote: its next open does not read the kept store copy, which
// the writer's release left a stub. Without the store's stub generation
// the prefill of that open stored the stub's "old content" and zeros.
func TestC3_AReadAfterAHostWriterReadsItsWritesNotAKeptCopy(t *testing.T) {
	st, mnt := newReadCachedMount(t)
	waitKept(t, st, 1)
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
	st, mnt := newReadCachedMount(t)
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

// Rules C3, D4: an unmount drops the requests the server has not read yet,
// so a RELEASE the kernel queued after a container's close can be lost.
// Unmount releases such a handle itself: a cached writer served from the
// host file leaves a store copy that is the host's (a stub of its size), as
// its release would have. (Seen in CI: TestD4_Fault_StoreDiskFull/cached
// read "" after a reopen, the copy as the create had left it.) Without
// releaseLeftover: "store copy has 0 bytes".
func TestUnmountReleasesAHandleWhoseReleaseWasDropped(t *testing.T) {
	st := newOneFileStore(t, consistency.Cached, "old content")
	if !st.ServesFromHost() {
		t.Skip("the test folder's file system is not one cached writers are served from the host on")
	}
	m, err := New(st, filepath.Join(t.TempDir(), "mnt"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(m.Mountpoint(), "new")
	var dropped atomic.Int32
	testHookDropRelease = func() bool { dropped.Add(1); return true }
	t.Cleanup(func() { testHookDropRelease = nil })
	if err := os.WriteFile(mnt, []byte("written"), 0o644); err != nil {
		m.Unmount()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); dropped.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			m.Unmount()
			t.Fatal("no RELEASE came in 10 s")
		}
	}
	testHookDropRelease = nil
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if n := st.Stats().Ops["release"]; n != 1 {
		t.Errorf("%d releases after the unmount, want 1 (the dropped one, done by Unmount)", n)
	}
	lst, err := st.Lstat("new")
	if err != nil {
		t.Fatal(err)
	}
	if lst.Size != int64(len("written")) {
		t.Errorf("store copy has %d bytes, want %d (the host file's)", lst.Size, len("written"))
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
