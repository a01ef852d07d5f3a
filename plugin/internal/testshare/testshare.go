// Package testshare mounts shares for tests: a go-fuse loopback over a
// backing directory, whose nodes a test makes to behave as a share does
// (refuse a change, fail at close, count requests). MountStale is one such
// share kept here for several packages: it answers lookups with stale
// attributes as sshfs does, what a file had when it was first looked up or
// last opened, however it changed since (sshfs keeps attributes per path
// for 20 s and looks again on open), so a test gets a change hidden behind
// that cache at once and every time, with no timing. MountFar is another: a
// share each of whose lstats is a round trip, and which can be made gone.
package testshare

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/bindstate/bindstate/plugin/internal/testenv"
)

// Mount serves backing at mnt, an empty directory, until the test ends,
// through a go-fuse loopback whose nodes node makes (st: what the lookup
// found; nil for the root), with o's timeouts. It skips the test unless it
// runs as root with /dev/fuse.
//
// The share offers no passthrough, as sshfs: a FUSE file system that
// offers it may not be the backing file of another's passthrough (the
// kernel bounds the stacking), which would hide what the plugin does with
// one that does not. A store may still hold the share open a moment after
// the test (its drain), so the unmount at cleanup is retried and finally
// detached: a busy mount left behind fails the removal of the test's
// temporary directories.
func Mount(t testing.TB, mnt, backing, name string, o fs.Options, node func(rd *fs.LoopbackRoot, st *syscall.Stat_t) fs.InodeEmbedder) {
	t.Helper()
	testenv.RequireFUSE(t)
	root := &fs.LoopbackRoot{Path: backing}
	root.NewNode = func(rd *fs.LoopbackRoot, _ *fs.Inode, _ string, st *syscall.Stat_t) fs.InodeEmbedder {
		return node(rd, st)
	}
	root.RootNode = node(root, nil)
	o.MountOptions.FsName = name
	o.MountOptions.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	srv, err := fs.Mount(mnt, root.RootNode, &o)
	if err != nil {
		t.Fatalf("mount %s over %s: %v", name, backing, err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(5 * time.Second); srv.Unmount() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				syscall.Unmount(mnt, syscall.MNT_DETACH)
				return
			}
		}
	})
}

// Stale is a mounted share with sshfs's stale attributes (MountStale).
type Stale struct {
	opens atomic.Int64 // files opened on the share
}

// Opens is the number of files opened on the share so far.
func (s *Stale) Opens() int64 { return s.opens.Load() }

// MountStale serves backing at mnt as Mount does, with stale attributes:
// the kernel keeps entries and attributes for an hour, and the share's own
// answers are what a file had at its lookup or its last open.
func MountStale(t testing.TB, mnt, backing string) *Stale {
	t.Helper()
	s := new(Stale)
	hour := time.Hour
	Mount(t, mnt, backing, "stale-share", fs.Options{AttrTimeout: &hour, EntryTimeout: &hour},
		func(rd *fs.LoopbackRoot, st *syscall.Stat_t) fs.InodeEmbedder {
			n := &staleNode{LoopbackNode: fs.LoopbackNode{RootData: rd}, share: s}
			if st != nil {
				var out fuse.AttrOut
				out.FromStat(st)
				n.frozen = &out
			}
			return n
		})
	return s
}

// staleNode is a loopback node whose Getattr answers the attributes it
// froze at its lookup or at its first Getattr after an open.
type staleNode struct {
	fs.LoopbackNode
	share  *Stale
	mu     sync.Mutex
	frozen *fuse.AttrOut
}

var _ = (fs.NodeGetattrer)((*staleNode)(nil))
var _ = (fs.NodeOpener)((*staleNode)(nil))

func (n *staleNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.frozen != nil {
		*out = *n.frozen
		return 0
	}
	if errno := n.LoopbackNode.Getattr(ctx, f, out); errno != 0 {
		return errno
	}
	kept := *out
	n.frozen = &kept
	return 0
}

func (n *staleNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.share.opens.Add(1)
	n.mu.Lock()
	n.frozen = nil // looked at again by the next Getattr
	n.mu.Unlock()
	return n.LoopbackNode.Open(ctx, flags)
}

// Far is a mounted share a round trip away that keeps no attributes
// (MountFar): while it is far, each lookup and attribute request waits a
// while, and it counts how many were under way at once.
type Far struct {
	far            atomic.Bool
	gone           atomic.Bool
	delay          time.Duration
	untyped        bool
	inFlight, most atomic.Int32
}

// SetFar makes the share far (on) or answer at once (off: a test's set-up).
func (f *Far) SetFar(on bool) { f.far.Store(on) }

// SetGone makes each lookup, attribute request and directory open fail
// with ENOTCONN (on), as sshfs's do once its connection is lost, or be
// answered again (off).
func (f *Far) SetGone(on bool) { f.gone.Store(on) }

// Most is the most lookups and attribute requests that were under way at
// once while the share was far, since the mount or the last ResetMost.
func (f *Far) Most() int32 { return f.most.Load() }

// ResetMost starts counting Most afresh.
func (f *Far) ResetMost() { f.most.Store(0) }

func (f *Far) request() func() {
	if !f.far.Load() {
		return func() {}
	}
	n := f.inFlight.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	time.Sleep(f.delay)
	return func() { f.inFlight.Add(-1) }
}

// MountFar serves backing at mnt as Mount does, through a share that, once
// SetFar(true), takes delay for each lookup and attribute request, with no
// kernel caching of entries or attributes (9p, or virtiofs or NFS without
// attribute caching: every lstat a round trip). untyped: its listings give
// no entry types (DT_UNKNOWN), as some file systems' do; it is then listed
// with READDIR, since READDIRPLUS looks each entry up and so types it.
func MountFar(t testing.TB, mnt, backing string, delay time.Duration, untyped bool) *Far {
	t.Helper()
	f := &Far{delay: delay, untyped: untyped}
	Mount(t, mnt, backing, "far-share", fs.Options{MountOptions: fuse.MountOptions{DisableReadDirPlus: untyped}},
		func(rd *fs.LoopbackRoot, _ *syscall.Stat_t) fs.InodeEmbedder {
			return &farNode{LoopbackNode: fs.LoopbackNode{RootData: rd}, share: f}
		})
	return f
}

type farNode struct {
	fs.LoopbackNode
	share *Far
}

func (n *farNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.share.gone.Load() {
		return syscall.ENOTCONN
	}
	defer n.share.request()()
	return n.LoopbackNode.Getattr(ctx, f, out)
}

func (n *farNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.share.gone.Load() {
		return nil, syscall.ENOTCONN
	}
	defer n.share.request()()
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *farNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.share.gone.Load() {
		return nil, 0, syscall.ENOTCONN
	}
	if !n.share.untyped {
		return n.LoopbackNode.OpendirHandle(ctx, flags)
	}
	ents, err := os.ReadDir(filepath.Join(n.RootData.Path, n.Path(n.Root())))
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	d := new(untypedDir)
	for i, e := range ents {
		d.ents = append(d.ents, fuse.DirEntry{Name: e.Name(), Off: uint64(i + 1)}) // Mode 0: DT_UNKNOWN
	}
	return d, 0, 0
}

// untypedDir is a directory handle that lists its entries without types.
type untypedDir struct {
	ents []fuse.DirEntry
	next int
}

func (d *untypedDir) Readdirent(context.Context) (*fuse.DirEntry, syscall.Errno) {
	if d.next >= len(d.ents) {
		return nil, 0
	}
	d.next++
	return &d.ents[d.next-1], 0
}

func (d *untypedDir) Seekdir(_ context.Context, off uint64) syscall.Errno {
	d.next = int(off)
	return 0
}
