package fsys

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// fakeBridge stands in for go-fuse's node bridge below listingFS: it lists
// a fixed set of names, perPage per reply, and tracks which directory
// handles are open and where each is, so a test sees every handle
// listingFS opens, whether it releases it, and every READDIR that makes a
// handle seek (the bridge's replay or dirHandle.Seekdir).
type fakeBridge struct {
	fuse.RawFileSystem

	names   []string
	perPage int

	mu       sync.Mutex
	nextFh   uint64
	open     map[uint64]uint64 // fh -> node
	pos      map[uint64]uint64 // fh -> the offset its last reply ended at
	opens    int
	seeks    int
	forgets  []uint64
	lastPage []string // the names of the last reply
}

func newFakeBridge(n, perPage int) *fakeBridge {
	b := &fakeBridge{RawFileSystem: fuse.NewDefaultRawFileSystem(), perPage: perPage, open: map[uint64]uint64{}, pos: map[uint64]uint64{}}
	for i := range n {
		b.names = append(b.names, fmt.Sprint("e", i))
	}
	return b
}

func (b *fakeBridge) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextFh++
	b.open[b.nextFh] = in.NodeId
	b.opens++
	out.Fh = b.nextFh
	return fuse.OK
}

func (b *fakeBridge) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	b.mu.Lock()
	node, ok := b.open[in.Fh]
	if in.Offset != b.pos[in.Fh] {
		b.seeks++
	}
	b.mu.Unlock()
	if !ok || node != in.NodeId {
		return fuse.EBADF
	}
	defer func() {
		b.mu.Lock()
		b.pos[in.Fh] = out.Offset
		b.mu.Unlock()
	}()
	b.lastPage = nil
	for i := int(in.Offset); i < len(b.names) && i < int(in.Offset)+b.perPage; i++ {
		if out.AddDirLookupEntry(fuse.DirEntry{Name: b.names[i], Mode: fuse.S_IFREG, Off: uint64(i + 1)}) == nil {
			break
		}
		b.lastPage = append(b.lastPage, b.names[i])
	}
	return fuse.OK
}

func (b *fakeBridge) ReleaseDir(in *fuse.ReleaseIn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open[in.Fh] != in.NodeId {
		panic(fmt.Sprintf("release of fh %d for node %d: it lists node %d", in.Fh, in.NodeId, b.open[in.Fh]))
	}
	delete(b.open, in.Fh)
}

func (b *fakeBridge) Forget(node, nlookup uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgets = append(b.forgets, node)
}

func (b *fakeBridge) stillOpen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open)
}

// readPage sends one READDIRPLUS for node at off, as the kernel does after
// an OPENDIR answered with ENOSYS (file handle 0), and returns the names
// in the reply and the offset to ask for next.
func readPage(t *testing.T, l *listingFS, b *fakeBridge, node, off uint64) ([]string, uint64) {
	t.Helper()
	out := fuse.NewDirEntryList(make([]byte, 1<<16), off)
	b.lastPage = nil
	if st := l.ReadDirPlus(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: node}, Offset: off}, out); !st.Ok() {
		t.Fatalf("readdirplus node %d at %d: %v", node, off, st)
	}
	return b.lastPage, out.Offset
}

// readAll lists node from off to the end, page by page.
func readAll(t *testing.T, l *listingFS, b *fakeBridge, node, off uint64) []string {
	t.Helper()
	var all []string
	for {
		names, next := readPage(t, l, b, node, off)
		if len(names) == 0 {
			return all
		}
		all = append(all, names...)
		off = next
	}
}

func TestListingFSAnswersOpendirWithENOSYS(t *testing.T) {
	l := newListingFS(newFakeBridge(1, 1))
	if st := l.OpenDir(nil, &fuse.OpenIn{}, &fuse.OpenOut{}); st != fuse.ENOSYS {
		t.Fatalf("OPENDIR answered %v, want ENOSYS (so that the kernel stops sending OPENDIR and RELEASEDIR)", st)
	}
}

func TestListingFSReadsAListingThroughOneHandle(t *testing.T) {
	b := newFakeBridge(25, 10)
	l := newListingFS(b)
	if got := readAll(t, l, b, 7, 0); !slices.Equal(got, b.names) {
		t.Fatalf("listing %v, want %v", got, b.names)
	}
	if b.opens != 1 {
		t.Errorf("%d handles opened for one listing in 4 pages, want 1", b.opens)
	}
	if n := b.stillOpen(); n != 0 {
		t.Errorf("%d handles open after the listing ended, want 0", n)
	}
}

// A reader whose buffer took only part of a reply goes on inside it: the
// kernel asks for the offset after the last entry it passed on, and the
// bridge replays the rest of its last reply from the same handle.
func TestListingFSGoesOnInsideItsLastReply(t *testing.T) {
	b := newFakeBridge(25, 10)
	l := newListingFS(b)
	readPage(t, l, b, 7, 0) // e0..e9; the reader took e0..e3
	if got := readAll(t, l, b, 7, 4); !slices.Equal(got, b.names[4:]) {
		t.Fatalf("listing from 4: %v, want %v", got, b.names[4:])
	}
	if b.opens != 1 {
		t.Errorf("%d handles opened, want 1: going on inside the last reply needs no new one", b.opens)
	}
}

// Two readers of one directory taking turns share the kept handle, which
// seeks to where each goes on; a reader starting over gets a fresh one.
func TestListingFSTwoReadersShareTheKeptHandle(t *testing.T) {
	b := newFakeBridge(25, 10)
	l := newListingFS(b)
	pageA, _ := readPage(t, l, b, 7, 0) // reader A: e0..e9
	pageB, _ := readPage(t, l, b, 7, 0) // reader B starts over: a fresh handle, A's released
	if b.opens != 2 || b.stillOpen() != 1 {
		t.Fatalf("after two listings started: %d handles opened, %d open; want 2 and 1", b.opens, b.stillOpen())
	}
	nextA, _ := readPage(t, l, b, 7, 10) // A goes on with the kept handle (B's, at 10)
	nextB, _ := readPage(t, l, b, 7, 10) // B too: it is at 20 now, so it seeks
	if b.opens != 2 || b.seeks != 1 {
		t.Errorf("readers taking turns: %d handles opened and %d seeks, want 2 and 1", b.opens, b.seeks)
	}
	gotA := slices.Concat(pageA, nextA, readAll(t, l, b, 7, 20))
	gotB := slices.Concat(pageB, nextB, readAll(t, l, b, 7, 20))
	for who, got := range map[string][]string{"A": gotA, "B": gotB} {
		if !slices.Equal(got, b.names) {
			t.Errorf("reader %s listed %v, want %v", who, got, b.names)
		}
	}
	if n := b.stillOpen(); n != 0 {
		t.Errorf("%d handles open after every listing ended, want 0", n)
	}
}

func TestListingFSReleasesAForgottenDirectorysListing(t *testing.T) {
	b := newFakeBridge(25, 10)
	l := newListingFS(b)
	readPage(t, l, b, 7, 0)
	readPage(t, l, b, 8, 0)
	l.Forget(7, 1)
	if n := b.stillOpen(); n != 1 {
		t.Errorf("%d handles open after node 7 was forgotten, want 1 (node 8's)", n)
	}
	if !slices.Equal(b.forgets, []uint64{7}) {
		t.Errorf("forgets passed on %v, want [7]", b.forgets)
	}
}

func TestListingFSBoundsUnfinishedListings(t *testing.T) {
	b := newFakeBridge(25, 10)
	l := newListingFS(b)
	for node := uint64(1); node <= maxListings+50; node++ {
		readPage(t, l, b, node, 0) // a reader that stops after one page
	}
	if n := b.stillOpen(); n != maxListings {
		t.Errorf("%d handles open for %d unfinished listings, want at most %d", n, maxListings+50, maxListings)
	}
}
