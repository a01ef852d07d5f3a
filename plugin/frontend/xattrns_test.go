package frontend

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/writeback"
)

// noTrustedNode is a host file system (a go-fuse loopback) that holds
// extended attributes but refuses the trusted.* namespace, as NFS does
// (it takes user.* only).
type noTrustedNode struct{ fs.LoopbackNode }

func refusedByNoTrusted(name string) bool { return strings.HasPrefix(name, "trusted.") }

func (n *noTrustedNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if refusedByNoTrusted(attr) {
		return 0, syscall.EOPNOTSUPP
	}
	return n.LoopbackNode.Getxattr(ctx, attr, dest)
}

func (n *noTrustedNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if refusedByNoTrusted(attr) {
		return syscall.EOPNOTSUPP
	}
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

func (n *noTrustedNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if refusedByNoTrusted(attr) {
		return syscall.EOPNOTSUPP
	}
	return n.LoopbackNode.Removexattr(ctx, attr)
}

// rule D4 (nothing the container saw succeed is lost), for one namespace
// of extended attributes: over a source that takes user.* but refuses
// trusted.*, a setxattr of a trusted.* name fails in the container as on
// the source (EOPNOTSUPP). Before, a delegated (and a cached) volume kept
// it in the store, the container read it back, and the writeback's
// setxattr on the host failed with a debug line only. user.* names are
// still kept and reach the host.
func TestD4_AnXattrNamespaceTheSourceRefusesIsRefused(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			r := newRig(t, st, func(host string) {
				backing := t.TempDir()
				writeFile(t, filepath.Join(backing, "f"), "x")
				mountHost(t, host, backing, "no-trusted", func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
					return &noTrustedNode{fs.LoopbackNode{RootData: rd}}
				})
			})
			if err := unix.Setxattr(r.hostPath("f"), "trusted.a", []byte("v"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
				t.Fatalf("the source takes trusted.a (%v): not the file system this test needs", err)
			}
			if err := unix.Setxattr(r.mntPath("f"), "user.a", []byte("kept"), 0); err != nil {
				t.Fatalf("setxattr user.a in the container: %v; want it kept (the source takes user.*)", err)
			}
			if err := unix.Setxattr(r.mntPath("f"), "trusted.a", []byte("v"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
				t.Errorf("setxattr trusted.a in the container: %v; want EOPNOTSUPP, as on the source", err)
			}
			if _, err := unix.Getxattr(r.mntPath("f"), "trusted.a", nil); !errors.Is(err, unix.EOPNOTSUPP) {
				t.Errorf("getxattr trusted.a in the container: %v; want EOPNOTSUPP", err)
			}
			if err := unix.Removexattr(r.mntPath("f"), "trusted.a"); !errors.Is(err, unix.EOPNOTSUPP) {
				t.Errorf("removexattr trusted.a in the container: %v; want EOPNOTSUPP", err)
			}
			if x := r.front.Status().Xattrs; !strings.Contains(x, "trusted.* refused") {
				t.Errorf("status xattrs %q; want it to say trusted.* is refused", x)
			}
			r.flush(t)
			buf := make([]byte, 64)
			n, err := unix.Getxattr(r.hostPath("f"), "user.a", buf)
			if err != nil || string(buf[:n]) != "kept" {
				t.Fatalf("host f's user.a: %q (%v); want %q", buf[:max(n, 0)], err, "kept")
			}
		})
	}
}

// smallXattrsNode is a host file system (a go-fuse loopback) that takes
// extended attributes of every namespace, but only values up to limit
// bytes (ENOSPC beyond, as ext4 answers for a value that does not fit the
// inode's one block).
type smallXattrsNode struct {
	fs.LoopbackNode
	limit *atomic.Int64
}

func (n *smallXattrsNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if int64(len(data)) > n.limit.Load() {
		return syscall.ENOSPC
	}
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

// rule D4 (a failed writeback fails the stop; nothing is discarded): an
// xattr the container set that the host then refuses is a change that did
// not reach the host. A cached volume writes it through, so the
// container's setxattr fails as on the host. A delegated one keeps it in
// the store; its writeback must fail, naming the path and the xattr, and
// keep it to retry, so that it lands once the host takes it. Before, the
// writeback's setxattr failure was a debug line and the flush succeeded
// with the xattr missing on the host.
func TestD4_AnXattrTheHostRefusesAtWritebackFailsIt(t *testing.T) {
	big := []byte(strings.Repeat("v", 60))
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			limit := new(atomic.Int64)
			limit.Store(32)
			refusedAtWriteback(t, st, refusal{
				what: "user.big",
				node: func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
					return &smallXattrsNode{LoopbackNode: fs.LoopbackNode{RootData: rd}, limit: limit}
				},
				make:   func(p string) error { return unix.Setxattr(p, "user.big", big, 0) },
				answer: unix.ENOSPC,
				allow:  func() { limit.Store(1 << 16) },
				landed: func(t *testing.T, r *rig, name string) { hostXattr(t, r, name, "user.big", string(big)) },
			}, func(r *rig) func(*writeback.FlushError) {
				// n: a file new to the host, with the xattr. Unlike a mode
				// (TestD4_AModeTheHostRefusesAtWritebackFailsIt), an xattr
				// is the container's whether or not the host had the file.
				writeFile(t, r.mntPath("n"), "new")
				if err := unix.Setxattr(r.mntPath("n"), "user.big", big, 0); err != nil {
					t.Fatal(err)
				}
				return func(failed *writeback.FlushError) {
					if e := failed.Failed["n"]; e == nil || !strings.Contains(e.Error(), "user.big") {
						t.Errorf("flush while the host refuses user.big: %v; want a failure of new file n naming it", failed)
					}
				}
			})
		})
	}
}
