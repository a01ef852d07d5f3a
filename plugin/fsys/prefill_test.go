package fsys

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
	"github.com/bindstate/bindstate/plugin/store"
)

// prefillRig is a store in state st over a host folder holding f (content),
// mounted; the hook, once armed, runs in the next prefill between its read
// of the store copy and its store into the kernel's cache.
type prefillRig struct {
	st    *store.Store
	m     *Mount
	mnt   string // f through the mount
	armed atomic.Pointer[func()]
}

func newPrefillRig(t *testing.T, state consistency.State, content string) *prefillRig {
	t.Helper()
	r := &prefillRig{st: newOneFileStore(t, state, content)}
	// Set before the mount (its server goroutines read it), armed later.
	testHookPrefillRead = func() {
		if f := r.armed.Swap(nil); f != nil {
			(*f)()
		}
	}
	t.Cleanup(func() { testHookPrefillRead = nil })
	r.m = mountStore(t, r.st)
	r.mnt = filepath.Join(r.m.Mountpoint(), "f")
	return r
}

// newOneFileStore opens a store in state over a new host folder holding one
// file, f (content). Tests that mount it need root.
func newOneFileStore(t *testing.T, state consistency.State, content string) *store.Store {
	t.Helper()
	return newStoreOver(t, state, func(host string) {
		if err := os.WriteFile(filepath.Join(host, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	})
}

// newStoreOver opens a store in state over a new host folder that setup
// fills (or mounts something on) first. Tests that mount it need root.
func newStoreOver(t testing.TB, state consistency.State, setup func(host string)) *store.Store {
	t.Helper()
	testenv.RequireFUSE(t)
	base := t.TempDir()
	host := filepath.Join(base, "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	setup(host)
	root, err := hostpath.Open(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	st, err := store.Open(store.Config{Host: root, Tree: filepath.Join(base, "tree"),
		Journal: filepath.Join(base, "journal"), State: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// mountStore mounts st in a new directory until the test ends.
func mountStore(t *testing.T, st *store.Store) *Mount {
	t.Helper()
	m, err := New(st, filepath.Join(t.TempDir(), "mnt"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	return m
}

// waitReleases waits until st has had want RELEASEs: the kernel sends a
// handle's RELEASE after its close returns. It reports false (and fails t,
// with Errorf, so it may be called from a server goroutine's hook) when
// they have not come in 10 s.
func waitReleases(t *testing.T, st *store.Store, want int64) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); st.Stats().Ops["release"] < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d RELEASEs after 10 s, want %d", st.Stats().Ops["release"], want)
			return false
		}
	}
	return true
}

// readReleased reads the file at mnt, which must hold want, and waits
// for the read's RELEASE (the 1st of st): an open made while it is still
// counted joins the reader's store copy.
func readReleased(t *testing.T, st *store.Store, mnt, want string) {
	t.Helper()
	if b, err := os.ReadFile(mnt); err != nil || string(b) != want {
		t.Fatalf("first read: %q %v", b, err)
	}
	if !waitReleases(t, st, 1) {
		t.FailNow()
	}
}

func (r *prefillRig) ops(kind string) int64 { return r.st.Stats().Ops[kind] }

func (r *prefillRig) read(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(r.mnt)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A small file read through the mount costs no READ: its content reaches the
// kernel with the OPEN, and, with no READ, the kernel keeps its atime, so a
// stat after it costs no GETATTR either. Read again, it is not stored again.
// Without prefill: "1 READ requests".
func TestPrefill_ReadingASmallFileCostsNoReadRequest(t *testing.T) {
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(state.String(), func(t *testing.T) {
			r := newPrefillRig(t, state, "package f\n")
			var st unix.Stat_t
			if err := unix.Lstat(r.mnt, &st); err != nil { // looked up: attributes cached
				t.Fatal(err)
			}
			if got := r.read(t); got != "package f\n" {
				t.Fatalf("read %q", got)
			}
			if n := r.ops("read"); n != 0 {
				t.Errorf("reading a 10-byte file cost %d READ requests, want 0", n)
			}
			if n := r.ops("prefill"); n != 1 {
				t.Errorf("%d prefills, want 1", n)
			}
			getattrs := r.ops("getattr")
			if err := unix.Lstat(r.mnt, &st); err != nil {
				t.Fatal(err)
			}
			if n := r.ops("getattr") - getattrs; n != 0 {
				t.Errorf("a stat after the read cost %d GETATTR requests, want 0", n)
			}
			if got := r.read(t); got != "package f\n" {
				t.Fatalf("second read %q", got)
			}
			if n, p := r.ops("read"), r.ops("prefill"); n != 0 || p != 1 {
				t.Errorf("read again: %d READs and %d prefills, want 0 and 1 (the kernel has it)", n, p)
			}
		})
	}
}

// A file larger than the kernel's first readahead is read by READs.
func TestPrefill_ALargeFileIsReadByReadRequests(t *testing.T) {
	big := strings.Repeat("x", prefillMax+1)
	r := newPrefillRig(t, consistency.Delegated, big)
	if got := r.read(t); got != big {
		t.Fatalf("read %d bytes, want %d", len(got), len(big))
	}
	if n, p := r.ops("read"), r.ops("prefill"); n == 0 || p != 0 {
		t.Errorf("%d READs and %d prefills, want some and 0", n, p)
	}
}

// rule D3 (one coherent view): a writer that opens the file while a prefill
// holds its old content waits for the prefill, so the old content cannot
// land over what the writer wrote (the kernel writes a file's cached pages
// itself, before the WRITE reaches the plugin). Without the writers'
// exclusion the writer finished inside the prefill ("a writer opened and
// wrote the file while a prefill held its old content"). The read after it
// passes either way here: the write moved the mtime, so the kernel drops
// its pages at the next attribute refresh (auto_inval_data), and the next
// open stores the new content. A mapping, or a write that keeps the mtime,
// gets no such second chance; hence the test of the exclusion itself.
func TestD3_APrefillNeverPutsOldContentOverAWrite(t *testing.T) {
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(state.String(), func(t *testing.T) {
			r := newPrefillRig(t, state, "old content")
			const want = "NEW CONTENT"
			done := make(chan error, 1)
			var finishedInside bool
			write := func() {
				go func() {
					w, err := os.OpenFile(r.mnt, os.O_WRONLY, 0)
					if err == nil {
						_, err = w.WriteAt([]byte(want), 0)
						if cerr := w.Close(); err == nil {
							err = cerr
						}
					}
					done <- err
				}()
				select {
				case err := <-done:
					finishedInside = true
					done <- err
				case <-time.After(300 * time.Millisecond):
				}
			}
			r.armed.Store(&write)
			r.read(t) // old or new: the write runs beside it
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if finishedInside {
				t.Error("a writer opened and wrote the file while a prefill held its old content")
			}
			if n := r.ops("prefill"); n != 1 {
				t.Fatalf("%d prefills, want 1: nothing tested", n)
			}
			if got := r.read(t); got != want {
				t.Errorf("read after the write: %q, want %q", got, want)
			}
		})
	}
}

// rule D3: a truncate while a prefill holds the old content is not undone
// by it (a stored page past the new end would give the file its old size
// back). Without the content generation the prefill stores the old content
// ("1 prefills, want 0"); the reads pass even then, as the kernel, told of
// the larger size, asks for the size again before it reads. The generation
// is what keeps that from resting on the kernel's order of checks.
func TestD3_APrefillNeverUndoesATruncate(t *testing.T) {
	r := newPrefillRig(t, consistency.Delegated, "old content")
	truncate := func() {
		if err := unix.Truncate(r.mnt, 3); err != nil {
			t.Error(err)
		}
	}
	r.armed.Store(&truncate)
	if got := r.read(t); got != "old" { // its READ came after the truncate
		t.Errorf("read across the truncate to 3 bytes: %q, want %q", got, "old")
	}
	if n := r.ops("prefill"); n != 0 {
		t.Errorf("%d prefills, want 0: the content changed after it was read", n)
	}
	if got := r.read(t); got != "old" {
		t.Errorf("read after truncating to 3 bytes: %q, want %q", got, "old")
	}
}

// rules D1 and C2: a host change brought in (the store copy rewritten, then
// Mount.Invalidate) while a prefill holds the old content is what the file
// reads afterwards, through the handle that open made. The change keeps the
// file's size and mtime (rsync -t, cp -p), so the kernel has no cause of its
// own to drop what it caches. Without the content generation the handle
// read "old content" from the kernel's cache.
func TestD1_APrefillNeverUndoesAHostChangeBroughtIn(t *testing.T) {
	r := newPrefillRig(t, consistency.Cached, "old content")
	const want = "HOST EDIT!!" // the same size
	bringIn := func() {
		st, err := r.st.Local().Lstat("f")
		if err != nil {
			t.Error(err)
			return
		}
		f, err := r.st.Local().OpenFile("f", unix.O_WRONLY|unix.O_TRUNC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := f.WriteString(want); err != nil {
			t.Error(err)
		}
		f.Close()
		if err := r.st.Local().Utimes("f", nil, &st.Mtim); err != nil {
			t.Error(err)
		}
		r.m.Invalidate("f", true, false)
	}
	r.armed.Store(&bringIn)
	f, err := os.Open(r.mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if n == 0 {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != want {
		t.Errorf("read across the host change: %q, want %q", got, want)
	}
	if n := r.ops("prefill"); n != 0 {
		t.Errorf("%d prefills, want 0: the content changed after it was read", n)
	}
}

// Dropping only a file's attributes (Mount.Invalidate without content)
// changes nothing the kernel caches of its content: the next open stores
// nothing again. Had it bumped the content generation: "2 prefills".
func TestPrefill_AnAttributeInvalidationStoresNothingAgain(t *testing.T) {
	r := newPrefillRig(t, consistency.Cached, "package f\n")
	r.read(t)
	r.m.Invalidate("f", false, false)
	if got := r.read(t); got != "package f\n" {
		t.Fatalf("read %q", got)
	}
	if n, p := r.ops("read"), r.ops("prefill"); n != 0 || p != 1 {
		t.Errorf("%d READs and %d prefills, want 0 and 1", n, p)
	}
}

// A stub (a file listed from the host, not read yet) shows the blocks its
// content takes, not the none its store copy has: du in a container counts
// the tree. Statting it fetches nothing.
func TestAStubShowsTheBlocksOfItsContent(t *testing.T) {
	for _, state := range []consistency.State{consistency.Cached, consistency.Delegated} {
		t.Run(state.String(), func(t *testing.T) {
			st := newStoreOver(t, state, func(host string) {
				if err := os.WriteFile(filepath.Join(host, "f"), make([]byte, 10000), 0o644); err != nil {
					t.Fatal(err)
				}
			})
			m := mountStore(t, st)
			var got unix.Stat_t
			if err := unix.Lstat(filepath.Join(m.Mountpoint(), "f"), &got); err != nil {
				t.Fatal(err)
			}
			if !st.IsStub("f") {
				t.Fatal("f was fetched by a stat")
			}
			if want := int64(24); got.Blocks != want { // 3 blocks of 4 KiB
				t.Errorf("a 10,000-byte stub shows %d blocks of 512 bytes, want %d", got.Blocks, want)
			}
		})
	}
}
