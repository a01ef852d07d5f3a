package ownmount

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/hostpath"
	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// The test binary's main goroutine stays on the process's first thread, so
// that TestMain can start a thread from there (fromFirst). And what the
// package's own init did, before any test opened a file.
func init() {
	runtime.LockOSThread()
	reservedAtInit, reserveErrAtInit = reserved, reserveErr
	for fd := 3; fd < lowFds; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			freeAtInit = append(freeAtInit, fd)
		}
	}
}

var (
	reservedAtInit   int
	reserveErrAtInit error
	freeAtInit       []int // descriptors below lowFds no file had then
)

// The low descriptors are taken when the process starts (the package's
// init), not at the first thread: by then a file of a share or a mount
// may be open among them, and every thread's table would have a copy.
func TestTheLowDescriptorsAreTakenAtTheStart(t *testing.T) {
	if reserveErrAtInit != nil || reservedAtInit < 3 || reservedAtInit >= lowFds {
		t.Fatalf("after the package's init: placeholder %d, %v; want one below %d", reservedAtInit, reserveErrAtInit, lowFds)
	}
	if len(freeAtInit) > 0 {
		t.Fatalf("after the package's init, descriptors %v below %d are free: a file opened then lands there, in every thread's table", freeAtInit, lowFds)
	}
}

// fromFirst is a thread started from the process's first thread, as a
// Root's is when the scheduler has put its goroutine there.
var fromFirst struct {
	t   *thread
	err error
}

func TestMain(m *testing.M) {
	if unix.Gettid() == unix.Getpid() {
		t := &thread{calls: make(chan func())}
		started := make(chan error, 1)
		var returned atomic.Bool
		// Were the first thread kept, run would serve on it until stopped.
		time.AfterFunc(5*time.Second, func() {
			if !returned.Load() {
				t.stop()
			}
		})
		t.run(started, true)
		returned.Store(true)
		fromFirst.t, fromFirst.err = t, <-started
	}
	os.Exit(m.Run())
}

// withNewThreads has a test's Roots and Dos start threads of their own
// (an idle one, made before the test opened its files, would show
// nothing), ended after it.
func withNewThreads(t *testing.T) {
	idle.mu.Lock()
	saved := idle.threads
	idle.threads = nil
	idle.mu.Unlock()
	t.Cleanup(func() {
		idle.mu.Lock()
		for _, th := range idle.threads {
			th.stop()
		}
		idle.threads = saved
		idle.mu.Unlock()
	})
}

// A Root's thread never is the process's first: /proc/self is that
// thread's table, and the process reads its own descriptors through it
// (hostpath's xattrs of a store file, a bind mount's source).
func TestTheProcesssFirstThreadKeepsTheProcesssTable(t *testing.T) {
	if fromFirst.t == nil {
		t.Skip("TestMain did not run on the process's first thread")
	}
	if fromFirst.err != nil {
		t.Fatal(fromFirst.err)
	}
	if int(fromFirst.t.tid) == unix.Getpid() {
		t.Fatal("the thread started from the process's first thread is that thread")
	}
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); l != f.Name() {
		t.Fatalf("/proc/self/fd of a file the process opened: %q, %v; want %s", l, err, f.Name())
	}
	dir := t.TempDir()
	if !fromFirst.t.do(func() { err = unix.Mkdir(filepath.Join(dir, "d"), 0o700) }) || err != nil {
		t.Fatalf("mkdir on the thread: %v", err)
	}
	fromFirst.t.stop()
}

// The kill tests run a child process (this test binary again) that mounts
// a file system whose lookup of "stall" never answers, and looks "stall" up
// on its own mount: through a Root, or (to show the hazard) from an
// ordinary goroutine. Once the child says its server is serving that
// request, the test kills it with SIGKILL and waits for it to be gone.
const childEnv = "BINDSTATE_OWNMOUNT_CHILD" // "root" or "plain", a tab, the mountpoint

// stallRoot is the child's file system: one name that stalls.
type stallRoot struct{ fs.Inode }

var _ = (fs.NodeLookuper)((*stallRoot)(nil))

func (r *stallRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == "stall" {
		fmt.Println("serving") // the request was read: its sender can no longer be interrupted
		<-make(chan struct{})
	}
	return nil, syscall.ENOENT
}

// stallAttrRoot is the child's file system for Do: the root's attributes
// stall, which the kernel asks for (default_permissions) before the first
// name looked up in the mount, go-fuse's WaitMount's own.
type stallAttrRoot struct{ fs.Inode }

var _ = (fs.NodeGetattrer)((*stallAttrRoot)(nil))

func (r *stallAttrRoot) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fmt.Println("serving")
	<-make(chan struct{})
	return 0
}

// TestOwnMountChild is the child's body; it does nothing in a plain run.
func TestOwnMountChild(t *testing.T) {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		t.Skip("only run as a child of the kill tests")
	}
	how, mp, _ := strings.Cut(spec, "\t")
	if how == "wait" {
		opts := &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "ownmount-test",
			Options: []string{"default_permissions"}}}
		server, err := fuse.NewServer(fs.NewNodeFS(&stallAttrRoot{}, opts), mp, &opts.MountOptions)
		if err != nil {
			t.Fatal(err)
		}
		go server.Serve()
		Do(server.WaitMount)
		t.Fatal("the wait for the mount returned")
	}
	server, err := fs.Mount(mp, &stallRoot{}, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "ownmount-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Unmount()
	switch how {
	case "root":
		m, err := Open(mp)
		if err != nil {
			t.Fatal(err)
		}
		m.Lstats([]string{"stall"})
	default:
		var st unix.Stat_t
		unix.Lstat(filepath.Join(mp, "stall"), &st)
	}
	t.Fatal("the stalled lookup returned")
}

// killAsking starts the child, kills it once its own lookup is being
// served, and reports whether it was gone within a while. If it was not,
// its mount's connection is aborted (and the child then goes).
func killAsking(t *testing.T, how string) (gone bool) {
	testenv.RequireFUSE(t)
	mp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnMountChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+how+"\t"+mp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mp, unix.MNT_DETACH)
	serving := make(chan bool, 1)
	var said strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
			if sc.Text() == "serving" {
				serving <- true
				break
			}
		}
		close(serving)
	}()
	select {
	case ok := <-serving:
		if !ok {
			cmd.Wait()
			t.Fatalf("the child ended before its lookup was served:\n%s%s", said.String(), stderr.String())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("the child's lookup was not served within a minute")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(10 * time.Second):
	}
	if err := testenv.AbortFuse(mp); err != nil {
		t.Fatalf("the killed child hangs, and its connection could not be aborted: %v", err)
	}
	<-done
	return false
}

// A plugin killed while its own request to its mount is being served must
// still go: Docker cannot start it again while it is there, and its mount
// hangs instead of failing (rule D4: the container's stop waits on it).
func TestD4_AKilledPluginAskingItsOwnMountGoes(t *testing.T) {
	if !killAsking(t, "root") {
		t.Fatal("the child killed while a Root's lookup was served hung until its FUSE connection was aborted")
	}
}

// Do is the same for a library's requests: go-fuse's WaitMount, whose
// first lookup in the new mount has the kernel ask for the root's
// attributes, stalled here.
func TestD4_AKilledPluginWaitingForItsNewMountGoes(t *testing.T) {
	if !killAsking(t, "wait") {
		t.Fatal("the child killed while WaitMount's request to its own mount was served (through Do) hung until its FUSE connection was aborted")
	}
}

// The hazard Root is for, shown: the same request from an ordinary
// goroutine keeps the killed process. (If a kernel ended such a wait by
// itself, the test above would prove nothing there; this says so.)
func TestAKilledProcessAskingItsOwnMountFromAnyThreadHangs(t *testing.T) {
	if killAsking(t, "plain") {
		t.Skip("this kernel lets a process killed during its own FUSE request go: Root is not needed here, and TestD4_AKilledPluginAskingItsOwnMountGoes shows nothing")
	}
}

// Each operation acts on the directory, and reports the path and errno of
// what failed.
func TestOperations(t *testing.T) {
	testenv.RequireRoot(t, "mknod")
	dir := t.TempDir()
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	steps := []struct {
		what string
		do   func() error
	}{
		{"mkdir d", func() error { return m.Mkdir("d", 0o700) }},
		{"create d/f", func() error { return m.Create("d/f", 0o600) }},
		{"truncate d/f", func() error { return m.Truncate("d/f", 5) }},
		{"symlink d/l", func() error { return m.Symlink("target", "d/l") }},
		{"mknod d/p", func() error { return m.Mknod("d/p", unix.S_IFIFO|0o600, 0) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "d/f")); err != nil || fi.Size() != 5 {
		t.Fatalf("d/f after create and truncate: %v, %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "d/l")); l != "target" {
		t.Fatalf("d/l: %q, %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "d/p")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("d/p: %v, %v", fi, err)
	}
	errs, err := m.Lstats([]string{"", "d", "d/l", "missing", "../up"})
	if err != nil {
		t.Fatal(err)
	}
	for i, rel := range []string{"", "d", "d/l"} {
		if errs[i] != nil {
			t.Errorf("lstat %q: %v", rel, errs[i])
		}
	}
	if !errors.Is(errs[3], unix.ENOENT) {
		t.Errorf("lstat missing: %v, want ENOENT", errs[3])
	}
	if !errors.Is(errs[4], hostpath.ErrEscape) {
		t.Errorf("lstat ../up: %v, want a refusal (hostpath.ErrEscape)", errs[4])
	}
	if err := m.Create("d/f", 0o600); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), filepath.Join(dir, "d/f")) {
		t.Errorf("create of an existing file: %v, want EEXIST naming the path", err)
	}
	if err := m.RemoveAll("d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "d")); !os.IsNotExist(err) {
		t.Fatalf("d after RemoveAll: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Mkdir("e", 0o700); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("mkdir after Close: %v, want ENOTCONN", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// The thread's table keeps no copy of the process's files: a file the
// process opened for writing before the thread started and closed after it
// has no writer left (a copy would keep a store file's last writer, or a
// journal's lock, for the thread's life).
func TestTheThreadKeepsNoCopyOfTheProcesssFiles(t *testing.T) {
	withNewThreads(t)
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	w, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w.Close()
	r, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A read lease is refused while the file is open for writing anywhere.
	if _, err := unix.FcntlInt(r.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		t.Fatalf("a read lease on the closed file: %v (the thread's table still has it open for writing)", err)
	}
	unix.FcntlInt(r.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
}

// The thread's table has the process's descriptors below lowFds, the
// runtime's poller among them, and nothing from lowFds up, however many
// files the process has open and wherever their numbers lie; and a file
// the process opens lands at lowFds or above (the numbers below are
// taken by reserveLow's placeholders), even after one below was closed.
func TestTheThreadKeepsOnlyTheLowDescriptors(t *testing.T) {
	withNewThreads(t)
	var opened []*os.File
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	for range 300 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		if f.Fd() < lowFds {
			t.Fatalf("a file opened by the process got descriptor %d, below %d", f.Fd(), lowFds)
		}
		opened = append(opened, f)
	}
	// A hole below the cut (a placeholder closed), which the next
	// thread's start fills again.
	hole := -1
	for fd := lowFds - 1; fd > 2 && hole < 0; fd-- {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/thread-self/fd/%d", fd)); fd != reserved && strings.HasPrefix(l, "/memfd:bindstate-ownmount-reserved") {
			hole = fd
		}
	}
	if hole < 0 {
		t.Fatal("no placeholder below the cut")
	}
	unix.Close(hole)
	high, err := unix.FcntlInt(opened[0].Fd(), unix.F_DUPFD_CLOEXEC, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(high)
	const dir = "/proc/thread-self/fd"
	links := func() (map[int]string, error) {
		fds, err := listFds(dir)
		if err != nil {
			return nil, err
		}
		m := make(map[int]string, len(fds))
		for _, fd := range fds {
			if m[fd], err = os.Readlink(fmt.Sprintf("%s/%d", dir, fd)); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	var thread map[int]string
	if err := Do(func() (err error) { thread, err = links(); return err }); err != nil {
		t.Fatal(err)
	}
	process, err := links()
	if err != nil {
		t.Fatal(err)
	}
	for fd, l := range thread {
		if fd >= lowFds {
			t.Errorf("the thread's table has descriptor %d (%s), at or past the cut %d", fd, l, lowFds)
		} else if process[fd] != l {
			t.Errorf("the thread's descriptor %d is %s, the process's %q", fd, l, process[fd])
		}
	}
	keep, err := runtimeFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range keep {
		if !runtimeFile(thread[fd]) {
			t.Errorf("the thread's table lacks the runtime's descriptor %d (%s): it has %q", fd, process[fd], thread[fd])
		}
	}
	for fd := 3; fd < lowFds; fd++ {
		if _, ok := thread[fd]; !ok {
			t.Errorf("descriptor %d, below the cut, is free in the thread's table: a file the process opened could have taken it", fd)
		}
	}
}

// The runtime works on the thread: a collection started there polls with
// the runtime's descriptors, which the thread's table must still have (the
// runtime throws if they are gone), and timers and goroutines work.
func TestTheRuntimeWorksOnTheThread(t *testing.T) {
	withNewThreads(t)
	m, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for range 3 {
		if err := m.run(func() error {
			runtime.GC()
			time.Sleep(time.Millisecond)
			c := make(chan int)
			go func() { c <- 1 }()
			<-c
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// And the process's poller still works from its other threads.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() { time.Sleep(10 * time.Millisecond); pw.Write([]byte("x")); pw.Close() }()
	pr.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	if _, err := pr.Read(b); err != nil {
		t.Fatalf("a pipe read through the poller: %v", err)
	}
}

// Where a table of its own is refused (an old kernel without close_range's
// unshare, a seccomp profile), a Root still serves, from a thread that
// shares the process's files, and the plugin says once what that risks.
func TestARefusedTableStillServesAndSaysSo(t *testing.T) {
	var logged strings.Builder
	defer func(l *slog.Logger) { slog.SetDefault(l) }(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	defer func(f func() error) { freshTable = f }(freshTable)
	freshTable = func() error { return unix.EPERM }
	sharedWarning = sync.Once{}
	t.Cleanup(func() {
		sharedTables.Store(false)
		sharedWarning = sync.Once{}
	})
	withNewThreads(t)
	dir := t.TempDir()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 2 {
		m, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Mkdir("d", 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			t.Fatal(err)
		}
		m.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logged.String(), "can hang"); n != 1 {
		t.Fatalf("the warning was logged %d times, want once:\n%s", n, logged.String())
	}
	// The thread that served shares the process's table: it sees the
	// test's descriptor.
	var l string
	if err := Do(func() error {
		l, err = os.Readlink(fmt.Sprintf("/proc/thread-self/fd/%d", f.Fd()))
		return err
	}); err != nil || l != dir {
		t.Fatalf("the test's descriptor from the serving thread: %q, %v; want %s (a shared table)", l, err, dir)
	}
}

// flushCounter is a file system of one file, "f", that counts the FLUSHes
// of its open handles: one per close of a descriptor of it, copies too.
type flushCounter struct {
	fs.Inode
	flushes atomic.Int32
}

type flushCountingFile struct {
	fs.Inode
	root *flushCounter
}

type flushCountingHandle struct{ root *flushCounter }

var (
	_ = (fs.NodeOnAdder)((*flushCounter)(nil))
	_ = (fs.NodeOpener)((*flushCountingFile)(nil))
	_ = (fs.FileFlusher)((*flushCountingHandle)(nil))
)

func (r *flushCounter) OnAdd(ctx context.Context) {
	r.AddChild("f", r.NewPersistentInode(ctx, &flushCountingFile{root: r}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

func (f *flushCountingFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &flushCountingHandle{root: f.root}, fuse.FOPEN_DIRECT_IO, 0
}

func (h *flushCountingHandle) Flush(ctx context.Context) syscall.Errno {
	h.root.flushes.Add(1)
	return 0
}

// A thread started while the process has a file open does not flush it,
// nor does its end: a flush takes the file's deferred write error (sshfs
// hands a full server's failed write to the first flush and forgets it),
// and the writeback, whose close of its host file then said nothing,
// renamed a short file into place as written
// (TestFault_D4_C3_ShareUnhealthy/full, 3 runs in 14: the host's payload
// never got the container's content). A table made by unshare(CLONE_FILES)
// got a copy of every descriptor, and each close of a copy, or the end of
// the thread, was a FLUSH (with it: `ending the threads flushed the
// process's open file 2 times`); freshTable copies none.
func TestAThreadStartedWhileAFileIsOpenDoesNotFlushIt(t *testing.T) {
	testenv.RequireFUSE(t)
	mp := t.TempDir()
	root := &flushCounter{}
	server, err := fs.Mount(mp, root, &fs.Options{MountOptions: fuse.MountOptions{DirectMount: true, FsName: "ownmount-flush-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Unmount()
	// New threads, ended before the unmount: an idle one made before the
	// file was opened has no copy of it.
	var started []*thread
	idle.mu.Lock()
	saved := idle.threads
	idle.threads = nil
	idle.mu.Unlock()
	defer func() {
		idle.mu.Lock()
		idle.threads = saved
		idle.mu.Unlock()
	}()
	f, err := os.OpenFile(filepath.Join(mp, "f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(t.TempDir()) // a thread held while Do starts another
	if err != nil {
		t.Fatal(err)
	}
	if err := Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if n := root.flushes.Load(); n != 0 {
		t.Errorf("starting two threads flushed the process's open file %d times, want none", n)
	}
	idle.mu.Lock()
	started, idle.threads = idle.threads, nil
	idle.mu.Unlock()
	if len(started) != 2 {
		t.Fatalf("%d threads were started, want 2", len(started))
	}
	for _, th := range started {
		th.stop()
		waitEnded(t, th)
	}
	if n := root.flushes.Load(); n != 0 {
		t.Errorf("ending the threads flushed the process's open file %d times, want none", n)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := root.flushes.Load(); n != 1 {
		t.Errorf("the file's close: %d flushes in all, want 1 (the test sees no flush)", n)
	}
}

// waitEnded waits until th's OS thread has exited (its goroutine's end
// only starts that), and its table with it.
func waitEnded(t *testing.T, th *thread) {
	t.Helper()
	task := fmt.Sprintf("/proc/self/task/%d", th.tid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d was stopped and still runs after 10s", th.tid)
		}
	}
}
