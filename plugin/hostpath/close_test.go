package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCloseWaitsForAnOperationInFlight: an operation that began before
// Close finishes on the Root's own directory. Were the fd closed at once,
// the kernel would give its number to the next directory opened (here
// another source's Root) and the operation would act beneath that one: a
// FUSE request still served while its volume goes away reaching into
// another volume's source.
func TestCloseWaitsForAnOperationInFlight(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	mustMkdir(t, filepath.Join(a, "sub"))
	mustMkdir(t, filepath.Join(b, "sub"))
	mustWrite(t, filepath.Join(a, "sub", "f"), "a")
	mustWrite(t, filepath.Join(b, "sub", "f"), "bb")
	ra, err := Open(a)
	if err != nil {
		t.Fatal(err)
	}
	fdA := ra.Fd()
	var aRoot unix.Stat_t
	mustNil(t, unix.Fstat(fdA, &aRoot))

	entered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookAcquired = func() { once.Do(func() { close(entered); <-resume }) }
	t.Cleanup(func() { testHookAcquired = nil })
	var st unix.Stat_t
	var lerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		st, lerr = ra.Lstat("sub/f")
	}()
	<-entered
	mustNil(t, ra.Close())
	if ra.Fd() != -1 {
		t.Errorf("Fd is %d after Close; want -1", ra.Fd())
	}
	// The lowest free number: ra's, had Close closed it.
	rb, err := Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	close(resume)
	<-done
	if lerr != nil || st.Size != 1 {
		t.Errorf("an Lstat begun before Close: size %d, err %v; want a/sub/f (1 byte)", st.Size, lerr)
	}

	// Once the last operation is done, the directory is closed.
	var now unix.Stat_t
	if err := unix.Fstat(fdA, &now); err == nil && now.Dev == aRoot.Dev && now.Ino == aRoot.Ino {
		t.Errorf("fd %d still holds the closed Root's directory after its last operation", fdA)
	}
	// And an operation begun after Close is refused, saying why.
	_, err = ra.Lstat("sub/f")
	if !errors.Is(err, ErrClosed) || !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("Lstat after Close: %v; want ErrClosed (ENOTCONN)", err)
	}
	if _, err := ra.OpenFile("sub/f", unix.O_RDONLY, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("OpenFile after Close: %v; want ErrClosed", err)
	}
}

// TestCloseDuringOperations: Close while operations of every kind run on the
// Root, with kept parents (the store's Root): each operation either works or
// is refused with ErrClosed, and the race detector sees no unsynchronized
// use of the fd (go test -race). Each operation dwells a moment once it
// uses the fd, and Close comes while one does: closed at once, the fd
// would fail it (EBADF), or serve it from another directory.
func TestCloseDuringOperations(t *testing.T) {
	t.Cleanup(func() { testHookAcquired = nil })
	for round := 0; round < 20; round++ {
		dir := t.TempDir()
		for _, d := range []string{"d1", "d1/d2", "d3"} {
			mustMkdir(t, filepath.Join(dir, d))
		}
		mustWrite(t, filepath.Join(dir, "d1/d2/f"), "x")
		r, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		r.KeepParents(4)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		ops := []func() error{
			func() error { _, err := r.Lstat("d1/d2/f"); return err },
			func() error {
				f, err := r.OpenFile("d1/d2/f", unix.O_RDONLY, 0)
				if err == nil {
					f.Close()
				}
				return err
			},
			func() error { _, err := r.ReadDir("d1"); return err },
			func() error { return r.Utimes("d3", nil, nil) },
			func() error {
				_, err := r.Getxattr("d1/d2/f", "user.none", nil)
				if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP) {
					return nil
				}
				return err
			},
		}
		inFlight := make(chan struct{})
		var once sync.Once
		testHookAcquired = func() {
			once.Do(func() { close(inFlight) })
			time.Sleep(20 * time.Microsecond)
		}
		for _, op := range ops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					if err := op(); err != nil {
						if !errors.Is(err, ErrClosed) {
							errs <- err
						}
						return
					}
				}
			}()
		}
		<-inFlight
		r.Close()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: an operation racing Close: %v; want success or ErrClosed", round, err)
		}
		if _, err := os.Stat(dir); err != nil {
			t.Fatal(err)
		}
	}
}
