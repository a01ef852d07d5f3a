package fsys

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/store"
)

// node is one file, directory or other entry of the container's view. It
// holds no state of its own: its path is derived from the kernel's tree.
type node struct {
	fs.Inode
	fs *filesystem

	// The kernel refuses to mix passthrough and ordinary (cached) opens of
	// one inode: the open that would mix fails with EIO. So each open's mode
	// is chosen, and counted, under opensMu (see newHandle): the first open
	// decides, later ones follow it while any is open. Counts may run a
	// little high (the kernel forgets a closed file before its RELEASE
	// reaches us), which only makes a later open follow an old choice.
	opensMu     sync.Mutex
	cachedOpens int // open handles served by the plugin
	ptOpens     int // open handles served by passthrough
	// hostReleases counts releases of handles served from the host (whose
	// store copy each leaves a stub); an open that began before one and
	// is served from the store copy looks at the copy again (newHandle).
	hostReleases atomic.Uint64
	// writeOpens counts the open handles that may write (see prefill), and
	// prefilled is the version of the content last stored in the kernel's
	// page cache; both under opensMu.
	writeOpens int
	prefilled  prefillStamp
	// kept is the store file held open for the next read-only open (see
	// openKept), under opensMu; nil if none.
	kept *store.Kept

	// populated: this directory's host entries are in the store (a store
	// directory never loses that), so a lookup in it is one lstat of the
	// store, not first a getxattr of the directory to ask: a cold tree walk
	// (go list, git status) does a lookup per file.
	populated atomic.Bool

	getattrs atomic.Uint64 // GETATTRs served (see restater)
}

var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeOnForgetter)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
	_ = (fs.NodeFsyncer)((*node)(nil))
	_ = (fs.NodeReader)((*node)(nil))
)

// testHookStoreOpened, if set (by tests), runs in an OPEN between the
// store's open and the handle's.
var testHookStoreOpened func(rel string)

// rel is the node's path relative to the mount root, and false for a node
// that no longer has a name (unlinked while open).
func (n *node) rel() (string, bool) {
	var segs []string
	p := &n.Inode
	root := n.Root()
	for p != root {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		segs = append(segs, name)
		p = parent
	}
	// Reverse into a path.
	size := 0
	for _, s := range segs {
		size += len(s) + 1
	}
	b := make([]byte, 0, size)
	for i := len(segs) - 1; i >= 0; i-- {
		if len(b) > 0 {
			b = append(b, '/')
		}
		b = append(b, segs[i]...)
	}
	return string(b), true
}

// orphanPath is what path returns for a node that lost its name (unlinked or
// renamed over while the kernel still held it): a name no store entry can
// have. errno turns the store's refusal of it into ENOENT, what the kernel
// expects for a file that is gone.
const orphanPath = "\x00orphan"

// path is rel for operations on a live node, orphanPath for an orphan.
func (n *node) path() string {
	r, ok := n.rel()
	if !ok {
		return orphanPath
	}
	return r
}

func (n *node) child(name string) string {
	p := n.path()
	if p == "" {
		return name
	}
	return p + "/" + name
}

// newChild hands the kernel the entry rel, whose store attributes are st.
func (n *node) newChild(ctx context.Context, rel string, st *unix.Stat_t, out *fuse.EntryOut) *fs.Inode {
	id := idFromStat(st)
	if n.fs.servedFromHost(st.Ino) {
		// Written on the host now (another name of a file open for
		// writing): the store copy's size and times are stale.
		if hst, err := n.fs.store.HostLstat(rel); err == nil {
			st = &hst
		}
	}
	fillAttr(&out.Attr, st)
	return n.NewInode(ctx, &node{fs: n.fs}, id)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.store.CountOp("lookup")
	if !n.populated.Load() {
		if err := n.fs.store.EnsurePopulated(n.path()); err != nil {
			return nil, n.fs.errno(err, "lookup", n.child(name))
		}
		n.populated.Store(true)
	}
	rel := n.child(name)
	st, err := n.fs.store.Lstat(rel)
	if err != nil {
		return nil, n.fs.errno(err, "lookup", rel)
	}
	return n.newChild(ctx, rel, &st, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fs.store.CountOp("getattr")
	n.getattrs.Add(1)
	var st unix.Stat_t
	var err error
	// Without a handle from the kernel, go-fuse passes one of the file's
	// open ones: a file written from the host is stat'ed there (handle.fd).
	// It passes none while the last one is being released, which for a
	// file written from the host is while its store copy is made a stub
	// again: the host has the attributes then.
	h, _ := f.(*handle)
	switch {
	case h != nil:
		err = unix.Fstat(h.fd(), &st)
	case n.fs.servedFromHost(n.StableAttr().Ino):
		st, err = n.fs.store.HostLstat(n.path())
	default:
		st, err = n.fs.store.Lstat(n.path())
	}
	if err != nil {
		return n.fs.errno(err, "getattr", n.path())
	}
	fillAttr(&out.Attr, &st)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.fs.store.CountOp("setattr")
	ctx = n.fs.origin(ctx)
	rel := n.path()
	var a store.Attrs
	if m, ok := in.GetMode(); ok {
		a.Mode = &m
	}
	if uid, ok := in.GetUID(); ok {
		u := int(uid)
		a.Uid = &u
	}
	if gid, ok := in.GetGID(); ok {
		g := int(gid)
		a.Gid = &g
	}
	if t, ok := in.GetATime(); ok {
		ts := unix.NsecToTimespec(t.UnixNano())
		a.Atime = &ts
	} else if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
		ts := unix.Timespec{Nsec: unix.UTIME_NOW}
		a.Atime = &ts
	}
	if t, ok := in.GetMTime(); ok {
		ts := unix.NsecToTimespec(t.UnixNano())
		a.Mtime = &ts
	} else if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
		ts := unix.Timespec{Nsec: unix.UTIME_NOW}
		a.Mtime = &ts
	}
	var err error
	if sz, ok := in.GetSize(); ok {
		size := int64(sz)
		if h, isH := f.(*handle); isH && h != nil {
			err = h.file.Truncate(ctx, size)
		} else {
			a.Size = &size
		}
	}
	if err == nil && (a.Mode != nil || a.Uid != nil || a.Gid != nil || a.Size != nil || a.Atime != nil || a.Mtime != nil) {
		err = n.fs.store.Setattr(ctx, rel, a)
	}
	if err != nil {
		return n.fs.errno(err, "setattr", rel)
	}
	if _, ok := in.GetSize(); ok {
		// The kernel truncates its cached pages after this reply.
		n.fs.contentChanged(nil)
	}
	if errno := n.Getattr(ctx, f, out); errno != 0 {
		return errno
	}
	// go-fuse leaves a SETATTR reply's timeout at 0 (it sets one for
	// GETATTR only), and the kernel would then ask again at the file's next
	// open or stat: a round trip per file after tar, cp -p or chmod -R.
	out.SetTimeout(n.fs.attrTimeout)
	return 0
}

// created looks up what an operation just made and hands it to the kernel.
func (n *node) created(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rel := n.child(name)
	st, err := n.fs.store.Lstat(rel)
	if err != nil {
		return nil, n.fs.errno(err, "lstat", rel)
	}
	return n.newChild(ctx, rel, &st, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.store.CountOp("mkdir")
	rel := n.child(name)
	if err := n.fs.store.Mkdir(n.fs.origin(ctx), rel, mode, caller(ctx)); err != nil {
		return nil, n.fs.errno(err, "mkdir", rel)
	}
	return n.created(ctx, name, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.store.CountOp("mknod")
	rel := n.child(name)
	if err := n.fs.store.Mknod(n.fs.origin(ctx), rel, mode, uint64(rdev), caller(ctx)); err != nil {
		return nil, n.fs.errno(err, "mknod", rel)
	}
	return n.created(ctx, name, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.store.CountOp("symlink")
	rel := n.child(name)
	if err := n.fs.store.Symlink(n.fs.origin(ctx), target, rel, caller(ctx)); err != nil {
		return nil, n.fs.errno(err, "symlink", rel)
	}
	return n.created(ctx, name, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	n.fs.store.CountOp("readlink")
	rel := n.path()
	t, err := n.fs.store.Readlink(rel)
	if err != nil {
		return nil, n.fs.errno(err, "readlink", rel)
	}
	return []byte(t), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.store.CountOp("link")
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	rel := n.child(name)
	ctx, cancel := waitCtx(ctx)
	defer cancel()
	if err := n.fs.store.Link(n.fs.origin(ctx), t.path(), rel); err != nil {
		return nil, n.fs.errno(err, "link", rel)
	}
	return n.created(ctx, name, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.store.CountOp("unlink")
	rel := n.child(name)
	return n.fs.errno(n.fs.store.Unlink(n.fs.origin(ctx), rel), "unlink", rel)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.store.CountOp("rmdir")
	rel := n.child(name)
	return n.fs.errno(n.fs.store.Rmdir(n.fs.origin(ctx), rel), "rmdir", rel)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.fs.store.CountOp("rename")
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, to := n.child(name), np.child(newName)
	ctx, cancel := waitCtx(ctx)
	defer cancel()
	return n.fs.errno(n.fs.store.Rename(n.fs.origin(ctx), from, to, flags), "rename", from)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.store.CountOp("create")
	rel := n.child(name)
	var ch *node
	relNow := func() (string, bool) { return ch.rel() }
	f, err := n.fs.store.Create(n.fs.origin(ctx), rel, int(flags), mode, caller(ctx), relNow)
	if err != nil {
		return nil, nil, 0, n.fs.errno(err, "create", rel)
	}
	var st unix.Stat_t
	if err := unix.Fstat(f.Fd(), &st); err != nil {
		f.Release()
		return nil, nil, 0, n.fs.errno(err, "create", rel)
	}
	ch = &node{fs: n.fs}
	fillAttr(&out.Attr, &st)
	inode := n.NewInode(ctx, ch, idFromStat(&st))
	h, err := n.fs.newHandle(n.fs.origin(ctx), ch, f, int(flags), 0)
	if err != nil {
		f.Release()
		return nil, nil, 0, n.fs.errno(err, "create", rel)
	}
	if h.fromHost {
		// Written on the host from now on: its times are the ones the
		// container sees (a file left empty has no write to refresh them).
		if err := unix.Fstat(h.fd(), &st); err == nil {
			fillAttr(&out.Attr, &st)
		}
	}
	return inode, h, openFlags(f), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.fs.store.CountOp("open")
	rel := n.path()
	octx, bySyncer := ctx, n.fs.fromSyncer(ctx)
	if bySyncer {
		octx = store.HostOrigin(ctx)
	}
	hostReleases := n.hostReleases.Load()
	var f *store.File
	var err error
	if bySyncer || int(flags)&unix.O_ACCMODE != unix.O_RDONLY {
		f, err = n.fs.store.Open(octx, rel, int(flags), n.rel)
	} else {
		f, err = n.openKept(octx, rel, int(flags))
	}
	if err != nil {
		return nil, 0, n.fs.errno(err, "open", rel)
	}
	if testHookStoreOpened != nil {
		testHookStoreOpened(rel)
	}
	h, err := n.fs.newHandle(octx, n, f, int(flags), hostReleases)
	if err != nil {
		f.Release()
		return nil, 0, n.fs.errno(err, "open", rel)
	}
	if n.fs.opened != nil && rel != orphanPath && !bySyncer {
		n.fs.opened(rel)
	}
	if !bySyncer && !h.passthrough && int(flags)&unix.O_ACCMODE == unix.O_RDONLY {
		n.fs.prefill(n, h)
	}
	return h, openFlags(f), 0
}

// openKept is a read-only open by the container, served from the store file
// the node keeps open between such opens (store.Kept) while that is still
// what a fresh open would give: a hot pass over a tree then costs no
// syscall per OPEN in the store, where it cost an open, checks and a close.
func (n *node) openKept(ctx context.Context, rel string, flags int) (*store.File, error) {
	n.opensMu.Lock()
	k := n.kept.Hold()
	n.opensMu.Unlock()
	f, nk, err := n.fs.store.OpenKept(ctx, rel, flags, n.rel, n.StableAttr().Ino, k)
	k.Drop()
	if nk != k {
		n.opensMu.Lock()
		old := n.kept
		n.kept = nk
		n.opensMu.Unlock()
		old.Drop()
	}
	return f, err
}

// Read serves a READ: through its handle, or, for one that came without
// (a read-only mount: the kernel opened the file without OPEN, see
// readOnlyFS), from the store file the node keeps, as a read-only open
// would be (a stub's content is fetched first).
func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h, ok := f.(*handle); ok && h != nil {
		return h.Read(ctx, dest, off)
	}
	n.fs.store.CountOp("read")
	rel := n.path()
	file, err := n.openKept(ctx, rel, unix.O_RDONLY)
	if err != nil {
		return nil, n.fs.errno(err, "read", rel)
	}
	defer file.Release()
	// The only sign of the container's use of a file this mount gets: a
	// hot open and its reads reach nobody.
	if n.fs.opened != nil && rel != orphanPath {
		n.fs.opened(rel)
	}
	// Copied, not spliced: the reply is written after Release, when a
	// file not kept is closed.
	got, err := file.ReadAt(dest, off)
	if err != nil {
		return nil, n.fs.errno(err, "read", rel)
	}
	// The kernel marks the file's atime stale after the READ; the restater
	// puts it back off the container's path, as after a handle's release
	// (there is no release here).
	n.fs.restat.add(n)
	return fuse.ReadResultData(dest[:got]), 0
}

// OnForget: the kernel forgot the node (evicted, or removed: an unlinked
// file's space is freed once its last descriptor is closed), so its kept
// store file goes.
func (n *node) OnForget() {
	n.opensMu.Lock()
	k := n.kept
	n.kept = nil
	n.opensMu.Unlock()
	k.Drop()
}

// Fsync without an open file (e.g. on a directory): rule D2 for entries.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	n.fs.store.CountOp("fsync")
	if h, ok := f.(*handle); ok && h != nil {
		return h.Fsync(ctx, flags)
	}
	rel := n.path()
	ctx, cancel := waitCtx(ctx)
	defer cancel()
	if flags&fsyncDataOnly != 0 {
		return n.fs.errno(n.fs.store.SyncData(ctx, rel), "fdatasync", rel)
	}
	return n.fs.errno(n.fs.store.Sync(ctx, rel), "fsync", rel)
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	n.fs.store.CountOp("getxattr")
	rel := n.path()
	sz, err := n.fs.store.Getxattr(rel, attr, dest)
	if err != nil {
		return uint32(sz), n.fs.errno(err, "getxattr", rel)
	}
	return uint32(sz), 0
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	n.fs.store.CountOp("listxattr")
	rel := n.path()
	names, err := n.fs.store.Listxattr(rel)
	if err != nil {
		return 0, n.fs.errno(err, "listxattr", rel)
	}
	if len(dest) < len(names) {
		return uint32(len(names)), syscall.ERANGE
	}
	return uint32(copy(dest, names)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	n.fs.store.CountOp("setxattr")
	rel := n.path()
	return n.fs.errno(n.fs.store.Setxattr(n.fs.origin(ctx), rel, attr, data, int(flags)), "setxattr", rel)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	n.fs.store.CountOp("removexattr")
	rel := n.path()
	return n.fs.errno(n.fs.store.Removexattr(n.fs.origin(ctx), rel, attr), "removexattr", rel)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	n.fs.store.CountOp("statfs")
	var st unix.Statfs_t
	if err := n.fs.store.Statfs(&st); err != nil {
		return n.fs.errno(err, "statfs", "")
	}
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.Bsize, out.Frsize = uint32(st.Bsize), uint32(st.Frsize)
	out.NameLen = uint32(st.Namelen)
	return 0
}
