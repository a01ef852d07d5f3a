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
	"golang.org/x/sys/unix"

	"github.com/bindstate/bindstate/plugin/consistency"
)

// noWorldWritableNode is a host file system (a go-fuse loopback) that
// refuses, while refuse is set, a chmod that makes anything writable by
// all (EPERM), as a share refuses a chmod of a file its user does not own.
type noWorldWritableNode struct {
	fs.LoopbackNode
	refuse *atomic.Bool
}

func (n *noWorldWritableNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if m, ok := in.GetMode(); ok && m&0o002 != 0 && n.refuse.Load() {
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
			r := newRig(t, st, func(host string) {
				backing := t.TempDir()
				writeFile(t, filepath.Join(backing, "f"), "x")
				writeFile(t, filepath.Join(backing, "w"), "old")
				mountHost(t, host, backing, "no-world-writable", func(rd *fs.LoopbackRoot) fs.InodeEmbedder {
					return &noWorldWritableNode{LoopbackNode: fs.LoopbackNode{RootData: rd}, refuse: refuse}
				})
			})
			// f: only its mode goes back (the container never read it);
			// w: written by the container, copied back whole.
			writeFile(t, r.mntPath("w"), "written")
			for _, name := range []string{"f", "w"} {
				err := os.Chmod(r.mntPath(name), 0o666)
				if st == consistency.Cached {
					if !errors.Is(err, unix.EPERM) {
						t.Fatalf("chmod 0666 of %s in a cached container: %v; want EPERM, the host's answer", name, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("chmod 0666 of %s in a delegated container: %v; want it kept for the writeback", name, err)
				}
			}
			if st == consistency.Cached {
				return
			}
			// n: new, 0666 in the store. The writeback makes it with the
			// plugin's umask, and the host refuses the chmod to 0666.
			writeFile(t, r.mntPath("n"), "new")
			if err := os.Chmod(r.mntPath("n"), 0o666); err != nil {
				t.Fatal(err)
			}
			failed := r.flushFailure(t) // while the host refuses 0666
			for _, name := range []string{"f", "w"} {
				if e := failed.Failed[name]; e == nil || !strings.Contains(e.Error(), "chmod 0666") {
					t.Errorf("flush while the host refuses 0666: %v; want a failure of %s naming the chmod", failed, name)
				}
			}
			if e := failed.Failed["n"]; e != nil {
				t.Errorf("flush failed new file n, whose mode is no change of a host file's: %v", e)
			}
			if got := readFile(t, r.hostPath("n")); got != "new" {
				t.Errorf("host n = %q after the flush; want %q, written back with the host's own mode", got, "new")
			}
			if got := readFile(t, r.hostPath("w")); got != "old" {
				t.Errorf("host w = %q while its writeback fails; want the host's own %q", got, "old")
			}
			refuse.Store(false) // the host takes it now: the kept changes go on retry
			r.flush(t)
			for _, name := range []string{"f", "w"} {
				fi, err := os.Stat(r.hostPath(name))
				if err != nil || fi.Mode().Perm() != 0o666 {
					t.Errorf("host %s after the retry: %v (%v); want mode 0666", name, fi.Mode(), err)
				}
			}
			if got := readFile(t, r.hostPath("w")); got != "written" {
				t.Errorf("host w = %q after the retry; want %q", got, "written")
			}
		})
	}
}
