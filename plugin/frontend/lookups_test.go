package frontend

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// lookupCountingNode is a host file system (a go-fuse loopback) that
// counts the LOOKUPs of each name made to it that found nothing: each is a
// round trip to the share on sshfs.
type lookupCountingNode struct {
	fs.LoopbackNode
	lookups *lookupCounts
}

type lookupCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *lookupCounts) of(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (n *lookupCountingNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	in, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno == syscall.ENOENT {
		n.lookups.mu.Lock()
		n.lookups.n[name]++
		n.lookups.mu.Unlock()
	}
	return in, errno
}

// rule C3, at the cost of a removal: a cached unlink or rmdir goes to the
// host before it returns, and asks the host nothing more about the name it
// removed. Each change made on both sides records the host's new attributes
// as the entry's base (rebase), and that lstat of a name just removed was a
// LOOKUP on the share that found nothing: one round trip more per file an
// rm -rf removes (make bench W3 rm, cached).
func TestC3_ARemovalAsksTheShareNothingMoreAboutTheName(t *testing.T) {
	counts := &lookupCounts{n: map[string]int{}}
	r := newRescanRig(t, consistency.Cached, "1h", func(host string) {
		backing := t.TempDir()
		writeFile(t, filepath.Join(backing, "file"), "f")
		if err := os.Mkdir(filepath.Join(backing, "dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		mountHost(t, host, backing, "lookup-counting", func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
			return &lookupCountingNode{fs.LoopbackNode{RootData: rd}, counts}
		})
	})
	listNames(t, r.mnt)
	for _, name := range []string{"file", "dir"} {
		if err := os.Remove(r.mntPath(name)); err != nil {
			t.Fatalf("removing %s in the container: %v", name, err)
		}
		if n := counts.of(name); n > 0 {
			t.Errorf("%d LOOKUP(s) of %s that found nothing reached the share while the container removed it; want none", n, name)
		}
		if _, err := os.Lstat(r.hostPath(name)); !os.IsNotExist(err) {
			t.Fatalf("%s on the host after its removal returned: %v; want it gone (C3)", name, err)
		}
	}
}
