// Package staleshare mounts, for tests, a share that answers lookups with
// stale attributes as sshfs does: what a file had when it was first looked
// up or last opened, however it changed since. sshfs keeps attributes per
// path for 20 s and looks again on open; tests that need a host edit hidden
// behind such a cache (or a writeback's own change, seen through another
// name) get it here at once and every time, with no timing.
package staleshare

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Share is a mounted stale share.
type Share struct {
	Dir   string        // the mountpoint: the share as the plugin sees it
	opens *atomic.Int64 // files opened on the share
}

// Opens is the number of files opened on the share so far.
func (s *Share) Opens() int64 { return s.opens.Load() }

// Mount serves backing at mnt, an empty directory, until the test ends. The kernel
// keeps entries and attributes for an hour, and the share's own answers
// are stale as the package says. It skips the test unless it runs as root
// with /dev/fuse.
func Mount(t testing.TB, mnt, backing string) *Share {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mount tests need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("mount tests need /dev/fuse")
	}
	s := &Share{Dir: mnt, opens: new(atomic.Int64)}
	root := &fs.LoopbackRoot{Path: backing}
	root.NewNode = func(_ *fs.LoopbackRoot, _ *fs.Inode, _ string, st *syscall.Stat_t) fs.InodeEmbedder {
		n := &node{LoopbackNode: fs.LoopbackNode{RootData: root}, opens: s.opens}
		if st != nil {
			var out fuse.AttrOut
			out.FromStat(st)
			n.frozen = &out
		}
		return n
	}
	root.RootNode = root.NewNode(root, nil, "", nil)
	hour := time.Hour
	// Without passthrough, as sshfs: the plugin's own FUSE files may not
	// stack on a file system that offers it.
	srv, err := fs.Mount(s.Dir, root.RootNode, &fs.Options{AttrTimeout: &hour, EntryTimeout: &hour,
		MountOptions: fuse.MountOptions{FsName: "stale-share", DisabledCapabilities: fuse.CAP_PASSTHROUGH}})
	if err != nil {
		t.Fatalf("mount a stale share of %s: %v", backing, err)
	}
	t.Cleanup(func() {
		// A store may hold the share open a moment after the test: retry,
		// then detach, or the temporary directory's removal fails.
		for deadline := time.Now().Add(5 * time.Second); srv.Unmount() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				syscall.Unmount(s.Dir, syscall.MNT_DETACH)
				return
			}
		}
	})
	return s
}

// node is a loopback node whose Getattr answers the attributes it froze at
// its lookup or first Getattr after an open.
type node struct {
	fs.LoopbackNode
	mu     sync.Mutex
	frozen *fuse.AttrOut
	opens  *atomic.Int64
}

var _ = (fs.NodeGetattrer)((*node)(nil))
var _ = (fs.NodeOpener)((*node)(nil))

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
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

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.opens.Add(1)
	n.mu.Lock()
	n.frozen = nil // looked at again by the next Getattr
	n.mu.Unlock()
	return n.LoopbackNode.Open(ctx, flags)
}
