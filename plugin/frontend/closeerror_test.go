package frontend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/internal/testshare"
)

// failingCloseNode is a host file system (a go-fuse loopback) that behaves
// like sshfs with a full server: writes are acknowledged, and the failure
// comes from close (FLUSH) of the open file they were written through, and
// only that one (sshfs keeps a failed write per open file).
type failingCloseNode struct{ fs.LoopbackNode }

func (n *failingCloseNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 || flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return fh, fl, errno
	}
	return &failingCloseFile{loopbackFile: loopbackFile{fh}}, fl, 0
}

// loopbackFile passes every file request on to the loopback's own handle;
// the test hosts below embed it and change one request each.
type loopbackFile struct{ inner fs.FileHandle }

func (f *loopbackFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return f.inner.(fs.FileWriter).Write(ctx, data, off)
}
func (f *loopbackFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.inner.(fs.FileReader).Read(ctx, dest, off)
}
func (f *loopbackFile) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.inner.(fs.FileGetattrer).Getattr(ctx, out)
}
func (f *loopbackFile) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.inner.(fs.FileSetattrer).Setattr(ctx, in, out)
}
func (f *loopbackFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return f.inner.(fs.FileFsyncer).Fsync(ctx, flags)
}
func (f *loopbackFile) Flush(ctx context.Context) syscall.Errno {
	return f.inner.(fs.FileFlusher).Flush(ctx)
}
func (f *loopbackFile) Release(ctx context.Context) syscall.Errno {
	return f.inner.(fs.FileReleaser).Release(ctx)
}

type failingCloseFile struct {
	loopbackFile
	wrote atomic.Bool
}

func (f *failingCloseFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.wrote.Store(true)
	return f.loopbackFile.Write(ctx, data, off)
}

func (f *failingCloseFile) Flush(ctx context.Context) syscall.Errno {
	if f.wrote.Load() {
		return syscall.EIO
	}
	return f.loopbackFile.Flush(ctx)
}

// mountHost serves backing at host, the source of a rig, through a go-fuse
// loopback whose nodes node makes (a test's own node type, which changes
// a request or counts them): testshare.Mount.
func mountHost(t *testing.T, host, backing, name string, node func(rd *fs.LoopbackRoot) fs.InodeEmbedder) {
	t.Helper()
	testshare.Mount(t, host, backing, name, fs.Options{},
		func(rd *fs.LoopbackRoot, _ *syscall.Stat_t) fs.InodeEmbedder { return node(rd) })
}

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
		mountHost(t, host, backing, "failing-close", func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
			return &failingCloseNode{fs.LoopbackNode{RootData: rd}}
		})
	})
	if w := r.front.Status().Writers; !strings.HasPrefix(w, "through the plugin: the source is a FUSE file system run by a process (fuse") {
		t.Errorf("status says cached writers over a FUSE share are served by %q, want through the plugin", w)
	}
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

// fsyncCountingNode is a host file system (a go-fuse loopback) that counts
// the FSYNC requests made to it, on files and directories.
type fsyncCountingNode struct {
	fs.LoopbackNode
	fsyncs *atomic.Int64
}

func (n *fsyncCountingNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	return &fsyncCountingFile{loopbackFile{fh}, n.fsyncs}, fl, 0
}

func (n *fsyncCountingNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return in, fh, fl, errno
	}
	return in, &fsyncCountingFile{loopbackFile{fh}, n.fsyncs}, fl, 0
}

func (n *fsyncCountingNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	n.fsyncs.Add(1)
	return 0
}

// OpendirHandle wraps the loopback's directory handle, whose own Fsyncdir
// would otherwise answer a directory's fsync without counting it.
func (n *fsyncCountingNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	return &fsyncCountingDir{fh, n.fsyncs}, fl, 0
}

type fsyncCountingDir struct {
	inner  fs.FileHandle
	fsyncs *atomic.Int64
}

func (d *fsyncCountingDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.inner.(fs.FileReaddirenter).Readdirent(ctx)
}
func (d *fsyncCountingDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.inner.(fs.FileSeekdirer).Seekdir(ctx, off)
}
func (d *fsyncCountingDir) Releasedir(ctx context.Context, flags uint32) {
	d.inner.(fs.FileReleasedirer).Releasedir(ctx, flags)
}
func (d *fsyncCountingDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.fsyncs.Add(1)
	return d.inner.(fs.FileFsyncdirer).Fsyncdir(ctx, flags)
}

type fsyncCountingFile struct {
	loopbackFile
	fsyncs *atomic.Int64
}

func (f *fsyncCountingFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.fsyncs.Add(1)
	return f.loopbackFile.Fsync(ctx, flags)
}

// rule D2: a container's fsync of a delegated file returns once the file is
// on the host's disk: the writeback fsyncs it there. The background
// writeback and the flush at a container's stop (D4) do not: on a share
// each host fsync is a round trip and a disk flush on the server, and a
// native mount does not fsync on its own either.
func TestD2_ContainerFsyncIsDurableOnTheHostOtherWritebackIsNot(t *testing.T) {
	var fsyncs atomic.Int64
	r := newRig(t, consistency.Delegated, func(host string) {
		backing := t.TempDir()
		mountHost(t, host, backing, "fsync-counting", func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
			return &fsyncCountingNode{fs.LoopbackNode{RootData: rd}, &fsyncs}
		})
	})
	writeFile(t, r.mntPath("plain"), "written, never fsynced")
	r.flush(t) // as at a container's stop
	if got := readFile(t, r.hostPath("plain")); got != "written, never fsynced" {
		t.Fatalf("host has %q after the flush", got)
	}
	if n := fsyncs.Load(); n != 0 {
		t.Fatalf("%d fsync(s) on the host for a file the container never fsynced", n)
	}

	f, err := os.Create(r.mntPath("synced"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("fsynced"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if n := fsyncs.Load(); n == 0 {
		t.Fatal("the container's fsync returned without an fsync of the file on the host (D2)")
	}
	if got := readFile(t, r.hostPath("synced")); got != "fsynced" {
		t.Fatalf("host has %q after the container's fsync", got)
	}

	// Written back in the background (no fsync on the host) before the
	// container's fsync: the fsync still reaches the host's copy.
	writeFile(t, r.mntPath("later"), "written back before the fsync")
	waitFor(t, "the background writeback of later", func() bool {
		b, err := os.ReadFile(r.hostPath("later"))
		return err == nil && string(b) == "written back before the fsync"
	})
	r.flush(t)
	before := fsyncs.Load()
	g, err := os.OpenFile(r.mntPath("later"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if fsyncs.Load() == before {
		t.Fatal("fsync of a file already written back returned without an fsync on the host (D2)")
	}

	// A directory's fsync: its entries, on the host's disk.
	before = fsyncs.Load()
	d, err := os.Open(r.mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of the mount's root: %v", err)
	}
	if fsyncs.Load() == before {
		t.Fatal("fsync of a directory returned without an fsync of it on the host (D2)")
	}
}
