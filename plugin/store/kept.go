package store

import (
	"context"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Kept is a store file held open between the read-only opens of one file of
// the container's view, so that the next such open need not open it again.
//
// A hot pass over a tree (go list, a build's header reads, git's blob
// reads) opens each file again and reads nothing: the kernel has the pages.
// Opening the store copy anew cost an openat2 (the whole path walked,
// RESOLVE_BENEATH), an fstat and fcntl to check what was opened, two fcntls
// in os.NewFile, an fgetxattr (a stub?) and a close: most of the plugin's
// own work per OPEN. Serving one from a kept file costs no syscall.
//
// A kept file is used only while it is what a fresh open would give
// (keptValid):
//   - it is the store inode the node stands for (the node's inode number is
//     the store file's): a file put in the path's place (a rename over it,
//     a host change brought in as a new file) is another node, looked up
//     anew once the kernel's entry for the path is invalidated;
//   - and no file has been marked a stub in place since it was kept
//     (stubGen: restub, bringIn). That is the one change to an inode that
//     makes reading it wrong: its content is then the host's, not here yet.
//     (A populate's stubs are new files, made with O_EXCL.)
//
// Content changes in place (a writer's writes, a truncate, a fetch filling
// a stub) need nothing: the kept descriptor is of the same inode, and reads
// through it see them as an open made now would.
//
// Only plain read-only opens are kept and served from one (keepable): a
// descriptor is shared by every handle using it, so its status flags are
// theirs too.
type Kept struct {
	file    *os.File
	ino     uint64 // the store inode, and the node's inode number
	stubGen uint64
	refs    atomic.Int32 // one for the keeper (a node), one per File using it
	s       *Store
}

// keptMax bounds the descriptors kept by all stores of the process, so
// that the plugin keeps most of its open-files limit for its real opens:
// half of the soft limit, at most 32768. Past it, new files are not kept
// (a kept one goes when its node is forgotten, or its file changes).
var keptMax = func() int64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int64(min(rl.Cur/2, 32768))
}()

// keptLive counts the Kept files open in this process.
var keptLive atomic.Int64

// keepable: a read-only open with no flag that changes how the descriptor
// reads (O_DIRECT, O_SYNC, O_NOATIME...). The kernel's own bits
// (O_LARGEFILE, O_CLOEXEC, O_NOCTTY, O_NONBLOCK, which a regular file
// ignores) do not count.
func keepable(flags int) bool {
	const ignored = oLargefile | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	return flags&^ignored == unix.O_RDONLY
}

// oLargefile is the kernel's O_LARGEFILE, which a 64-bit kernel sets on
// every open (and the FUSE OPEN carries); the unix package has it as 0 on
// 64-bit platforms, where a program need not pass it.
const oLargefile = 0o100000

// keptSet is a store's live Kept files, closed with the store.
type keptSet struct {
	mu    sync.Mutex
	files map[*Kept]struct{}
	// stubGen counts files marked a stub in place (markedStub).
	stubGen atomic.Uint64
}

// markedStub is called after a store file is marked a stub in place:
// files kept before no longer count as what an open would give.
func (s *Store) markedStub() { s.kept.stubGen.Add(1) }

// OpenKept is Open for a read-only open of rel by the container, served
// from k (the node's kept file, or nil) when k is still what an open would
// give. It returns the file and what the node should keep from now on: k,
// a new Kept, or nil.
//
// ino is the node's inode number: a file whose store inode is another (the
// path changed under the kernel's entry) is not kept for it.
func (s *Store) OpenKept(ctx context.Context, rel string, flags int, relNow func() (string, bool), ino uint64, k *Kept) (*File, *Kept, error) {
	r := s.routeFor(ctx)
	if r == routeLocal || !keepable(flags) {
		f, err := s.Open(ctx, rel, flags, relNow)
		return f, k, err
	}
	if k != nil && s.keptValid(ino, k) {
		if r == routeJournal {
			s.queue.Touch()
		}
		k.refs.Add(1)
		s.countHit()
		return &File{s: s, rel: relNow, name: rel, local: k.file, kept: k}, k, nil
	}
	gen := s.kept.stubGen.Load() // before the open's own look at the stub mark
	f, err := s.Open(ctx, rel, flags, relNow)
	if err != nil {
		return nil, nil, err
	}
	return f, s.keep(f, ino, gen), nil
}

// keptValid reports whether k is still what an open of the node ino would
// give.
func (s *Store) keptValid(ino uint64, k *Kept) bool {
	return k.s == s && k.ino == ino && s.kept.stubGen.Load() == k.stubGen
}

// keep makes f's store file a Kept, shared with f, if it may be: a regular
// file opened from the store (not from the host, as when the store is
// full), within keptMax. Its content is here: Open looked at its stub mark
// (and fetched a stub's), and a mark made since moved the stub generation
// past gen, read before that look, so such a Kept is never used.
func (s *Store) keep(f *File, ino, gen uint64) *Kept {
	if f.local == nil || f.localIsHost || f.host != nil || f.hostRead != nil || f.lazy {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(f.Fd(), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != ino {
		return nil
	}
	if keptLive.Add(1) > keptMax {
		keptLive.Add(-1)
		return nil
	}
	k := &Kept{file: f.local, ino: st.Ino, stubGen: gen, s: s}
	k.refs.Store(2) // the node's, and f's
	f.kept = k
	s.kept.mu.Lock()
	if s.kept.files == nil {
		s.kept.files = make(map[*Kept]struct{})
	}
	s.kept.files[k] = struct{}{}
	s.kept.mu.Unlock()
	return k
}

// Hold takes a reference for a caller about to pass k to OpenKept (k may
// be nil); Drop gives one back, closing the file with the last.
func (k *Kept) Hold() *Kept {
	if k != nil {
		k.refs.Add(1)
	}
	return k
}

// Drop gives back a reference taken by Hold, or the keeper's own.
func (k *Kept) Drop() {
	if k == nil || k.refs.Add(-1) != 0 {
		return
	}
	k.s.kept.mu.Lock()
	_, live := k.s.kept.files[k] // not if the store closed it already
	delete(k.s.kept.files, k)
	k.s.kept.mu.Unlock()
	if live {
		k.file.Close()
		keptLive.Add(-1)
	}
}

// closeKept closes what is still kept when the store closes (nodes the
// kernel never forgot before the unmount).
func (s *Store) closeKept() {
	s.kept.mu.Lock()
	files := s.kept.files
	s.kept.files = nil
	s.kept.mu.Unlock()
	for k := range files {
		k.file.Close()
		keptLive.Add(-1)
	}
}
