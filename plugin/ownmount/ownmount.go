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
// (the crash exerciser met it once in 36 runs).
//
// So each Root runs its operations on one locked OS thread with a file
// table of its own that holds none of the process's files but a few
// harmless ones the process has had from its start (freshTable says how,
// and why no other): /dev/fuse is not in it. When the plugin is
// killed, its other threads exit, the process's table is closed with
// /dev/fuse in it, the kernel aborts the connection, and the waiting
// request ends (ENOTCONN): the thread exits too. Otherwise a thread waits
// idle for the next Root or Do.
//
// What runs on the thread must close on the thread whatever it opens (a
// descriptor opened there is a number in the thread's table, meaningless
// to the others), so Root offers the operations themselves, never the
// descriptors: each opens, acts and closes within one call. Nor does it
// offer those that name a descriptor by /proc/self/fd (hostpath's xattrs,
// chown, utimes, chmod): that is the process's table, not the thread's.
package ownmount

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
)

// Root is a directory of one of the plugin's own mounts (its root, in
// practice), on which operations run on the Root's own thread. It is safe
// for concurrent use; operations run one at a time, in turn.
type Root struct {
	t *thread
	r *hostpath.Root // opened, used and closed on t only

	mu     sync.RWMutex // held shared by each operation, exclusive by Close
	closed bool
}

// Open opens dir, a mountpoint of the plugin's, on a thread of its own
// (acquire).
func Open(dir string) (*Root, error) {
	t, err := acquire()
	if err != nil {
		return nil, &os.PathError{Op: "open own mount", Path: dir, Err: err}
	}
	var r *hostpath.Root
	t.do(func() { r, err = hostpath.Open(dir) })
	if err != nil {
		release(t)
		return nil, err
	}
	return &Root{t: t, r: r}, nil
}

// errClosed is what operations after Close return: ENOTCONN, as the kernel
// answers for a mount whose server has gone.
var errClosed = fmt.Errorf("own mount closed: %w", unix.ENOTCONN)

// run runs op on the thread, or returns errClosed.
func (m *Root) run(op func() error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return errClosed
	}
	var err error
	m.t.do(func() { err = op() })
	return err
}

// Close closes the directory and gives the thread back (release). Later
// calls return nil.
func (m *Root) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var err error
	m.t.do(func() { err = m.r.Close() })
	release(m.t)
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

// Do runs fn on a thread of its own (acquire), given back after it. It is
// for a library's requests to one of the plugin's own mounts that
// no Root can make for it: go-fuse's WaitMount opens a name in a new mount
// and polls it (so that the kernel learns the server answers no poll),
// which has the kernel ask the mount's root for its attributes first. fn
// must close on the thread whatever it opens there.
func Do(fn func() error) error {
	t, err := acquire()
	if err != nil {
		return fmt.Errorf("a thread for a request to an own mount: %w", err)
	}
	defer release(t)
	t.do(func() { err = fn() })
	return err
}

// idle are the threads no Root or Do has now, kept for the next one
// (a thread's start costs a few syscalls and a wait for the scheduler).
var idle struct {
	mu      sync.Mutex
	threads []*thread
}

// acquire takes an idle thread, or starts one.
func acquire() (*thread, error) {
	idle.mu.Lock()
	if n := len(idle.threads); n > 0 {
		t := idle.threads[n-1]
		idle.threads = idle.threads[:n-1]
		idle.mu.Unlock()
		return t, nil
	}
	idle.mu.Unlock()
	return startThread()
}

// release gives t back to idle, once what it ran has closed what it
// opened.
func release(t *thread) {
	idle.mu.Lock()
	idle.threads = append(idle.threads, t)
	idle.mu.Unlock()
}

// thread is one locked OS thread with a file table of its own (or, where
// the kernel refused one, the process's), running the functions it is
// given one at a time. stop ends it: only tests do.
type thread struct {
	calls chan func()
	tid   uint32 // set before startThread returns

	mu     sync.Mutex // guards closed and sending on calls
	closed bool
}

// runtimeFiles are the descriptors of the runtime's poller (an epoll
// instance and the eventfd that wakes it), made once for the process. A
// thread's table must have them too, at the same numbers: the runtime uses
// them from any thread (a collection started by an allocation on the
// thread polls the network at its end, and throws if the epoll is gone).
// The first call sets the poller up (a pipe is a pollable file: making one
// does) and finds them by their /proc links; their numbers stay for the
// process's life.
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
	return kept, nil // in order, as listFds lists
})

// sharedTables is set once a thread could not be given a table of its own
// (an old kernel, a seccomp profile): the threads started after it share
// the process's, as they did before ownmount, and only a kill during one
// of their requests can hang. sharedWarning says so once.
var (
	sharedTables  atomic.Bool
	sharedWarning sync.Once
)

// startThread starts a thread with a table of its own, or, where that is
// refused, one that shares the process's.
func startThread() (*thread, error) {
	if !sharedTables.Load() {
		t, err := start(true)
		if err == nil {
			return t, nil
		}
		sharedTables.Store(true)
		sharedWarning.Do(func() {
			slog.Warn("the plugin's requests to its own mounts come from threads that share the process's files: a plugin killed while one is served can hang (docs/troubleshooting.md, \"A killed plugin that does not go\")",
				"err", err)
		})
	}
	return start(false)
}

// start starts a thread and waits until it serves, or has ended.
func start(ownTable bool) (*thread, error) {
	t := &thread{calls: make(chan func())}
	started := make(chan error, 1)
	go t.run(started, ownTable)
	if err := <-started; err != nil {
		return nil, err
	}
	return t, nil
}

// run is the thread's goroutine. It never unlocks the thread once it may
// have a table of its own: when it returns, the runtime ends the thread
// rather than give the table to other goroutines. (The runtime never makes
// a new thread from a locked one, so none shares this table.)
func (t *thread) run(started chan<- error, ownTable bool) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The process's first thread: /proc/self is its table, which
		// the rest of the process reads as its own (/proc/self/fd/N, a
		// bind's source), so it must keep the process's. It is held while
		// another goroutine, which then cannot run on it, takes its
		// place, and is given back once that one has its thread.
		elsewhere := make(chan error, 1)
		go t.run(elsewhere, ownTable)
		err := <-elsewhere
		runtime.UnlockOSThread()
		started <- err
		return
	}
	t.tid = uint32(unix.Gettid())
	if ownTable {
		if err := freshTable(); err != nil {
			started <- err
			return // ends the thread, and whatever table it has
		}
	}
	started <- nil
	for fn := range t.calls {
		fn()
	}
}

// lowFds is where a thread's table is cut from the process's: it gets
// copies of the process's descriptors below it and none of those from it
// up. The kernel copies a table in words of its bitmap (close_range's
// unshare leaves out of the copy only what lies past the first word that
// the range starts in), so the cut can be at a multiple of 64 only, and
// the process keeps its descriptors below the first for files harmless to
// copy (reserveLow).
const lowFds = 64

// reserved is one of the placeholders below lowFds (a memfd), dup'ed into
// each free number there; reserveErr is why there are none.
var (
	reserved   = -1
	reserveErr error
)

// The placeholders are made when the process starts, before any file of
// a share or of a mount is open: every number below lowFds that a file
// opened later could take is taken, so that such a file lands at lowFds
// or above, out of the threads' tables.
func init() { reserveErr = reserveLow() }

// reserveLow fills every free number from 3 to lowFds-1 with a dup of
// reserved (made the first time), lowest first, as the kernel gives them
// (F_DUPFD: it never replaces an open descriptor), and checks that the
// runtime's poller is below the cut, where the threads' tables have it.
func reserveLow() error {
	keep, err := runtimeFiles()
	if err != nil {
		return err
	}
	if len(keep) == 0 {
		return fmt.Errorf("the runtime's poller was not found in /proc/thread-self/fd")
	}
	if slices.Max(keep) >= lowFds {
		return fmt.Errorf("the runtime's poller is at descriptor %d, past the %d a thread's table keeps", slices.Max(keep), lowFds)
	}
	if reserved < 0 {
		fd, err := unix.MemfdCreate("bindstate-ownmount-reserved", unix.MFD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("make the placeholder for the low descriptors: %w", err)
		}
		if fd >= lowFds {
			unix.Close(fd)
			return fmt.Errorf("no descriptor below %d is free for the placeholder", lowFds)
		}
		reserved = fd
	}
	for {
		fd, err := unix.FcntlInt(uintptr(reserved), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return fmt.Errorf("fill the low descriptors: %w", err)
		}
		if fd >= lowFds {
			unix.Close(fd)
			return nil
		}
	}
}

// freshTable gives the calling thread a file table of its own that holds
// the process's descriptors below lowFds (the standard three, the
// runtime's poller, reserveLow's placeholders, what was open when the
// process started) and no copy of any other.
//
// Why no copy. A table made by unshare(CLONE_FILES) starts as a copy of
// the process's, and a copy of a share's file can be neither closed nor
// kept. Closing it, or ending the thread, is a close of the file, whose
// flush takes its deferred write error (sshfs hands a full server's failed
// write to the first flush only), and the writeback, whose own close then
// said nothing, renamed a short file into place as written
// (TestFault_D4_C3_ShareUnhealthy/full, 3 runs in 14, when the threads
// closed their copies). Keeping it holds the file open: a copy of a file
// of the plugin's own mount kept the mount from going away.
//
// close_range(lowFds, ~0, CLOSE_RANGE_UNSHARE) makes the table without
// those copies (the kernel leaves the range out of the copy rather than
// copy and close it), in one syscall: the thread is never without the
// poller. A hole below lowFds (a descriptor there the process closed) is
// filled again first.
var freshTable = func() error {
	if reserveErr != nil {
		return reserveErr
	}
	if err := reserveLow(); err != nil {
		return err
	}
	if err := unix.CloseRange(lowFds, math.MaxUint32, unix.CLOSE_RANGE_UNSHARE); err != nil {
		return fmt.Errorf("unshare the file table (close_range): %w", err)
	}
	return nil
}

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
