package fsys

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is a directory listing in progress. It lists the store only when
// first read. The kernel never opens a directory on this mount (listingFS
// answers OPENDIR with ENOSYS); listingFS opens a dirHandle for each listing
// the kernel starts, and the bridge seeks it (Seekdir) for a reader that goes
// on from elsewhere. The flags OpendirHandle returns never reach the kernel,
// which assumes the same ones on a mount without OPENDIR.
//
// Directories are listed with FOPEN_CACHE_DIR: the kernel keeps the listing
// in the directory's page cache and serves later readdirs from it, with no
// READDIRPLUS (and no lookup per entry) until the listing changes. It
// changes only through the mount (container operations, and host changes,
// which the syncer applies as operations on the mount), and the kernel drops
// the cached listing itself on each of those.
type dirHandle struct {
	n *node

	mu     sync.Mutex
	list   []fuse.DirEntry
	loaded bool
	pos    int // index of the next entry
}

var (
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fs.store.CountOp("opendir")
	return &dirHandle{n: n}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

func (d *dirHandle) load() syscall.Errno {
	if d.loaded {
		return 0
	}
	d.n.fs.store.CountOp("readdir")
	rel := d.n.path()
	entries, err := d.n.fs.store.ReadDir(rel)
	if err != nil {
		return d.n.fs.errno(err, "readdir", rel)
	}
	d.list = make([]fuse.DirEntry, 0, len(entries))
	for _, e := range entries {
		d.list = append(d.list, fuse.DirEntry{Name: e.Name, Mode: e.Type, Ino: e.Ino})
	}
	d.loaded = true
	return 0
}

// Readdirent returns the next entry, or nil at the end. An entry's offset
// is its position plus one, which is what Seekdir takes back.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.load(); errno != 0 {
		return nil, errno
	}
	if d.pos >= len(d.list) {
		return nil, 0
	}
	e := d.list[d.pos]
	d.pos++
	e.Off = uint64(d.pos)
	return &e, 0
}

// Seekdir goes back to (or past) an offset Readdirent handed out; 0 is the
// start, and a rewinddir lists the store again.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		d.loaded = false
	}
	if errno := d.load(); errno != 0 {
		return errno
	}
	d.pos = min(int(off), len(d.list))
	return 0
}

// Releasedir is called by listingFS when a listing ends, when the kernel
// forgets the directory, or when too many listings are unfinished. A listing
// read to its end has the restater put back the attributes the kernel drops
// after listing a directory.
func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	d.mu.Lock()
	ended := d.loaded && d.pos >= len(d.list)
	d.mu.Unlock()
	if ended {
		d.n.fs.restat.add(d.n)
	}
}
