package fsys

import (
	"context"
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
}

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileFsyncer)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileGetattrer)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
	_ = (fs.FileLseeker)((*handle)(nil))
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	// Spliced straight from the store file: no copy through this process.
	return fuse.ReadResultFd(uintptr(h.file.Fd()), off, len(dest)), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.file.WriteAt(h.fs.origin(ctx), data, off)
	if err != nil {
		return uint32(n), h.fs.errno(err, "write", h.file.Rel())
	}
	return uint32(n), 0
}

// Fsync returns once the file is on the host (rule D2).
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.fs.errno(h.file.Sync(ctx), "fsync", h.file.Rel())
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	return h.fs.errno(h.file.Release(), "release", h.file.Rel())
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(h.file.Fd(), &st); err != nil {
		return h.fs.errno(err, "fstat", h.file.Rel())
	}
	fillAttr(&out.Attr, &st)
	return 0
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	return h.fs.errno(h.file.Allocate(h.fs.origin(ctx), mode, int64(off), int64(size)), "fallocate", h.file.Rel())
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.file.Fd(), int64(off), int(whence))
	if err != nil {
		return 0, h.fs.errno(err, "lseek", h.file.Rel())
	}
	return uint64(n), 0
}
