package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// File is an open file of the container's view. Reads are served from the
// store; writes follow the state's rule (through to the host for cached,
// journaled for delegated). Offsets come from the kernel (pread/pwrite), so
// O_APPEND is never passed down.
type File struct {
	s     *Store
	rel   func() (string, bool) // current path (renamed while open?); false once unlinked
	local *os.File
	host  *os.File // cached state, opened for writing: the host half
	write bool
	mu    sync.Mutex // guards host during Release

	// servedFromHost: the kernel reads and writes the host file itself
	// (ServeFromHost), so the store copy learns nothing of those writes
	// and is made a stub again at Release. hostRead is the host file opened
	// for such a handle that has no host half (a reader).
	servedFromHost bool
	hostRead       *os.File
	lazy           bool // opened by the applier (host-origin): content stays lazy

	unbusy func() // ends the host refresh's hands-off for a cached writer
	held   string // delegated: the path Hold was taken on at the first write ("" if none)
	// heldRenames is the store's rename count when the hold was taken or
	// last looked at (heldWriters): while the count stays so, the file
	// cannot have been renamed.
	heldRenames uint64
	name        string // the path it was opened or created under

	// kept: local is a Kept file's, shared with other handles and closed
	// by the Kept (see OpenKept). localIsHost: local is the host file (a
	// reader of a stub while the store is full).
	kept        *Kept
	localIsHost bool

	ino          atomic.Uint64 // the store file's inode (storeIno), once read
	kernelWrites bool          // KernelWrites was called: the range log counts it until Release
}

// openFlags strips flags the store handles itself.
func openFlags(flags int) int {
	return flags &^ (unix.O_APPEND | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_NOFOLLOW)
}

func isWrite(flags int) bool { return flags&unix.O_ACCMODE != unix.O_RDONLY }

// Open opens rel. relNow reports the file's current path for later writes.
func (s *Store) Open(ctx context.Context, rel string, flags int, relNow func() (string, bool)) (*File, error) {
	write := isWrite(flags)
	trunc := write && flags&unix.O_TRUNC != 0
	r := s.routeFor(ctx)
	if r == routeJournal {
		s.queue.Touch() // the container is busy: background writeback waits
	}
	switch {
	case r == routeLocal:
		// The applier opens only to raise events; content stays lazy.
	case trunc:
		if err := s.prepareTruncate(rel, 0); err != nil {
			return nil, err
		}
	case !write:
		// Read-only opens (most of them: compilers, go list, git status)
		// open first and ask the open file whether it is still a stub, one
		// fgetxattr, rather than look the xattr up by path beforehand.
	case r == routeThrough && s.writersFromHost && flags&unix.O_ACCMODE == unix.O_WRONLY:
		// Most likely served from the host file (HostPassthrough), which
		// needs no store copy: fetched only if not (EnsureContent). An
		// append to a large log, once per line, does not copy the log.
	default:
		if err := s.fetchForOpen(rel); err != nil {
			return nil, err
		}
	}
	f := &File{s: s, rel: relNow, write: write, name: rel}
	open := func() error {
		lf, err := s.local.OpenFile(rel, openFlags(flags), 0)
		if err != nil {
			return err
		}
		f.local = lf
		return nil
	}
	switch {
	case r == routeLocal:
		f.lazy = true
		return f, open()
	case !write:
		if err := open(); err != nil {
			return nil, err
		}
		if !isStubFd(f.local) {
			s.countHit()
			return f, nil
		}
		f.local.Close()
		if err := s.fetchForOpen(rel); err != nil {
			if isNoSpace(err) {
				// The store is full: the host file itself serves this
				// reader, as it is what the stub stands for.
				if hf, herr := s.host.OpenFile(rel, unix.O_RDONLY, 0); herr == nil {
					s.readerLog.Warn("the local store is full: reading from the host", "path", rel, "err", err)
					f.local = hf
					f.localIsHost = true
					return f, nil
				}
			}
			return nil, err
		}
		return f, open()
	case r == routeThrough:
		defer s.lockShared(ctx)()
		hf, err := s.host.OpenFile(rel, openFlags(flags), 0)
		if err != nil {
			return nil, err
		}
		f.host = hf
		if err := open(); err != nil {
			hf.Close()
			return nil, err
		}
		f.unbusy = s.holdBusy(rel, f.local)
		s.markWriter(rel, f.local)
		return f, nil
	default:
		defer s.lockShared(ctx)()
		if trunc {
			return f, s.do(r, []string{rel}, nil, open)
		}
		return f, open()
	}
}

// Create creates and opens rel.
func (s *Store) Create(ctx context.Context, rel string, flags int, mode uint32, o Owner, relNow func() (string, bool)) (*File, error) {
	r := s.routeFor(ctx)
	if r == routeLocal {
		unlock := s.lockShared(ctx)
		err := s.adoptFromHost(rel)
		unlock()
		if err != nil {
			return nil, err
		}
		return s.Open(ctx, rel, flags&^unix.O_TRUNC, relNow)
	}
	defer s.lockShared(ctx)()
	f := &File{s: s, rel: relNow, write: true, name: rel}
	excl := flags & unix.O_EXCL
	err := s.do(r, []string{rel},
		func() error {
			hf, err := s.host.OpenFile(rel, openFlags(flags)|unix.O_CREAT|excl, mode)
			if err != nil {
				return err
			}
			f.host = hf
			s.hostChown(rel, o, nil)
			return nil
		},
		func() error {
			lf, err := s.local.OpenFile(rel, openFlags(flags)|unix.O_CREAT|excl, mode)
			if err != nil {
				return err
			}
			f.local = lf
			return s.chown(rel, o)
		})
	if err != nil {
		f.closeAll()
		return nil, err
	}
	if f.host != nil {
		f.unbusy = s.holdBusy(rel, f.local)
		s.markWriter(rel, f.local)
	}
	return f, nil
}

// rels is the file's current path as a journal/base key, or none once the
// file has been unlinked (its content then matters to no one on the host).
func (f *File) rels() []string {
	if r, ok := f.rel(); ok {
		return []string{r}
	}
	return nil
}

// relOrName is the file's current path, or the one it was opened or
// created under while it has none (not attached to the tree yet, or
// unlinked): the name to act on for it.
func (f *File) relOrName() string {
	if r, ok := f.rel(); ok {
		return r
	}
	return f.name
}

// Rel names the file for logs.
func (f *File) Rel() string {
	if r, ok := f.rel(); ok {
		return r
	}
	return "(unlinked)"
}

// Fd is the store file's descriptor (for reads, seeks and stats).
func (f *File) Fd() int { return int(f.local.Fd()) }

// ReadAt reads from the store.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(f.Fd(), p, off)
	if n < 0 {
		n = 0
	}
	return n, err
}

// route is the route of a change made through f, decided holding the apply
// lock shared (so a change racing with SetWriteThrough is either written
// back by its flush or sees the switch). flush reports that the change must
// be written back before the call returns: a delegated store writing
// through (rules C4, D5) has no host half for files opened before the
// switch, so their changes are journaled and then written back at once
// (correct, slower).
func (f *File) route(ctx context.Context) (r route, flush bool) {
	r = f.s.routeFor(ctx)
	if r == routeThrough && f.host == nil {
		if f.s.queue != nil {
			return routeJournal, true
		}
		return routeLocal, false // opened by the applier, or read-only
	}
	return r, false
}

// writeBack writes the file back now (route's flush).
func (f *File) writeBack(ctx context.Context) error {
	if rels := f.rels(); rels != nil {
		return f.s.Flush(ctx, rels...)
	}
	return nil
}

// WriteAt writes p at off along the state's route.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	s := f.s
	var n int
	unlock := s.lockShared(ctx)
	r, flush := f.route(ctx)
	unlockContent := f.lockAgainstRestub(r)
	rels := f.rels()
	local := func() error {
		var err error
		n, err = unix.Pwrite(f.Fd(), p, off)
		return err
	}
	var err error
	if r == routeJournal {
		// Logged for the range log: a large file's next Put writes the
		// places written, not the whole file. A failed write may have
		// written part of p: the whole of it is logged.
		ino := f.storeIno()
		err = s.journaled(rels, local, func() {}, func() { s.ranges.wrote(rels, ino, off, int64(len(p))) })
	} else {
		err = s.do(r, rels,
			func() error {
				_, err := unix.Pwrite(int(f.host.Fd()), p, off)
				return err
			}, local)
	}
	unlockContent()
	unlock()
	if flush && err == nil {
		err = f.writeBack(ctx)
	}
	return n, err
}

// Allocate is fallocate(2) along the state's route.
func (f *File) Allocate(ctx context.Context, mode uint32, off, size int64) error {
	s := f.s
	unlock := s.lockShared(ctx)
	r, flush := f.route(ctx)
	unlockContent := f.lockAgainstRestub(r)
	err := s.do(r, f.rels(),
		func() error { return unix.Fallocate(int(f.host.Fd()), mode, off, size) },
		func() error { return unix.Fallocate(f.Fd(), mode, off, size) })
	unlockContent()
	unlock()
	if flush && err == nil {
		err = f.writeBack(ctx)
	}
	return err
}

// Truncate is ftruncate(2) along the state's route.
func (f *File) Truncate(ctx context.Context, size int64) error {
	s := f.s
	if isHostOrigin(ctx) {
		return nil // hostOriginTruncate
	}
	if f.host == nil && s.queue == nil && s.routeFor(ctx) == routeThrough {
		return s.Setattr(ctx, f.Rel(), Attrs{Size: &size})
	}
	unlock := s.lockShared(ctx)
	r, flush := f.route(ctx)
	unlockContent := f.lockAgainstRestub(r)
	err := s.do(r, f.rels(),
		func() error { return f.host.Truncate(size) },
		func() error { return f.local.Truncate(size) })
	unlockContent()
	unlock()
	if flush && err == nil {
		err = f.writeBack(ctx)
	}
	return err
}

// Sync returns once the file's data is on the host (rule D2): for cached it
// fsyncs the host half; for delegated it writes the file back now, fsynced
// on the host. A delegated file opened while the store wrote through
// (SetWriteThrough) has a host half too, but its later changes may be
// journaled: both are done.
//
// A file with several names (isLinked) may have been written through another
// of them, which the journal lists under that name only: this name is
// written back anyway, and that carries the file's content, in place, to
// every host name of it.
func (f *File) Sync(ctx context.Context) error { return f.sync(ctx, false) }

// SyncData is Sync for fdatasync(2): the content and size must be on the
// host, the times may follow (Store.SyncData).
func (f *File) SyncData(ctx context.Context) error { return f.sync(ctx, true) }

func (f *File) sync(ctx context.Context, dataOnly bool) error {
	if f.host != nil {
		// f.name labels it for the test hook: f.Rel() walks the tree.
		if err := fsyncHost(f.host, f.name, dataOnly); err != nil || f.s.queue == nil {
			return err
		}
	}
	if f.s.queue != nil && f.local != nil {
		var st unix.Stat_t
		if err := unix.Fstat(f.Fd(), &st); err == nil && isLinked(&st) {
			for _, rel := range f.rels() {
				if err := f.s.queue.MarkDirty(rel); err != nil {
					return fmt.Errorf("journal %q: %w", rel, err)
				}
			}
		}
	}
	if rels := f.rels(); rels != nil {
		return f.s.sync(ctx, dataOnly, rels)
	}
	return nil
}

// Release closes the file. A cached file records the host's attributes as
// its base now that our own writes are done.
func (f *File) Release() error {
	if f.kernelWrites {
		f.kernelWrites = false
		f.s.ranges.kernelWriter(f.storeIno(), -1)
	}
	f.mu.Lock() // against a hold moved meanwhile (heldWriters.followRenames)
	if f.held != "" {
		// Renamed while open, and the hold not moved yet: the writes went
		// to the file under its new name, which the released hold leaves
		// dirty.
		if err := f.moveHold(f.s.queue, f.s.heldWriters.renames.Load()); err != nil {
			f.s.log.Error("journal a file renamed while open", "path", f.held, "err", err)
		}
		f.s.queue.Release(f.held)
		f.s.heldWriters.remove(f)
		f.held = ""
	}
	f.mu.Unlock()
	switch {
	case f.servedFromHost && f.host != nil:
		f.restub()
	case f.host != nil:
		for _, r := range f.rels() {
			f.s.rebaseReleased(r)
		}
	}
	return f.closeAll()
}

func (f *File) closeAll() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unbusy != nil {
		f.unbusy()
		f.unbusy = nil
	}
	var err error
	if f.host != nil {
		err = f.host.Close()
		f.host = nil
	}
	if f.hostRead != nil {
		f.hostRead.Close()
		f.hostRead = nil
	}
	if f.kept != nil {
		f.local = nil
		f.kept.Drop()
		f.kept = nil
	}
	if f.local != nil {
		if e := f.local.Close(); err == nil {
			err = e
		}
		f.local = nil
	}
	return err
}

// WritesThrough reports whether the file has a host half that its writes
// go to before they return (cached, or delegated writing through).
func (f *File) WritesThrough() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.host != nil
}

// FlushHost makes the share report what it deferred for the host half, as
// a close of the file on the share would (sshfs: a write the server failed
// after acknowledging it): it closes a duplicate of the host descriptor.
// Nothing to do without a host half.
func (f *File) FlushHost() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.host == nil {
		return nil
	}
	fd, err := unix.Dup(int(f.host.Fd()))
	if err != nil {
		return fmt.Errorf("flush %q on the host: %w", f.Rel(), err)
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("flush %q on the host: %w", f.Rel(), err)
	}
	return nil
}

// BeginWrite is called before a handle's first write. In the delegated state
// it holds the file's path in the writeback queue until Release: the path
// stays journaled, and is not copied to the host again every writeback delay
// while the container is still writing it (a log or database file would be
// copied whole each time); fsync and flushes still write it at once.
func (f *File) BeginWrite(ctx context.Context) error {
	if f.s.routeFor(ctx) != routeJournal {
		return nil
	}
	// Not attached to the tree yet (BeginWrite at Create, before the kernel
	// has the new entry) or unlinked while open: the name it was opened
	// under is the one to keep journaled. Skipping the hold here would let
	// passthrough writes go unjournaled after the first writeback.
	rel := f.relOrName()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held != "" {
		return nil
	}
	if err := f.s.queue.Hold(rel); err != nil {
		return fmt.Errorf("journal %q: %w", rel, err)
	}
	f.held = rel
	f.heldRenames = f.s.heldWriters.add(f)
	return nil
}

// Passthrough reports whether the kernel may read and write this file's store
// copy directly, without a request to the plugin per read or write (FUSE
// passthrough). Only a delegated file journaled the ordinary way qualifies:
// its writes need nothing from the plugin until writeback, and BeginWrite
// (called at open for writing) keeps its path held dirty in the journal for
// as long as it is open, since the plugin then sees none of its writes. A
// cached file writes through to the host, so every write must reach the
// plugin.
func (f *File) Passthrough(ctx context.Context) bool {
	return f.host == nil && f.s.routeFor(ctx) == routeJournal
}

// HostPassthrough reports whether the kernel may write this file's host
// half directly (FUSE passthrough to the host file): a cached file open
// for writing. Rule C3 wants each write on the host before it returns; a
// write sent to the plugin, which writes the store and then the share,
// costs a round trip to the plugin on top of the share's own, so a cached
// writer was twice as slow as a bind mount of the share (make bench W2).
// Served from the host, it costs what the bind mount costs, and the store
// copy, which sees none of those writes, is fetched again after Release.
//
// Only where the source's file system keeps a failed write with the file,
// not with one open file of it (writersFromHost): not over sshfs.
func (f *File) HostPassthrough() bool {
	return f.host != nil && f.s.writersFromHost
}

// ServesFromHost reports whether the store's passthrough opens are served
// from the host file (a cached store whose writers are, see
// HostPassthrough) rather than from the store file (delegated). Any other
// cached store has no passthrough opens.
func (s *Store) ServesFromHost() bool { return s.writersFromHost }

// ServeFromHost is called when the kernel is handed the host file of f
// for passthrough (HostFd). A reader that joins a file open by
// such a writer (the kernel serves every open of a file from one backing
// file while any passthrough open lasts) has no host half: one is opened
// for reading, so that whichever of them the kernel is handed, it is the
// host file, never the store copy the writes do not reach.
func (f *File) ServeFromHost() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servedFromHost = true
	if f.host != nil || f.hostRead != nil {
		return nil
	}
	rel := f.relOrName()
	hf, err := f.s.host.OpenFile(rel, unix.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open %q on the host for passthrough: %w", rel, err)
	}
	f.hostRead = hf
	return nil
}

// EnsureContent fetches the store copy's content if it is a stub now, for
// an open served from it after all: a writer Open left a stub for (it may
// be served from the host, and is not: its writes then go to both halves,
// and the store half must be whole first), or a reader whose Open found
// the copy whole just before a writer served from the host made it a stub
// at its release.
func (f *File) EnsureContent() error {
	if f.lazy || !isStubFd(f.local) {
		return nil
	}
	rel := f.relOrName()
	return f.s.fetchForOpen(rel)
}

// HostFd is the host file the kernel is handed for passthrough
// (ServeFromHost), or -1.
func (f *File) HostFd() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.host != nil:
		return int(f.host.Fd())
	case f.hostRead != nil:
		return int(f.hostRead.Fd())
	}
	return -1
}

// restub makes the store copy of a file the kernel wrote on the host
// (ServeFromHost) a stub of the host file as it is now: its size, mtime and
// base the host's, its content fetched at the next open. That is cheaper
// than copying it back (a writer's output is seldom read back at once) and
// cannot go stale: the stub is marked before the open counts drop (see
// fsys handle.Release), so no open finds the old content. If the host file
// cannot be read, the copy is still marked a stub: the next open then
// fails with the share's error instead of reading what the host lost.
func (f *File) restub() {
	// Under the content lock, which takes the host's size and gives it to
	// the copy in one step against whatever else sets them: another
	// release of the file (the kernel sends a RELEASE after the close
	// returns, so a new writer can open, write and be released while an
	// earlier release is still here: the earlier one cut the stub back to
	// the size it saw, from before the later one's append), a fetch
	// through any of its names, and a change going through to both
	// halves (lockAgainstRestub).
	defer f.s.lockContentOf(f.storeIno())()
	rel := f.Rel()
	fd := int(f.local.Fd())
	var st unix.Stat_t
	serr := unix.Fstat(int(f.host.Fd()), &st)
	if testHookRestub != nil {
		testHookRestub(rel)
	}
	if serr != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.s.log.Warn("stat of a host-written file failed; its store copy is fetched again at the next open", "path", rel, "err", serr)
		if err := unix.Fsetxattr(fd, xattrStub, mark, 0); err != nil {
			f.s.log.Error("marking a host-written file's store copy stale", "path", rel, "err", err)
		}
		f.s.markedStub()
		return
	}
	// As a populate makes a stub (adoptIn), with the host's times (both:
	// the container saw the host file's while it was open) and base. Not
	// its owner and mode, as adoptIn gives: those changes went to both
	// halves already, and one made since the stat would be undone.
	err := f.s.stubOfHost(fd, &st, false)
	if err == nil && f.s.writersOf(f.storeIno()) > 1 {
		// Another writer has it open still: its release gives the base.
		err = unix.Fsetxattr(fd, xattrBase, writerBase.encode(), 0)
	}
	if err != nil {
		f.s.log.Error("making a host-written file's store copy a stub", "path", rel, "err", err)
	}
}

// stubOfHost makes the open store file fd a stub of the host file st
// describes, with its times and base, and its mode where asked to; the
// caller holds its content lock.
func (s *Store) stubOfHost(fd int, st *unix.Stat_t, mode bool) error {
	err := stubFd(fd, st.Size)
	s.markedStub()
	if err == nil {
		err = setAttrsFd(fd, st, false, mode)
	}
	return err
}

// restubMayRunBeside reports whether a change along route r to a file's
// content, size or times may have a restub run beside it: in a cached
// store whose writers are served from the host. A restub looks at the host
// file, then gives the store copy its size and times; a write, truncate or
// setattr that went through to both halves in between was undone in the
// copy (the exerciser stat'ed a file at its size from before a truncate,
// and read the truncated content). Such a change takes the content lock
// (lockAgainstRestub); anywhere else it takes nothing.
func (s *Store) restubMayRunBeside(r route) bool { return r == routeThrough && s.writersFromHost }

// lockAgainstRestub takes the content lock of f's store inode for a change
// through f along route r where a restub may run beside it, and nothing
// elsewhere (without looking the inode up).
func (f *File) lockAgainstRestub(r route) func() {
	if !f.s.restubMayRunBeside(r) {
		return func() {}
	}
	return f.s.lockContentOf(f.storeIno())
}

// testHookRestub, if set (by tests), is called by restub between its look
// at the host file and the stub it makes of the store copy.
var testHookRestub func(rel string)

// isNoSpace reports whether err is the store's disk or quota being full.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

// storeIno is the store file's inode number (0 if it cannot be read: no
// range log entry has it, so the write makes its paths' next Puts whole).
func (f *File) storeIno() uint64 {
	if ino := f.ino.Load(); ino != 0 {
		return ino
	}
	var st unix.Stat_t
	if unix.Fstat(f.Fd(), &st) != nil {
		return 0
	}
	f.ino.Store(st.Ino)
	return st.Ino
}

// KernelWrites is called when the kernel is handed the store file to write
// itself (FUSE passthrough): the plugin sees none of those writes, so the
// file's next writeback copies it whole (rangeLog), until Release.
func (f *File) KernelWrites() {
	if f.kernelWrites {
		return
	}
	if ino := f.storeIno(); ino != 0 {
		f.kernelWrites = true
		f.s.ranges.kernelWriter(ino, 1)
	}
}
