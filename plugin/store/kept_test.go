package store

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// keptRig is a store over a host folder holding f, populated, with what an
// fsys node for f would pass to OpenKept.
type keptRig struct {
	rig  *storeRig
	s    *Store
	host string
	ino  uint64 // f's store inode: the node's inode number
}

func newKeptRig(t *testing.T, st consistency.State, content string) *keptRig {
	t.Helper()
	r := newStoreRig(t, st, writeback.Options{}, func(h string) {
		os.WriteFile(filepath.Join(h, "f"), []byte(content), 0o644)
	})
	if err := r.s.EnsurePopulated(""); err != nil {
		t.Fatal(err)
	}
	lst, err := r.s.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	return &keptRig{rig: r, s: r.s, host: r.host, ino: lst.Ino}
}

func relF() (string, bool) { return "f", true }

// open is a read-only open of f as the node would make it, keeping k.
func (r *keptRig) open(t *testing.T, k *Kept) (*File, *Kept) {
	t.Helper()
	f, nk, err := r.s.OpenKept(context.Background(), "f", unix.O_RDONLY|oLargefile, relF, r.ino, k)
	if err != nil {
		t.Fatal(err)
	}
	return f, nk
}

// keepFirst is the first read-only open of f, which must keep its store
// file (a plain open of a whole regular file).
func (r *keptRig) keepFirst(t *testing.T) (*File, *Kept) {
	t.Helper()
	f, k := r.open(t, nil)
	if k == nil {
		t.Fatal("a plain read-only open of a whole regular file kept nothing")
	}
	return f, k
}

func readAll(t *testing.T, f *File) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := f.ReadAt(buf, 0)
	if err != nil && n == 0 {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// A second read-only open of a file is served from the descriptor the first
// kept: the same file, no open of the store copy. Without keeping: "a
// second open opened the store file again".
func TestKeptFileServesTheNextOpen(t *testing.T) {
	r := newKeptRig(t, consistency.Delegated, "content")
	f1, k := r.keepFirst(t)
	fd := f1.Fd()
	if got := readAll(t, f1); got != "content" {
		t.Fatalf("first open read %q", got)
	}
	f1.Release()
	f2, k2 := r.open(t, k)
	defer f2.Release()
	if k2 != k || f2.Fd() != fd {
		t.Fatalf("a second open opened the store file again (fd %d, kept %d)", f2.Fd(), fd)
	}
	if got := readAll(t, f2); got != "content" {
		t.Fatalf("second open read %q", got)
	}
	k.Drop()
}

// What a writer changes in place is read through the kept descriptor, as
// through a new one (rule D2's writes, read back in the container).
func TestKeptFileSeesWritesInPlace(t *testing.T) {
	r := newKeptRig(t, consistency.Delegated, "old")
	f1, k := r.keepFirst(t)
	f1.Release()
	defer k.Drop()
	w, err := r.s.Open(context.Background(), "f", unix.O_WRONLY|unix.O_TRUNC, relF)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(context.Background(), []byte("new and longer"), 0); err != nil {
		t.Fatal(err)
	}
	w.Release()
	f2, k2 := r.open(t, k)
	defer f2.Release()
	if k2 != k {
		t.Fatal("a write in place dropped the kept file")
	}
	if got := readAll(t, f2); got != "new and longer" {
		t.Fatalf("read %q after the write, want %q", got, "new and longer")
	}
}

// newHostWriterRig is a cached store whose file f (content) was read whole
// and is kept (k), now open by a writer served from the host file (w), as
// the kernel's passthrough open makes it. It skips where the test folder's
// file system is not one cached writers are served from the host on.
func newHostWriterRig(t *testing.T, content string) (*keptRig, *Kept, *File) {
	t.Helper()
	r := newCachedHostRig(t, content)
	f1, k := r.keepFirst(t)
	if got := readAll(t, f1); got != content {
		t.Fatalf("first read %q", got)
	}
	f1.Release()
	return r, k, r.hostWriter(t, "", 0) // if it fails, the store's close closes k's file

}

// newCachedHostRig is a cached keptRig whose writers are served from the
// host file, or skips.
func newCachedHostRig(t *testing.T, content string) *keptRig {
	t.Helper()
	r := newKeptRig(t, consistency.Cached, content)
	if !r.s.ServesFromHost() {
		t.Skip("the test folder's file system is not one cached writers are served from the host on")
	}
	return r
}

// hostWriter opens f for writing as the kernel's passthrough open of a
// cached writer would be served (from the host file), and writes data at
// off into the host file as the kernel would.
func (r *keptRig) hostWriter(t *testing.T, data string, off int64) *File {
	t.Helper()
	w, err := r.s.Open(context.Background(), "f", unix.O_WRONLY, relF)
	if err != nil {
		t.Fatal(err)
	}
	if !w.HostPassthrough() {
		t.Fatal("the writer may not be served from the host file")
	}
	if err := w.ServeFromHost(); err != nil {
		t.Fatal(err)
	}
	if data != "" {
		if _, err := unix.Pwrite(w.HostFd(), []byte(data), off); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// Rule C3: a cached writer served from the host file leaves the store copy
// a stub at its release (restub), in place. A file kept before must not
// serve the next open: it would read the stub, not what the writer wrote.
// Without the stub generation: "read \"old\\x00\"".
func TestC3_AFileKeptBeforeAHostWriterIsNotReadAfterIt(t *testing.T) {
	r, k, w := newHostWriterRig(t, "old")
	defer k.Drop()
	// The kernel's writes, straight to the host file.
	if _, err := unix.Pwrite(w.HostFd(), []byte("new!"), 0); err != nil {
		t.Fatal(err)
	}
	w.Release()

	f2, k2 := r.open(t, k)
	defer f2.Release()
	if got := readAll(t, f2); got != "new!" {
		t.Fatalf("read %q after the host writer's release, want %q", got, "new!")
	}
	if k2 == k {
		t.Error("the file kept before the writer still serves opens")
	}
	k2.Drop()
}

// Rules C2, C3: a cached writer served from the host file whose host file
// ends up empty (truncated on the host while the container had it open)
// leaves an empty store copy at its release, not the content the copy had
// before. The copy takes the host's size, times and base there, so nothing
// would ever fetch it again: a copy left whole with the old content would
// be read for good. (Broken once: restub relied on stubFd to give the copy
// its size, and stubFd skipped an empty file, since a populate creates
// one empty anyway.)
func TestC3_AHostWriterLeavingTheFileEmptyLeavesAnEmptyStoreCopy(t *testing.T) {
	r, k, w := newHostWriterRig(t, "old content")
	defer k.Drop()
	if err := os.Truncate(filepath.Join(r.host, "f"), 0); err != nil {
		t.Fatal(err)
	}
	w.Release()

	f2, k2 := r.open(t, k)
	defer f2.Release()
	if got := readAll(t, f2); got != "" {
		t.Fatalf("read %q after the host file was emptied under a host writer, want nothing", got)
	}
	var st unix.Stat_t
	if err := unix.Fstat(f2.Fd(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 0 {
		t.Errorf("store copy has %d bytes, want 0 (the host file's size)", st.Size)
	}
	if k2 != nil {
		k2.Drop()
	}
}

// The same from a stub (the populate's copy, never read): the empty copy
// the host writer leaves is the content, not a stub any more (stubFd drops
// the mark of an empty file), so its next open fetches nothing.
func TestC3_AHostWriterLeavingAStubEmptyLeavesNoStub(t *testing.T) {
	r := newKeptRig(t, consistency.Cached, "old content")
	if !r.s.ServesFromHost() {
		t.Skip("the test folder's file system is not one cached writers are served from the host on")
	}
	if !r.s.IsStub("f") {
		t.Fatal("the populate's copy is not a stub")
	}
	w, err := r.s.Open(context.Background(), "f", unix.O_WRONLY, relF)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ServeFromHost(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(r.host, "f"), 0); err != nil {
		t.Fatal(err)
	}
	w.Release()
	if r.s.IsStub("f") {
		t.Error("an empty copy of an empty host file is still marked a stub")
	}
	if st, err := r.s.Lstat("f"); err != nil || st.Size != 0 {
		t.Errorf("store copy: %d bytes, %v; want 0", st.Size, err)
	}
}

// A file is kept only for the node it is: an open that found another store
// inode at the path (changed under the kernel's entry) keeps nothing for
// the node. Nor is an open with flags that change how it reads.
func TestKeptOnlyForItsNodeAndPlainOpens(t *testing.T) {
	r := newKeptRig(t, consistency.Delegated, "content")
	f, nk, err := r.s.OpenKept(context.Background(), "f", unix.O_RDONLY, relF, r.ino+1, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	if nk != nil {
		t.Error("kept a store file for a node of another inode")
	}
	f, nk, err = r.s.OpenKept(context.Background(), "f", unix.O_RDONLY|unix.O_NOATIME, relF, r.ino, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
	if nk != nil {
		t.Error("kept a descriptor opened with O_NOATIME, which every later open would share")
	}
}

// The kept descriptor is closed with its last reference (the node's Drop
// after the handles' releases), or with the store. keptLive counts them.
func TestKeptFileIsClosedWithItsLastReference(t *testing.T) {
	r := newKeptRig(t, consistency.Delegated, "content")
	before := keptLive.Load()
	f1, k := r.keepFirst(t)
	fd := f1.Fd()
	if keptLive.Load() != before+1 {
		t.Fatalf("keptLive %d, want %d", keptLive.Load(), before+1)
	}
	k.Drop() // the node forgets it while the handle is open
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the kept file was closed under an open handle: %v", err)
	}
	f1.Release()
	if keptLive.Load() != before {
		t.Fatalf("keptLive %d after the last reference went, want %d", keptLive.Load(), before)
	}

	_, k = r.keepFirst(t) // the handle is never released: the store closes it
	k.Drop()
	_, k = r.keepFirst(t)
	err := r.s.Close()
	r.rig.s = nil
	if err != nil {
		t.Fatal(err)
	}
	if keptLive.Load() != before {
		t.Fatalf("keptLive %d after the store closed, want %d", keptLive.Load(), before)
	}
	k.Drop() // after the close: nothing counted twice
	if keptLive.Load() != before {
		t.Fatalf("keptLive %d after a Drop past the close, want %d", keptLive.Load(), before)
	}
}

// Rule C3: two releases of one file served from the host that overlap (the
// kernel sends a RELEASE after the close returns, so a second writer may
// open, write and be released meanwhile) leave the store copy at the host's
// size after both. Without the restub lock the first release, paused here
// after its look at the host, cut the stub back to the size from before the
// second writer's write: "store copy of 5 bytes, host file of 14".
func TestC3_OverlappingReleasesOfAHostWrittenFileLeaveTheHostsSize(t *testing.T) {
	r, k, w1 := newHostWriterRig(t, "old")
	k.Drop()
	if _, err := unix.Pwrite(w1.HostFd(), []byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	looked, goOn := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	testHookRestub = func(string) {
		if first.CompareAndSwap(false, true) { // the second release goes on
			close(looked)
			<-goOn
		}
	}
	t.Cleanup(func() { testHookRestub = nil })
	released1 := make(chan struct{})
	go func() { w1.Release(); close(released1) }()
	<-looked

	w2 := r.hostWriter(t, " and more", 5)
	released2 := make(chan struct{})
	go func() { w2.Release(); close(released2) }()
	select { // without the lock the second release ends now
	case <-released2:
	case <-time.After(200 * time.Millisecond):
	}
	close(goOn)
	<-released1
	<-released2
	st, err := r.s.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != 14 {
		t.Fatalf("store copy of %d bytes, host file of 14", st.Size)
	}
}

// Rule C3: a fetch that copied the host file before a writer served from
// the host wrote it ends before that writer's release makes the copy a
// stub again, never after: the container then reads what the writer
// wrote. With the fetch and the restub under locks of their own, the fetch
// (paused here after its copy) ended after the restub, unmarked the stub
// and left the copy from before the write: "first", not "first and more".
func TestC3_AFetchUnderWayWhenAHostWriterIsReleasedIsNotLeftStale(t *testing.T) {
	// No read of f before the test's own fetch: no read-ahead, which may
	// fetch f at any time, starts.
	r := newCachedHostRig(t, "old")
	r.hostWriter(t, "first", 0).Release() // the copy: a stub of "first"
	if !r.s.IsStub("f") {
		t.Fatal("not a stub after the host writer's release")
	}
	copied, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookFetchCopied = func(string) { once.Do(func() { close(copied); <-goOn }) }
	t.Cleanup(func() { testHookFetchCopied = nil })
	fetched := make(chan error, 1)
	go func() { fetched <- r.s.EnsureContent("f") }()
	<-copied

	w2 := r.hostWriter(t, " and more", 5)
	released := make(chan struct{})
	go func() { w2.Release(); close(released) }()
	select { // without the shared lock the release ends now
	case <-released:
	case <-time.After(200 * time.Millisecond):
	}
	close(goOn)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	<-released
	if err := r.s.EnsureContent("f"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(r.s.local.Path(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "first and more" {
		t.Fatalf("store copy %q after the writer's release, want the host's %q", got, "first and more")
	}
}

// Rule C3: a truncate that goes through to both halves while a writer
// served from the host is released is not undone by the restub: the store
// copy ends at the host's size. Without the restub's lock around the
// truncate the restub, paused here after its look at the host, gave the
// copy the size from before the truncate ("store copy of 14 bytes, host
// file of 5"), and the container stat'ed that size and read 5 bytes.
func TestC3_ATruncateBesideAHostWritersReleaseIsNotUndone(t *testing.T) {
	r := newCachedHostRig(t, "old")
	if err := r.s.EnsureContent("f"); err != nil { // not a stub: the truncate fetches nothing
		t.Fatal(err)
	}
	w := r.hostWriter(t, "first and more", 0)
	looked, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookRestub = func(string) { once.Do(func() { close(looked); <-goOn }) }
	t.Cleanup(func() { testHookRestub = nil })
	released := make(chan struct{})
	go func() { w.Release(); close(released) }()
	<-looked

	size := int64(5)
	truncated := make(chan error, 1)
	go func() { truncated <- r.s.Setattr(context.Background(), "f", Attrs{Size: &size}) }()
	select { // without the lock the truncate ends now
	case err := <-truncated:
		truncated <- err
	case <-time.After(200 * time.Millisecond):
	}
	close(goOn)
	<-released
	if err := <-truncated; err != nil {
		t.Fatal(err)
	}
	st, err := r.s.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	hst, err := r.s.HostLstat("f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != hst.Size || hst.Size != size {
		t.Fatalf("store copy of %d bytes, host file of %d (truncated to %d)", st.Size, hst.Size, size)
	}
}
