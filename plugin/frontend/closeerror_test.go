package frontend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// failingCloseNode is a host file system (a go-fuse loopback) that behaves
// like sshfs with a full server: writes are acknowledged, and the failure
// comes from close (FLUSH) of a file opened for writing.
type failingCloseNode struct{ fs.LoopbackNode }

func (n *failingCloseNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 || flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return fh, fl, errno
	}
	return &failingCloseFile{fh}, fl, 0
}

type failingCloseFile struct{ inner fs.FileHandle }

func (f *failingCloseFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return f.inner.(fs.FileWriter).Write(ctx, data, off)
}
func (f *failingCloseFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.inner.(fs.FileReader).Read(ctx, dest, off)
}
func (f *failingCloseFile) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.inner.(fs.FileGetattrer).Getattr(ctx, out)
}
func (f *failingCloseFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return f.inner.(fs.FileFsyncer).Fsync(ctx, flags)
}
func (f *failingCloseFile) Release(ctx context.Context) syscall.Errno {
	return f.inner.(fs.FileReleaser).Release(ctx)
}
func (f *failingCloseFile) Flush(ctx context.Context) syscall.Errno { return syscall.EIO }

// rule C3: a share that reports a failed write only at close (sshfs
// acknowledges writes before its server has them) fails the container's
// close of a cached file the same way, as close on the share itself would.
// Before, the plugin answered the container's close without asking the
// share, and the write was reported as done (TestFault_D4_C3_ShareUnhealthy/
// full over a real sshfs share saw dd succeed).
func TestC3_ShareErrorAtCloseFailsTheContainersClose(t *testing.T) {
	r := newRig(t, consistency.Cached, func(host string) {
		backing := t.TempDir()
		writeFile(t, filepath.Join(backing, "f"), "before")
		root := &fs.LoopbackRoot{Path: backing}
		root.NewNode = func(rd *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
			return &failingCloseNode{fs.LoopbackNode{RootData: rd}}
		}
		root.RootNode = root.NewNode(root, nil, "", nil)
		srv, err := fs.Mount(host, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{FsName: "failing-close"}})
		if err != nil {
			t.Fatalf("mount the host: %v", err)
		}
		t.Cleanup(func() { srv.Unmount() })
	})
	f, err := os.OpenFile(r.mntPath("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("after"), 0); err != nil {
		t.Fatalf("write (the share acknowledges it): %v", err)
	}
	if err := f.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("close of a cached file the share failed at close: %v, want EIO (C3: the host's error)", err)
	}
}
