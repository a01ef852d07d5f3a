package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bindstate/bindstate/plugin/internal/testshare"
	"golang.org/x/sys/unix"
)

// LstatFresh sees a change that the share's caches (the kernel's, and the
// share's own, refreshed by an open as sshfs's is) hide from Lstat, and
// leaves the fresh attributes where the next Lstat finds them: the
// writeback confirms a mismatch with it before it keeps a host copy aside
// as a host edit (D7), and then reads on with Lstat.
func TestLstatFreshLooksPastTheSharesCaches(t *testing.T) {
	backing := t.TempDir()
	mustWrite(t, filepath.Join(backing, "f"), "12")
	mnt := t.TempDir()
	testshare.MountStale(t, mnt, backing)
	r, err := Open(mnt)
	mustNil(t, err)
	defer r.Close()

	st, err := r.Lstat("f")
	mustNil(t, err)
	if st.Size != 2 {
		t.Fatalf("Lstat f before the change: size %d, want 2", st.Size)
	}
	mustWrite(t, filepath.Join(backing, "f"), "1234567") // behind the share's back
	st, err = r.Lstat("f")
	mustNil(t, err)
	if st.Size != 2 {
		t.Fatalf("set-up: the share shows the change at once (size %d): nothing here is stale", st.Size)
	}
	st, err = r.LstatFresh("f")
	mustNil(t, err)
	if st.Size != 7 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("LstatFresh f: mode %o size %d, want a regular file of size 7", st.Mode, st.Size)
	}
	st, err = r.Lstat("f")
	mustNil(t, err)
	if st.Size != 7 {
		t.Errorf("Lstat f after LstatFresh: size %d, want 7 (the kernel's copy refreshed)", st.Size)
	}
}

// LstatFresh opens nothing but a regular file (a FIFO would block, a device
// node can act on an open), never follows a final symlink, and refuses
// what Lstat refuses.
func TestLstatFreshOpensOnlyRegularFiles(t *testing.T) {
	backing := t.TempDir()
	mustNil(t, os.Symlink("f", filepath.Join(backing, "link")))
	mustNil(t, unix.Mkfifo(filepath.Join(backing, "fifo"), 0o644))
	mustWrite(t, filepath.Join(backing, "f"), "12")
	mnt := t.TempDir()
	share := testshare.MountStale(t, mnt, backing)
	r, err := Open(mnt)
	mustNil(t, err)
	defer r.Close()

	// A FIFO is opened by the kernel, never by the share, so the count of
	// opens cannot see it: a writer waiting for a reader does. Any open for
	// reading, even one closed at once, lets the writer's open return.
	writer := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(mnt, "fifo"), os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		writer <- err
	}()
	t.Cleanup(func() { // a reader of our own lets a writer still waiting go
		if f, err := os.OpenFile(filepath.Join(mnt, "fifo"), os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			<-writer
			f.Close()
		}
	})
	time.Sleep(50 * time.Millisecond) // the writer is waiting in its open
	for name, want := range map[string]uint32{"link": unix.S_IFLNK, "fifo": unix.S_IFIFO} {
		before := share.Opens()
		st, err := r.LstatFresh(name)
		mustNil(t, err)
		if st.Mode&unix.S_IFMT != want {
			t.Errorf("LstatFresh %s: mode %o, want type %o", name, st.Mode, want)
		}
		if n := share.Opens() - before; n != 0 {
			t.Errorf("LstatFresh %s opened %d files on the share, want none", name, n)
		}
	}
	select {
	case err := <-writer:
		writer <- err // for the cleanup
		t.Errorf("LstatFresh fifo opened the FIFO: a writer waiting for a reader went on (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	before := share.Opens()
	if _, err := r.LstatFresh("f"); err != nil {
		t.Fatal(err)
	}
	if share.Opens() == before {
		t.Errorf("LstatFresh f opened nothing: a share's own cache (sshfs's) stays stale")
	}
	_, err = r.LstatFresh("missing")
	wantErrno(t, err, unix.ENOENT, filepath.Join(mnt, "missing"))
	if _, err := r.LstatFresh("../x"); !errors.Is(err, ErrEscape) {
		t.Errorf("LstatFresh ../x: %v, want an escape refused", err)
	}
}
