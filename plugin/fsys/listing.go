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
// itself when the kernel starts a listing (offset 0) and keeps it, one per
// directory, for the READDIRs that go on from a later offset. The bridge
// takes any offset on a handle: it goes on where its last reply ended,
// replays the rest of that reply to a reader whose buffer took only part of
// it, and otherwise seeks (dirHandle.Seekdir), so two readers of one
// directory taking turns share the kept handle. A listing that starts over
// gets a fresh handle, and so sees the directory as it is now. The handle is
// released when a listing ends (an empty reply), when the kernel forgets
// the directory, or when more than maxListings directories have unfinished
// listings.
type listingFS struct {
	fuse.RawFileSystem // the node bridge

	mu       sync.Mutex
	listings map[uint64]uint64 // directory node ID -> bridge handle of its listing in progress
}

// maxListings bounds the listings kept for readers that stopped midway.
const maxListings = 256

func newListingFS(bridge fuse.RawFileSystem) *listingFS {
	return &listingFS{RawFileSystem: bridge, listings: map[uint64]uint64{}}
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
	l.keep(node, fh)
	return st
}

// take removes and returns the kept handle of node for a READDIR at off. A
// listing at offset 0 starts over and gets none.
func (l *listingFS) take(node, off uint64) (uint64, bool) {
	if off == 0 {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fh, ok := l.listings[node]
	delete(l.listings, node)
	return fh, ok
}

// keep stores the handle of node's listing in progress, releasing the one
// it replaces and, past maxListings, that of an arbitrary other directory.
// A kept handle is never in use: take removes it for the length of a read.
func (l *listingFS) keep(node, fh uint64) {
	type kept struct{ node, fh uint64 }
	var drop []kept
	l.mu.Lock()
	if old, ok := l.listings[node]; ok {
		drop = append(drop, kept{node, old})
	}
	l.listings[node] = fh
	for n, other := range l.listings {
		if len(l.listings) <= maxListings {
			break
		}
		if n != node {
			drop = append(drop, kept{n, other})
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
	fh, ok := l.listings[node]
	delete(l.listings, node)
	l.mu.Unlock()
	if ok {
		l.release(node, fh)
	}
	l.RawFileSystem.Forget(node, nlookup)
}
