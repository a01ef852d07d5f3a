package fsys

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// readOnlyFS serves a read-only volume (Options.ReadOnly) without OPEN,
// RELEASE and FLUSH.
//
// A hot pass over a tree (go list, a build reading its sources again)
// costs one OPEN round trip per file and nothing else: the kernel has the
// names, attributes and pages. Here that round trip is most of the time
// (a hot go list over GOROOT: 2.1-2.2x native with it, 1.1-1.2x without;
// contrib/bench/README.md, "Read-only volumes without OPEN"). So readOnlyFS answers the kernel's first OPEN
// with ENOSYS, and the kernel stops sending OPEN and RELEASE on this mount
// (fc->no_open): it opens every file itself, with FOPEN_KEEP_CACHE, and
// sends READs with file handle 0, which node.Read serves from the store
// file the node keeps. The first close of such a file sends a FLUSH with
// handle 0, answered ENOSYS too (fc->no_flush): nothing is written here,
// so a close has nothing to report.
//
// The kernel's switches hold for the whole connection, writers included,
// and it is the open that serves a writer (passthrough, write-through,
// the journal's hold): so this is only for a mount no container writes.
// The mount the containers see is a read-only bind (frontend), and
// readOnlyFS refuses every change that reaches the connection from anyone
// but the syncer's own threads, which bring host changes in through the
// mount (they create files with CREATE, which still carries a handle).
type readOnlyFS struct {
	fuse.RawFileSystem
	fs *filesystem
}

func newReadOnlyFS(inner fuse.RawFileSystem, fs *filesystem) *readOnlyFS {
	return &readOnlyFS{RawFileSystem: inner, fs: fs}
}

// byContainer reports a request from anyone but the syncer's threads.
func (r *readOnlyFS) byContainer(c *fuse.Caller) bool { return !r.fs.syncerCaller(c) }

func (r *readOnlyFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

// Flush: only a file opened without OPEN comes with handle 0.
func (r *readOnlyFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if in.Fh == 0 {
		return fuse.ENOSYS
	}
	return r.RawFileSystem.Flush(cancel, in)
}

// Lseek (SEEK_DATA, SEEK_HOLE) of a file opened without OPEN: ENOSYS makes
// the kernel answer it itself (fc->no_lseek), as for a file with no holes.
func (r *readOnlyFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if in.Fh == 0 {
		return fuse.ENOSYS
	}
	return r.RawFileSystem.Lseek(cancel, in, out)
}

// The changes a container could ask for, refused. (Behind the read-only
// bind the kernel refuses them itself; this holds for the connection.)

func (r *readOnlyFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.Fh == 0 || r.byContainer(&in.Caller) {
		return 0, fuse.EROFS
	}
	return r.RawFileSystem.Write(cancel, in, data)
}

func (r *readOnlyFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if in.Fh == 0 || r.byContainer(&in.Caller) {
		return 0, fuse.EROFS
	}
	return r.RawFileSystem.Writev(cancel, in, data)
}

func (r *readOnlyFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.SetAttr(cancel, in, out)
}

func (r *readOnlyFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Mknod(cancel, in, name, out)
}

func (r *readOnlyFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (r *readOnlyFS) Unlink(cancel <-chan struct{}, in *fuse.InHeader, name string) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Unlink(cancel, in, name)
}

func (r *readOnlyFS) Rmdir(cancel <-chan struct{}, in *fuse.InHeader, name string) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Rmdir(cancel, in, name)
}

func (r *readOnlyFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (r *readOnlyFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Link(cancel, in, name, out)
}

func (r *readOnlyFS) Symlink(cancel <-chan struct{}, in *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Symlink(cancel, in, target, name, out)
}

func (r *readOnlyFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (r *readOnlyFS) RemoveXAttr(cancel <-chan struct{}, in *fuse.InHeader, attr string) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.RemoveXAttr(cancel, in, attr)
}

func (r *readOnlyFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Create(cancel, in, name, out)
}

func (r *readOnlyFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}

func (r *readOnlyFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if in.Fh == 0 || r.byContainer(&in.Caller) {
		return fuse.EROFS
	}
	return r.RawFileSystem.Fallocate(cancel, in)
}

func (r *readOnlyFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
