// Package fsys is the FUSE adapter: it turns kernel requests on a mount into
// calls on a store.Store and nothing more. It is the only package that
// speaks go-fuse; errno translation lives in errno.go.
//
// The kernel checks permissions itself (default_permissions), and every
// container's process reaches the same mount for a (source, state), so all
// of them share one coherent view (rule D3).
package fsys

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/internal/logrepeat"
	"github.com/bindstate/bindstate/plugin/ownmount"
	"github.com/bindstate/bindstate/plugin/store"
)

// Options tune a mount.
type Options struct {
	Name string // shown as the mount's source in mountinfo
	// AttrTimeout is how long the kernel may cache names, attributes and
	// negative lookups (default an hour). Every change to the store that does
	// not pass through the mount is announced to the kernel (host changes are
	// applied through the mount, or invalidated with Invalidate), so a long
	// timeout costs nothing in correctness and saves a round trip per stat.
	AttrTimeout time.Duration
	Debug       bool // log every FUSE request
	// NoPassthrough turns FUSE passthrough off: every read and write of a
	// delegated file then goes through the plugin (slower; for kernels or
	// setups where passthrough misbehaves).
	NoPassthrough bool
	// ReadOnly serves a mount no container writes without OPEN, RELEASE
	// and FLUSH (readOnlyFS): a hot open costs no round trip. Only the
	// syncer's own threads may change anything through it (host changes
	// brought in); every other change gets EROFS.
	ReadOnly bool
	// Opened, if set, is told of each file a container opens (not the
	// syncer's own opens), by its path in the mount: the host refresh
	// watches those files more closely (syncer.InUse). It is called on
	// the path of every open, so it must be quick.
	Opened func(rel string)
	Log    *slog.Logger
}

// Mount serves st at mountpoint (created if missing) until Unmount.
type Mount struct {
	server     *fuse.Server
	root       *node
	mountpoint string
}

// New mounts st at mountpoint.
func New(st *store.Store, mountpoint string, o Options) (*Mount, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.AttrTimeout == 0 {
		o.AttrTimeout = time.Hour
	}
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		return nil, &os.PathError{Op: "mount", Path: mountpoint, Err: err}
	}
	rootSt, err := st.Lstat("")
	if err != nil {
		return nil, err
	}
	// What a container can make fail at will, it can make the plugin log
	// at will: its records are limited (logrepeat).
	fsys := &filesystem{store: st, log: logrepeat.Wrap(o.Log), passthrough: !o.NoPassthrough,
		attrTimeout: o.AttrTimeout, restat: newRestater(mountpoint), opened: o.Opened}
	root := &node{fs: fsys}
	timeout := o.AttrTimeout
	opts := &fs.Options{
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		RootStableAttr:  &fs.StableAttr{Ino: rootSt.Ino, Gen: 1},
		MountOptions: fuse.MountOptions{
			AllowOther:           true,
			DirectMount:          true,
			FsName:               o.Name,
			Name:                 "bindstate",
			Options:              []string{"default_permissions"},
			MaxWrite:             1 << 20,
			MaxReadAhead:         1 << 20,
			Debug:                o.Debug,
			EnableSymlinkCaching: true,
			// The kernel would otherwise ask for security.capability before
			// every write (a round trip per write); handle.removePrivs does
			// what it would do instead.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2,
			// Over a source that holds no xattrs the store refuses them all:
			// answering the first xattr request ENOSYS tells the kernel to send
			// none after it, which it would otherwise do before every chown
			// and a file's first write (security.capability). The container
			// gets EOPNOTSUPP, as from a plain bind of the source.
			DisableXAttrs: !st.HostTakesXattrs(),
		},
	}
	var raw fuse.RawFileSystem = newListingFS(newAfterBridgeFS(fs.NewNodeFS(root, opts), fsys))
	if o.ReadOnly {
		raw = newReadOnlyFS(raw, fsys)
	}
	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		fsys.restat.close()
		return nil, &os.PathError{Op: "fuse mount", Path: mountpoint, Err: err}
	}
	go server.Serve()
	// WaitMount looks a name up in the new mount: the plugin's own
	// request, made from a thread that cannot keep a killed plugin alive.
	if err := ownmount.Do(server.WaitMount); err != nil {
		fsys.restat.close()
		server.Unmount() // best effort: mounted, but never to be served
		return nil, &os.PathError{Op: "fuse mount", Path: mountpoint, Err: err}
	}
	m := &Mount{server: server, root: root, mountpoint: mountpoint}
	st.OnWrittenBehind(func(rel string) { m.Invalidate(rel, true, false) })
	return m, nil
}

// Mountpoint is where the file system is mounted.
func (m *Mount) Mountpoint() string { return m.mountpoint }

// detachedWait bounds how long Unmount waits for a lazily detached mount's
// last user (a process still holding a file open) before it gives up.
var detachedWait = 10 * time.Second

// Unmount detaches the mount and waits for the server to stop. A busy mount
// (a process still has a file open) is detached lazily: it leaves the
// namespace at once and the kernel ends it when the last user lets go. Unmount
// waits for that at most detachedWait, so that one stuck process cannot hold
// the caller (and Docker's Unmount call) forever; it then says so.
func (m *Mount) Unmount() error {
	m.root.fs.restat.close()
	m.root.fs.store.OnWrittenBehind(nil) // the store may outlive the mount (a drain)
	err := m.server.Unmount()
	if err != nil {
		derr := unix.Unmount(m.mountpoint, unix.MNT_DETACH)
		if derr != nil {
			return &os.PathError{Op: "unmount", Path: m.mountpoint, Err: err}
		}
	}
	done := make(chan struct{})
	go func() { m.server.Wait(); close(done) }()
	select {
	case <-done:
		m.root.fs.releaseLeftover()
		m.root.fs.log.Close() // no request comes any more: say the repeats held back
		return nil
	case <-time.After(detachedWait):
		return &os.PathError{Op: "unmount", Path: m.mountpoint,
			Err: fmt.Errorf("detached, but a process still uses it after %s: it is served until it lets go", detachedWait)}
	}
}

// Invalidate drops what the kernel caches for rel: its attributes and, with
// content, its data pages; with entry, the name itself in its parent. Paths
// the kernel never looked up have nothing cached and are skipped.
func (m *Mount) Invalidate(rel string, content, entry bool) {
	parent := &m.root.Inode
	cur := parent
	name := ""
	if rel != "" {
		for _, seg := range strings.Split(rel, "/") {
			if cur == nil {
				break
			}
			parent, name = cur, seg
			cur = cur.GetChild(seg)
		}
	}
	drop := func() {
		if entry && name != "" && parent != nil {
			parent.NotifyEntry(name)
		}
		if cur != nil {
			off := int64(-1)
			if content {
				off = 0
			}
			cur.NotifyContent(off, 0)
		}
	}
	if !content {
		drop() // attributes or the name only: no prefill stands down
		return
	}
	m.root.fs.contentChanged(drop)
}

// filesystem is what all nodes of one mount share.
type filesystem struct {
	store       *store.Store
	log         *logrepeat.Logger // limits repeats: a container causes its records (see New)
	passthrough bool
	attrTimeout time.Duration // Options.AttrTimeout
	restat      *restater
	opened      func(rel string) // Options.Opened; nil: not told

	// fromHost counts, by store inode, the open handles the kernel serves
	// from the host file (handle.fromHost): while any is open, the store
	// copy's size and times are stale, so a lookup of another of its names
	// (a hard link) answers with the host's (node.newChild).
	// fromHostOpen is the sum of fromHost: every lookup and GETATTR asks
	// servedFromHost, and almost always none is open.
	fromHostMu   sync.Mutex
	fromHost     map[uint64]int
	fromHostOpen atomic.Int64

	// open holds the handles the kernel has not released yet. An unmount
	// drops the requests the server has not read, a RELEASE among them (the
	// kernel sends it after close returns), so one can still be here when
	// the server stops: Unmount releases it then (releaseLeftover), or what
	// a release does (a cached host writer's copy made a stub, a delegated
	// writer's journal hold ended) would never happen.
	openMu sync.Mutex
	open   map[*handle]struct{}

	// releases holds each handle's kind uncount until the bridge has
	// finished its RELEASE (afterBridgeFS).
	releases bridgeReleases

	// contentGen counts the changes to files' content made other than
	// through a handle open for writing; see prefill.
	contentMu  sync.RWMutex
	contentGen uint64
}

// track counts h open until untrack.
func (f *filesystem) track(h *handle) {
	f.openMu.Lock()
	if f.open == nil {
		f.open = make(map[*handle]struct{})
	}
	f.open[h] = struct{}{}
	f.openMu.Unlock()
}

func (f *filesystem) untrack(h *handle) {
	f.openMu.Lock()
	delete(f.open, h)
	f.openMu.Unlock()
}

// releaseLeftover releases the handles whose RELEASE never came, once the
// server has stopped (no request can come any more).
func (f *filesystem) releaseLeftover() {
	f.openMu.Lock()
	left := slices.Collect(maps.Keys(f.open))
	f.openMu.Unlock()
	for _, h := range left {
		f.log.Info("releasing a file whose RELEASE the unmount dropped", "path", h.file.Rel())
		h.Release(context.Background())
	}
}

// countFromHost adds d to the handles served from the host for store
// inode ino.
func (f *filesystem) countFromHost(ino uint64, d int) {
	f.fromHostMu.Lock()
	defer f.fromHostMu.Unlock()
	if f.fromHost == nil {
		f.fromHost = make(map[uint64]int)
	}
	if f.fromHost[ino] += d; f.fromHost[ino] <= 0 {
		delete(f.fromHost, ino)
	}
	f.fromHostOpen.Add(int64(d))
}

// servedFromHost reports whether store inode ino is written on the host
// now (countFromHost).
func (f *filesystem) servedFromHost(ino uint64) bool {
	if f.fromHostOpen.Load() == 0 {
		return false
	}
	f.fromHostMu.Lock()
	defer f.fromHostMu.Unlock()
	return f.fromHost[ino] > 0
}

// origin marks requests made by the syncer's own threads as host-origin
// (see store.Threads), so they change the store only.
func (f *filesystem) origin(ctx context.Context) context.Context {
	if f.fromSyncer(ctx) {
		return store.HostOrigin(ctx)
	}
	return ctx
}

// fromSyncer reports a request made by one of the syncer's own threads.
func (f *filesystem) fromSyncer(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	return ok && f.syncerCaller(c)
}

// syncerCaller reports a request's caller that is one of the syncer's own
// threads (a pid of 0: from outside the plugin's pid namespace).
func (f *filesystem) syncerCaller(c *fuse.Caller) bool {
	return c.Pid != 0 && f.store.Threads().Has(c.Pid)
}

func caller(ctx context.Context) store.Owner {
	if c, ok := fuse.FromContext(ctx); ok {
		return store.Owner{Uid: int(c.Uid), Gid: int(c.Gid)}
	}
	return store.Owner{Uid: 0, Gid: 0}
}

func idFromStat(st *unix.Stat_t) fs.StableAttr {
	return fs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: st.Ino, Gen: 1}
}

func fillAttr(out *fuse.Attr, st *unix.Stat_t) {
	out.Ino = st.Ino
	out.Size = uint64(st.Size)
	out.Blocks = blocksOf(st)
	out.Blksize = uint32(st.Blksize)
	out.Atime, out.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	out.Mtime, out.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	out.Ctime, out.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	out.Mode = st.Mode
	out.Nlink = uint32(st.Nlink)
	out.Uid, out.Gid = st.Uid, st.Gid
	out.Rdev = uint32(st.Rdev)
}

// blocksOf is st_blocks as the container sees it. A regular file whose
// store copy has a size and no block is nearly always a stub: its content
// not fetched yet, its size set by a truncate, and its xattrs in the inode
// (store.Base.encode). It is shown with the blocks its content will take
// once fetched, whole blocks of the store's, as the host shows it with
// its data: du and ls -s count what the tree holds, not nothing, and a
// tool that reads zero blocks as "all holes" does not skip it. A file the
// container made all holes (truncate -s) is shown so too: rare, and it
// reads as zeros either way.
func blocksOf(st *unix.Stat_t) uint64 {
	if st.Blocks != 0 || st.Size <= 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return uint64(st.Blocks)
	}
	bs := int64(st.Blksize)
	if bs < 512 {
		bs = 4096
	}
	return uint64((st.Size + bs - 1) / bs * (bs / 512))
}
