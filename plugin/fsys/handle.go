package fsys

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/store"
)

// handle is an open file.
type handle struct {
	file *store.File
	fs   *filesystem

	// killPriv: the file had set-id bits or a security.capability xattr
	// when it was opened for writing. The mount negotiates
	// HANDLE_KILLPRIV_V2 (so the kernel does not ask for security.capability
	// before every write, a round trip per write), which makes clearing
	// them on the first write our job, as the kernel would.
	killPriv    atomic.Bool
	wrote       atomic.Bool // BeginWrite done
	whole       atomic.Bool // fromHost, written through the plugin: the store copy was made whole
	read        atomic.Bool // served a READ: the kernel has marked the file's atime stale
	passthrough bool        // the kernel reads and writes the file itself
	writable    bool        // open for writing (counted in node.writeOpens)
	fromHost    bool        // passthrough to the host file (cached), not the store's
	node        *node       // whose open counts include this handle
}

// PassthroughFd hands the kernel the file for FUSE passthrough, when the
// handle qualifies (see newHandle): the store file (delegated) or the
// host file (cached).
func (h *handle) PassthroughFd() (int, bool) {
	if !h.passthrough {
		return -1, false
	}
	return h.fd(), true
}

// fd is the file the kernel reads and writes for this handle: the host
// file for one served from the host, else the store file.
func (h *handle) fd() int {
	if h.fromHost {
		return h.file.HostFd()
	}
	return h.file.Fd()
}

// newHandle wraps an open store file. Opening for writing costs one fstat
// and one fgetxattr on the store file, so that writes cost none.
//
// A file open for writing only is served by passthrough (unless the mount
// was made without it): the kernel then does reads and writes on a file
// itself, and the plugin never sees them.
//   - delegated: the store file, at local-disk speed. So a handle open for
//     writing holds its path dirty in the journal from open to release
//     (BeginWrite now, not at the first write), and set-id bits are
//     cleared at open rather than at the first write.
//   - cached: the host file (store.File.HostPassthrough), at the share's
//     own speed, each write on the host before it returns (rule C3). Every
//     open joining it is served from the host file too, and the store copy
//     becomes a stub again at release.
//
// hostReleases is n.hostReleases as it was before the store opened file.
func (f *filesystem) newHandle(ctx context.Context, n *node, file *store.File, flags int, hostReleases uint64) (*handle, error) {
	h := &handle{file: file, fs: f, node: n}
	write := flags&unix.O_ACCMODE != unix.O_RDONLY
	// Only for O_WRONLY (logs, dd, compiler output): those are the opens
	// passthrough speeds up, a write per round trip saved.
	//
	// Not for O_RDWR: a writable shared mapping needs it, and a passthrough
	// mapping is of the store file itself, so msync(MS_SYNC) would never
	// reach the plugin (rule D2).
	//
	// Not for O_RDONLY: a read-only open served by the plugin keeps the
	// kernel's page cache (FOPEN_KEEP_CACHE), so a hot read costs no request
	// either, and the passthrough open costs more: a backing-file register
	// and unregister per open, and a GETATTR after each read (the kernel
	// drops the cached atime). go list over GOROOT hot (make bench W1):
	// 4.61x native with passthrough readers, 3.99x without.
	want := f.passthrough && flags&unix.O_ACCMODE == unix.O_WRONLY &&
		(file.Passthrough(ctx) || file.HostPassthrough())
	fromHost := f.store.ServesFromHost()
	n.opensMu.Lock()
	switch {
	case n.ptOpens > 0:
		// Open by passthrough (or not yet released by the bridge,
		// afterBridgeFS): the bridge answers this open with passthrough on
		// the same backing file whatever the handle says (the kernel
		// refuses an ordinary open of an inode open by passthrough), so
		// it is one. (An O_RDWR open made now has its msync served from
		// the store file: its data is journaled at release and written
		// back then or on fsync.)
		h.passthrough = f.passthrough
	case n.cachedOpens > 0:
		h.passthrough = false
	default:
		h.passthrough = want
	}
	if h.passthrough && fromHost {
		// Before the open is counted (and so before another open can join
		// it): the kernel may be handed this handle's file.
		if err := file.ServeFromHost(); err != nil {
			n.opensMu.Unlock()
			return nil, err
		}
		h.fromHost = true
		f.countFromHost(n.StableAttr().Ino, 1)
	}
	if h.passthrough {
		n.ptOpens++
	} else {
		n.cachedOpens++
	}
	if write {
		h.writable = true
		n.writeOpens++
	}
	n.opensMu.Unlock()
	f.track(h)
	if !h.passthrough && ((write && fromHost) || n.hostReleases.Load() != hostReleases) {
		// Served from the store copy after all: a writer's writes go to
		// it too, and a reader may have found it whole just before a
		// writer served from the host made it a stub (handle.Release).
		if err := file.EnsureContent(); err != nil {
			h.release()
			return nil, err
		}
	}
	if h.passthrough && write {
		if !h.fromHost {
			// The kernel writes the store file itself: the store cannot
			// tell which bytes change, and writes it back whole.
			file.KernelWrites()
		}
		if err := file.BeginWrite(ctx); err != nil {
			h.release()
			return nil, err
		}
		h.wrote.Store(true)
	}
	if write {
		var st unix.Stat_t
		if unix.Fstat(file.Fd(), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			setID := st.Mode&unix.S_ISUID != 0 || st.Mode&(unix.S_ISGID|unix.S_IXGRP) == unix.S_ISGID|unix.S_IXGRP
			_, err := unix.Fgetxattr(file.Fd(), capabilityXattr, nil)
			h.killPriv.Store(setID || err == nil)
		}
		if h.passthrough && h.killPriv.Load() {
			h.removePrivs(ctx)
		}
	}
	return h, nil
}

// testHookDropRelease, if set (by tests) and true, drops a RELEASE, as an
// unmount drops one the server has not read yet.
var testHookDropRelease func() bool

// testHookReleased, if set (by tests), runs at the end of a RELEASE the
// plugin served, before the bridge drops the handle's passthrough backing.
var testHookReleased func()

// release uncounts the handle on its node, and as open.
func (h *handle) release() {
	h.releaseOpen()
	h.releaseKind()
}

// releaseOpen uncounts the handle as open, but not its kind (releaseKind).
func (h *handle) releaseOpen() {
	h.fs.untrack(h)
	h.node.opensMu.Lock()
	if h.fromHost {
		h.fs.countFromHost(h.node.StableAttr().Ino, -1)
	}
	if h.writable {
		h.node.writeOpens--
	}
	h.node.opensMu.Unlock()
}

// releaseKind uncounts the handle's kind (node.ptOpens or cachedOpens),
// from which newHandle decides the kind of the node's next open.
func (h *handle) releaseKind() {
	h.node.opensMu.Lock()
	if h.passthrough {
		h.node.ptOpens--
	} else {
		h.node.cachedOpens--
	}
	h.node.opensMu.Unlock()
}

// errno is filesystem.errno for this handle's file. The file's path is
// looked up only for an error: working it out walks the node tree and
// allocates, and a release, flush or fsync that succeeds does not need it.
func (h *handle) errno(err error, op string) syscall.Errno {
	if err == nil {
		return 0
	}
	return h.fs.errno(err, op, h.file.Rel())
}

// capabilityXattr holds file capabilities; a write removes it (as the
// kernel's file_remove_privs does).
const capabilityXattr = "security.capability"

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileFsyncer)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileGetattrer)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
	_ = (fs.FileLseeker)((*handle)(nil))
	_ = (fs.FilePassthroughFder)((*handle)(nil))
	_ = (fs.FileFlusher)((*handle)(nil))
)

// Flush is sent on close only for a handle that writes through to the
// host (openFlags: every other open carries FOPEN_NOFLUSH, since nothing
// happens on its close and a FLUSH would be a round trip per close, a third
// of the requests of an open-read-close workload such as go list).
//
// For a file written through (cached, rule C3), close is where a share
// reports what it deferred: sshfs acknowledges writes before the server
// has them and returns a failed one (the share full, EIO) from close. So
// Flush closes a duplicate of the host half, which makes the share flush
// that file and gives its error to the container's close, as the share
// itself would.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	h.fs.store.CountOp("flush")
	return h.errno(h.file.FlushHost(), "close")
}

// openFlags are the FOPEN_ flags of an open of file.
func openFlags(file *store.File) uint32 {
	if file.WritesThrough() {
		return fuse.FOPEN_KEEP_CACHE
	}
	return fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.fs.store.CountOp("read")
	h.read.Store(true)
	// Spliced straight from the file: no copy through this process. A
	// handle served from the host reads there: the kernel sends READs for
	// it only where it refused the host file for passthrough (an overlayfs
	// source: go-fuse then serves every open of the mount by requests),
	// and the host is what such a handle stands for.
	return fuse.ReadResultFd(uintptr(h.fd()), off, len(dest)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.fs.store.CountOp("write")
	ctx = h.fs.origin(ctx)
	if h.killPriv.Load() {
		h.removePrivs(ctx)
	}
	if h.fromHost && !h.whole.Load() {
		// The kernel was to write the host file itself, and sends WRITEs
		// instead (it refused the host file: see Read): they go to the
		// store copy too, which the open left a stub. Made whole before
		// the first, so that no fetch for a reader copies over them.
		if err := h.file.EnsureContent(); err != nil {
			return 0, h.errno(err, "write")
		}
		h.whole.Store(true)
	}
	if !h.wrote.Load() {
		if err := h.file.BeginWrite(ctx); err != nil {
			return 0, h.errno(err, "write")
		}
		h.wrote.Store(true)
	}
	n, err := h.file.WriteAt(ctx, data, off)
	if err != nil {
		return uint32(n), h.errno(err, "write")
	}
	return uint32(n), 0
}

// Fsync returns once the file is on the host (rule D2); for fdatasync,
// once its content and size are (the times may follow: store.SyncData).
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.fs.store.CountOp("fsync")
	ctx, cancel := waitCtx(ctx)
	defer cancel()
	if flags&fsyncDataOnly != 0 {
		return h.errno(h.file.SyncData(ctx), "fdatasync")
	}
	return h.errno(h.file.Sync(ctx), "fsync")
}

// fsyncDataOnly is FUSE_FSYNC_FDATASYNC, the FSYNC flag of fdatasync(2)
// (go-fuse has no name for it).
const fsyncDataOnly = 1

// Release closes the file before it uncounts the handle: a file written
// from the host has its store copy marked stale in file.Release, and an
// open that no longer joins this one (the counts at zero) must find it so.
// The handle's kind stays counted until the bridge has dropped its
// passthrough backing file (afterBridgeFS): until then, the kernel serves a
// new open of the inode by passthrough whatever the plugin decides.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	if testHookDropRelease != nil && testHookDropRelease() {
		return 0 // as if the RELEASE never came
	}
	err := h.file.Release()
	if h.fromHost {
		h.node.hostReleases.Add(1) // before the uncount: see newHandle
	}
	h.releaseOpen()
	h.fs.releases.after(ctx, h.releaseKind)
	h.fs.store.CountOp("release")
	if h.read.Load() {
		// The kernel marks a file's atime stale after each READ, and its
		// next stat then costs a GETATTR whatever the attribute timeout:
		// a file read once (a build's first run) costs a round trip at
		// every stat of every later run until then. The restater asks
		// for it now, off the container's path (as for a listing).
		h.fs.restat.add(h.node)
	}
	if testHookReleased != nil {
		testHookReleased()
	}
	return h.errno(err, "release")
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd(), &st); err != nil {
		return h.errno(err, "fstat")
	}
	fillAttr(&out.Attr, &st)
	return 0
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	h.fs.store.CountOp("fallocate")
	return h.errno(h.file.Allocate(h.fs.origin(ctx), mode, int64(off), int64(size)), "fallocate")
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd(), int64(off), int(whence))
	if err != nil {
		return 0, h.errno(err, "lseek")
	}
	return uint64(n), 0
}

// removePrivs does what the kernel does before a write by a process without
// CAP_FSETID: clear the set-user-ID bit, the set-group-ID bit of a group
// executable file, and the file's capabilities. go-fuse does not pass the
// kernel's FUSE_WRITE_KILL_SUIDGID flag to file handles, so a writer other
// than root counts as unprivileged. Capabilities go whoever writes.
func (h *handle) removePrivs(ctx context.Context) {
	if !h.killPriv.Swap(false) {
		return
	}
	rel := h.file.Rel()
	var st unix.Stat_t
	if err := unix.Fstat(h.file.Fd(), &st); err != nil {
		return
	}
	if c, ok := fuse.FromContext(ctx); ok && c.Uid != 0 {
		mode := st.Mode & 07777
		mode &^= unix.S_ISUID
		if mode&unix.S_IXGRP != 0 {
			mode &^= unix.S_ISGID
		}
		if mode != st.Mode&07777 {
			if err := h.fs.store.Setattr(ctx, rel, store.Attrs{Mode: &mode}); err != nil {
				h.fs.log.Warn("clearing set-id bits before a write", "path", rel, "err", err)
			}
		}
	}
	if err := h.fs.store.Removexattr(ctx, rel, capabilityXattr); err != nil && !errors.Is(err, unix.ENODATA) {
		h.fs.log.Warn("removing file capabilities before a write", "path", rel, "err", err)
	}
}
