package frontend

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
	"github.com/bindstate/bindstate/plugin/writeback"
)

// chmodRefusingNode is a host file system (a go-fuse loopback) that
// refuses a chmod to a mode refuses says (EPERM), as a share refuses a
// chmod of a file its user does not own, or one that keeps modes of its
// own refuses every chmod, even to the mode a file has; a new file still
// gets the mode it is made with.
type chmodRefusingNode struct {
	fs.LoopbackNode
	refuses func(mode uint32) bool
}

func (n *chmodRefusingNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if m, ok := in.GetMode(); ok && n.refuses(m) {
		return syscall.EPERM
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// rule D4 (a failed writeback fails the stop; nothing is discarded), for a
// file's mode: a chmod the container made that the host then refuses is a
// change that did not reach the host. A cached volume writes it through,
// so the container's chmod fails as on the host. A delegated one keeps it;
// its writeback must fail for that path, naming the chmod, and keep it to
// retry, so that it lands once the host takes it. Before, the refusal was a
// debug line, the flush succeeded, and the host kept the old mode.
//
// A mode the container did not change is not held against the host: a new
// file whose mode the host will not take (the host keeps its own, as vfat
// or a share's create mask does) is still written back.
func TestD4_AModeTheHostRefusesAtWritebackFailsIt(t *testing.T) {
	for _, st := range storeStates {
		t.Run(st.String(), func(t *testing.T) {
			refuse := new(atomic.Bool)
			refuse.Store(true)
			refusedAtWriteback(t, st, refusal{
				what: "chmod 0666",
				node: func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
					// while refuse is set, a mode writable by all
					return &chmodRefusingNode{LoopbackNode: fs.LoopbackNode{RootData: rd},
						refuses: func(m uint32) bool { return m&0o002 != 0 && refuse.Load() }}
				},
				make:   func(p string) error { return os.Chmod(p, 0o666) },
				answer: unix.EPERM,
				allow:  func() { refuse.Store(false) },
				landed: func(t *testing.T, r *rig, name string) {
					if fi, err := os.Stat(r.hostPath(name)); err != nil || fi.Mode().Perm() != 0o666 {
						t.Errorf("host %s after the retry: %v (%v); want mode 0666", name, fi.Mode(), err)
					}
				},
			}, func(r *rig) func(*writeback.FlushError) {
				// n: new, 0666 in the store. The writeback makes it with
				// the plugin's umask, and the host refuses the chmod.
				writeFile(t, r.mntPath("n"), "new")
				if err := os.Chmod(r.mntPath("n"), 0o666); err != nil {
					t.Fatal(err)
				}
				return func(failed *writeback.FlushError) {
					if e := failed.Failed["n"]; e != nil {
						t.Errorf("flush failed new file n, whose mode is no change of a host file's: %v", e)
					}
					if got := readFile(t, r.hostPath("n")); got != "new" {
						t.Errorf("host n = %q after the flush; want %q, written back with the host's own mode", got, "new")
					}
				}
			})
		})
	}
}

// rule D4, the other side of TestD4_AModeTheHostRefusesAtWritebackFailsIt:
// a refused chmod fails the writeback only when the host file lacks the
// mode. A delegated file the container gave another owner and mode and
// rewrote is written back as a new file, made with its mode; the owner
// goes on after it, and since a chown clears set-id bits the mode is set
// again after that. A share that refuses that second chmod already has
// the container's mode: the writeback must succeed (without the check of
// what the host has, it failed, and the change was retried for ever).
func TestD4_AChmodTheHostRefusesToAModeItHasIsNoFailure(t *testing.T) {
	r := newRig(t, consistency.Delegated, func(host string) {
		backing := t.TempDir()
		writeFile(t, filepath.Join(backing, "w"), "old")
		mountHost(t, host, backing, "no-chmod", func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
			return &chmodRefusingNode{LoopbackNode: fs.LoopbackNode{RootData: rd}, refuses: func(uint32) bool { return true }}
		})
	})
	writeFile(t, r.mntPath("w"), "written")
	if err := os.Chmod(r.mntPath("w"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(r.mntPath("w"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	r.flush(t)
	if got := readFile(t, r.hostPath("w")); got != "written" {
		t.Errorf("host w = %q after the flush; want %q", got, "written")
	}
	var st unix.Stat_t
	if err := unix.Lstat(r.hostPath("w"), &st); err != nil || st.Mode&0o7777 != 0o600 || st.Uid != 1000 {
		t.Errorf("host w: mode %#o, owner %d (%v); want 0600 and 1000, as in the container", st.Mode&0o7777, st.Uid, err)
	}
}
