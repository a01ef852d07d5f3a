// Package ownmount makes the plugin's requests to its own FUSE mounts: the
// refresh bringing a host change in through the mount (so the kernel raises
// the container's inotify events and drops its caches), the restater's
// stats after a listing, and go-fuse's wait for a new mount (Do). It makes
// them from a thread that cannot keep a killed plugin alive.
//
// Why a thread of its own. A FUSE request that the server has already read
// is waited for without interruption: a thread whose request is being
// served when the plugin is killed waits for an answer its own dead
// threads will never give. The kernel ends that wait when it aborts the
// connection, which it does when the last descriptor of /dev/fuse is
// closed; but that descriptor is in the process's file table, and the
// table is closed only when its last thread has exited, which the waiting
// thread never does. The killed plugin stays, one thread in state D, its
// mount hanging instead of failing, and Docker cannot start it again
// (docs/troubleshooting.md had it as a known limit; the crash exerciser met
// it once in 36 runs).
//
// So each Root runs its operations on one locked OS thread that has
// unshared its file table (unshare(CLONE_FILES)) and closed, in its copy,
// every descriptor but the runtime's own: /dev/fuse is not among them. When
// the plugin is killed, its other threads exit, the process's table is
// closed with /dev/fuse in it, the kernel aborts the connection, and the
// waiting request ends (ENOTCONN): the thread exits too.
//
// What runs on the thread must close on the thread whatever it opens (a
// descriptor opened there is a number in the thread's table, meaningless
// to the others), so Root offers the operations themselves, never the
// descriptors: each opens, acts and closes within one call. Nor does it
// offer those that name a descriptor by /proc/self/fd (hostpath's xattrs,
// chown, utimes, chmod): that is the process's table, not the thread's.
package ownmount

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// Root is a directory of one of the plugin's own mounts (its root, in
// practice), on which operations run on the Root's own thread. It is safe
// for concurrent use; operations run one at a time, in turn.
type Root struct {
	t *thread
	r *hostpath.Root // opened, used and closed on t only
}

// Open opens dir, a mountpoint of the plugin's, and starts its thread.
func Open(dir string) (*Root, error) {
	t, err := startThread()
	if err != nil {
		return nil, &os.PathError{Op: "open own mount", Path: dir, Err: err}
	}
	var r *hostpath.Root
	t.do(func() { r, err = hostpath.Open(dir) })
	if err != nil {
		t.stop()
		return nil, err
	}
	return &Root{t: t, r: r}, nil
}

// errClosed is what operations after Close return: ENOTCONN, as the kernel
// answers for a mount whose server has gone.
var errClosed = fmt.Errorf("own mount closed: %w", unix.ENOTCONN)

// run runs op on the thread, or returns errClosed.
func (m *Root) run(op func() error) error {
	var err error
	if !m.t.do(func() { err = op() }) {
		return errClosed
	}
	return err
}

// Close closes the directory and ends the thread. Later calls return nil.
func (m *Root) Close() error {
	err := m.run(m.r.Close)
	m.t.stop()
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

// ThreadID is the id of the OS thread the Root's requests come from, the
// same for the Root's life: a FUSE server sees it as the requests' pid.
func (m *Root) ThreadID() uint32 { return m.t.tid }

// Path is the directory's path.
func (m *Root) Path() string { return m.r.Path() }

// Mkdir is hostpath.Root.Mkdir on the thread.
func (m *Root) Mkdir(rel string, mode uint32) error {
	return m.run(func() error { return m.r.Mkdir(rel, mode) })
}

// Mknod is hostpath.Root.Mknod on the thread.
func (m *Root) Mknod(rel string, mode uint32, dev uint64) error {
	return m.run(func() error { return m.r.Mknod(rel, mode, dev) })
}

// Symlink is hostpath.Root.Symlink on the thread.
func (m *Root) Symlink(target, rel string) error {
	return m.run(func() error { return m.r.Symlink(target, rel) })
}

// RemoveAll is hostpath.Root.RemoveAll on the thread.
func (m *Root) RemoveAll(rel string) error {
	return m.run(func() error { return m.r.RemoveAll(rel) })
}

// Truncate is hostpath.Root.Truncate on the thread.
func (m *Root) Truncate(rel string, size int64) error {
	return m.run(func() error { return m.r.Truncate(rel, size) })
}

// Create makes rel a new empty regular file (O_EXCL: it must not exist)
// with mode, and closes it.
func (m *Root) Create(rel string, mode uint32) error {
	return m.run(func() error {
		f, err := m.r.OpenFile(rel, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, mode)
		if err != nil {
			return err
		}
		return f.Close()
	})
}

// Lstats lstats each of rels ("" is the Root itself) in one turn of the
// thread, and returns each one's error (nil where it was statted).
func (m *Root) Lstats(rels []string) ([]error, error) {
	errs := make([]error, len(rels))
	err := m.run(func() error {
		for i, rel := range rels {
			var st unix.Stat_t
			if rel == "" {
				fd := m.r.Fd()
				if fd < 0 {
					return errClosed
				}
				errs[i] = unix.Fstatat(fd, "", &st, unix.AT_EMPTY_PATH)
			} else {
				_, errs[i] = m.r.Lstat(rel)
			}
		}
		return nil
	})
	return errs, err
}

// Do runs fn on a thread of its own, started for the call and ended after
// it. It is for a library's requests to one of the plugin's own mounts that
// no Root can make for it: go-fuse's WaitMount opens a name in a new mount
// and polls it (so that the kernel learns the server answers no poll),
// which has the kernel ask the mount's root for its attributes first. fn
// must close on the thread whatever it opens there.
func Do(fn func() error) error {
	t, err := startThread()
	if err != nil {
		return fmt.Errorf("a thread for a request to an own mount: %w", err)
	}
	defer t.stop()
	t.do(func() { err = fn() })
	return err
}

// thread is one locked OS thread with a file table of its own, running the
// functions it is given one at a time.
type thread struct {
	calls chan func()
	tid   uint32 // set before startThread returns

	mu     sync.Mutex // guards closed and sending on calls
	closed bool
}

// runtimeFiles are the descriptors of the runtime's poller (an epoll
// instance and the eventfd that wakes it), made once for the process. A
// thread's table must keep them: made after the table was copied, they
// would be missing from the copy, where the runtime uses them too (a
// collection started by an allocation on the thread polls the network at
// its end). The first call sets the poller up (a pipe is a pollable file:
// making one does) and finds them by their /proc links; their numbers
// stay for the process's life.
var runtimeFiles = sync.OnceValues(func() ([]int, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("set up the runtime's poller: %w", err)
	}
	pr.Close()
	pw.Close()
	// thread-self: /proc/self/fd is the table of the process's first
	// thread, which need not be this one's (a Root's thread has its own).
	const dir = "/proc/thread-self/fd"
	fds, err := listFds(dir)
	if err != nil {
		return nil, err
	}
	var kept []int
	link := make([]byte, 64)
	for _, fd := range fds {
		if n, err := unix.Readlink(dir+"/"+strconv.Itoa(fd), link); err == nil && runtimeFile(string(link[:n])) {
			kept = append(kept, fd)
		}
	}
	// In order, as listFds lists; clipped, so that an append to it (as
	// closeInherited's, on several threads at once) copies it.
	return slices.Clip(kept), nil
})

func startThread() (*thread, error) {
	if _, err := runtimeFiles(); err != nil {
		return nil, err
	}
	t := &thread{calls: make(chan func())}
	started := make(chan error, 1)
	go t.run(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return t, nil
}

// run is the thread's goroutine. Once it has unshared the table it never
// unlocks the thread: when it returns, the runtime ends the thread rather
// than give its file table to other goroutines. (The runtime never makes a
// new thread from a locked one, so none shares this table.)
func (t *thread) run(started chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The process's first thread: /proc/self is its table, which
		// the rest of the process reads as its own (/proc/self/fd/N, a
		// bind's source), so it must keep the process's. It is held
		// while another goroutine, which then cannot run on it, takes
		// its place, and is given back once that one has its thread.
		elsewhere := make(chan error, 1)
		go t.run(elsewhere)
		err := <-elsewhere
		runtime.UnlockOSThread()
		started <- err
		return
	}
	t.tid = uint32(unix.Gettid())
	if err := unshareFiles(); err != nil {
		// Where unshare is refused (a seccomp profile without
		// CAP_SYS_ADMIN), the requests still work from a shared table,
		// as they did before ownmount: only a kill during one can hang.
		sharedWarning.Do(func() {
			slog.Warn("the plugin's requests to its own mounts come from a thread that shares the process's files: a plugin killed while one is served can hang (docs/troubleshooting.md, \"A killed plugin that does not go\")",
				"err", err)
		})
	} else if err := closeInherited(); err != nil {
		started <- err
		return
	}
	started <- nil
	for fn := range t.calls {
		fn()
	}
}

// unshareFiles gives the calling thread a file table of its own (a copy of
// the process's); tests replace it to see a refusal.
var unshareFiles = func() error {
	if err := unix.Unshare(unix.CLONE_FILES); err != nil {
		return fmt.Errorf("unshare the file table: %w", err)
	}
	return nil
}

// sharedWarning says once per process that unshareFiles was refused.
var sharedWarning sync.Once

// do runs fn on the thread and waits for it; false if the thread was
// stopped.
func (t *thread) do(fn func()) bool {
	done := make(chan struct{})
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	t.calls <- func() { fn(); close(done) }
	t.mu.Unlock()
	<-done
	return true
}

// stop ends the thread once the function it runs returns. Later calls do
// nothing.
func (t *thread) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		close(t.calls)
	}
}

// closeInherited closes, in the calling thread's own table, every
// descriptor it copied from the process's but the standard three and the
// runtime's (runtimeFiles): the thread needs no other, and a copy would keep
// its file open after the process closed it (a journal's lock, a file's
// last writer, /dev/fuse). It closes the ranges between those with
// close_range, a few syscalls however many the process has open: a plugin
// keeps up to 32768 store files open, and each mount starts threads (its
// wait, the refresh, the restater). Telling each file by its /proc link
// and closing it took 110 ms with 10,000 open, close_range 1 ms. Where the
// kernel has no close_range (before 5.9) it closes each.
func closeInherited() error {
	keep, err := runtimeFiles()
	if err != nil {
		return err
	}
	first := uint(3)
	for _, fd := range append(keep, math.MaxInt32+1) {
		if uint(fd) > first {
			if err := closeRange(first, uint(fd)-1, 0); err != nil {
				if errors.Is(err, unix.ENOSYS) {
					return closeEach(keep)
				}
				return fmt.Errorf("close the thread's copies of fds %d-%d: %w", first, fd-1, err)
			}
		}
		first = uint(fd) + 1
	}
	return nil
}

// closeRange is close_range(2); tests replace it to see a kernel without.
var closeRange = unix.CloseRange

// closeEach is closeInherited one descriptor at a time.
func closeEach(keep []int) error {
	fds, err := listFds("/proc/thread-self/fd")
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if fd > 2 && !slices.Contains(keep, fd) {
			unix.Close(fd)
		}
	}
	return nil
}

// listFds lists the open descriptors a /proc fd directory shows, in
// increasing order, without the one it opened to list them.
func listFds(dir string) ([]int, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var fds []int
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(dfd, buf)
		if err != nil {
			return nil, &os.PathError{Op: "list", Path: dir, Err: err}
		}
		if n == 0 {
			break
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		for _, name := range names {
			if fd, err := strconv.Atoi(name); err == nil && fd != dfd {
				fds = append(fds, fd)
			}
		}
	}
	slices.Sort(fds)
	return fds, nil
}

// runtimeFile says whether a descriptor's /proc link names a file of the
// kind the runtime's poller is made of.
func runtimeFile(link string) bool {
	return link == "anon_inode:[eventpoll]" || link == "anon_inode:[eventfd]"
}
