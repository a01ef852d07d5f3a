package fsys

import (
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// listingFS serves directory listings without OPENDIR and RELEASEDIR.
//
// It answers the kernel's first OPENDIR with ENOSYS. The kernel then stops
// sending OPENDIR and RELEASEDIR on this mount (fc->no_opendir), opens every
// directory as if it had answered FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE (what
// dirHandle answers anyway), and sends READDIR(PLUS) with file handle 0.
// A hot `git status` opens every directory of the tree and `go list` opens
// every package: once the kernel has a listing cached, each of those opens
// was a round trip there and one back for nothing.
//
// The node bridge needs a handle to list a directory, so listingFS opens one
// itself for a listing the kernel starts (offset 0) and keeps it, keyed by
// the directory's node, while the kernel goes on reading where it left off:
// at the end of the last reply, or inside it when the reader's buffer took
// only part of it (the bridge replays the rest of its last reply). The
// handle is released when the listing ends (an empty reply), when the
// kernel forgets the directory, or when more than maxListings listings are
// left unfinished. A READDIR at an offset no kept listing covers (two
// readers of one directory at once, or a seekdir) gets a fresh handle
// sought to that offset, which dirHandle supports.
type listingFS struct {
	fuse.RawFileSystem // the node bridge

	mu       sync.Mutex
	listings map[uint64]listing // by directory node ID
}

// listing is a bridge directory handle in the middle of a listing.
type listing struct {
	node uint64
	fh   uint64
	from uint64 // the offset the last reply started at
	next uint64 // the offset after the last reply: where the kernel goes on
}

// maxListings bounds the listings kept for readers that stopped midway.
const maxListings = 256

func newListingFS(bridge fuse.RawFileSystem) *listingFS {
	return &listingFS{RawFileSystem: bridge, listings: map[uint64]listing{}}
}

func (l *listingFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (l *listingFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return l.read(cancel, in, out, l.RawFileSystem.ReadDir)
}

func (l *listingFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return l.read(cancel, in, out, l.RawFileSystem.ReadDirPlus)
}

func (l *listingFS) read(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList,
	readDir func(<-chan struct{}, *fuse.ReadIn, *fuse.DirEntryList) fuse.Status) fuse.Status {
	node := in.NodeId
	fh, ok := l.take(node, in.Offset)
	if !ok {
		open := fuse.OpenIn{InHeader: in.InHeader, Flags: uint32(in.Flags)}
		var opened fuse.OpenOut
		if st := l.RawFileSystem.OpenDir(cancel, &open, &opened); !st.Ok() {
			return st
		}
		fh = opened.Fh
	}
	withFh := *in
	withFh.Fh = fh
	st := readDir(cancel, &withFh, out)
	if !st.Ok() || out.Offset == in.Offset { // an error, or the end: nothing was added
		l.release(node, fh)
		return st
	}
	l.keep(listing{node: node, fh: fh, from: in.Offset, next: out.Offset})
	return st
}

// take removes and returns the kept listing of node if off is where it goes
// on: the end of its last reply, or inside it. A kept listing is past its
// first entry, so a listing starting over (offset 0) always gets a fresh
// handle, and sees the directory as it is now.
func (l *listingFS) take(node, off uint64) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept, ok := l.listings[node]
	if !ok || off <= kept.from || off > kept.next {
		return 0, false
	}
	delete(l.listings, node)
	return kept.fh, true
}

// keep stores a listing the kernel is expected to go on reading, releasing
// the one it replaces and, past maxListings, an arbitrary other one.
func (l *listingFS) keep(kept listing) {
	var drop []listing
	l.mu.Lock()
	if old, ok := l.listings[kept.node]; ok {
		drop = append(drop, old)
	}
	l.listings[kept.node] = kept
	for n, other := range l.listings {
		if len(l.listings) <= maxListings {
			break
		}
		if n != kept.node {
			drop = append(drop, other)
			delete(l.listings, n)
		}
	}
	l.mu.Unlock()
	for _, d := range drop {
		l.release(d.node, d.fh)
	}
}

func (l *listingFS) release(node, fh uint64) {
	l.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh})
}

// Forget drops the kept listing of a directory the kernel forgets: the
// handle must not outlive the node it lists.
func (l *listingFS) Forget(node, nlookup uint64) {
	l.mu.Lock()
	kept, ok := l.listings[node]
	delete(l.listings, node)
	l.mu.Unlock()
	if ok {
		l.release(node, kept.fh)
	}
	l.RawFileSystem.Forget(node, nlookup)
}
